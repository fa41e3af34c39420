"""What a baseline lacks is named, never a silent pass (a review degraded the baseline one way at a time
and found bad candidates that passed): a baseline without a phase's measurements, a baseline phase that
did not pass, a probe the baseline failed, a node judged against its class only; and a candidate that
contradicts itself (a probe ok and timed out, a phase reported twice)."""

from __future__ import annotations

import pytest

from tests.judge_scenarios import judge_one, mi300x_snapshot, scale_metrics, upgraded
from upgrade_gate.model import Finding, GateReport, PhaseStatus, Severity, Snapshot, Verdict, replace


def _judge(candidate: Snapshot, baseline: Snapshot) -> GateReport:
    return judge_one(candidate, baseline)


def _blocks(report: GateReport, rule: str) -> list[Finding]:
    return [f for n in report.nodes for f in n.findings if f.rule == rule and f.severity is Severity.BLOCK]


def _mesh(key: str) -> bool:
    return key.startswith("mesh/")


def test_a_baseline_without_a_phases_measurements_cannot_hide_a_drop() -> None:
    """Phase 2 passed in the baseline but recorded no measurement: a 15% mesh drop was never compared and
    the node passed. Now the candidate's metrics the baseline lacks are named, and the node blocks."""
    base = mi300x_snapshot()
    stripped = replace(
        base,
        phases=tuple(replace(p, measurements=()) if p.phase == 2 else p for p in base.phases),
    )
    report = _judge(scale_metrics(upgraded(), 0.85, _mesh), stripped)
    assert report.verdict is Verdict.BLOCK
    (found,) = _blocks(report, "bandwidth.not_comparable")
    assert "measured now are absent from the baseline, so no regression of them can be judged" in found.message
    assert "mesh/all_reduce/busbw (" in found.message and found.path == "measurements"
    assert _judge(upgraded(), base).verdict is Verdict.PASS  # the whole baseline: nothing to say


@pytest.mark.parametrize("status", [PhaseStatus.SKIPPED, PhaseStatus.FAILED, PhaseStatus.ERROR, None])
def test_a_baseline_phase_that_did_not_pass_is_named(status: PhaseStatus | None) -> None:
    """A baseline whose phase 2 was skipped, failed, errored or is absent is no reference for phase 2."""
    base = mi300x_snapshot()
    phases = tuple(
        replace(p, status=status, measurements=()) if p.phase == 2 and status is not None else p
        for p in base.phases
        if status is not None or p.phase != 2
    )
    report = _judge(upgraded(), replace(base, phases=phases))
    assert report.verdict is Verdict.BLOCK
    named = [f for f in _blocks(report, "evidence.missing") if f.path == "baseline.phases[phase=2]"]
    assert len(named) == 1
    had = status.value if status is not None else "no result"
    assert named[0].message.startswith(f"the baseline's phase 2 (gpu-mesh-validation): {had};")


def test_a_probe_the_baseline_failed_is_still_required_of_the_candidate() -> None:
    """sysfs_sriov failed in the baseline and is absent from the candidate: it used to drop out of the
    required probes, so the SR-IOV state was judged on neither side without a word."""
    base = mi300x_snapshot()
    base = replace(
        base, probes=tuple(replace(p, ok=False, reason="boom") if p.name == "sysfs_sriov" else p for p in base.probes)
    )
    cand = upgraded()
    cand = replace(cand, probes=tuple(p for p in cand.probes if p.name != "sysfs_sriov"))
    found = [f for f in _blocks(_judge(cand, base), "evidence.missing") if f.path == "probes[name=sysfs_sriov]"]
    assert [f.message for f in found] == ["probe sysfs_sriov is absent from the candidate (it ran in the baseline)"]


@pytest.mark.parametrize("flag", ["timed_out", "missing"])
def test_a_probe_marked_ok_that_also_timed_out_contradicts_itself(flag: str) -> None:
    cand = upgraded()
    cand = replace(cand, probes=tuple(replace(p, **{flag: True}) if p.name == "rocminfo" else p for p in cand.probes))
    report = _judge(cand, mi300x_snapshot())
    (found,) = [f for f in _blocks(report, "evidence.missing") if f.path == "probes[name=rocminfo]"]
    assert found.message.startswith("probe rocminfo is marked ok but also ")
    assert found.message.endswith("the snapshot contradicts itself")


@pytest.mark.parametrize("first", [True, False])
def test_a_phase_reported_twice_blocks_whichever_comes_first(first: bool) -> None:
    """A second phase 2 result (errored) before or after the passed one: the verdict used to depend on the order."""
    cand = upgraded()
    passed = next(p for p in cand.phases if p.phase == 2)
    extra = replace(passed, status=PhaseStatus.ERROR, measurements=(), reason="crashed")
    others = tuple(p for p in cand.phases if p.phase != 2)
    twice = (extra, passed) if first else (passed, extra)
    report = _judge(replace(cand, phases=(*others, *twice)), mi300x_snapshot())
    assert report.verdict is Verdict.BLOCK
    found = [f for f in _blocks(report, "evidence.missing") if "reported 2 times" in f.message]
    assert [f.message.split(":")[0] for f in found] == ["phase 2 is reported 2 times (error, passed)"] or [
        f.message.split(":")[0] for f in found
    ] == ["phase 2 is reported 2 times (passed, error)"]


def test_a_configuration_baseline_says_what_it_cannot_judge_without_blocking() -> None:
    """A baseline with no phase result at all (`snapshot`, `fleet snapshot`: the change window's usual
    baseline) is no regression reference: said as info, judged by the CVF floors and the class. One whose
    phases passed but recorded no measurement is a degraded baseline: that blocks."""
    base = mi300x_snapshot()
    configuration = replace(base, phases=(), measurements=())
    report = _judge(upgraded(), configuration)
    notes = [f for n in report.nodes for f in n.findings if f.rule == "bandwidth.not_comparable"]
    assert [f.severity for f in notes] == [Severity.INFO]
    assert notes[0].message.startswith("the baseline measured nothing (a configuration snapshot): the ")
    assert not [f for f in _blocks(report, "evidence.missing") if (f.path or "").startswith("baseline.")]
    assert report.verdict is Verdict.PASS
    emptied = replace(base, phases=tuple(replace(p, measurements=()) for p in base.phases), measurements=())
    assert _blocks(_judge(upgraded(), emptied), "bandwidth.not_comparable")
