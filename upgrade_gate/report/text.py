"""Small pure helpers shared by the text-like renderers (console, Markdown, JUnit)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from upgrade_gate.model import Finding, GateReport, NodeReport, Severity

SEVERITY_ORDER = {Severity.BLOCK: 0, Severity.WARN: 1, Severity.INFO: 2}


def show_value(value: object) -> str:
    """A compact, stable one-line rendering of an expected/actual value."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def sorted_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Findings by severity (block first), then rule, device and message, for stable output."""
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], f.rule, f.device or "", f.message))


def counts(report: GateReport) -> dict[Severity, int]:
    """How many findings of each severity the report holds."""
    out = dict.fromkeys(Severity, 0)
    for finding in report.findings:
        out[finding.severity] += 1
    return out


def node_summary(node: NodeReport) -> str:
    """e.g. "BLOCK (2 block, 1 warn)"."""
    blocks = sum(1 for f in node.findings if f.severity is Severity.BLOCK)
    warns = sum(1 for f in node.findings if f.severity is Severity.WARN)
    return f"{node.verdict.value} ({blocks} block, {warns} warn)"
