"""The demo's closing summary: why the gate blocked, one line per node and rule.

The console report lists every finding (one per message size for a bandwidth drop); the closing lines
say the same thing in a few lines a newcomer can read: per node and rule, how many findings, and the
most telling one - for a changed GPU order, the permutation itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from upgrade_gate.model import Finding, GateReport, Severity

MAX_MESSAGE = 150


def permutation(expected: object, actual: object) -> str | None:
    """`0->7 1->6 ...` (baseline index -> index now) from two index-ordered lists of device ids."""
    if not isinstance(expected, Sequence) or not isinstance(actual, Sequence):
        return None
    if isinstance(expected, str) or isinstance(actual, str):
        return None
    before, after = list(expected), list(actual)
    if sorted(map(str, before)) != sorted(map(str, after)) or len(set(map(str, after))) != len(after):
        return None
    where = {str(device): i for i, device in enumerate(after)}
    return " ".join(f"{i}->{where[str(device)]}" for i, device in enumerate(before))


def blocking_reasons(report: GateReport) -> tuple[str, ...]:
    """One line per (node, rule) with blocking findings, nodes first and the fleet (checklists) last."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in report.findings:
        if f.severity is Severity.BLOCK:
            groups.setdefault((f.node, f.rule), []).append(f)
    ordered = sorted(groups, key=lambda k: (k[0] == "fleet", k[0], k[1]))
    return tuple(_line(node, rule, groups[(node, rule)]) for node, rule in ordered)


def _line(node: str, rule: str, findings: list[Finding]) -> str:
    first = findings[0]
    if rule == "device.order_changed":
        perm = permutation(first.expected, first.actual)
        if perm is not None:
            return f"{node}: {rule}: GPU enumeration order changed; baseline index -> index now: {perm}"
    if rule.startswith("checklist."):
        items = ", ".join(sorted({f.device or "?" for f in findings}))
        return f"{node}: {rule}: checklist item(s) {items} not satisfied"
    message = first.message if len(first.message) <= MAX_MESSAGE else first.message[: MAX_MESSAGE - 3] + "..."
    device = f" [{first.device}]" if first.device else ""
    more = f" (and {len(findings) - 1} more like it)" if len(findings) > 1 else ""
    return f"{node}{device}: {rule}: {message}{more}"
