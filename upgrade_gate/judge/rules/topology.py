"""XGMI link matrix rule: every GPU pair keeps its link type, hops, weight and peer access.

Design decisions:
- Pairs are keyed by the two BDFs (the topology is a property of slots, so an order change does not
  move it); a pair whose type, hops or weight differs blocks, as does a pair that appeared or vanished.
  A degraded XGMI link typically shows as a pair falling back to PCIE or gaining hops.
- Peer access (amd-smi's `link_status`) is compared where the candidate printed it: a pair whose access
  is DISABLED now and was not before blocks (collectives fall back or fail between those GPUs), and so
  does the reverse, a change like any other. A baseline taken before the field was recorded (null)
  compares as enabled: a disabled pair is never "as before" for want of a baseline value.
- A candidate with no link matrix at all while the baseline had one is one finding (the topology
  probe lost its evidence), not one per pair. So are pairs whose peer access the baseline recorded and the
  candidate does not (amd-smi's topology failed and `rocm-smi --showtopo`, which has no access field, stood
  in; or amd-smi printed `link_status: N/A`): missing evidence, naming the topology probe's failure, never
  "compared where printed" (break test 2026-12-07: a matrix whose GPU 2 links printed DISABLED and was then
  killed, hung or cut passed with nothing to report).
- A candidate whose link list equals the baseline's (link by link, in order: what one collector prints
  twice on a healthy node) has no pair to compare: it is passed without building the pair maps.
- Under a planned partition change (`change.partition`) the links of a changed device's partitions
  beyond its first (BDF function 0) are the change: the devices' own links (first partitions) are
  still compared.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from upgrade_gate.judge.plan_partition import function_of, planned_slots, slot_of
from upgrade_gate.judge.rules.base import NodeContext, finding, spec
from upgrade_gate.model import Finding, GpuLink

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry


def _links(links: tuple[GpuLink, ...]) -> dict[tuple[str, str], GpuLink]:
    out: dict[tuple[str, str], GpuLink] = {}
    for link in links:
        a, b = str(link.a), str(link.b)
        out[(a, b) if a <= b else (b, a)] = link
    return out


def _shape(link: GpuLink) -> tuple[object, ...]:
    return (link.link_type, link.hops, link.weight)


def _access_changed(was: GpuLink, now: GpuLink) -> bool:
    if now.access is None:
        return False
    return now.access != (was.access if was.access is not None else True)


TOPOLOGY_PROBE = "amdsmi_topology"


def _topology_probe(ctx: NodeContext) -> str:
    """Why the candidate's links carry no access: its topology probe's failure, or the tool's placeholder."""
    probe = next((p for p in ctx.candidate.probes if p.name == TOPOLOGY_PROBE), None)
    if probe is None:
        return f"no {TOPOLOGY_PROBE} probe ran"
    if not probe.ok:
        why = "timed out" if probe.timed_out else (probe.reason or "failed")
        return f"{TOPOLOGY_PROBE} {why}; its stand-in prints no peer access"
    return f"{TOPOLOGY_PROBE} printed no link_status for them (N/A or absent)"


def _show(link: GpuLink | None) -> str:
    if link is None:
        return "absent"
    access = "" if link.access is None else f" access {'enabled' if link.access else 'DISABLED'}"
    return f"{link.link_type.value} hops {link.hops} weight {link.weight}{access}"


def _unchanged(before: tuple[GpuLink, ...], after: tuple[GpuLink, ...]) -> bool:
    """The same links in the same order: no pair can differ (checked in tests/test_judge_section_facts.py)."""
    return before == after


def check_xgmi(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Link type / hops / weight per GPU pair vs the baseline."""
    assert ctx.baseline is not None
    if _unchanged(ctx.baseline.gpu_links, ctx.candidate.gpu_links):
        return
    before = _links(ctx.baseline.gpu_links)
    after = _links(ctx.candidate.gpu_links)
    if before and not after:
        yield finding(
            ctx,
            entry,
            f"GPU link matrix absent from the candidate (the baseline had {len(before)} pairs)",
            path="gpu_links",
            expected=len(before),
            actual=0,
            evidence=TOPOLOGY_PROBE,
        )
        return
    change = ctx.plan.change.partition if ctx.plan is not None else None
    planned = planned_slots(change, ctx.baseline, ctx.candidate) if change is not None else frozenset()

    def partition_link(key: tuple[str, str]) -> bool:
        return any(slot_of(end) in planned and function_of(end) != 0 for end in key)

    recorded = [k for k, was in before.items() if was.access is not None and not (planned and partition_link(k))]
    lost = [k for k in recorded if k in after and after[k].access is None]
    if lost:
        yield finding(
            ctx,
            entry,
            f"GPU link matrix: peer access not reported at {len(lost)} of the {len(recorded)} pairs the baseline "
            f"recorded it for ({_topology_probe(ctx)}): missing evidence",
            path="gpu_links",
            expected="peer access (amd-smi link_status) per pair",
            actual=None,
            evidence=TOPOLOGY_PROBE,
        )

    for key in sorted(before.keys() | after.keys()):
        if planned and partition_link(key):
            continue
        was, now = before.get(key), after.get(key)
        if was is not None and now is not None and _shape(was) == _shape(now) and not _access_changed(was, now):
            continue
        a, b = key
        yield finding(
            ctx,
            entry,
            f"GPU link {a} <-> {b}: {_show(was)} -> {_show(now)}",
            device=f"{a}~{b}",
            path=f"gpu_links[a={a},b={b}]",
            expected=_show(was),
            actual=_show(now),
            evidence=TOPOLOGY_PROBE,
        )


SPECS = (
    spec(
        "xgmi.link_changed",
        "the GPU link matrix (type, hops, weight, peer access per pair) differs from the baseline",
        check_xgmi,
        needs_baseline=True,
    ),
)
