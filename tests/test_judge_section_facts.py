"""Facts the judge derives once per snapshot (or node) and batch say what deriving them afresh says
(issue 29): a baseline that shares its candidate's VF facts, an XGMI matrix passed as equal to its
baseline, the NIC facts of a candidate judged against another baseline. Checked over generated inputs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from upgrade_gate.judge.policy import RuleEntry, load_policy
from upgrade_gate.judge.rules import facts, nic, topology
from upgrade_gate.model import Bdf, GpuLink, LinkType, Nic, NicPort, RuleId, Severity, SriovFunction, replace

BDFS = st.sampled_from([Bdf(f"0000:{bus:02x}:00.{fn}") for bus in (5, 6, 0x15) for fn in (0, 1)])
PF = Bdf("0000:06:00.0")
COUNTS = st.none() | st.sampled_from([-1, 0, 7, 8])


@st.composite
def nics(draw: Any) -> Nic:
    return Nic(
        name=draw(st.sampled_from(["ionic_0", "ionic_1", "mlx5_0"])),
        bdf=draw(st.none() | BDFS),
        sriov_numvfs=draw(COUNTS),
    )


SRIOV = st.builds(SriovFunction, bdf=BDFS, numvfs=COUNTS, totalvfs=st.just(16))
LINKS = st.builds(
    GpuLink,
    a=BDFS,
    b=BDFS,
    link_type=st.sampled_from(list(LinkType)),
    hops=st.none() | st.sampled_from([1, 2]),
    weight=st.none() | st.sampled_from([15, 30]),
)


def _copies(items: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(replace(x) for x in items)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(SRIOV, max_size=4).map(tuple),
    st.lists(nics(), max_size=4).map(tuple),
    st.none() | st.lists(SRIOV, max_size=4).map(tuple),
    st.none() | st.lists(nics(), max_size=4).map(tuple),
)
def test_vf_facts_of_a_baseline_like_its_candidate_are_its_own(
    sriov: tuple[SriovFunction, ...],
    nic_list: tuple[Nic, ...],
    base_sriov: tuple[SriovFunction, ...] | None,
    base_nics: tuple[Nic, ...] | None,
) -> None:
    candidate = SimpleNamespace(sriov=sriov, nics=nic_list)
    baseline = SimpleNamespace(  # None: a copy of the candidate's section (equal, not the same object)
        sriov=_copies(sriov) if base_sriov is None else base_sriov,
        nics=_copies(nic_list) if base_nics is None else base_nics,
    )
    facts.forget()
    try:
        assert facts.vf_facts(baseline, like=candidate) == facts._vf_facts(baseline)  # type: ignore[arg-type]
    finally:
        facts.forget()


@given(st.lists(COUNTS, min_size=1, max_size=3))
def test_doubtful_means_counts_that_disagree_or_a_negative_one(counts: list[int | None]) -> None:
    reports = [facts.VfReport(None, c) for c in counts]
    distinct = set(counts)
    assert facts.doubtful(reports) == (len(distinct) > 1 or any(c is not None and c < 0 for c in distinct))


def _xgmi(before: tuple[GpuLink, ...], after: tuple[GpuLink, ...], *, full: bool = False) -> list[Any]:
    """`check_xgmi`'s findings; `full`: with its test for an unchanged link list bypassed."""
    ctx = SimpleNamespace(
        node="n", plan=None, baseline=SimpleNamespace(gpu_links=before), candidate=SimpleNamespace(gpu_links=after)
    )
    entry = RuleEntry(id=RuleId("xgmi.link_changed"), severity=Severity.BLOCK)
    unchanged = topology._unchanged
    if full:
        topology._unchanged = lambda *args: False  # every pair compared
    try:
        return list(topology.check_xgmi(ctx, entry))  # type: ignore[arg-type]
    finally:
        topology._unchanged = unchanged


@settings(max_examples=300, deadline=None)
@given(st.lists(LINKS, max_size=5).map(tuple), st.none() | st.lists(LINKS, max_size=5).map(tuple))
def test_an_xgmi_matrix_passed_as_unchanged_is_one_the_full_rule_says_nothing_of(
    before: tuple[GpuLink, ...], after: tuple[GpuLink, ...] | None
) -> None:
    now = _copies(before) if after is None else after  # None: the baseline's links again
    said = _xgmi(before, now, full=True)
    assert _xgmi(before, now) == said
    if topology._unchanged(before, now):
        assert not said


def _port(rate: float, gids: int) -> NicPort:
    return NicPort(port=1, state="ACTIVE", phys_state="LINK_UP", rate_gbps=rate, gid_count=gids)


def test_nic_facts_of_a_candidate_follow_its_baseline() -> None:
    policy = load_policy()
    candidate = SimpleNamespace(nics=(Nic(name="ionic_0", bdf=PF, ports=(_port(200.0, 2),)),))
    slower = SimpleNamespace(nics=(Nic(name="ionic_0", bdf=PF, ports=(_port(100.0, 1),)),))
    faster = SimpleNamespace(nics=(Nic(name="ionic_0", bdf=PF, ports=(_port(400.0, 4),)),))
    entry = RuleEntry(id=RuleId("nic.port_state"), severity=Severity.BLOCK)

    def judged(baseline: object) -> list[str]:
        ctx = SimpleNamespace(node="n", candidate=candidate, baseline=baseline, policy=policy)
        return [f.message for f in nic.check_port_state(ctx, entry)]  # type: ignore[arg-type]

    facts.forget()
    try:
        assert judged(slower) == []
        assert judged(faster) == ["NIC ionic_0 port 1: link rate 200.0 Gb/s, baseline 400 Gb/s"]
        assert judged(None) == []
        facts.forget()
        assert nic._NICS.peek(candidate) is None  # type: ignore[arg-type]
    finally:
        facts.forget()
