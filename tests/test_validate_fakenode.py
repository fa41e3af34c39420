"""Phases 0-3 on fake nodes through the local launcher: a healthy node passes, each fault fails its phase.

Every fault must fail the right phase with a reason that names the tool or the device, and stop the
later phases for that node (`not-run` naming the phase that stopped it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.test_validate_support import fast_config, healthy_spec, launcher_for, make_node, snapshot_of, with_vfs
from upgrade_gate.fakenode import FakeNode, Faults, NodeSpec, ToolFault, faults
from upgrade_gate.model import NodeName, PhaseResult, PhaseStatus, Snapshot
from upgrade_gate.validate import cvf
from upgrade_gate.validate.phases import select_phases
from upgrade_gate.validate.pipeline import run_pipeline

PHASES_0_3 = select_phases(frozenset(range(4)))
NODE = NodeName("node-01")


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> tuple[FakeNode, Snapshot]:
    node = make_node(tmp_path_factory.mktemp("healthy"), with_vfs(healthy_spec(), 1))
    return node, snapshot_of(node)


def _run(node: FakeNode, snapshot: Snapshot, **config: str) -> tuple[PhaseResult, ...]:
    return run_pipeline(
        [NODE], phases=PHASES_0_3, config=fast_config(**config), launcher=launcher_for(node), snapshots={NODE: snapshot}
    )[NODE]


def test_validate_fakenode_healthy_node_passes_phases_0_to_3(healthy: tuple[FakeNode, Snapshot]) -> None:
    results = _run(
        *healthy, UPGRADE_GATE_NIC_VF_COUNT="1", UPGRADE_GATE_NIC_PCIE_GEN="5", UPGRADE_GATE_NIC_PCIE_WIDTH="16"
    )
    assert [(r.phase, r.status) for r in results] == [(n, PhaseStatus.PASSED) for n in range(4)], [
        r.reasons for r in results
    ]
    acceptance, mesh = results[1], results[2]
    assert acceptance.labels == {cvf.GPU_HW_ACCEPTANCE: "passed"}
    assert acceptance.annotations[f"{cvf.GPU_HW_ACCEPTANCE}-stage-hbm-lvl1"] == "passed"
    by_key = {m.key: m for m in mesh.measurements}
    avg = by_key["mesh/all_reduce/avg_busbw"]
    assert len(avg.samples) == 3 and avg.unit == "GB/s"
    one_k = by_key["mesh/all_reduce/busbw/1024"]
    assert len(one_k.samples) == 3
    assert one_k.settings == {
        "min_bytes": "1024", "max_bytes": str(2 << 30), "step_factor": "2", "iters": "6",
        "warmup_iters": "20", "ranks": "8", "datatype": "float", "op": "sum",
    }  # fmt: skip
    assert str(2 << 30) in {k.rsplit("/", 1)[-1] for k in by_key}
    assert mesh.annotations[cvf.measured_bw_key(cvf.GPU_MESH_VALIDATION)] == f"{sorted(avg.samples)[1]:.2f}"
    for r in results:
        assert r.duration_s is not None and r.tool_duration_s is not None and r.tool_duration_s <= r.duration_s
    assert mesh.tool_duration_s is not None and mesh.tool_duration_s > 0


def _fault_case(tool: str, fault: ToolFault, phase: int, status: PhaseStatus, reason: str) -> tuple[object, ...]:
    return (lambda spec: spec, Faults(tools={tool: fault}), {}, phase, status, reason)


TOOL_FAULTS = [
    pytest.param(
        *_fault_case("all_reduce_perf", faults.missing(), 2, PhaseStatus.ERROR, "all_reduce_perf: missing binary"),
        id="missing-binary",
    ),
    pytest.param(
        lambda spec: spec,
        Faults(tools={"all_reduce_perf": faults.hang()}),
        {"UPGRADE_GATE_PHASE2_TIMEOUT_S": "0.5"},
        2,
        PhaseStatus.ERROR,
        "all_reduce_perf: timed out after 0.5s",
        id="hang",
    ),
    pytest.param(
        *_fault_case(
            "agfhc", faults.nonzero(3, "AGFHC init failed"), 1, PhaseStatus.FAILED, "stage-hbm-lvl1: agfhc: exit code 3"
        ),
        id="nonzero-exit",
    ),
    pytest.param(
        *_fault_case("rvs", faults.garbage(), 1, PhaseStatus.ERROR, "stage-gpu-stress: rvs: unreadable output"),
        id="garbage-output",
    ),
    pytest.param(
        lambda spec: faults.fail_agfhc(spec, "hbm_bw"),
        Faults(),
        {},
        1,
        PhaseStatus.FAILED,
        "stage-hbm-lvl1: agfhc hbm_lvl1: hbm_bw-1-1 failed",
        id="agfhc-test-fails",
    ),
    pytest.param(
        lambda spec: faults.scale_mesh_bandwidth(spec, 0.5),
        Faults(),
        {},
        2,
        PhaseStatus.FAILED,
        "bus-bw-below-threshold: all_reduce_perf Avg bus bandwidth 6",
        id="bandwidth-below-threshold",
    ),
]


@pytest.mark.parametrize(("transform", "tool_faults", "config", "phase", "status", "reason"), TOOL_FAULTS)
def test_validate_fakenode_tool_fault_fails_its_phase_and_stops_the_rest(
    healthy: tuple[FakeNode, Snapshot],
    tmp_path: Path,
    transform: Callable[[NodeSpec], NodeSpec],
    tool_faults: Faults,
    config: dict[str, str],
    phase: int,
    status: PhaseStatus,
    reason: str,
) -> None:
    node = make_node(tmp_path, transform(healthy[0].spec), tool_faults)
    results = _run(node, healthy[1], **config)  # the phase tools do not change the snapshot
    assert [r.status for r in results[:phase]] == [PhaseStatus.PASSED] * phase
    broken = results[phase]
    assert broken.status is status, broken.reasons
    assert broken.reason is not None and broken.reason.startswith(reason), broken.reason
    assert broken.labels == {cvf.PHASE_LABELS[phase]: "failed"}
    assert broken.annotations[cvf.failure_reason_key(cvf.PHASE_LABELS[phase])].startswith(reason)
    for later in results[phase + 1 :]:
        assert later.status is PhaseStatus.NOT_RUN
        assert later.reason is not None and later.reason.startswith(
            f"phase {phase} ({cvf.PHASE_NAMES[phase]}) {status}"
        )


SNAPSHOT_FAULTS = [
    pytest.param(lambda s: faults.take_port_down(s, 2), "rdma-state:ionic_2=DOWN", id="nic-port-down"),
    pytest.param(
        lambda s: faults.empty_gid_table(s, 1), "gid-table:ionic_1=0 (PHASE3_MIN_GID_COUNT 1)", id="empty-gid"
    ),
    pytest.param(lambda s: faults.drop_vfs(s, 3, 1), "vf-count:ionic_3=0, expected 1", id="lost-vf"),
    pytest.param(
        lambda s: faults.downgrade_nic_link(s, 0, width=8),
        "pcie-downgraded:ionic_0=Gen 32 GT/s x8",
        id="link-downgraded",
    ),
]


@pytest.mark.parametrize(("transform", "reason"), SNAPSHOT_FAULTS)
def test_validate_fakenode_nic_fault_fails_phase3_with_its_reason(
    healthy: tuple[FakeNode, Snapshot], tmp_path: Path, transform: Callable[[NodeSpec], NodeSpec], reason: str
) -> None:
    node = make_node(tmp_path, transform(healthy[0].spec))
    results = _run(node, snapshot_of(node), UPGRADE_GATE_NIC_VF_COUNT="1")
    assert [r.status for r in results[:3]] == [PhaseStatus.PASSED] * 3
    nic = results[3]
    assert nic.status is PhaseStatus.FAILED
    assert any(r.startswith(reason) for r in nic.reasons), nic.reasons
    assert nic.labels == {cvf.NIC_HEALTH: "failed"}


def test_validate_fakenode_phase0_fails_when_the_gpu_tools_vanished(
    healthy: tuple[FakeNode, Snapshot], tmp_path: Path
) -> None:
    gone = Faults(tools={"rocminfo": faults.missing(), "amd-smi": faults.missing(), "rocm-smi": faults.missing()})
    node = make_node(tmp_path, healthy[0].spec, gone)
    results = _run(node, snapshot_of(node))
    assert results[0].status is PhaseStatus.ERROR
    assert results[0].reason is not None and results[0].reason.startswith(
        "no GPU evidence: rocminfo: rocminfo: missing binary"
    )
    assert [r.status for r in results[1:]] == [PhaseStatus.NOT_RUN] * 3
