"""PCIe link and SR-IOV rules: links must not train lower, VFs must not go missing.

Design decisions:
- `pcie.downgrade` compares each link's current speed/width (lspci LnkSta) with its maximum (LnkCap)
  and with the baseline's current values. Either being lower blocks: CVF phase 3 wants Gen5 x16 with
  no width degradation, and a link that trained lower than last time is a regression even when the
  slot is capable of no more. A link the baseline had and the candidate no longer reports blocks. A
  link whose current speed or width is unknown blocks, on either side and whatever the parameters say:
  pciutils ls-caps.c prints `Speed unknown` for a speed code it does not know (an old pciutils on a
  faster link, or a garbled register), and such a link can be judged neither against its maximum nor
  against the baseline; two unknowns that match are no evidence of a healthy link. lspci's own
  `(downgraded)` verdict is never dropped: where the parsed speed/width do not show the drop it
  claims, the evidence disagrees and blocks. A speed or width above the maximum (a garbled value, or
  lspci's `(overdriven)`) blocks whatever the parameters say: it is no evidence of a healthy link.
- `sriov.vf_count`: VFs enabled per PF (sysfs `sriov_numvfs`, a NIC's own count as fallback) must
  equal the baseline's; a PF that disappeared blocks. SR-IOV silently losing a VF after a PF reset is
  the failure CVF describes ("amd.com/vnic: 7 instead of 8"). With `UPGRADE_GATE_NIC_VF_COUNT` set,
  every NIC PF must carry exactly that many VFs. A PF whose sysfs record and NIC disagree on the count,
  or report a negative one, blocks with both values (`facts.vf_reports`); it is not compared further.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from upgrade_gate.judge.rules.base import NodeContext, ParamSpec, finding, show, spec
from upgrade_gate.judge.rules.facts import VfReport, vf_facts
from upgrade_gate.model import Finding, PcieLink

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry

_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def describe_link(speed: float | None, width: int | None) -> str:
    """`Gen5 (32 GT/s) x16`, with `?` for unknown parts."""
    if speed is None:
        speed_text = "? GT/s"
    else:
        gen = _GEN.get(speed)
        speed_text = f"Gen{gen} ({speed:g} GT/s)" if gen is not None else f"{speed:g} GT/s"
    return f"{speed_text} x{width if width is not None else '?'}"


def _below(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and a < b


def _above(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and a > b


def _downgrade_doubt(link: PcieLink, maximum: str) -> str:
    """Why lspci's `(downgraded)` is not borne out by a link whose parsed values are not below LnkCap."""
    if link.max_speed_gts is None and link.max_width is None:
        return "reported as downgraded by lspci"
    if (link.speed_gts, link.width) == (link.max_speed_gts, link.max_width):
        return f"lspci marks it downgraded, yet that is its maximum {maximum} (the evidence disagrees)"
    return (
        f"lspci marks it downgraded, yet neither speed nor width is below its maximum {maximum} "
        "(the evidence disagrees)"
    )


class _Problems(NamedTuple):
    """What `check_pcie` finds wrong with one link, before any words: each field is one problem it names."""

    above_max: bool  # a speed or width above LnkCap: garbled evidence
    below_max: bool  # below LnkCap (only where `compare_to_max`)
    doubted: bool  # lspci says downgraded, the parsed values do not show it
    below_baseline: bool  # below the baseline's (only where `compare_to_baseline`)
    unknown_now: bool  # current speed or width unknown in the candidate (always)
    unknown_before: bool  # current speed or width unknown in the baseline (only where `compare_to_baseline`)


def _problems(link: PcieLink, was: PcieLink | None, to_max: bool, to_baseline: bool) -> _Problems:
    below = _below(link.speed_gts, link.max_speed_gts) or _below(link.width, link.max_width)
    below_baseline = unknown_before = False
    if was is not None and to_baseline:
        below_baseline = _below(link.speed_gts, was.speed_gts) or _below(link.width, was.width)
        unknown_before = _unknown(was) is not None
    return _Problems(
        above_max=_above(link.speed_gts, link.max_speed_gts) or _above(link.width, link.max_width),
        below_max=below and to_max,
        doubted=not below and link.downgraded,
        below_baseline=below_baseline,
        unknown_now=_unknown(link) is not None,
        unknown_before=unknown_before,
    )


def _unknown(link: PcieLink) -> str | None:
    """What lspci left unknown of a link's current state, in its own words; None when speed and width are known.

    `lspci.pcie_links` gives a width whenever LnkSta was printed (LnkSta always prints `Width xN`) and no
    speed only for LnkSta's `Speed unknown`; without LnkSta (LnkCap alone) both are None.
    """
    if link.speed_gts is not None and link.width is not None:
        return None
    if link.speed_gts is None and link.width is None:
        return "lspci printed no LnkSta for it"
    if link.speed_gts is None:
        return "lspci printed 'Speed unknown' in its LnkSta"
    return "lspci printed no current width for it"


def _quiet(link: PcieLink, was: PcieLink | None, to_max: bool, to_baseline: bool) -> bool:
    """True when `check_pcie` has no problem to report of `link`."""
    return not any(_problems(link, was, to_max, to_baseline))


def _unchanged_at_max(baseline: Sequence[PcieLink], candidate: Sequence[PcieLink]) -> bool:
    """The usual node: its links equal the baseline's, on distinct BDFs, each at its maximum and not marked
    downgraded, so `check_pcie` finds no problem whatever its parameters (checked against the full rule
    over generated inputs: tests/test_judge_fast_paths.py, which found the distinct BDFs: a BDF listed twice
    is compared with the baseline's last link of that BDF). One C-level tuple comparison and a pass over
    the links, instead of every link's BDF text, a sort and its `_problems`."""
    return (
        baseline == candidate
        and all(
            link.speed_gts is not None
            and link.width is not None
            and link.speed_gts == link.max_speed_gts
            and link.width == link.max_width
            and not link.downgraded
            for link in candidate
        )
        and len({link.bdf for link in candidate}) == len(candidate)
    )


def check_pcie(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Current PCIe speed/width vs maximum and baseline."""
    if ctx.baseline is not None and _unchanged_at_max(ctx.baseline.pcie, ctx.candidate.pcie):
        return
    base: dict[str, PcieLink] = {str(link.bdf): link for link in ctx.baseline.pcie} if ctx.baseline else {}
    seen: set[str] = set()
    to_max, to_baseline = entry.flag("compare_to_max"), entry.flag("compare_to_baseline")
    for link in sorted(ctx.candidate.pcie, key=lambda lk: lk.bdf):
        bdf = str(link.bdf)
        seen.add(bdf)
        was = base.get(bdf)
        if _quiet(link, was, to_max, to_baseline):
            continue  # the usual link: no words to build (~45 of 48 calls of describe_link saved)
        found = _problems(link, was, to_max, to_baseline)
        now = describe_link(link.speed_gts, link.width)
        expected = maximum = describe_link(link.max_speed_gts, link.max_width)
        problems: list[str] = []
        if found.above_max:
            problems.append(f"above its maximum {maximum}, which no link trains to (garbled evidence)")
        if found.below_max:
            problems.append(f"below its maximum {maximum}")
        if found.doubted:
            problems.append(_downgrade_doubt(link, maximum))
        if was is not None and to_baseline:
            expected = describe_link(was.speed_gts, was.width)
        if found.below_baseline:
            problems.append(f"below the baseline {expected}")
        if found.unknown_now:
            shown = f" (baseline {expected})" if was is not None and to_baseline and not found.unknown_before else ""
            problems.append(f"{_unknown(link)}, so the link cannot be judged{shown}")
        if found.unknown_before and was is not None:
            problems.append(f"in the baseline {_unknown(was)}, so there is nothing to compare with")
        if problems:
            yield finding(
                ctx,
                entry,
                f"PCIe link {bdf} runs {now}: " + "; ".join(problems),
                device=bdf,
                path=f"pcie[bdf={bdf}]",
                expected=expected,
                actual=now,
                evidence="lspci",
            )
    for bdf in sorted(set(base) - seen):
        was = base[bdf]
        yield finding(
            ctx,
            entry,
            f"PCIe link {bdf} ({describe_link(was.speed_gts, was.width)} in the baseline) is no longer reported",
            device=bdf,
            path=f"pcie[bdf={bdf}]",
            expected=describe_link(was.speed_gts, was.width),
            actual=None,
            evidence="lspci",
        )


def _source(report: VfReport) -> str:
    return "sysfs" if report.nic is None else f"NIC {report.nic}"


def _vf_doubt(ctx: NodeContext, entry: RuleEntry, pf: str, reports: Sequence[VfReport]) -> Finding:
    """Two sources of one PF's VF count that disagree, or a negative count."""
    nic = next((r for r in reports if r.nic is not None), None)
    path = f"nics[name={nic.nic}].sriov_numvfs" if nic is not None else f"sriov[bdf={pf}].numvfs"
    counts = {r.vfs for r in reports}
    if len(counts) > 1:
        shown = " vs ".join(f"{_source(r)} sriov_numvfs {show(r.vfs)}" for r in reports)
        message = f"PF {pf}: {shown}: the evidence disagrees"
    else:
        message = (
            f"PF {pf}: sriov_numvfs {reports[0].vfs} ({', '.join(map(_source, reports))}): "
            "a negative VF count is garbled evidence"
        )
    return finding(
        ctx,
        entry,
        message,
        device=pf,
        path=path,
        expected=reports[0].vfs if len(counts) > 1 else "0 or more",
        actual=nic.vfs if nic is not None else reports[0].vfs,
        evidence="sysfs_sriov",
    )


def check_sriov(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """VF count per PF vs the baseline (and UPGRADE_GATE_NIC_VF_COUNT); VF counts that disagree."""
    facts = vf_facts(ctx.candidate)
    now, doubts = facts.counts, facts.doubts
    for pf, found in doubts.items():
        yield _vf_doubt(ctx, entry, pf, found)
    if ctx.baseline is not None:
        before = vf_facts(ctx.baseline, like=ctx.candidate).counts
        for pf, was in before.items():  # sorted by PF
            if pf in doubts:
                continue
            if pf not in now:
                yield finding(
                    ctx,
                    entry,
                    f"PF {pf}: gone (the baseline had {was} VFs enabled)",
                    device=pf,
                    path=f"sriov[bdf={pf}].numvfs",
                    expected=was,
                    actual=None,
                    evidence="sysfs_sriov",
                )
            elif now[pf] != was:
                yield finding(
                    ctx,
                    entry,
                    f"PF {pf}: {now[pf] if now[pf] is not None else 'unknown'} VFs enabled, "
                    f"baseline {was if was is not None else 'unknown'}",
                    device=pf,
                    path=f"sriov[bdf={pf}].numvfs",
                    expected=was,
                    actual=now[pf],
                    evidence="sysfs_sriov",
                )
    expected = ctx.policy.thresholds.nic_vf_count
    if expected is not None:
        where = ctx.policy.thresholds.source("nic_vf_count")
        for nic in sorted(ctx.candidate.nics, key=lambda n: n.name):
            count = now.get(str(nic.bdf)) if nic.bdf is not None else nic.sriov_numvfs
            if count != expected:
                yield finding(
                    ctx,
                    entry,
                    f"NIC {nic.name}: {count if count is not None else 'unknown'} VFs enabled, expected {expected} "
                    f"({where})",
                    device=nic.name,
                    path=f"nics[name={nic.name}].sriov_numvfs",
                    expected=expected,
                    actual=count,
                    evidence="sysfs_sriov",
                )


SPECS = (
    spec(
        "pcie.downgrade",
        "a PCIe link trained below its maximum or below the baseline",
        check_pcie,
        params={
            "compare_to_max": ParamSpec(kind="boolean", default=True, doc="block below LnkCap"),
            "compare_to_baseline": ParamSpec(kind="boolean", default=True, doc="block below the baseline"),
        },
    ),
    spec("sriov.vf_count", "VFs enabled per PF differ from the baseline", check_sriov),
)
