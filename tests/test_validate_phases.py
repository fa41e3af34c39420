"""Phases 0 and 3 on hand-built snapshots, CVF labels, and the pipeline's gating rules with stub phases."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

import pytest

from tests.test_validate_support import nic_snapshot
from upgrade_gate.model import NodeName, PhaseResult, PhaseStatus, ProbeStatus, replace
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import CvfConfig, default_config, parse_cvf_config
from upgrade_gate.validate.launcher import LocalLauncher
from upgrade_gate.validate.phase import GroupContext, Outcome, PhaseContext, make_result
from upgrade_gate.validate.phases import EligibilityPhase, NicHealthPhase
from upgrade_gate.validate.pipeline import ProgressEvent, all_passed, run_pipeline

NODE = NodeName("node-01")
LAUNCHER = LocalLauncher({NODE: {}})


def _ctx(**kwargs: object) -> PhaseContext:
    fields: dict[str, object] = {"node": NODE, "config": default_config(), "launcher": LAUNCHER}
    fields.update(kwargs)
    return PhaseContext(**fields)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- phase 0


def test_validate_phase0_cluster_mode_needs_nfd_labels() -> None:
    labels = {cvf.NFD_AMD_GPU: "true"}
    ok = EligibilityPhase().run(_ctx(node_labels=labels, requested=frozenset({0, 1, 2})))
    assert ok.status is PhaseStatus.PASSED and ok.labels == {}
    nic = EligibilityPhase().run(_ctx(node_labels=labels, requested=frozenset({0, 3})))
    assert nic.status is PhaseStatus.FAILED
    assert nic.reason == f"node label {cvf.NFD_AMD_NIC}=true missing (no such label); phases 3-5 need it"
    gpu = EligibilityPhase().run(_ctx(node_labels={cvf.NFD_AMD_GPU: "false"}, requested=frozenset({0})))
    assert gpu.reason is not None and f"{cvf.NFD_AMD_GPU}=false" in gpu.reason


def test_validate_phase0_local_mode_uses_the_snapshot() -> None:
    assert (
        EligibilityPhase().run(_ctx(snapshot=nic_snapshot(), requested=frozenset({0, 3}))).status is PhaseStatus.PASSED
    )
    no_nic = EligibilityPhase().run(_ctx(snapshot=nic_snapshot(nics=0), requested=frozenset({0, 3})))
    assert no_nic.status is PhaseStatus.FAILED and "no RDMA NIC found" in (no_nic.reason or "")
    assert (
        EligibilityPhase().run(_ctx(snapshot=nic_snapshot(nics=0), requested=frozenset({0, 2}))).status
        is PhaseStatus.PASSED
    )
    broken = nic_snapshot(gpus=0, probes=(ProbeStatus(name="rocminfo", ok=False, reason="rocminfo: missing binary"),))
    err = EligibilityPhase().run(_ctx(snapshot=broken, requested=frozenset({0})))
    assert err.status is PhaseStatus.ERROR and err.reason == "no GPU evidence: rocminfo: rocminfo: missing binary"
    assert EligibilityPhase().run(_ctx()).status is PhaseStatus.ERROR


# --------------------------------------------------------------------------- phase 3


def test_validate_phase3_healthy_snapshot_passes_with_observed_firmware() -> None:
    result = NicHealthPhase().run(_ctx(snapshot=nic_snapshot()))
    assert result.status is PhaseStatus.PASSED, result.reasons
    assert result.labels == {cvf.NIC_HEALTH: "passed"}
    assert result.annotations[f"{cvf.NIC_HEALTH}-observed-fw"].startswith("ionic_0=1.117.1-a-63,ionic_1=")


@pytest.mark.parametrize(
    ("snapshot_args", "config", "reason"),
    [
        ({"port_state": "PORT_DOWN"}, {}, "rdma-state:ionic_0=DOWN"),
        ({"gids": 0}, {}, "gid-table:ionic_0=0 (PHASE3_MIN_GID_COUNT 1)"),
        (
            {"numvfs": 7},
            {"UPGRADE_GATE_NIC_VF_COUNT": "8"},
            "vf-count:ionic_0=7, expected 8 (UPGRADE_GATE_NIC_VF_COUNT)",
        ),
        ({"width": 8}, {}, "pcie-downgraded:ionic_0=Gen 32 GT/s x8 (capable of 32 GT/s x16)"),
        ({"width": 8}, {"UPGRADE_GATE_NIC_PCIE_WIDTH": "16"}, "pcie-width:ionic_0=x8, expected x16"),
        ({}, {"UPGRADE_GATE_NIC_PCIE_GEN": "4"}, "pcie-speed:ionic_0=32.0 GT/s, expected 16 GT/s"),
        ({"nics": 7}, {}, "nic-count:expected=8,actual=7"),
        (
            {"fw": "1.117.4"},
            {"UPGRADE_GATE_NIC_FIRMWARE": "1.117.1-a-63"},
            "firmware:ionic_0=1.117.4, expected 1.117.1-a-63",
        ),
        (
            {"fw": "1.117.4"},
            {"ROCE_WORKLOAD_IMAGE": "img:ainic-1.117.5-a-56"},
            "fw-image-mismatch:ionic_0=1.117.4/image=",
        ),
    ],
)
def test_validate_phase3_each_fault_fails_with_its_reason(
    snapshot_args: dict[str, object], config: dict[str, str], reason: str
) -> None:
    snapshot = nic_snapshot(**snapshot_args)  # type: ignore[arg-type]
    result = NicHealthPhase().run(_ctx(snapshot=snapshot, config=parse_cvf_config(config, source="c")))
    assert result.status is PhaseStatus.FAILED
    assert any(r.startswith(reason) for r in result.reasons), result.reasons
    assert result.labels == {cvf.NIC_HEALTH: "failed"}
    assert result.annotations[cvf.failure_reason_key(cvf.NIC_HEALTH)] == "; ".join(result.reasons)


def test_validate_phase3_collects_every_reason_before_deciding() -> None:
    snap = nic_snapshot(nics=7, port_state="PORT_DOWN", gids=0)
    result = NicHealthPhase().run(_ctx(snapshot=snap))
    assert result.reasons == (
        "nic-count:expected=8,actual=7",
        "rdma-state:ionic_0=DOWN",
        "link-state:ionic_0=DISABLED",
        "gid-table:ionic_0=0 (PHASE3_MIN_GID_COUNT 1)",
        "roce-v2:ionic_0=absent (no RoCE v2 GID)",
    )
    assert result.reason == result.reasons[0]
    assert result.annotations[f"{cvf.NIC_HEALTH}-failed-nics"] == "ionic_0"


def test_validate_phase3_failed_probe_is_missing_evidence_not_a_pass() -> None:
    probes = (ProbeStatus(name="ibv_devinfo", ok=False, reason="ibv_devinfo: missing binary"),)
    result = NicHealthPhase().run(_ctx(snapshot=nic_snapshot(probes=probes)))
    assert result.status is PhaseStatus.ERROR
    assert result.reason == "preflight-failed:ibv_devinfo=ibv_devinfo: missing binary"
    assert NicHealthPhase().run(_ctx()).status is PhaseStatus.ERROR


def test_validate_phase3_unknown_firmware_with_an_expectation_fails_closed() -> None:
    cfg = parse_cvf_config({"UPGRADE_GATE_NIC_FIRMWARE": "1.117.1-a-63"}, source="c")
    result = NicHealthPhase().run(_ctx(snapshot=nic_snapshot(fw=None), config=cfg))
    assert (
        result.status is PhaseStatus.ERROR
        and result.reason == "firmware:ionic_0=unknown (UPGRADE_GATE_NIC_FIRMWARE 1.117.1-a-63)"
    )


# --------------------------------------------------------------------------- labels


def test_validate_cvf_label_values_are_valid_kubernetes_values() -> None:
    assert cvf.label_value("passed") == "passed"
    for text in ("bus bw below threshold: 63.2 GB/s < 100", "x" * 80, "--", "é"):
        value = cvf.label_value(text)
        assert cvf.is_label_value(value) and value, value
    assert cvf.label_value("a b") != cvf.label_value("a/b")
    assert cvf.status_label(PhaseStatus.ERROR) == "failed" and cvf.status_label(PhaseStatus.NOT_RUN) is None
    assert len(cvf.annotation_value("r" * 5000)) == cvf.MAX_ANNOTATION_CHARS


# --------------------------------------------------------------------------- gating (stub phases)


class _Stub:
    """A node phase returning a fixed status (or raising, or sleeping)."""

    def __init__(
        self, number: int, status: PhaseStatus = PhaseStatus.PASSED, *, sleep: float = 0.0, boom: bool = False
    ):
        self.number = number
        self.name = cvf.PHASE_NAMES[number]
        self.label_key = cvf.PHASE_LABELS.get(number)
        self.status = status
        self.sleep = sleep
        self.boom = boom
        self.seen: list[NodeName] = []

    def run(self, ctx: PhaseContext) -> PhaseResult:
        self.seen.append(ctx.node)
        if self.boom:
            raise RuntimeError("phase bug")
        time.sleep(self.sleep)
        status = self.status_for(ctx.node)
        reasons = () if status is PhaseStatus.PASSED else (f"stub {self.number}",)
        return make_result(self, ctx.config, status, reasons)

    def status_for(self, node: NodeName) -> PhaseStatus:
        return self.status

    def budget_s(self, config: CvfConfig, *, samples: int, nodes: int) -> float:
        return 0.05 if self.sleep else 10.0

    def plan(self, config: CvfConfig, *, samples: int) -> tuple[str, ...]:
        return ()


class _GroupStub:
    number = 4
    name = "rail-bandwidth"
    label_key = cvf.RAIL_BANDWIDTH

    def run_group(self, ctx: GroupContext) -> Mapping[NodeName, PhaseResult]:
        return {n: Outcome().result(self, ctx.config) for n in ctx.nodes[:1]}  # forgets the others

    def budget_s(self, config: CvfConfig, *, samples: int, nodes: int) -> float:
        return 10.0

    def plan(self, config: CvfConfig, *, samples: int) -> tuple[str, ...]:
        return ()


def _statuses(results: Mapping[NodeName, tuple[PhaseResult, ...]], node: str = "node-01") -> list[str]:
    return [r.status.value for r in results[NodeName(node)]]


def test_validate_pipeline_failed_phase_stops_later_phases_for_that_node_only() -> None:
    class Picky(_Stub):
        def status_for(self, node: NodeName) -> PhaseStatus:
            return PhaseStatus.FAILED if node == "node-02" else PhaseStatus.PASSED

    later = _Stub(3)
    launcher = LocalLauncher({"node-01": {}, "node-02": {}})
    results = run_pipeline(
        ["node-01", "node-02"], phases=[_Stub(1), Picky(2), later], config=default_config(), launcher=launcher
    )
    assert _statuses(results) == ["passed", "passed", "passed"]
    assert _statuses(results, "node-02") == ["passed", "failed", "not-run"]
    not_run = results[NodeName("node-02")][2]
    assert not_run.reason == "phase 2 (gpu-mesh-validation) failed: stub 2" and not_run.labels == {}
    assert later.seen == ["node-01"]
    assert all_passed({NodeName("node-01"): results[NodeName("node-01")]}) and not all_passed(results)


def test_validate_pipeline_skip_flag_is_recorded_skipped_and_the_node_continues() -> None:
    cfg = parse_cvf_config({"SKIP_GPU_MESH_VALIDATION": "true"}, source="cvf.yaml")
    mesh, nic = _Stub(2), _Stub(3)
    results = run_pipeline(["node-01"], phases=[mesh, nic], config=cfg, launcher=LAUNCHER)
    skipped, passed = results[NODE]
    assert skipped.status is PhaseStatus.SKIPPED and mesh.seen == []
    assert skipped.reason is not None and skipped.reason.startswith(
        "skipped by SKIP_GPU_MESH_VALIDATION=true in cvf.yaml"
    )
    assert skipped.labels == {cvf.GPU_MESH_VALIDATION: "skipped"}
    assert passed.status is PhaseStatus.PASSED and nic.seen == [NODE]
    assert not all_passed(results)


def test_validate_pipeline_phase_that_skips_itself_stops_the_node() -> None:
    results = run_pipeline(
        ["node-01"], phases=[_Stub(1, PhaseStatus.SKIPPED), _Stub(2)], config=default_config(), launcher=LAUNCHER
    )
    assert _statuses(results) == ["skipped", "not-run"]


def test_validate_pipeline_crashing_phase_is_an_error_naming_the_exception() -> None:
    results = run_pipeline(
        ["node-01"], phases=[_Stub(2, boom=True), _Stub(3)], config=default_config(), launcher=LAUNCHER
    )
    crashed = results[NODE][0]
    assert crashed.status is PhaseStatus.ERROR
    assert crashed.reason == "phase 2 (gpu-mesh-validation): crashed: RuntimeError: phase bug"
    assert crashed.labels == {cvf.GPU_MESH_VALIDATION: "failed"}
    assert _statuses(results) == ["error", "not-run"]


def test_validate_pipeline_watchdog_abandons_a_stuck_phase() -> None:
    results = run_pipeline(
        ["node-01"], phases=[_Stub(2, sleep=2.0)], config=default_config(), launcher=LAUNCHER, watchdog_grace_s=0.05
    )
    (stuck,) = results[NODE]
    assert stuck.status is PhaseStatus.ERROR and "abandoned" in (stuck.reason or "")


def test_validate_pipeline_group_phase_missing_a_node_is_an_error() -> None:
    launcher = LocalLauncher({"node-01": {}, "node-02": {}})
    results = run_pipeline(["node-01", "node-02"], phases=[_GroupStub()], config=default_config(), launcher=launcher)
    assert _statuses(results) == ["passed"]
    (missing,) = results[NodeName("node-02")]
    assert (
        missing.status is PhaseStatus.ERROR
        and missing.reason == "phase 4 (rail-bandwidth): returned no result for this node"
    )


def test_validate_pipeline_progress_events_and_times() -> None:
    events: list[ProgressEvent] = []
    results = run_pipeline(
        ["node-01"], phases=[_Stub(0), _Stub(2)], config=default_config(), launcher=LAUNCHER, progress=events.append
    )
    assert [(e.kind, e.phase) for e in events] == [
        ("phase-start", 0), ("node-done", 0), ("phase-done", 0),
        ("phase-start", 2), ("node-done", 2), ("phase-done", 2),
    ]  # fmt: skip
    for r in results[NODE]:
        assert r.duration_s is not None and r.tool_duration_s == 0.0


def test_validate_pipeline_refuses_a_phase_given_twice() -> None:
    with pytest.raises(ValueError, match="phases given twice"):
        run_pipeline(["node-01"], phases=[_Stub(2), _Stub(2)], config=default_config(), launcher=LAUNCHER)


def test_validate_pipeline_phase_timeout_key_sets_the_budget() -> None:
    cfg = replace(default_config(), phase_timeouts_s={2: 0.01})
    events: list[ProgressEvent] = []
    run_pipeline(["node-01"], phases=[_Stub(2)], config=cfg, launcher=LAUNCHER, progress=events.append)
    assert events[0].budget_s == 0.01


def test_validate_pipeline_runs_node_phases_concurrently_and_keeps_node_order() -> None:
    names = [f"node-{i:02d}" for i in range(6)]
    launcher = LocalLauncher({name: {} for name in names})
    barrier = threading.Barrier(len(names), timeout=30)  # only passable when every node runs at once

    class Together(_Stub):
        def status_for(self, node: NodeName) -> PhaseStatus:
            barrier.wait()
            return PhaseStatus.PASSED

    together = Together(2)
    results = run_pipeline(names, phases=[together], config=default_config(), launcher=launcher)
    assert list(results) == names and sorted(together.seen) == names
    assert all(r[0].status is PhaseStatus.PASSED for r in results.values()), results
    with pytest.raises(ValueError, match="parallel must be >= 1"):
        run_pipeline(names, phases=[together], config=default_config(), launcher=launcher, parallel=0)


def test_validate_phase3_a_port_without_its_physical_state_is_missing_evidence() -> None:
    """ibv_devinfo printed no phys_state for an ACTIVE port: no evidence the link is up, so the phase
    cannot pass (it used to skip the check). `5: LinkUp` (sysfs) and `LINK_UP (5)` read as up."""
    from upgrade_gate.model import replace

    snap = nic_snapshot()
    nic = snap.nics[0]

    def with_phys(value: str | None) -> object:
        ports = tuple(replace(p, phys_state=value) for p in nic.ports)
        return replace(snap, nics=(replace(nic, ports=ports), *snap.nics[1:]))

    result = NicHealthPhase().run(_ctx(snapshot=with_phys(None)))
    assert result.status is PhaseStatus.ERROR
    assert "link-state:ionic_0=unknown (physical state not reported)" in result.reasons
    for up in ("LINK_UP", "5: LinkUp", "LINK_UP (5)"):
        assert NicHealthPhase().run(_ctx(snapshot=with_phys(up))).status is PhaseStatus.PASSED, up
