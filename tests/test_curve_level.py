"""The curve-level test of `bandwidth.regression` (issue 29): a whole sweep shifted beyond `curve_tolerance`
(default 2%) blocks when shown, next to the per-size test; singletons keep `tolerance` (7%); a plan's
`accept ... shift` or an override covering the whole curve replaces it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.judge_scenarios import mi300x_snapshot, upgraded
from upgrade_gate.cli.main import run
from upgrade_gate.errors import ExitCode
from upgrade_gate.judge import curves
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.judge.rules.measured import curve_params
from upgrade_gate.model import Snapshot, replace
from upgrade_gate.snapshot.io import write_snapshot
from upgrade_gate.store.gitstore import BaselineStore

SIZES = [1024 << i for i in range(21)]
LEVELS = [min(0.13 * 2**i, 320.0) for i in range(21)]


def _curve(
    rng: np.random.Generator,
    factor: float = 1.0,
    *,
    n: int = 5,
    nc: int = 5,
    shift: float = 0.0,
    tol: float | None = None,
) -> list[curves.Row]:
    rows = []
    for size, level in zip(SIZES, LEVELS, strict=True):
        base = tuple(np.round(level * (1 + 0.03 * rng.standard_normal(n)), 2).tolist())
        cand = tuple(np.round(level * factor * (1 + 0.03 * rng.standard_normal(nc)), 2).tolist())
        rows.append(curves.Row(f"mesh/all_reduce/busbw/{size}", base, cand, True, shift, tol, None))
    return rows


def _group_blocks(a: curves.Assessment) -> list[curves.Decision]:
    return [d for d in a.groups if d.outcome == "block"]


def test_curve_level_whole_sweep_5pct_down_blocks_by_default() -> None:
    rng = np.random.default_rng(29)
    got = curves.assess_many([_curve(rng, 0.95) for _ in range(100)])
    assert all(a.worst() == "block" for a in got)
    (first,) = _group_blocks(got[0])
    assert first.key == "mesh/all_reduce/busbw" and "beyond the 2% tolerance" in first.why
    assert first.threshold == pytest.approx(0.02) and 0.03 < first.drop < 0.07


def test_curve_level_healthy_curves_never_block_on_the_curve() -> None:
    rng = np.random.default_rng(30)
    got = curves.assess_many([_curve(rng) for _ in range(300)])
    assert not [d for a in got for d in _group_blocks(a)]


def test_curve_level_a_shift_near_the_curve_tolerance_is_remeasured_then_decided_at_max_samples() -> None:
    rng = np.random.default_rng(31)
    # 3% down: the estimate is beyond 2% but not shown with 5 samples; at 20 (max_samples) the estimate decides
    early = curves.assess(_curve(rng, 0.97, nc=5))
    assert [d.outcome for d in early.groups] in (["remeasure"], ["block"])
    late = curves.assess(_curve(rng, 0.97, nc=20))
    assert [d.outcome for d in late.groups] == ["block"]


def test_curve_level_singletons_keep_the_tolerance() -> None:
    rng = np.random.default_rng(32)
    base = tuple(np.round(280 * (1 + 0.03 * rng.standard_normal(5)), 2).tolist())
    cand = tuple(np.round(280 * 0.95 * (1 + 0.03 * rng.standard_normal(5)), 2).tolist())
    got = curves.assess([curves.Row("mesh/all_reduce/avg_busbw", base, cand)])
    assert not _group_blocks(got)  # 5% down on one metric is within the 7% tolerance


def test_curve_level_a_plan_accept_shift_or_a_whole_curve_override_replaces_the_curve_tolerance() -> None:
    rng = np.random.default_rng(33)
    # a plan's accept entry: candidate ~ baseline * (1 - 5%), within its own tolerance
    accepted = curves.assess(_curve(rng, 0.95, shift=-0.05, tol=0.03))
    assert not _group_blocks(accepted)
    # tolerance_overrides covering every size: the override (7%) governs the whole curve
    overridden = curves.assess(_curve(rng, 0.95, tol=0.07))
    assert not _group_blocks(overridden)
    # a curve_tolerance above the tolerance: the tolerance (the smaller) governs
    wide = curves.assess(_curve(rng, 0.95), curves.Params(curve_tolerance=0.10))
    assert not _group_blocks(wide)


def test_curve_level_policy_knob_reaches_the_statistics(tmp_path: Path) -> None:
    default = load_policy().rule_for("bandwidth.regression", None)
    assert default is not None and curve_params(default).curve_tolerance == pytest.approx(0.02)
    path = tmp_path / "policy.yaml"
    path.write_text("rules:\n  - {id: bandwidth.regression, params: {curve_tolerance: 0.07}}\n", encoding="utf-8")
    entry = load_policy(path).rule_for("bandwidth.regression", None)
    assert entry is not None and curve_params(entry).curve_tolerance == pytest.approx(0.07)


def _scaled(snap: Snapshot, prefix: str, factor: float) -> Snapshot:
    phases = tuple(
        replace(
            p,
            measurements=tuple(
                replace(m, samples=tuple(round(s * factor, 2) for s in m.samples)) if m.key.startswith(prefix) else m
                for m in p.measurements
            ),
        )
        for p in snap.phases
    )
    return replace(snap, phases=phases)


def test_cli_gate_on_files_blocks_a_whole_sweep_5pct_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = Path(__file__).parent / "fixtures" / "judge" / "plans" / "rocm-6.2.0.yaml"
    store = tmp_path / "store"
    with BaselineStore(store) as st:
        st.save([mi300x_snapshot()], message="baseline")
    codes = {}
    for name, factor in (("healthy", 1.0), ("sweep", 0.95)):
        cand = tmp_path / f"{name}.json"
        write_snapshot(_scaled(upgraded(), "mesh/all_reduce/busbw/", factor), cand)
        report = tmp_path / f"{name}-report.json"
        codes[name] = run(["gate", "--store", str(store), "--now", "2026-11-30T12:00:00Z", "--plan", str(plan),
                           "--candidate", str(cand), "--report", f"json:{report}"])  # fmt: skip
        capsys.readouterr()
        if name == "sweep":
            text = report.read_text(encoding="utf-8")
            assert "mesh/all_reduce/busbw" in text and "beyond the 2% tolerance" in text
            assert json.loads(text)
    assert codes == {"healthy": ExitCode.PASS, "sweep": ExitCode.BLOCK}
