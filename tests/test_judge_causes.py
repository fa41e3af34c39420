"""Root causes: every finding in exactly one cause, the verdict untouched, one headline per fault."""

from __future__ import annotations

import pytest

from tests.judge_scenarios import (
    judge_one,
    lose_vf,
    narrow_link,
    reverse_order,
    scale_metrics,
    set_firmware,
    upgraded,
    with_software,
)
from tests.report_sample import sample_report
from upgrade_gate.judge.causes import ensure_causes, group_causes
from upgrade_gate.judge.checklist import load_checklist
from upgrade_gate.model import CauseCategory, GateReport, PhaseStatus, Severity, Snapshot, Verdict, replace

FAULTS = {
    "healthy": upgraded,
    "reversed": lambda: reverse_order(upgraded()),
    "vf-lost": lambda: lose_vf(upgraded()),
    "x8": lambda: narrow_link(upgraded()),
    "firmware-on-every-gpu": lambda: _all_firmware(upgraded()),
    "mesh-drop": lambda: scale_metrics(upgraded(), 0.85, lambda key: key.startswith("mesh/")),
    "rocm-wrong": lambda: with_software(upgraded(), rocm_version="6.2.1", rocm_build="6.2.1-112"),
    "mesh-tool-failed": lambda: _mesh_tool_failed(upgraded()),
    "nic-port-down": lambda: _nic_port_down(upgraded()),
    "everything": lambda: narrow_link(lose_vf(reverse_order(scale_metrics(upgraded(), 0.8, lambda k: True)))),
}


def _all_firmware(snap: Snapshot) -> Snapshot:
    for gpu in snap.gpus:
        snap = set_firmware(snap, "CP_MEC1", "180", serial=str(gpu.serial))
    return snap


def _mesh_tool_failed(snap: Snapshot) -> Snapshot:
    """Phase 2's all_reduce_perf exited 1: the phase failed and measured no bandwidth (its thermal samples
    around the sweep were still taken)."""
    phases = tuple(
        replace(r, status=PhaseStatus.FAILED, reason="all_reduce_perf: exit code 1",
                measurements=tuple(m for m in r.measurements if not m.key.startswith("mesh/")))
        if r.phase == 2 else r
        for r in snap.phases
    )  # fmt: skip
    return replace(snap, phases=phases)


def _nic_port_down(snap: Snapshot) -> Snapshot:
    """ionic_0's port is down: ibv_devinfo says so, and phase 3 failed naming the NIC."""
    nics = tuple(
        replace(n, ports=tuple(replace(p, state="PORT_DOWN") for p in n.ports)) if n.name == "ionic_0" else n
        for n in snap.nics
    )
    reason = "rdma-state:ionic_0=DOWN; link-state:ionic_0=DISABLED"
    phases = tuple(replace(r, status=PhaseStatus.FAILED, reason=reason) if r.phase == 3 else r for r in snap.phases)
    return replace(snap, nics=nics, phases=phases)


def _judge(candidate: Snapshot, **kw: object) -> GateReport:
    return judge_one(candidate, **kw)


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_causes_own_every_finding_once_and_never_change_the_verdict(name: str) -> None:
    report = _judge(FAULTS[name]())
    for node in report.nodes:
        owned = sorted(i for c in node.causes for i in c.findings)
        assert owned == list(range(len(node.findings)))
        for cause in node.causes:
            worst = min((node.findings[i].severity for i in cause.findings), key=list(Severity).index)
            assert cause.severity is worst and cause.headline and cause.owner
    blocking = any(f.severity is Severity.BLOCK for f in report.findings)
    assert (report.verdict is Verdict.BLOCK) is blocking
    bare = replace(report, nodes=tuple(replace(n, causes=()) for n in report.nodes), fleet_causes=())
    assert group_causes(bare).verdict is report.verdict
    assert [n.findings for n in group_causes(bare).nodes] == [n.findings for n in report.nodes]


def test_causes_one_firmware_cause_for_a_block_moved_on_every_gpu() -> None:
    report = _judge(FAULTS["firmware-on-every-gpu"]())
    # (+ one warning cause: a cluster size this seeded node leaves inconclusive at 5 samples, judge.curves)
    (cause,) = [c for c in report.nodes[0].causes if c.severity is Severity.BLOCK]
    assert len(cause.findings) == 8 and cause.category is CauseCategory.FIRMWARE
    assert cause.headline == "firmware moved outside the plan on all 8 GPUs: 1 block(s), CP_MEC1 177 -> 180"
    assert cause.owner == "release manager"


def test_causes_a_mesh_drop_is_one_cause_with_sizes_and_the_phase_to_rerun() -> None:
    report = _judge(FAULTS["mesh-drop"]())
    (cause,) = [c for c in report.nodes[0].causes if c.severity is Severity.BLOCK]
    assert cause.key == "bandwidth:mesh/all_reduce"
    # judge.curves: the sweep is judged as one curve (its shift, and the average), not size by size
    assert cause.headline.startswith("intra-node all_reduce bus bandwidth -15% vs its baseline at every size, ")
    findings = [report.nodes[0].findings[i] for i in cause.findings]
    assert {f.device for f in findings} == {"mesh/all_reduce/busbw", "mesh/all_reduce/avg_busbw"}
    assert any("curve 1" in f.message and "beyond the 2% tolerance" in f.message for f in findings)
    assert cause.next_step is not None and "upgrade-gate validate --phases 2 --node mi300x-node-01" in cause.next_step


def test_causes_an_order_change_carries_the_pin_and_the_table() -> None:
    (cause,) = [c for c in _judge(FAULTS["reversed"]()).nodes[0].causes if c.severity is Severity.BLOCK]
    assert cause.key == "device.order" and cause.category is CauseCategory.DRIVER
    assert cause.next_step is not None and cause.next_step.startswith("export ROCR_VISIBLE_DEVICES=GPU-")
    assert cause.details[0].split() == ["index", *map(str, range(8))]
    assert all(len(line) <= 120 for line in cause.details)


def test_causes_failed_checklist_items_are_one_fleet_cause_with_their_owners() -> None:
    report = _judge(FAULTS["reversed"](), checklists=[load_checklist("canary")])
    (fleet,) = report.fleet_causes
    assert fleet.key == "checklist:canary"
    assert "canary.device-order" in fleet.headline and "canary.mixed-precision" in fleet.headline
    assert "platform on-call" in fleet.owner and "ML research" in fleet.owner


def test_causes_ensure_fills_a_report_built_without_them() -> None:
    report = sample_report()
    assert not any(n.causes for n in report.nodes)
    grouped = ensure_causes(report)
    assert all(sorted(i for c in n.causes for i in c.findings) == list(range(len(n.findings))) for n in grouped.nodes)
    assert ensure_causes(grouped) is grouped


def test_causes_a_floor_in_doubt_is_not_called_a_drop_and_notes_stand_apart() -> None:
    """Seen on the fleet bench: a rail whose samples straddle CVF's 380 Gb/s floor read as 'RDMA ionic_6
    bandwidth -0% vs its baseline', and the 'not judged' notes swelled a warning's metric count."""
    from upgrade_gate.judge.causes import node_causes
    from upgrade_gate.model import Finding, NodeReport, RuleId

    rail = Finding(
        rule=RuleId("bandwidth.threshold"),
        severity=Severity.WARN,
        node="n1",
        message="rail/ionic_6/write_bw: median 381.87 Gb/s is not shown above or below PHASE4_BW_THRESHOLD 380 Gb/s "
        "(CVF default; 5 sample(s), bounds 365.78 .. 398.66 Gb/s; re-measure, up to 20 samples)",
        device="rail/ionic_6/write_bw",
        path="measurements[key=rail/ionic_6/write_bw]",
        expected=380.0,
        actual=381.87,
    )
    note = Finding(
        rule=RuleId("bandwidth.regression"),
        severity=Severity.INFO,
        node="n1",
        message="cluster/all_gather/busbw: 2 value(s) under two printed steps (0.02) at 1024, 2048: not judged",
        device="cluster/all_gather/busbw",
        path="measurements[key=cluster/all_gather/busbw]",
    )
    causes = node_causes(NodeReport(node="n1", verdict=Verdict.PASS, findings=(rail, note)), None, None)
    by_key = {c.key: c for c in causes}
    floor = by_key["bandwidth.threshold:rail/ionic_6"]
    assert floor.headline == (
        "RDMA ionic_6 bandwidth not shown above or below PHASE4_BW_THRESHOLD 380: median 381.87; "
        "the phase should re-measure it"
    )
    assert floor.severity is Severity.WARN and "vs its baseline" not in floor.headline
    notes = by_key["bandwidth.not_judged:cluster/all_gather"]
    assert notes.severity is Severity.INFO and notes.findings == (1,)
    assert "not judged" in notes.headline


def test_causes_a_phase_whose_tool_failed_is_the_one_cause_of_its_missing_measurements() -> None:
    """issue 27: all_reduce_perf exits 1; the phase failure is the cause, and "not comparable ... absent
    from the candidate" and "no measurement to check against the threshold" are folded under it."""
    report = _judge(FAULTS["mesh-tool-failed"]())
    (cause,) = [c for c in report.nodes[0].causes if c.severity is Severity.BLOCK]
    assert cause.key == "phase:2" and "all_reduce_perf: exit code 1" in cause.headline
    rules = {report.nodes[0].findings[i].rule for i in cause.findings}
    assert "phase.failed" in rules and any(r.startswith("bandwidth.") for r in rules), rules


def test_causes_a_nic_named_by_a_failed_phase_is_one_cause_with_its_own_findings() -> None:
    """issue 27: a NIC port down reads as phase 3's failure with the NIC's findings under it, not three
    causes; a finding on another NIC stays its own."""
    report = _judge(FAULTS["nic-port-down"]())
    (cause,) = [c for c in report.nodes[0].causes if c.severity is Severity.BLOCK]
    assert cause.key == "phase:3" and "ionic_0=DOWN" in cause.headline
    paths = {report.nodes[0].findings[i].path or "" for i in cause.findings}
    assert any(p.startswith("nics[name=ionic_0]") for p in paths), paths
