"""The kernel-event rule (`dmesg.fatal`): the candidate's classified kernel events through the fatal-error map.

Design decisions (the map itself is `judge.kernel_events`):
- Events are grouped per (kind, BDF): one finding per group, with the count and the first line. The kind is
  the policy's pattern table's for the event's own line (`_kind`), not the one the snapshot claims: a reset
  line filed as `other` passed a hand-edited candidate (2026-12-07).
- Each group is graded by the policy's map for the GPU family of its device (from the candidate's GPU at
  that BDF, else the node's only family): `fatal` blocks, `error` warns (the rule's `block_severities`
  / `warn_severities`), anything else is not reported. Fatal init, probe failure, ring timeouts and
  every reset are `fatal` in the shipped table on every family.
- `baseline_rate: tolerate` turns a group into an info finding when the baseline has the same kind on
  the same device at least as many times; the message says so and which policy entry allowed it.
- A policy that adds or replaces a regex needs the candidate's events classified with that table
  (`Snapshot.event_patterns`): otherwise one blocking finding says the log was not scanned for the
  site's patterns, because events the snapshot never classified cannot be judged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from upgrade_gate.judge.kernel_events import shipped_kernel_events
from upgrade_gate.judge.rules.base import NodeContext, ParamSpec, finding, softer, spec
from upgrade_gate.model import Finding, KernelEvent, Severity, Snapshot
from upgrade_gate.parse.dmesg import PatternTable, family_of, first_match

_REPORTED = ("fatal", "error")  # the shipped dmesg.fatal's block and warn severities

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry


def _families(snap: Snapshot) -> tuple[dict[str, str], str | None]:
    by_bdf = {str(g.bdf): f for g in snap.gpus if g.bdf and (f := family_of(g.gfx_target))}
    found = {f for g in snap.gpus if (f := family_of(g.gfx_target))}
    return by_bdf, (found.pop() if len(found) == 1 else None)


def _kind(event: KernelEvent, table: PatternTable, family: str | None) -> str:
    """The kind the policy's pattern table gives the event's own line (its first match, as `parse.dmesg`
    classifies), else the snapshot's: the line is the evidence, the kind a claim about it. A GPU reset
    line filed as `other` passed (2026-12-07); a real snapshot's events get their own kind back."""
    found = first_match(event.text, (p for p in table.patterns if p.applies_to(family)))
    return found.id if found is not None else event.kind


def check_kernel_events(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Fatal (block) and error (warn) kernel events, graded by the site's map (see the module docstring)."""
    events_map = ctx.policy.kernel_events
    if events_map.site_regex:
        wanted = events_map.table.digest
        if ctx.candidate.event_patterns != wanted:
            yield finding(
                ctx,
                entry,
                "dmesg: the candidate's kernel log was classified with pattern table "
                f"{ctx.candidate.event_patterns or 'unknown'}, not this policy's {wanted} (it adds site patterns): "
                "rebuild the snapshot from its capture bundle (gate does so for bundle candidates)",
                path="event_patterns",
                expected=wanted,
                actual=ctx.candidate.event_patterns,
                evidence="dmesg",
            )
    block = set(entry.strings("block_severities"))
    warn = set(entry.strings("warn_severities"))
    by_bdf, node_family = _families(ctx.candidate)
    table = events_map.table
    groups: dict[tuple[str, str], list[KernelEvent]] = {}
    for event in ctx.candidate.events:
        bdf = str(event.bdf) if event.bdf else ""
        groups.setdefault((_kind(event, table, by_bdf.get(bdf, node_family)), bdf), []).append(event)
    before = Counter(
        (_kind(e, table, by_bdf.get(str(e.bdf) if e.bdf else "", node_family)), str(e.bdf) if e.bdf else "")
        for e in (ctx.baseline.events if ctx.baseline is not None else ())
    )
    for (kind, bdf), events in sorted(groups.items()):
        family = by_bdf.get(bdf, node_family)
        grade = events_map.grade(kind, family, events[0].severity)
        regraded = None
        if grade.severity not in block and grade.severity not in warn:
            shipped = shipped_kernel_events().grade(kind, family, events[0].severity).severity
            if shipped not in _REPORTED and grade.severity not in _REPORTED:
                continue
            regraded = (
                f" (re-graded {grade.severity or 'not applicable'} by {grade.by}; the shipped table: {shipped})"
                if shipped != grade.severity
                else f" ({grade.severity}: in neither block_severities nor warn_severities of this policy)"
            )
        first = min(events, key=lambda e: e.line_no)
        severity: Severity | None = None if grade.severity in block else softer(entry.severity)
        message = (
            f"dmesg: {kind}{' on ' + bdf if bdf else ''}: {len(events)} line(s), first at line {first.line_no}: "
            f"{first.text.strip()[:160]}"
        )
        if regraded is not None:  # a site's re-grade never makes an event vanish: it is named, not blocking
            severity = Severity.INFO
            message += regraded
        seen = before[(kind, bdf)]
        if grade.tolerate_baseline_rate and seen >= len(events):
            severity = Severity.INFO
            message += f" (the baseline shows it {seen} time(s): tolerated at that rate by {grade.by})"
        elif grade.tolerate_baseline_rate:
            message += f" (more than the baseline's {seen}: {grade.by} tolerates only the baseline's rate)"
        yield finding(
            ctx,
            entry,
            message,
            device=bdf or None,
            path=f"events[kind={kind}]",
            expected="no such event",
            actual=len(events),
            evidence="dmesg",
            severity=severity,
        )


SPECS = (
    spec(
        "dmesg.fatal",
        "fatal amdgpu kernel events (RAS, ring timeouts, resets) in the candidate's dmesg",
        check_kernel_events,
        plan_can_accept=False,
        params={
            "block_severities": ParamSpec(kind="strings", default=("fatal",), doc="event severities that block"),
            "warn_severities": ParamSpec(kind="strings", default=("error",), doc="event severities that warn"),
        },
    ),
)
