"""Phase 2's thermal sampling on fake nodes, and the gate's view of it (a mesh observation, as `window observe`
with `mesh: true` judges): a healthy node passes, a GPU running 14 °C hot blocks with a readable cause,
broken or hanging sampling tools fail closed, readings follow the BDF and not amd-smi's index.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_validate_support import fast_config, healthy_spec, launcher_for, make_node, snapshot_of
from upgrade_gate.fakenode import FakeNode, Faults, NodeSpec, faults, mi300x_cpx_node
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.observe import observation_policy, observation_view
from upgrade_gate.judge.policy import Policy, load_policy
from upgrade_gate.model import GateReport, NodeName, PhaseResult, PhaseStatus, Severity, Snapshot, Verdict, replace
from upgrade_gate.validate.phase import PhaseContext
from upgrade_gate.validate.phases import select_phases
from upgrade_gate.validate.phases.thermal import ROCMSMI_ARGV, sample_thermal
from upgrade_gate.validate.pipeline import run_pipeline

NODE = NodeName("node-01")
NOW = "2026-12-01T00:00:00Z"
MONITOR = ("monitor",)


def _phase2(root: Path, spec: NodeSpec, tool_faults: Faults | None = None) -> tuple[FakeNode, Snapshot, PhaseResult]:
    node = make_node(root, spec, tool_faults)
    snap = snapshot_of(node)
    results = run_pipeline(
        [NODE], phases=select_phases(frozenset({2})), config=fast_config(), launcher=launcher_for(node),
        snapshots={NODE: snap},
    )[NODE]  # fmt: skip
    return node, replace(snap, phases=results), results[0]


def _observe(baseline: Snapshot, candidate: Snapshot, policy: Policy | None = None) -> GateReport:
    """Judge like `window observe` with `mesh: true` (judge.observe's view and policy)."""
    return judge(
        baselines={NODE: observation_view(baseline, mesh=True)},
        candidates=(observation_view(candidate, mesh=True),),
        plan=None,
        policy=observation_policy(policy or load_policy(None), mesh=True),
        references={},
        now=NOW,
    )


def _thermal_findings(report: GateReport) -> list[tuple[Severity, str]]:
    return [(f.severity, f.message) for n in report.nodes for f in n.findings if f.rule == "thermal.outlier"]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Snapshot, PhaseResult]:
    _, snap, mesh = _phase2(tmp_path_factory.mktemp("healthy"), healthy_spec())
    return snap, mesh


def test_thermal_phase2_records_temperature_and_power_of_every_gpu(healthy: tuple[Snapshot, PhaseResult]) -> None:
    snap, mesh = healthy
    assert mesh.status is PhaseStatus.PASSED and mesh.reasons == ()
    by_key = {m.key: m for m in mesh.measurements}
    for gpu in snap.gpus:
        key = f"thermal/gpu{gpu.index}"
        hot = by_key[f"{key}/temp_c_max"]
        assert hot.unit == "C" and len(hot.samples) == 1 and not hot.higher_is_better
        assert hot.settings["bdf"] == str(gpu.bdf) and hot.settings["tool"] == "amd-smi monitor -p -t"
        assert hot.settings["load"].startswith("all_reduce_perf -b 1K -e 2G -f 2 -g 8 ")
        assert len(by_key[f"{key}/temp_c"].samples) >= 3  # before, at least one during, end
        assert by_key[f"{key}/power_w_mean"].unit == "W"
        assert f"{key}/mem_temp_c_max" in by_key
    assert [by_key[f"thermal/gpu{i}/temp_c_max"].samples[0] for i in range(8)] == [63, 66, 62, 69, 63, 69, 64, 67]
    assert mesh.tool_duration_s is not None and mesh.duration_s is not None
    assert mesh.tool_duration_s <= mesh.duration_s  # the background sampler's time is not counted twice


def test_thermal_healthy_node_passes_and_a_hot_gpu_blocks_with_its_cause(
    tmp_path: Path, healthy: tuple[Snapshot, PhaseResult]
) -> None:
    base, _ = healthy
    _, again, _ = _phase2(tmp_path / "again", healthy_spec())
    assert _observe(base, again).verdict is Verdict.PASS
    _, hot, mesh = _phase2(tmp_path / "hot", faults.run_hot(healthy_spec(), gpu=3, delta_c=14.0))
    assert mesh.status is PhaseStatus.PASSED  # CVF's phase 2 is a bandwidth test; the gate judges the heat
    report = _observe(base, hot)
    assert report.verdict is Verdict.BLOCK
    found = _thermal_findings(report)
    assert [s for s, _ in found] == [Severity.BLOCK, Severity.BLOCK], found
    (peers,) = [m for _, m in found if "peers" in m]
    (own,) = [m for _, m in found if "baseline" in m]
    assert re.fullmatch(
        r"GPU 3 \(0000:75:00\.0\) ran at 83 °C, 19\.0 °C above the median of its 7 peers \(64\.0 °C\) under the same "
        r"phase 2 load; threshold 10 °C; power 708 W vs 707 W",
        peers,
    ), peers
    assert own.startswith("GPU 3 (0000:75:00.0) ran at 83 °C, 14.0 °C above its own baseline (69 °C)")
    cause = next(c for n in report.nodes for c in n.causes if c.key == "thermal.outlier")
    assert cause.headline.startswith("GPU 3 (0000:75:00.0) ran at 83 °C") and "cooling" in (cause.next_step or "")


def test_thermal_readings_follow_the_bdf_not_the_enumeration(tmp_path: Path) -> None:
    spec = faults.run_hot(faults.reverse_enumeration(healthy_spec()), gpu=0, delta_c=14.0)  # slot 0: 05:00.0
    snap, mesh = _phase2(tmp_path, spec)[1:]
    by_key = {m.key: m for m in mesh.measurements}
    hip7 = next(g for g in snap.gpus if g.index == 7)
    assert str(hip7.bdf) == "0000:05:00.0"
    assert by_key["thermal/gpu7/temp_c_max"].samples == (77.0,)
    assert by_key["thermal/gpu7/temp_c_max"].settings["bdf"] == "0000:05:00.0"


def test_thermal_rocm_smi_stands_in_when_amd_smi_monitor_fails(tmp_path: Path) -> None:
    broken = Faults(tools={"amd-smi": faults.nonzero(1, "amd-smi: broken", argv_prefix=MONITOR)})
    mesh = _phase2(tmp_path, healthy_spec(), broken)[2]
    temps = {m.key: m for m in mesh.measurements if m.key.endswith("/temp_c_max")}
    assert len(temps) == 8 and {m.settings["tool"] for m in temps.values()} == {" ".join(ROCMSMI_ARGV)}
    assert mesh.status is PhaseStatus.PASSED
    (note,) = [r for r in mesh.reasons if "stood in" in r]
    assert note.startswith("thermal: amd-smi failed (amd-smi: ") and "amd-smi: broken" in note, note
    assert note.endswith("; rocm-smi --showbus --showtemp --showpower --json stood in")


@pytest.mark.parametrize(
    "tool_faults",
    [
        pytest.param(
            Faults(tools={"amd-smi": faults.garbage(argv_prefix=MONITOR), "rocm-smi": faults.missing()}), id="garbage"
        ),
        pytest.param(
            Faults(
                tools={
                    "amd-smi": faults.nonzero(2, "ERROR: no GPU", argv_prefix=MONITOR),
                    "rocm-smi": faults.nonzero(1, "ERROR:root:Driver not initialized"),
                }
            ),
            id="error-text",
        ),
    ],
)
def test_thermal_missing_samples_fail_closed(
    tmp_path: Path, healthy: tuple[Snapshot, PhaseResult], tool_faults: Faults
) -> None:
    base, _ = healthy
    _, snap, mesh = _phase2(tmp_path, healthy_spec(), tool_faults)
    assert not [m for m in mesh.measurements if m.key.startswith("thermal/")]
    assert mesh.status is PhaseStatus.PASSED  # bandwidth evidence is intact; the thermal rule decides
    notes = [r for r in mesh.reasons if r.startswith("thermal: ")]
    assert notes and "rocm-smi too" in notes[0], mesh.reasons
    report = _observe(base, snap)
    assert report.verdict is Verdict.BLOCK
    (severity, message), *_ = _thermal_findings(report)
    assert severity is Severity.BLOCK
    assert message.startswith("phase 2 ran without thermal evidence for GPU 0 (0000:05:00.0), GPU 1 (0000:15:00.0)")
    assert "amd-smi failed" in message
    lenient = load_policy(None)
    lenient = replace(
        lenient,
        rules=tuple(
            replace(e, params={**e.params, "missing_evidence": "warn"}) if e.id == "thermal.outlier" else e
            for e in lenient.rules
        ),
    )
    warned = _observe(base, snap, lenient)
    assert warned.verdict is Verdict.PASS and [s for s, _ in _thermal_findings(warned)] == [Severity.WARN]


def test_thermal_a_hanging_tool_is_bounded_and_reported(tmp_path: Path) -> None:
    node = make_node(
        tmp_path, healthy_spec(), Faults(tools={"amd-smi": faults.hang(argv_prefix=MONITOR), "rocm-smi": faults.hang()})
    )
    snap = snapshot_of(node)
    ctx = PhaseContext(node=NODE, config=fast_config(), launcher=launcher_for(node), snapshot=snap)
    with sample_thermal(ctx, interval_s=0.05, max_during=2, timeout_s=0.5) as record:
        pass  # no load: only the sampling's own bounds matter here
    assert [s.when for s in record.samples] == ["before"]  # neither tool answered: nothing more is tried
    assert record.samples[0].error is not None and "timed out after" in record.samples[0].error
    (problem,) = record.problems
    assert (
        "amd-smi failed (amd-smi: timed out after" in problem and "rocm-smi too (rocm-smi: timed out after" in problem
    )

    node = make_node(tmp_path / "late", healthy_spec(), Faults(tools={"rocm-smi": faults.hang()}))
    ctx = replace(ctx, launcher=launcher_for(node))
    with sample_thermal(ctx, interval_s=0.05, max_during=2, timeout_s=0.5) as record:
        pass
    whens = [s.when for s in record.samples]
    assert whens[0] == "before" and whens[-1] == "end" and 1 <= whens.count("during") <= 2
    assert all(s.error is None for s in record.samples)


def test_thermal_partitions_share_their_device_sensor(tmp_path: Path) -> None:
    _, snap, mesh = _phase2(tmp_path, mi300x_cpx_node(str(NODE)))
    temps = sorted(m.key for m in mesh.measurements if m.key.endswith("/temp_c_max"))
    firsts = sorted(f"thermal/gpu{g.index}/temp_c_max" for g in snap.gpus if str(g.bdf).endswith(".0"))
    assert temps == firsts and len(snap.gpus) == 16
    assert not [r for r in mesh.reasons if r.startswith("thermal: ")]
    assert _thermal_findings(_observe(snap, snap)) == []  # every device read; two devices are no peer median


def test_thermal_an_observation_without_mesh_does_not_judge_heat(
    tmp_path: Path, healthy: tuple[Snapshot, PhaseResult]
) -> None:
    base, _ = healthy
    _, hot, _ = _phase2(tmp_path, faults.run_hot(healthy_spec(), gpu=3, delta_c=14.0))
    report = judge(
        baselines={NODE: observation_view(base, mesh=False)},
        candidates=(observation_view(hot, mesh=False),),
        plan=None,
        policy=observation_policy(load_policy(None), mesh=False),
        references={},
        now=NOW,
    )
    assert _thermal_findings(report) == []  # phase 2 did not run in this observation: nothing to judge
