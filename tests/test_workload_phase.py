"""Phases 6 and 7 on fake nodes: the shipped training script run for real (PyTorch, gloo, two ranks on
the CPUs), and a site's own command that misbehaves (no PyTorch needed), through the node's runner.

The real runs are few (three training runs per module fixture) and short (5 steps, batch 8): the suite
must stay quick on two cores. Timings go to bench/bench_workload.py, never into an assert here.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.judge_scenarios import NOW
from tests.test_validate_support import fast_config, launcher_for, make_node, snapshot_of
from upgrade_gate.collect.runner import CommandResult, CommandRunner
from upgrade_gate.fakenode import FakeNode, NodeSpec, faults, mi300x_node
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import NodeName, PhaseResult, PhaseStatus, Severity, Snapshot, replace
from upgrade_gate.validate import cvf
from upgrade_gate.validate.launcher import LocalLauncher
from upgrade_gate.validate.phases import select_phases
from upgrade_gate.validate.pipeline import run_pipeline

NODE = NodeName("node-01")
SITE = Path(__file__).parent / "fixtures" / "workload" / "site_workload.py"
SHORT = {"UPGRADE_GATE_WORKLOAD_STEPS": "5", "UPGRADE_GATE_WORKLOAD_WARMUP": "1", "UPGRADE_GATE_WORKLOAD_BATCH": "8"}
torch = pytest.importorskip("torch")


def _node(root: Path, name: str = "node-01", change: object = None) -> tuple[FakeNode, Snapshot]:
    spec = mi300x_node(name, seed=1, gpu_count=4, nic_count=0)
    if callable(change):
        spec = change(spec)
    node = make_node(root, spec)
    return node, snapshot_of(node)


def _run(node: FakeNode, snap: Snapshot, phases: set[int], launcher: object = None, **config: str) -> list[PhaseResult]:
    return list(
        run_pipeline(
            [node.spec.name],
            phases=select_phases(frozenset(phases)),
            config=fast_config(**{**SHORT, **config}),
            launcher=launcher or launcher_for(node),  # type: ignore[arg-type]
            snapshots={node.spec.name: snap},
        )[NodeName(node.spec.name)]
    )


class _Recording(LocalLauncher):
    """The local launcher, recording every argv its runners run (the seam the phase uses)."""

    def __init__(self, node: FakeNode) -> None:
        self.envs = {node.spec.name: node.env(os.environ)}
        super().__init__(self.envs)
        self.argvs: list[tuple[str, ...]] = []

    def runner_for(self, node: NodeName) -> CommandRunner:
        inner = super().runner_for(node)
        outer = self

        class Runner:
            def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
                outer.argvs.append(tuple(argv))
                return inner.run(argv, timeout=timeout)

        return Runner()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> tuple[FakeNode, Snapshot, list[PhaseResult], _Recording]:
    node, snap = _node(tmp_path_factory.mktemp("healthy"))
    launcher = _Recording(node)
    before = dict(os.environ)
    env_before = json.dumps(launcher.envs, sort_keys=True)
    results = _run(node, snap, {6, 7}, launcher)
    assert dict(os.environ) == before and json.dumps(launcher.envs, sort_keys=True) == env_before
    return node, snap, results, launcher


def test_workload_phase_real_training_run_passes_and_records_the_contract(healthy: tuple) -> None:  # type: ignore[type-arg]
    _, snap, (six, seven), _ = healthy
    assert (six.phase, six.status, seven.phase, seven.status) == (6, PhaseStatus.PASSED, 7, PhaseStatus.PASSED), (
        six.reasons,
        seven.reasons,
    )
    assert six.labels == {cvf.WORKLOAD_VALIDATION: "passed"} and seven.labels == {cvf.PERTURBATION_VALIDATION: "passed"}
    by_key = {m.key: m for m in six.measurements}
    rate, loss = by_key["workload/samples_per_s"], by_key["workload/loss"]
    assert len(rate.samples) == 4 and all(v > 0 for v in rate.samples)  # 5 steps, 1 of warm-up
    assert len(loss.samples) == 5 and rate.settings["backend"] == "gloo" and rate.settings["precision"] == "bf16"
    assert by_key["workload/init_s"].samples[0] > 0 and by_key["workload/collective_timeouts"].samples == (0.0,)
    known = {str(g.bdf) for g in snap.gpus}
    assert [d.rank for d in six.device_map] == [0, 1] and {str(d.bdf) for d in six.device_map} <= known
    # the same seed, steps and data: the perturbed runs' loss curves are the same real numbers
    seven_keys = {m.key: m for m in seven.measurements}
    assert seven_keys["perturbation/reversed/loss"].samples == loss.samples
    assert seven_keys["perturbation/rotated/loss"].samples == loss.samples
    # the reference script binds by PCIe order: the permuted lists leave every rank on its GPU
    assert {(d.rank, d.uuid) for d in seven.device_map} == {(d.rank, d.uuid) for d in six.device_map}


def test_workload_phase_perturbation_sets_the_list_in_the_childs_environment_only(healthy: tuple) -> None:  # type: ignore[type-arg]
    *_, launcher = healthy
    permuted = [a for a in launcher.argvs if a[0] == "env"]
    assert [a[1] for a in permuted] == ["HIP_VISIBLE_DEVICES=3,2,1,0", "HIP_VISIBLE_DEVICES=1,2,3,0"]
    assert all(a[2] == "torchrun" for a in permuted)
    assert not any(k.endswith("VISIBLE_DEVICES") for k in os.environ)


def test_workload_gate_end_to_end_blocks_a_slower_node_with_timeouts(
    healthy: tuple,  # type: ignore[type-arg]
    tmp_path: Path,
) -> None:
    """capture -> validate (phase 6, real training) -> gate against the healthy run as the baseline."""
    _, snap, (six, seven), _ = healthy
    baseline = replace(snap, phases=(six, seven))

    def broken(spec: NodeSpec) -> NodeSpec:
        slow = faults.workload_timeouts(faults.slow_workload(spec, step_delay_s=0.6), 3)
        return faults.slow_init(slow, init_delay_s=4)

    node, cand_snap = _node(tmp_path, change=broken)
    (result,) = _run(node, cand_snap, {6})
    assert result.status is PhaseStatus.FAILED and "3 collective timeout(s) in the job's log" in (result.reason or "")
    candidate = replace(cand_snap, phases=(result,))
    report = judge(baselines={NODE: baseline}, candidates=[candidate], plan=None, policy=load_policy(), now=NOW)
    blocks = {f.rule: f.message for f in report.findings if f.severity is Severity.BLOCK}
    assert blocks["workload.throughput"].startswith("workload/samples_per_s: baseline ")
    assert (
        blocks["workload.collective_timeouts"]
        == "workload/collective_timeouts: baseline 0, candidate 3 in the job's log"
    )
    assert "phase.failed" in blocks


def test_workload_gate_end_to_end_index_pinned_workload_blocks_with_the_uuid_pin(tmp_path: Path) -> None:
    node, snap = _node(tmp_path, change=faults.index_pinned)
    six, seven = _run(node, snap, {6, 7})
    assert six.status is seven.status is PhaseStatus.PASSED, (six.reasons, seven.reasons)
    candidate = replace(snap, phases=(six, seven))
    report = judge(baselines={}, candidates=[candidate], plan=None, policy=load_policy(), now=NOW)
    found = [f for f in report.findings if f.rule == "workload.index_dependent"]
    assert found and all(f.severity is Severity.BLOCK for f in found)
    # The device-map finding; a throughput finding for a permuted run may come first on a loaded CPU.
    moved = [f for f in found if "reversed (HIP_VISIBLE_DEVICES=3,2,1,0): rank 0" in f.message]
    assert moved, [f.message for f in found]
    assert moved[0].hint is not None and "UUID" in moved[0].hint


def _site(tmp_path: Path, mode: str, **config: str) -> PhaseResult:
    """Phase 6 with a site's command (UPGRADE_GATE_WORKLOAD_COMMAND) that behaves as `mode`."""
    node = make_node(tmp_path, mi300x_node("node-01", seed=1, gpu_count=2, nic_count=0))
    snap = snapshot_of(node)
    gpus = ",".join(str(g.bdf) for g in snap.gpus)
    command = f"{sys.executable} {SITE} {mode} {gpus}"
    (result,) = _run(node, snap, {6}, UPGRADE_GATE_WORKLOAD_COMMAND=command, **config)
    return result


@pytest.mark.parametrize(
    ("mode", "status", "reason"),
    [
        ("nothing", PhaseStatus.ERROR, "no usable workload output: workload: the workload printed nothing"),
        ("garbage", PhaseStatus.ERROR, "no usable workload output: workload: not a JSON line"),
        ("truncated", PhaseStatus.ERROR, "no usable workload output: workload: not a JSON line"),
        ("signal", PhaseStatus.FAILED, "killed by SIGKILL"),
        ("nan", PhaseStatus.FAILED, "loss is nan at step 2 (1 of 3 steps)"),
        ("unknown-gpu", PhaseStatus.FAILED, "rank 0: device map names GPU 0000:aa:00.0 (GPU-0), which the snapshot"),
        ("timeouts", PhaseStatus.FAILED, "1 collective timeout(s) in the job's log: [rank0]"),
    ],
)
def test_workload_phase_bad_workload_blocks_with_its_cause(
    tmp_path: Path, mode: str, status: PhaseStatus, reason: str
) -> None:
    result = _site(tmp_path, mode)
    assert result.status is status and reason in (result.reason or ""), result.reasons
    assert result.labels == {cvf.WORKLOAD_VALIDATION: "failed"}


def test_workload_phase_hang_past_its_deadline_is_an_error(tmp_path: Path) -> None:
    result = _site(tmp_path, "hang", UPGRADE_GATE_WORKLOAD_TIMEOUT_S="1")
    assert result.status is PhaseStatus.ERROR and "timed out after" in (result.reason or ""), result.reasons


def test_workload_phase_site_command_passes_and_missing_torchrun_is_an_error(tmp_path: Path) -> None:
    assert _site(tmp_path / "ok", "ok").status is PhaseStatus.PASSED
    node = make_node(tmp_path / "bare", mi300x_node("node-01", seed=1, gpu_count=2, nic_count=0),
                     faults.Faults(tools={"torchrun": faults.missing()}))  # fmt: skip
    (result,) = _run(node, snapshot_of(node), {6})
    assert result.status is PhaseStatus.ERROR and result.reason == "torchrun: missing binary"


def test_workload_phase_re_measures_while_the_baseline_comparison_is_inconclusive(tmp_path: Path) -> None:
    """Like the bandwidth phases: the injected comparison (validate.remeasure) says the throughput is
    inconclusive once; the phase runs the job again and pools the steps of both runs."""
    from upgrade_gate.validate.remeasure import Resampling

    asked: list[int] = []

    def compare(node: NodeName, measurements: Sequence[object]) -> dict[str, str]:
        rate = next(m for m in measurements if m.key == "workload/samples_per_s")  # type: ignore[attr-defined]
        asked.append(len(rate.samples))
        return {"workload/samples_per_s": "-8% .. +1%"} if len(asked) == 1 else {}

    node = make_node(tmp_path, mi300x_node("node-01", seed=1, gpu_count=2, nic_count=0))
    snap = snapshot_of(node)
    command = f"{sys.executable} {SITE} ok {','.join(str(g.bdf) for g in snap.gpus)}"
    (result,) = run_pipeline(
        ["node-01"],
        phases=select_phases(frozenset({6})),
        config=fast_config(UPGRADE_GATE_WORKLOAD_COMMAND=command),
        launcher=launcher_for(node),
        snapshots={"node-01": snap},
        resampling=Resampling(max_samples=20, compare=compare),
    )[NODE]
    assert result.status is PhaseStatus.PASSED, result.reasons
    assert asked == [2, 4]  # 2 measured steps a run: asked after the first run and after the second
    rate = next(m for m in result.measurements if m.key == "workload/samples_per_s")
    assert len(rate.samples) == 4
    assert result.annotations[f"{cvf.WORKLOAD_VALIDATION}-samples"] == "workload: 2 (re-measured: -8% .. +1%)"
