"""The judge's fast paths say nothing the full rule would have said (issue 29): each skips an item only
where the rule's own tests find no problem. Checked against the full rule over generated inputs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from upgrade_gate.judge.policy import RuleEntry
from upgrade_gate.judge.rules import pcie
from upgrade_gate.model import PcieLink, Severity

SPEEDS = st.none() | st.sampled_from([2.5, 5.0, 8.0, 16.0, 32.0, 64.0, 7.0])
WIDTHS = st.none() | st.sampled_from([1, 2, 4, 8, 16, 32])


@st.composite
def links(draw: Any) -> PcieLink:
    return PcieLink(
        bdf="0000:05:00.0",
        speed_gts=draw(SPEEDS),
        width=draw(WIDTHS),
        max_speed_gts=draw(SPEEDS),
        max_width=draw(WIDTHS),
        downgraded=draw(st.booleans()),
    )


def _full_rule(link: PcieLink, was: PcieLink | None, to_max: bool, to_baseline: bool) -> list[Any]:
    """`check_pcie`'s findings on a node with this one link, the quiet test bypassed."""
    entry = RuleEntry(
        id="pcie.downgrade",
        severity=Severity.BLOCK,
        params={"compare_to_max": to_max, "compare_to_baseline": to_baseline},
    )
    ctx = SimpleNamespace(
        node="n",
        candidate=SimpleNamespace(pcie=(link,)),
        baseline=SimpleNamespace(pcie=(was,)) if was is not None else None,
    )
    quiet = pcie._quiet
    pcie._quiet = lambda *args: False  # type: ignore[assignment] - the rule's words, every time
    try:
        return list(pcie.check_pcie(ctx, entry))  # type: ignore[arg-type]
    finally:
        pcie._quiet = quiet  # type: ignore[assignment]


@settings(max_examples=400, deadline=None)
@given(links(), st.none() | links(), st.booleans(), st.booleans())
def test_a_pcie_link_skipped_as_quiet_is_one_the_rule_says_nothing_of(
    link: PcieLink, was: PcieLink | None, to_max: bool, to_baseline: bool
) -> None:
    said = _full_rule(link, was, to_max, to_baseline)
    assert pcie._quiet(link, was, to_max, to_baseline) == (not said), said


LINK_SPEEDS = st.none() | st.sampled_from([16.0, 32.0, float("nan")])
LINK_WIDTHS = st.none() | st.sampled_from([8, 16])


@st.composite
def link_sections(draw: Any) -> tuple[PcieLink, ...]:
    """0-4 links on a few BDFs (a BDF twice now and then), speeds and widths often equal to their maximum."""
    out = []
    for _ in range(draw(st.integers(0, 4))):
        speed, width = draw(LINK_SPEEDS), draw(LINK_WIDTHS)
        out.append(
            PcieLink(
                bdf=draw(st.sampled_from(["0000:05:00.0", "0000:15:00.0", "0000:25:00.0"])),
                speed_gts=speed,
                width=width,
                max_speed_gts=speed if draw(st.booleans()) else draw(LINK_SPEEDS),
                max_width=width if draw(st.booleans()) else draw(LINK_WIDTHS),
                downgraded=draw(st.integers(0, 4)) == 0,
            )
        )
    return tuple(out)


@settings(max_examples=500, deadline=None)
@given(link_sections(), st.none() | link_sections(), st.booleans(), st.booleans(), st.booleans())
def test_a_node_skipped_as_its_links_are_unchanged_at_maximum_is_one_the_rule_says_nothing_of(
    links_now: tuple[PcieLink, ...], other: tuple[PcieLink, ...] | None, same: bool, to_max: bool, to_baseline: bool
) -> None:
    """`pcie.downgrade` on a whole node with the unchanged-section fast path and without it: the baseline
    is the candidate's links (a copy: equal, not the same objects) or another section."""
    from upgrade_gate.model import replace

    was = tuple(replace(link) for link in links_now) if same or other is None else other
    entry = RuleEntry(
        id="pcie.downgrade",
        severity=Severity.BLOCK,
        params={"compare_to_max": to_max, "compare_to_baseline": to_baseline},
    )
    ctx = SimpleNamespace(node="n", candidate=SimpleNamespace(pcie=links_now), baseline=SimpleNamespace(pcie=was))
    fast = list(pcie.check_pcie(ctx, entry))  # type: ignore[arg-type]
    skip = pcie._unchanged_at_max
    pcie._unchanged_at_max = lambda *args: False  # type: ignore[assignment] - the full rule, every time
    try:
        full = list(pcie.check_pcie(ctx, entry))  # type: ignore[arg-type]
    finally:
        pcie._unchanged_at_max = skip  # type: ignore[assignment]
    assert fast == full
    if skip(was, links_now):
        assert not full


BLOCKS = st.dictionaries(st.sampled_from(["CP_MEC1", "PSP_SOSDRV", "SMU", "vbios"]), st.sampled_from(["1", "2"]))
VBIOS = st.none() | st.sampled_from(["113-A", "113-B"])


@settings(max_examples=300, deadline=None)
@given(BLOCKS, VBIOS, BLOCKS, VBIOS)
def test_a_gpu_skipped_as_its_classs_firmware_is_one_the_rule_says_nothing_of(
    firmware: dict[str, str], vbios: str | None, prevailing: dict[str, str], prevailing_vbios: str | None
) -> None:
    """`fleet.odd_one_out`'s GPU firmware findings with the fast path and without it (a block named
    `vbios` beside the VBIOS included: the key `gpu/vbios` names both)."""
    from tests.judge_scenarios import mi300x_snapshot
    from upgrade_gate.judge.rules import fleet
    from upgrade_gate.model import ClassReference, replace

    snap = mi300x_snapshot()
    gpus = tuple(replace(g, firmware=dict(firmware), vbios=vbios) for g in snap.gpus)
    keys = {f"gpu/{block}": version for block, version in prevailing.items()}
    if prevailing_vbios is not None:
        keys["gpu/vbios"] = prevailing_vbios
    ref = ClassReference(
        node_class="c", nodes=("a", "b", "c"), gpu_order=tuple(str(g.bdf) for g in gpus), firmware=keys
    )
    entry = RuleEntry(id="fleet.odd_one_out", severity=Severity.BLOCK, params={"check_metrics": False})
    ctx = SimpleNamespace(node="n", reference=ref, candidate=replace(snap, gpus=gpus), plan=None)
    fast = list(fleet.check_odd_one_out(ctx, entry))  # type: ignore[arg-type]
    cache = fleet._GPU_FIRMWARE
    fleet._GPU_FIRMWARE = SimpleNamespace(  # type: ignore[assignment] - never equal: the full loop for every GPU
        get=lambda ref, compute: compute(ref)._replace(blocks=None)
    )
    try:
        full = list(fleet.check_odd_one_out(ctx, entry))  # type: ignore[arg-type]
    finally:
        fleet._GPU_FIRMWARE = cache  # type: ignore[assignment]
    assert fast == full
