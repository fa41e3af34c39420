"""The fleet between changes: `fleet watch` gates every node against its own baseline, non-invasively.

One round: capture every matching node with a Job, build its snapshot, and judge it against its
latest baseline with the observation view (`judge.observe`: snapshot, kernel events, NIC state; the
phase 2 mesh test too with `mesh`) and no change plan, since nothing is meant to change between
windows. Drift no one planned (a driver that reloaded, a VF lost after a PF reset, an order change
after a BIOS update) blocks. Results go where Kubernetes users look: the node condition
`UpgradeGateDrift` (node-problem-detector's convention) and Prometheus text for node_exporter's
textfile collector (`report.prometheus`).

Design decisions
- A node whose capture failed, or that has no baseline, is not a silent gap: its condition is True
  with reason `evidence.missing` and the failure, and its verdict series says BLOCK.
- Nodes in an open change window are skipped (their window observes them against the plan); a node
  labelled `upgrade-gate/canary` is one of those.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from upgrade_gate.fleet.labels import CANARY, NODE_CLASS
from upgrade_gate.fleet.node_vendor import gpu_nodes
from upgrade_gate.model import (
    Finding,
    GateReport,
    NodeName,
    NodeReport,
    RuleId,
    Severity,
    Snapshot,
    Verdict,
)
from upgrade_gate.report.prometheus import node_condition

if TYPE_CHECKING:
    from upgrade_gate.fleet.executor import ExecutorSettings
    from upgrade_gate.fleet.kube import KubeClient
    from upgrade_gate.judge.policy import Policy
    from upgrade_gate.store.gitstore import BaselineStore

_EVIDENCE = RuleId("evidence.missing")


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchRound:
    """What one `fleet watch` round found."""

    report: GateReport
    taken_at: dict[str, datetime]
    skipped: tuple[tuple[NodeName, str], ...]


def _missing(node: NodeName, message: str) -> NodeReport:
    finding = Finding(rule=_EVIDENCE, severity=Severity.BLOCK, node=node, message=message)
    return NodeReport(node=node, verdict=Verdict.BLOCK, findings=(finding,))


def watch_round(
    client: KubeClient,
    store: BaselineStore,
    *,
    settings: ExecutorSettings,
    policy: Policy,
    now: datetime,
    run_id: str,
    selector: str | None,
    class_label: str = NODE_CLASS,
    set_conditions: bool = True,
) -> WatchRound:
    """Capture, judge against the baselines, set each node's condition; the report of the round."""
    from upgrade_gate.fleet.executor import capture_nodes
    from upgrade_gate.fleet.rollout import parse_time
    from upgrade_gate.fleet.window_validate import judge_inputs
    from upgrade_gate.judge.judge import judge
    from upgrade_gate.judge.observe import observation_policy, observation_view
    from upgrade_gate.judge.rules.evidence import read_clock
    from upgrade_gate.snapshot.build import build_snapshot

    nodes = list(gpu_nodes(client, selector))
    skipped = tuple((n.name, f"in change window ({n.labels[CANARY]})") for n in nodes if CANARY in n.labels)
    watched = [n for n in nodes if CANARY not in n.labels]
    stored = set(store.nodes())
    extra: list[NodeReport] = []
    candidates: dict[NodeName, Snapshot] = {}
    with_baseline = [n for n in watched if n.name in stored]
    extra += [_missing(n.name, f"{n.name}: no baseline in the store to watch against") for n in watched
              if n.name not in stored]  # fmt: skip
    refused: dict[NodeName, str] = {}  # busy or refused: no evidence either way, no condition (issue 28)
    for name, bundle in (
        capture_nodes(client, with_baseline, settings, run_id=run_id, refused=refused) if with_baseline else {}
    ).items():
        if isinstance(bundle, str):
            extra.append(_missing(name, f"{name}: capture failed: {bundle}"))
        else:
            cls = next((n.labels.get(class_label) for n in with_baseline if n.name == name), None)
            candidates[name] = build_snapshot(bundle, node_class=cls)
    baselines, _refs, denylist = judge_inputs(store, tuple(candidates), tuple(candidates.values()))
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    report = judge(
        baselines={n: observation_view(s, mesh=False) for n, s in baselines.items()},
        candidates=tuple(observation_view(s, mesh=False) for s in candidates.values()),
        plan=None,
        policy=observation_policy(policy, mesh=False),
        references={},
        denylist=denylist,
        now=stamp,
        clock=read_clock(),  # the wall clock (evidence.taken_at), whatever time the report says
    ) if candidates else None  # fmt: skip
    reports = [*(report.nodes if report else ()), *extra]
    verdict = Verdict.BLOCK if any(r.verdict is Verdict.BLOCK for r in reports) or not reports else Verdict.PASS
    merged = GateReport(
        verdict=verdict,
        generated_at=stamp,
        tool_version=report.tool_version if report else "",
        policy_name=policy.name,
        nodes=tuple(sorted(reports, key=lambda r: r.node)),
        fleet_findings=report.fleet_findings if report else (),
    )
    if set_conditions:
        for node_report in merged.nodes:
            client.set_node_condition(node_report.node, node_condition(node_report, now=now))
    taken = {str(n): parse_time(s.taken_at, where=f"node {n}: snapshot taken_at") for n, s in candidates.items()}
    skipped += tuple((name, f"not captured: {why}") for name, why in sorted(refused.items()))
    return WatchRound(report=merged, taken_at=taken, skipped=skipped)


def summary_lines(round_: WatchRound) -> Sequence[str]:
    """One line per node: verdict and the first blocking finding."""
    lines = []
    for node in round_.report.nodes:
        first = next((f for f in node.findings if f.severity is Severity.BLOCK), None)
        tail = f"  {first.rule}: {first.message}"[:160] if first else ""
        lines.append(f"{node.node:<24} {node.verdict}{tail}")
    lines += [f"{name:<24} skipped: {why}" for name, why in round_.skipped]
    return lines
