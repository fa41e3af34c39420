"""Phases re-measure on their own (issue 14): fake nodes whose rails and rccl-tests sweeps sit in, or
clearly out of, the inconclusive band of their CVF floor; the extra runs are real fake-tool runs.

The only double is `_FailingAfter` (a fault: the tool breaks during re-measurement), kept small.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.test_validate_support import fast_config, healthy_spec, launcher_for, make_node
from upgrade_gate.collect.runner import CommandResult, CommandRunner
from upgrade_gate.fakenode import FakeNode
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.judge.remeasure import BaselineComparison, resampling
from upgrade_gate.model import NodeName, PhaseResult, PhaseStatus, Snapshot
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.launcher import Background, LocalLauncher
from upgrade_gate.validate.phases import ClusterPhase, RailPhase
from upgrade_gate.validate.pipeline import run_pipeline
from upgrade_gate.validate.remeasure import Resampling

NAMES = ("node-01", "node-02")
LIMIT = Resampling(max_samples=6)  # 2 samples first, then 2 more per look, up to 6


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, FakeNode]:
    root = tmp_path_factory.mktemp("remeasure")
    return {name: make_node(root, healthy_spec(name)) for name in NAMES}


def _config(**extra: str) -> CvfConfig:
    return fast_config(**{"PHASE4_IB_DEV_PREFIX": "ionic_", "UPGRADE_GATE_SAMPLES": "2", **extra})


def _rails(launcher: object, config: CvfConfig, resample: Resampling) -> dict[NodeName, tuple[PhaseResult, ...]]:
    return run_pipeline(list(NAMES), phases=[RailPhase()], config=config, launcher=launcher, resampling=resample)  # type: ignore[arg-type]


def _level(pair: dict[str, FakeNode]) -> float:
    """The pair's rail-0 level: the median of a clear-pass run (floor far below)."""
    result = _rails(launcher_for(*pair.values()), _config(PHASE4_BW_THRESHOLD="100"), LIMIT)[NodeName("node-01")][0]
    m = next(m for m in result.measurements if m.key == "rail/ionic_0/write_bw")
    return statistics.median(m.samples)


def test_remeasure_clear_pass_takes_the_minimum_samples(pair: dict[str, FakeNode]) -> None:
    results = _rails(launcher_for(*pair.values()), _config(PHASE4_BW_THRESHOLD="100"), LIMIT)
    for name in NAMES:
        (rail,) = results[NodeName(name)]
        assert rail.status is PhaseStatus.PASSED, rail.reasons
        assert {len(m.samples) for m in rail.measurements} == {2}
        assert f"{cvf.RAIL_BANDWIDTH}-samples" not in rail.annotations


def test_remeasure_rail_in_the_inconclusive_band_is_re_measured_up_to_the_limit(pair: dict[str, FakeNode]) -> None:
    level = _level(pair)
    config = _config(PHASE4_BW_THRESHOLD=f"{level:.2f}")
    results = _rails(launcher_for(*pair.values()), config, LIMIT)
    for name in NAMES:
        (rail,) = results[NodeName(name)]
        # between the bounds at the limit: never failed on a coin toss; the judge warns on the samples
        assert rail.status is PhaseStatus.PASSED, rail.reasons
        assert {len(m.samples) for m in rail.measurements} == {6}
        note = rail.annotations[f"{cvf.RAIL_BANDWIDTH}-samples"]
        assert note.startswith("rail-0: 6 (re-measured: ") and "not shown above or below PHASE4_BW_THRESHOLD" in note
        assert "rail-1: 6 (re-measured: " in note
    # without a policy limit the same rails keep their fixed count and are not failed either
    fixed = _rails(launcher_for(*pair.values()), config, Resampling())[NodeName("node-01")][0]
    assert fixed.status is PhaseStatus.PASSED and {len(m.samples) for m in fixed.measurements} == {2}


def test_remeasure_clear_fail_fails_on_the_first_look_with_the_evidence(pair: dict[str, FakeNode]) -> None:
    results = _rails(launcher_for(*pair.values()), _config(PHASE4_BW_THRESHOLD="500"), LIMIT)
    (rail,) = results[NodeName("node-01")]
    assert rail.status is PhaseStatus.FAILED
    assert {len(m.samples) for m in rail.measurements} == {2}
    assert rail.reason is not None and rail.reason.startswith(
        "below-threshold:rail-0(node-01:ionic_0<->node-02:ionic_0)="
    )
    assert "2 sample(s), upper bound" in rail.reason and "CVF's single-sample decision: failed" in rail.reason
    assert rail.reason.endswith("< PHASE4_BW_THRESHOLD 500 Gb/s")


class _FailingAfter:
    """A launcher whose `tool` runs fail (exit 1) after `after` good runs: a tool breaking mid-phase."""

    def __init__(self, inner: LocalLauncher, tool: str, after: int) -> None:
        self._inner, self._tool, self._left = inner, tool, after

    def runner_for(self, node: NodeName) -> CommandRunner:
        return _Runner(self, self._inner.runner_for(node))

    def address(self, node: NodeName, *, device: str | None = None) -> str:
        return self._inner.address(node, device=device)

    def start(self, node: NodeName, argv: Sequence[str]) -> Background:
        return self._inner.start(node, argv)

    def tool_env(self, node: NodeName) -> Mapping[str, str]:
        return self._inner.tool_env(node)

    def take(self, argv: Sequence[str]) -> bool:
        if self._tool not in argv:
            return True
        self._left -= 1
        return self._left >= 0


class _Runner:
    def __init__(self, owner: _FailingAfter, inner: CommandRunner) -> None:
        self._owner, self._inner = owner, inner

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        if self._owner.take(argv):
            return self._inner.run(argv, timeout=timeout)
        return CommandResult(argv=tuple(argv), returncode=1, stdout="", stderr="Segmentation fault\n", duration_s=0.1)


def test_remeasure_a_tool_failing_during_re_measurement_fails_closed(pair: dict[str, FakeNode]) -> None:
    level = _level(pair)
    launcher = _FailingAfter(launcher_for(*pair.values()), "ib_write_bw", after=3)  # rail-0: 2 runs, 1 more
    results = _rails(launcher, _config(PHASE4_BW_THRESHOLD=f"{level:.2f}"), LIMIT)
    (rail,) = results[NodeName("node-01")]
    assert rail.status is PhaseStatus.FAILED
    assert any(r.startswith("ib-write-bw-crashed:rail-0(") for r in rail.reasons), rail.reasons
    assert "rail/ionic_0/write_bw" not in {m.key for m in rail.measurements}  # no pass on partial evidence
    assert rail.annotations[f"{cvf.RAIL_BANDWIDTH}-failed-rails"].startswith("0")


def _cluster(launcher: object, config: CvfConfig, resample: Resampling) -> PhaseResult:
    results = run_pipeline(
        list(NAMES),
        phases=[ClusterPhase()],
        config=config,
        launcher=launcher,
        resampling=resample,  # type: ignore[arg-type]
    )
    return results[NodeName("node-01")][0]


def test_remeasure_sweep_threshold_in_the_band_reruns_the_sweep_and_a_failing_rerun_fails_closed(
    pair: dict[str, FakeNode],
) -> None:
    clear = _cluster(launcher_for(*pair.values()), _config(), LIMIT)
    assert clear.status is PhaseStatus.PASSED, clear.reasons
    avg = next(m for m in clear.measurements if m.key == "cluster/all_reduce/avg_busbw")
    assert len(avg.samples) == 2  # no threshold for all_gather, all_reduce far above TESTS_JSON's 5 GB/s
    tests = json.dumps({"tests": [{"name": "all_reduce_perf", "threshold": round(statistics.median(avg.samples), 2)}]})
    banded = _cluster(launcher_for(*pair.values()), _config(TESTS_JSON=tests), LIMIT)
    assert banded.status is PhaseStatus.PASSED, banded.reasons
    counts = {m.key.split("/")[1]: len(m.samples) for m in banded.measurements}
    assert counts == {"all_reduce": 6, "all_gather": 2}  # the whole sweep re-ran, the other one did not
    note = banded.annotations[f"{cvf.CLUSTER_VALIDATION_STATUS}-samples"]
    assert note.startswith("mpirun all_reduce_perf: 6 (re-measured: Avg bus bandwidth ")
    failing = _FailingAfter(launcher_for(*pair.values()), "all_reduce_perf", after=3)
    broken = _cluster(failing, _config(TESTS_JSON=tests), LIMIT)
    assert broken.status is PhaseStatus.FAILED
    assert broken.reason == "mpirun: exit 1: Segmentation fault" or "Segmentation fault" in (broken.reason or "")


def _baseline_of(result: PhaseResult, node: str, shift: float) -> Mapping[str, Snapshot]:
    from upgrade_gate.model import NodeInfo, Software, replace

    scaled = tuple(
        replace(m, samples=tuple(round(s * shift, 2) for s in m.samples), settings=dict(m.settings))
        if "/all_reduce/" in m.key
        else m
        for m in result.measurements
    )
    phase = replace(result, measurements=scaled)
    info = NodeInfo(name=NodeName(node), node_class="mi300x-8gpu")
    snap = Snapshot(
        node=info, taken_at="2026-12-01T00:00:00Z", tool_version="test", software=Software(), phases=(phase,)
    )
    return {node: snap}


def test_remeasure_against_the_baseline_reruns_an_inconclusive_curve(pair: dict[str, FakeNode], tmp_path: Path) -> None:
    config = _config(UPGRADE_GATE_SAMPLES="3")  # >= min_samples per side: the curve statistics apply
    clear = _cluster(launcher_for(*pair.values()), config, LIMIT)
    # a whole-curve tolerance of 7% (the default is 2% since issue 29, where a 7% shift is a plain block)
    path = tmp_path / "policy.yaml"
    path.write_text("rules:\n  - {id: bandwidth.regression, params: {curve_tolerance: 0.07}}\n", encoding="utf-8")
    policy = load_policy(path)
    # all_reduce 7.5% higher in the baseline: the curve's shift (-7.0%) sits at the 7% tolerance
    baselines = _baseline_of(clear, "node-01", 1.075)
    compare = BaselineComparison(baselines, policy)
    measured = [m for m in clear.measurements if m.key.startswith("cluster/all_reduce/")]
    assert "cluster/all_reduce/busbw" in compare(NodeName("node-01"), measured)
    assert compare(NodeName("node-01"), [m for m in clear.measurements if "all_gather" in m.key]) == {}
    resample = resampling(policy, "mi300x-8gpu", baselines=baselines)
    assert resample.max_samples == 20  # the shipped policy's bandwidth.regression.max_samples
    banded = _cluster(launcher_for(*pair.values()), config, Resampling(max_samples=5, compare=compare))
    counts = {m.key.split("/")[1]: len(m.samples) for m in banded.measurements}
    assert counts == {"all_reduce": 5, "all_gather": 3}
    note = banded.annotations[f"{cvf.CLUSTER_VALIDATION_STATUS}-samples"]
    assert (
        "comparison(s) with node-01's baseline inconclusive (cluster/all_reduce/avg_busbw, cluster/all_reduce/busbw,"
        in note
    )


def test_remeasure_policy_limit_is_the_regression_rule_parameter(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("rules:\n  - {id: bandwidth.regression, params: {max_samples: 9}}\n", encoding="utf-8")
    r = resampling(load_policy(path))
    assert (r.max_samples, r.compare) == (9, None)
    assert r.next_count(2, 2) == 4 and r.next_count(8, 2) == 9 and r.limit(12) == 12


def test_remeasure_phase_look_judges_at_the_node_multiplicity() -> None:
    import numpy as np

    from upgrade_gate.judge import curves

    rng = np.random.default_rng(5)
    sizes = [1024 << i for i in range(10, 22)]
    rows = [
        curves.Row(
            key=f"mesh/all_reduce/busbw/{s}",
            baseline=tuple(np.round(200 * (1 + 0.03 * rng.standard_normal(5)), 2)),
            candidate=tuple(np.round(200 * (0.88 if s == sizes[6] else 1.0) * (1 + 0.03 * rng.standard_normal(5)), 2)),
        )
        for s in sizes
    ]
    key = f"mesh/all_reduce/busbw/{sizes[6]}"
    phase_only = next(d for d in curves.assess(rows).metrics if d.key == key)
    node_wide = next(d for d in curves.assess(rows, multiplicity=(132, 20)).metrics if d.key == key)
    assert node_wide.threshold > phase_only.threshold  # 132 tests: a stricter single-size threshold
    base = {f"mesh/all_reduce/busbw/{s}": r for s, r in zip(sizes, rows, strict=True)}
    from upgrade_gate.judge.remeasure import multiplicity_of
    from upgrade_gate.model import Measurement

    measured = {k: Measurement(key=k, unit="GB/s", samples=r.baseline) for k, r in base.items()}
    measured["rail/ionic_0/write_bw"] = Measurement(key="rail/ionic_0/write_bw", unit="Gb/s", samples=(383.0,))
    assert multiplicity_of(measured) == (12, 2)


def test_remeasure_cli_refuses_another_nodes_baseline_and_a_bad_policy(tmp_path: Path) -> None:
    from tests.judge_scenarios import mi300x_snapshot
    from upgrade_gate.cli.main import run
    from upgrade_gate.errors import ExitCode
    from upgrade_gate.snapshot.io import write_snapshot

    snap = mi300x_snapshot()
    path = tmp_path / "baseline.json"
    write_snapshot(snap, path)
    other = "not-" + snap.node.name
    assert run(["validate", "--node", other, "--phases", "2", "--baseline", str(path)]) == ExitCode.USAGE
    bad = tmp_path / "policy.yaml"
    bad.write_text("rules:\n  - {id: bandwidth.regression, params: {max_samples: many}}\n", encoding="utf-8")
    assert run(["validate", "--node", other, "--phases", "2", "--policy", str(bad)]) == ExitCode.BAD_INPUT
