"""Watch results where Kubernetes users look: Prometheus text metrics and a node condition.

The metrics are the text exposition format (version 0.0.4) for node_exporter's textfile collector:
one file per run, written atomically by the caller, named `upgrade_gate.prom`.

    upgrade_gate_verdict{node="gpu-node-01",verdict="PASS"} 1     one series per verdict, 1 for the current
    upgrade_gate_blocked{node="gpu-node-01"} 0                     1 when the node's verdict is BLOCK
    upgrade_gate_findings{node="...",rule="...",severity="block"}  findings per rule and severity
    upgrade_gate_last_run_timestamp_seconds{node="..."}            when the gate judged the node
    upgrade_gate_evidence_age_seconds{node="..."}                  how old the judged snapshot was

Design decisions
- Every node of the report gets every verdict series (1 for its verdict, 0 for the other), the way
  kube-state-metrics exposes enums, so an alert is `upgrade_gate_verdict{verdict="BLOCK"} == 1` and
  a node that turned PASS again clears it instead of leaving a stale series.
- The condition follows node-problem-detector: type `UpgradeGateDrift`, status `True` when the node
  drifted from its baseline (BLOCK), reason the rule of the first blocking finding, message its
  headline; `False` with reason `NoDrift` clears it. Messages are one line, capped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from upgrade_gate.model import GateReport, NodeReport, Severity, Verdict

CONDITION_TYPE = "UpgradeGateDrift"
_MAX_MESSAGE = 1024


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_metrics(report: GateReport, *, now: datetime, taken_at: Mapping[str, datetime] | None = None) -> str:
    """The report as Prometheus text: verdicts, findings per rule, last run and evidence age."""
    taken_at = taken_at or {}
    ts = now.timestamp()
    lines = [
        "# HELP upgrade_gate_verdict The gate's verdict for the node (1 for the current verdict).",
        "# TYPE upgrade_gate_verdict gauge",
    ]
    for node in report.nodes:
        for verdict in (Verdict.PASS, Verdict.BLOCK):
            value = 1 if node.verdict is verdict else 0
            lines.append(f'upgrade_gate_verdict{{node="{_label(node.node)}",verdict="{verdict}"}} {value}')
    lines += [
        "# HELP upgrade_gate_blocked 1 when the node's verdict is BLOCK.",
        "# TYPE upgrade_gate_blocked gauge",
    ]
    for n in report.nodes:
        lines.append(f'upgrade_gate_blocked{{node="{_label(n.node)}"}} {1 if n.verdict is Verdict.BLOCK else 0}')
    lines += [
        "# HELP upgrade_gate_findings Findings of the last run per rule and severity.",
        "# TYPE upgrade_gate_findings gauge",
    ]
    for node in report.nodes:
        counts = Counter((str(f.rule), str(f.severity)) for f in node.findings)
        for (rule, severity), count in sorted(counts.items()):
            lines.append(
                f'upgrade_gate_findings{{node="{_label(node.node)}",rule="{_label(rule)}",'
                f'severity="{_label(severity)}"}} {count}'
            )
    lines += [
        "# HELP upgrade_gate_last_run_timestamp_seconds When the gate last judged the node (Unix time).",
        "# TYPE upgrade_gate_last_run_timestamp_seconds gauge",
    ]
    lines += [f'upgrade_gate_last_run_timestamp_seconds{{node="{_label(n.node)}"}} {ts:.3f}' for n in report.nodes]
    ages = [(n, taken_at[n.node]) for n in report.nodes if n.node in taken_at]
    if ages:
        lines += [
            "# HELP upgrade_gate_evidence_age_seconds Age of the judged snapshot when the gate ran.",
            "# TYPE upgrade_gate_evidence_age_seconds gauge",
        ]
        lines += [
            f'upgrade_gate_evidence_age_seconds{{node="{_label(n.node)}"}} {max(0.0, ts - t.timestamp()):.3f}'
            for n, t in ages
        ]
    return "\n".join(lines) + "\n"


def node_condition(node: NodeReport, *, now: datetime) -> dict[str, Any]:
    """The `UpgradeGateDrift` condition for one node (a NodeCondition as the API takes it)."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    blocking = [f for f in node.findings if f.severity is Severity.BLOCK]
    if node.verdict is Verdict.BLOCK and blocking:
        first = blocking[0]
        more = f" (+{len(blocking) - 1} more)" if len(blocking) > 1 else ""
        message = " ".join(f"{first.message}{more}".split())[:_MAX_MESSAGE]
        status, reason = "True", str(first.rule)
    elif node.verdict is Verdict.BLOCK:
        status, reason, message = "True", "Blocked", "the gate blocked this node"
    else:
        status, reason, message = "False", "NoDrift", "the node matches its baseline"
    return {
        "type": CONDITION_TYPE,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }
