"""`workload.utilisation_spread` on hand-built phase 6 evidence: healthy, jittery (the incident's 4 -> 12
points), missing (with the phase's own `utilisation: ...` reason), and a baseline without a spread."""

from __future__ import annotations

import pytest

from tests.judge_scenarios import judge_one, mi300x_snapshot, upgraded
from tests.workload_support import with_workload
from upgrade_gate.model import Finding, GateReport, Severity, Snapshot, replace

RULE = "workload.utilisation_spread"
NOT_SAMPLED = "utilisation: amd-smi list --json failed (amd-smi: missing binary); not sampled"


def _found(report: GateReport) -> list[Finding]:
    return [f for f in report.findings if f.rule == RULE]


def _base(spread: float | None = 4.0) -> Snapshot:
    return with_workload(mi300x_snapshot(), spread=spread)


@pytest.mark.parametrize("spread", [4.0, 7.9, 9.0])  # within x2, or more than x2 but under +5 points
def test_utilisation_spread_healthy_passes(spread: float) -> None:
    base = _base(4.0 if spread != 9.0 else 4.2)
    assert _found(judge_one(with_workload(upgraded(), seed=2, spread=spread), base)) == []


def test_utilisation_spread_incident_jitter_blocks_naming_baseline_and_candidate() -> None:
    (f,) = _found(judge_one(with_workload(upgraded(), seed=2, spread=12.0), _base()))
    assert f.severity is Severity.BLOCK
    assert f.message == (
        "workload/gfx_util_spread_pct: baseline 4.0 points, candidate 12.0 points (x3.0; allowed x2 or +5 points; "
        "worst ?)"
    )
    assert (f.expected, f.actual, f.path) == (4.0, 12.0, "measurements[key=workload/gfx_util_spread_pct]")


def test_utilisation_spread_missing_evidence_blocks_with_the_phases_reason() -> None:
    cand = with_workload(upgraded(), seed=2, spread=None)
    six = next(p for p in cand.phases if p.phase == 6)
    six = replace(six, reasons=(NOT_SAMPLED,))
    cand = replace(cand, phases=tuple(six if p.phase == 6 else p for p in cand.phases))
    (f,) = _found(judge_one(cand, _base()))
    assert f.severity is Severity.BLOCK and f.actual is None
    assert f.message == (
        "workload/gfx_util_spread_pct: phase 6 sampled no GPU utilisation spread (amd-smi list --json failed "
        "(amd-smi: missing binary); not sampled): missing evidence"
    )


def test_utilisation_spread_missing_without_a_reason_still_blocks() -> None:
    (f,) = _found(judge_one(with_workload(upgraded(), seed=2, spread=None), _base()))
    assert f.severity is Severity.BLOCK and "(no samples recorded): missing evidence" in f.message


def test_utilisation_spread_baseline_without_a_spread_warns_never_passes() -> None:
    (f,) = _found(judge_one(with_workload(upgraded(), seed=2, spread=3.0), _base(None)))
    assert f.severity is Severity.WARN
    assert f.message.startswith("workload/gfx_util_spread_pct: baseline not measured, candidate 3.0 points")


def test_utilisation_spread_without_phase_6_is_left_to_workload_evidence() -> None:
    cand = replace(upgraded(), phases=tuple(p for p in upgraded().phases if p.phase != 6))
    assert _found(judge_one(cand, _base())) == []
