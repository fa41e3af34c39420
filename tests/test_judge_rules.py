"""Each rule family on the MI300X scenario node: what blocks, what warns, what the finding says."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.judge_scenarios import (
    NODE,
    NODE_CLASS,
    NOW,
    SERIALS,
    SWEEP_SETTINGS,
    UNIQUE_IDS,
    mi300x_snapshot,
    reverse_order,
    scale_metrics,
    upgrade_plan,
    upgraded,
)
from upgrade_gate.errors import ConfigError
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.plan import ChangePlan
from upgrade_gate.judge.policy import Policy, load_policy
from upgrade_gate.model import (
    ClassReference,
    Finding,
    GateReport,
    GpuLink,
    GpuSerial,
    KernelEvent,
    LinkType,
    Measurement,
    MetricSummary,
    NodeName,
    PhaseStatus,
    ProbeStatus,
    Severity,
    Snapshot,
    Verdict,
    replace,
)

BASE = mi300x_snapshot()
POLICY = load_policy()


def run(
    candidate: Snapshot,
    *,
    baseline: Snapshot | None = BASE,
    plan: ChangePlan | None = None,
    policy: Policy = POLICY,
    references: Mapping[str, ClassReference] | None = None,
    denylist: Mapping[GpuSerial, str] | None = None,
) -> GateReport:
    baselines = {baseline.node.name: baseline} if baseline is not None else {}
    return judge(
        baselines=baselines,
        candidates=[candidate],
        plan=plan if plan is not None else upgrade_plan(),
        policy=policy,
        references=references,
        denylist=denylist,
        now=NOW,
    )


def only(report: GateReport, rule: str) -> list[Finding]:
    return [f for f in report.findings if f.rule == rule]


def test_rules_healthy_upgrade_has_no_findings_and_runs_every_rule() -> None:
    report = run(upgraded())
    # At 5 samples one cluster size of this seeded healthy node is inconclusive (judge.curves: neither
    # shown within nor beyond its curve); it warns that the phase should re-measure it, nothing else.
    assert report.verdict is Verdict.PASS
    assert [(f.rule, f.severity, f.device) for f in report.findings] == [
        ("bandwidth.regression", Severity.WARN, "cluster/all_gather/busbw/262144")
    ]
    assert "inconclusive with 5 samples: re-measure" in report.findings[0].message
    assert "device.order_changed" in report.rules_evaluated
    assert "bandwidth.regression" in report.rules_evaluated


def test_rules_order_change_prints_the_permutation_and_a_uuid_pin() -> None:
    (f,) = only(run(reverse_order(upgraded())), "device.order_changed")
    assert f.severity is Severity.BLOCK
    assert f"index 0 was 0000:05:00.0 (serial {SERIALS[0]}), now 0000:f5:00.0 (serial {SERIALS[7]})" in f.message
    assert f.hint is not None
    pin = "ROCR_VISIBLE_DEVICES=" + ",".join("GPU-" + u.lower().removeprefix("0x") for u in UNIQUE_IDS)
    assert pin in f.hint
    assert f.expected[0] == "0000:05:00.0" and f.actual[0] == "0000:f5:00.0"  # type: ignore[index]


def test_rules_order_pin_falls_back_to_indices_without_uuids() -> None:
    def strip(s: Snapshot) -> Snapshot:
        return replace(s, gpus=tuple(replace(g, unique_id=None) for g in s.gpus))

    (f,) = only(run(strip(reverse_order(upgraded())), baseline=strip(BASE)), "device.order_changed")
    assert f.hint is not None and "HIP_VISIBLE_DEVICES=7,6,5,4,3,2,1,0" in f.hint


def test_rules_missing_added_and_replaced_gpus() -> None:
    cand = upgraded()
    gone = replace(cand, gpus=cand.gpus[:7])
    assert [f.device for f in only(run(gone), "device.missing")] == [f"serial={SERIALS[7]}"]
    swapped = replace(cand, gpus=(*cand.gpus[:7], replace(cand.gpus[7], serial=GpuSerial("NEWBOARD"), unique_id="0x1")))
    report = run(swapped)
    (f,) = only(report, "device.replaced")
    assert "slot 0000:f5:00.0 was replaced" in f.message and f.actual == "NEWBOARD"
    assert not only(report, "device.missing") and not only(report, "device.added")
    assert not only(report, "device.order_changed")  # index 7 is still slot f5: only the board changed
    extra = replace(cand.gpus[0], index=8, bdf="0000:a5:00.0", serial=GpuSerial("EXTRA"), unique_id="0x2")
    assert [f.device for f in only(run(replace(cand, gpus=(*cand.gpus, extra))), "device.added")] == ["serial=EXTRA"]


def test_rules_identity_unverified_warns() -> None:
    cand = upgraded()
    blind = replace(cand, gpus=tuple(replace(g, serial=None, unique_id="N/A") for g in cand.gpus))
    report = run(blind)
    findings = only(report, "identity.unverified")
    assert len(findings) == 8 and {f.severity for f in findings} == {Severity.WARN}
    assert "matched to the baseline by bdf only" in findings[0].message


def test_rules_denylisted_serial_blocks_wherever_it_turns_up() -> None:
    (f,) = only(run(upgraded(), denylist={SERIALS[2]: "phase 1 hbm_lvl1 failed on node-17"}), "device.denylisted")
    assert f.severity is Severity.BLOCK and "node-17" in f.message


def test_rules_planned_firmware_must_land_on_target() -> None:
    plan = upgrade_plan(change={"firmware": [{"block": "PLDM_BUNDLE", "to": "01.25.17.07"}]})
    findings = only(run(upgraded(), plan=plan), "firmware.unplanned")
    assert len(findings) == 8 and "the plan moves it to 01.25.17.07" in findings[0].message
    missing = upgrade_plan(change={"firmware": [{"block": "IFWI", "to": "1"}]})
    (f,) = only(run(upgraded(), plan=missing), "firmware.unplanned")
    assert "no GPU reports that block" in f.message


def test_rules_vbios_change_outside_the_plan() -> None:
    cand = upgraded()
    cand = replace(cand, gpus=tuple(replace(g, vbios="113-M3000100-103") if g.index == 0 else g for g in cand.gpus))
    (f,) = only(run(cand), "vbios.unplanned")
    assert f.expected == "113-M3000100-102" and f.actual == "113-M3000100-103"


def test_rules_kernel_change_without_plan_blocks() -> None:
    cand = replace(upgraded(), software=replace(upgraded().software, kernel="6.8.0-49-generic"))
    (f,) = only(run(cand), "software.kernel")
    assert "kernel changed outside the plan: 5.15.0-116-generic -> 6.8.0-49-generic" in f.message


def test_rules_rocm_unknown_version_blocks_with_reason() -> None:
    cand = upgraded()
    cand = replace(cand, software=replace(cand.software, rocm_version=None, na_reasons={"rocm_version": "no file"}))
    (f,) = only(run(cand), "software.rocm")
    assert "ROCm version unknown (no file)" in f.message


def test_rules_nic_port_gid_roce_and_firmware() -> None:
    cand = upgraded()
    nics = list(cand.nics)
    port = nics[1].ports[0]
    nics[1] = replace(nics[1], ports=(replace(port, state="PORT_DOWN", phys_state="DISABLED"),))
    nics[2] = replace(nics[2], ports=(replace(port, gid_count=0, roce_v2=False),))
    nics[3] = replace(nics[3], fw_ver="1.117.5-a-56")
    report = run(replace(cand, nics=tuple(nics)))
    assert [f.device for f in only(report, "nic.port_state")] == ["ionic_1"]
    (gid,) = only(report, "nic.gid_count")
    assert gid.device == "ionic_2" and "expected at least 4 (baseline 4)" in gid.message
    assert [f.device for f in only(report, "nic.roce_v2")] == ["ionic_2"]
    (fw,) = only(report, "nic.firmware")
    assert "1.117.1-a-63 -> 1.117.5-a-56" in fw.message


def test_rules_nic_renamed_and_count() -> None:
    cand = upgraded()
    nics = tuple(replace(n, name="ionic_9") if n.name == "ionic_0" else n for n in cand.nics)
    (f,) = only(run(replace(cand, nics=nics)), "nic.missing")
    assert "is now named ionic_9" in f.message
    short = replace(cand, pcie=tuple(lk for lk in cand.pcie if lk.bdf != "0000:f6:00.0"))
    counts = [f for f in only(run(short), "nic.missing") if f.path == "nics"]
    assert counts and "7 NICs with PCI id 1dd8:1002 found, expected 8 (CVF default)" in counts[0].message


def test_rules_xgmi_link_degraded_to_pcie() -> None:
    cand = upgraded()
    links = tuple(
        replace(lk, link_type=LinkType.PCIE, hops=2, weight=40)
        if (lk.a, lk.b) == ("0000:05:00.0", "0000:15:00.0")
        else lk
        for lk in cand.gpu_links
    )
    (f,) = only(run(replace(cand, gpu_links=links)), "xgmi.link_changed")
    assert f.message == "GPU link 0000:05:00.0 <-> 0000:15:00.0: XGMI hops 1 weight 15 -> PCIE hops 2 weight 40"
    (gone,) = only(run(replace(cand, gpu_links=())), "xgmi.link_changed")
    assert "absent from the candidate (the baseline had 28 pairs)" in gone.message


def test_rules_evidence_probe_failures_and_fallbacks() -> None:
    cand = upgraded()

    def probes(*changed: ProbeStatus) -> Snapshot:
        names = {p.name for p in changed}
        return replace(cand, probes=tuple(p for p in cand.probes if p.name not in names) + changed)

    timed_out = probes(ProbeStatus(name="amdsmi_static", ok=False, reason="timed out after 30s", timed_out=True))
    (f,) = only(run(timed_out), "evidence.missing")
    assert f.message == "probe amdsmi_static timed out: timed out after 30s" and f.severity is Severity.BLOCK
    covered = probes(
        ProbeStatus(name="amdsmi_static", ok=False, reason="binary missing", missing=True),
        ProbeStatus(name="rocmsmi", ok=True, required=False, fallback_for=("amdsmi_static",)),
    )
    assert not only(run(covered), "evidence.missing")
    optional = probes(ProbeStatus(name="amdsmi_version", ok=False, reason="exit 2", required=False))
    assert [f.severity for f in only(run(optional), "evidence.missing")] == [Severity.WARN]
    vanished = replace(cand, probes=tuple(p for p in cand.probes if p.name != "ibv_devinfo"))
    (gone,) = only(run(vanished), "evidence.missing")
    assert gone.message == "probe ibv_devinfo is absent from the candidate (it ran in the baseline)"


def test_rules_evidence_phases_skipped_absent_and_not_applicable(tmp_path: Path) -> None:
    cand = upgraded()
    phases = tuple(
        replace(p, status=PhaseStatus.SKIPPED, reason="SKIP_GPU_HW_ACCEPTANCE=true") if p.phase == 1 else p
        for p in cand.phases
        if p.phase != 5
    )
    report = run(replace(cand, phases=phases))
    messages = sorted(f.message for f in only(report, "evidence.missing"))
    assert messages == [
        "phase 1 (gpu-hw-acceptance) skipped: SKIP_GPU_HW_ACCEPTANCE=true; a skipped phase is not a pass",
        "phase 5 (cluster-rccl) has no result: not run",
    ]
    assert len(only(report, "bandwidth.not_comparable")) == 46  # the phase-5 sweeps the baseline had
    path = tmp_path / "p.yaml"
    path.write_text(f"phases: {{not_applicable: {{{NODE_CLASS}: [1, 5]}}}}\n", encoding="utf-8")
    assert not only(run(replace(cand, phases=phases), policy=load_policy(path)), "evidence.missing")
    path.write_text("phases: {not_applicable: {'*': [1, 5]}}\n", encoding="utf-8")  # every class, classless too
    classless = replace(cand, node=replace(cand.node, node_class=None), phases=phases)
    assert not only(
        run(classless, baseline=replace(BASE, node=classless.node), policy=load_policy(path)), "evidence.missing"
    )


def test_rules_phase_failed_blocks_with_reasons() -> None:
    cand = upgraded()
    phases = tuple(
        replace(p, status=PhaseStatus.FAILED, reasons=("bus-bw-below-threshold",)) if p.phase == 2 else p
        for p in cand.phases
    )
    (f,) = only(run(replace(cand, phases=phases)), "phase.failed")
    assert f.message == "phase 2 (gpu-mesh-validation) failed: bus-bw-below-threshold"


def test_rules_dmesg_fatal_blocks_and_errors_warn() -> None:
    events = (
        KernelEvent(
            kind="amdgpu.gpu_reset", severity="fatal", bdf="0000:05:00.0", line_no=812, text="GPU reset begin!"
        ),
        KernelEvent(
            kind="amdgpu.gpu_reset", severity="fatal", bdf="0000:05:00.0", line_no=900, text="GPU reset begin!"
        ),
        KernelEvent(kind="amdgpu.ras_deferred", severity="error", bdf=None, line_no=5, text="1 deferred"),
    )
    findings = only(run(replace(upgraded(), events=events)), "dmesg.fatal")
    assert [(f.severity, f.device) for f in findings] == [(Severity.BLOCK, "0000:05:00.0"), (Severity.WARN, None)]
    assert "2 line(s), first at line 812" in findings[0].message


def test_rules_bandwidth_settings_mismatch_is_not_comparable() -> None:
    cand = upgraded()
    phases = tuple(
        replace(p, measurements=tuple(replace(m, settings={**m.settings, "NCCL_ALGO": "Tree"}) for m in p.measurements))
        if p.phase == 2
        else p
        for p in cand.phases
    )
    report = run(replace(cand, phases=phases))
    findings = only(report, "bandwidth.not_comparable")
    assert len(findings) == 23 and report.verdict is Verdict.BLOCK
    assert "settings differ: NCCL_ALGO unset -> Tree" in findings[0].message
    assert not [f for f in only(report, "bandwidth.regression") if f.device and f.device.startswith("mesh/")]


def test_rules_bandwidth_absolute_cvf_floors() -> None:
    cand = scale_metrics(upgraded(), 0.70, lambda k: k == "mesh/all_reduce/avg_busbw")
    cand = replace(cand, phases=tuple(
        replace(p, measurements=p.measurements[:7]) if p.phase == 4 else p for p in cand.phases
    ))  # fmt: skip
    findings = only(
        run(cand, plan=upgrade_plan(accept=[{"metric": "mesh/**", "tolerance": 0.5}])), "bandwidth.threshold"
    )
    by_path = {f.path: f.message for f in findings}
    assert set(by_path) == {"measurements[key=mesh/all_reduce/avg_busbw]", "measurements[key=rail/*/write_bw]"}
    assert (
        "is below PHASE2_BW_THRESHOLD 100 GB/s (CVF default)" in by_path["measurements[key=mesh/all_reduce/avg_busbw]"]
    )
    assert "7 rail bandwidth measurement(s), PHASE4_RAIL_COUNT is 8" in by_path["measurements[key=rail/*/write_bw]"]


def test_rules_plan_accepted_metric_shift() -> None:
    cand = scale_metrics(upgraded(), 0.90, lambda k: k.startswith("cluster/all_gather/"))
    assert only(run(cand), "bandwidth.regression")
    plan = upgrade_plan(accept=[{"metric": "cluster/all_gather/**", "shift": -0.10, "tolerance": 0.07}])
    assert run(cand, plan=plan).verdict is Verdict.PASS


def test_rules_metric_threshold_uses_named_operators(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "rules: [{id: metric.threshold, params: {checks: ["
        "{metric: 'mesh/all_reduce/busbw/2147483648', op: ge, value: 330},"
        "{metric: 'nothing/**', op: le, value: 1}]}}]\n",
        encoding="utf-8",
    )
    messages = sorted(f.message for f in only(run(upgraded(), policy=load_policy(path)), "metric.threshold"))
    assert messages[0].startswith("mesh/all_reduce/busbw/2147483648: median ") and "fails ge 330" in messages[0]
    assert messages[1] == "no measurement matches nothing/** (check median le 1)"


def test_rules_odd_one_out_without_a_baseline() -> None:
    cand = reverse_order(upgraded())
    reference = ClassReference(
        node_class=NODE_CLASS,
        nodes=(NodeName("mi300x-node-02"), NodeName("mi300x-node-03"), NodeName("mi300x-node-04")),
        gpu_order=tuple(str(g.bdf) for g in BASE.gpus),
        firmware={"gpu/PLDM_BUNDLE": "01.25.03.12", "nic/4098/fw_ver": "1.117.1-a-63"},
        software={"rocm_version": "6.1.3", "kernel": "5.15.0-116-generic"},
        sriov={"0000:06:00.0": 4},
        metrics=(
            MetricSummary(
                key="mesh/all_reduce/avg_busbw",
                unit="GB/s",
                median=160.0,
                spread=2.0,
                n_nodes=3,
                settings=SWEEP_SETTINGS,
            ),
            MetricSummary(key="mesh/all_reduce/busbw/1024", unit="GB/s", median=9.0, spread=0.1, n_nodes=3),
        ),
    )
    report = run(cand, baseline=None, references={NODE_CLASS: reference})
    findings = {f.path: f for f in only(report, "fleet.odd_one_out")}
    # ROCm differs from the class but as planned: not odd; busbw/1024's class settings differ: not compared.
    assert set(findings) == {"gpus.order", "measurements[key=mesh/all_reduce/avg_busbw]"}
    thin = replace(reference, metrics=tuple(replace(m, n_nodes=2) for m in reference.metrics))
    thin_report = run(cand, baseline=None, references={NODE_CLASS: thin})
    assert {f.path for f in only(thin_report, "fleet.odd_one_out")} == {"gpus.order"}  # 2 nodes: no class metric
    assert not only(report, "device.order_changed")  # needs a baseline
    # a class reference is something to judge against, but not the node's own baseline: said, not blocked
    missing = only(report, "evidence.missing")
    assert [(f.severity, f.path) for f in missing] == [(Severity.WARN, "baseline")]
    assert "no baseline for mi300x-node-01: judged against the reference of class mi300x-8gpu (3 node(s))" in (
        missing[0].message
    )
    thin_nodes = run(cand, baseline=None, references={NODE_CLASS: replace(reference, nodes=reference.nodes[:2])})
    assert [f.severity for f in only(thin_nodes, "evidence.missing")] == [Severity.BLOCK]  # 2 < class_min_nodes
    assert "index 0 at 0000:f5:00.0, class mi300x-8gpu has 0000:05:00.0" in findings["gpus.order"].message
    assert (
        "below class mi300x-8gpu (160.00 over 3 nodes"
        in findings["measurements[key=mesh/all_reduce/avg_busbw]"].message
    )


def test_rules_odd_one_out_takes_the_direction_from_the_class_not_the_candidate() -> None:
    # break test 2026-12-07: a node without a baseline, -20% on bandwidth, passed its class once its document
    # said `higher_is_better: false`
    key = "mesh/all_reduce/avg_busbw"

    def flipped(snap: Snapshot) -> Snapshot:
        def flip(ms: tuple[Measurement, ...]) -> tuple[Measurement, ...]:
            return tuple(replace(m, higher_is_better=False) if m.key == key else m for m in ms)

        return replace(
            snap,
            measurements=flip(snap.measurements),
            phases=tuple(replace(p, measurements=flip(p.measurements)) for p in snap.phases),
        )

    summary = MetricSummary(key=key, unit="GB/s", median=160.0, spread=2.0, n_nodes=3, settings=SWEEP_SETTINGS)
    reference = ClassReference(
        node_class=NODE_CLASS,
        nodes=(NodeName("mi300x-node-02"), NodeName("mi300x-node-03"), NodeName("mi300x-node-04")),
        gpu_order=tuple(str(g.bdf) for g in mi300x_snapshot().gpus),
        metrics=(replace(summary, higher_is_better=True),),
    )
    cand = flipped(upgraded())
    (f,) = [f for f in only(run(cand, baseline=None, references={NODE_CLASS: reference}), "fleet.odd_one_out")
            if f.path == f"measurements[key={key}]"]  # fmt: skip
    assert f.severity is Severity.BLOCK
    assert "the candidate says lower is better, class mi300x-8gpu's baselines say higher" in f.message
    assert not [  # the candidate's own direction, as before, only where the reference has none (written before)
        f
        for f in only(run(cand, baseline=None, references={NODE_CLASS: replace(reference, metrics=(summary,))}),
                      "fleet.odd_one_out")
        if f.path == f"measurements[key={key}]"
    ]  # fmt: skip


def test_rules_a_named_canary_without_a_baseline_blocks() -> None:
    # break test 2026-12-07: the plan's own canary, with no baseline, passed its class with a warning
    reference = ClassReference(
        node_class=NODE_CLASS,
        nodes=(NodeName("mi300x-node-02"), NodeName("mi300x-node-03"), NodeName("mi300x-node-04")),
        gpu_order=tuple(str(g.bdf) for g in mi300x_snapshot().gpus),
    )
    refs = {NODE_CLASS: reference}
    named = upgrade_plan(canaries={"nodes": [NODE], "max_fraction": 0.1})
    (f,) = only(run(upgraded(), baseline=None, references=refs, plan=named), "evidence.missing")
    assert f.severity is Severity.BLOCK and "the plan names it as a canary" in f.message
    (g,) = only(run(upgraded(), baseline=None, references=refs), "evidence.missing")
    assert g.severity is Severity.WARN  # a node the plan does not name: the class stands in, as documented


def test_rules_nothing_to_compare_with_blocks() -> None:
    (f,) = only(run(upgraded(), baseline=None), "evidence.missing")
    assert "no baseline" in f.message and "no reference" in f.message


def test_rules_plan_accept_path_downgrades_to_info() -> None:
    cand = upgraded()
    cand = replace(cand, gpus=tuple(replace(g, firmware={**g.firmware, "RLC": "105"}) for g in cand.gpus))
    plan = upgrade_plan(accept=[{"path": "gpus[*].firmware.RLC", "to": "105", "reason": "driver-loaded"}])
    report = run(cand, plan=plan)
    assert report.verdict is Verdict.PASS
    findings = only(report, "firmware.unplanned")
    assert {f.severity for f in findings} == {Severity.INFO}
    assert findings[0].message.endswith("(accepted by plan rocm-6.2.0 accept[0]: driver-loaded)")


@pytest.mark.parametrize("glob", ["measurements**", "measurements[*]", "measurements[key=cluster/all_gather/**]"])
def test_rules_a_path_accept_never_accepts_a_measured_cost(glob: str) -> None:
    # break test 2026-12-07: `accept: [{path: "**"}]` passed a node 20% down on bandwidth; a measured cost is
    # accepted only by a metric entry, with its shift and tolerance
    cand = scale_metrics(upgraded(), 0.80, lambda k: k.startswith("cluster/all_gather/"))
    report = run(cand, plan=upgrade_plan(accept=[{"path": glob, "reason": "anything goes"}]))
    assert report.verdict is Verdict.BLOCK
    blocked = [f for f in only(report, "bandwidth.regression") if f.severity is Severity.BLOCK]
    assert blocked and all(f.path is not None and f.path.startswith("measurements[") for f in blocked)
    # a path glob still accepts a changed field (`**` alone, which names no field, is refused: test_brk16_config)
    firmware = replace(cand, gpus=tuple(replace(g, firmware={**g.firmware, "RLC": "105"}) for g in cand.gpus))
    both = run(firmware, plan=upgrade_plan(accept=[{"path": "gpus**"}]))
    assert {f.severity for f in only(both, "firmware.unplanned")} == {Severity.INFO}


@pytest.mark.parametrize("globs", ["[]", "['nothing/**']"])
def test_rules_metric_globs_that_select_nothing_are_said(tmp_path: Path, globs: str) -> None:
    # break test 2026-12-07: globs that match no metric judged nothing, and the console said "nothing to report"
    path = tmp_path / "p.yaml"
    path.write_text(f"rules: [{{id: bandwidth.regression, params: {{metrics: {globs}}}}}]\n", encoding="utf-8")
    cand = scale_metrics(upgraded(), 0.80, lambda k: k.startswith("cluster/all_gather/"))
    (f,) = only(run(cand, policy=load_policy(path)), "bandwidth.regression")
    assert f.severity is Severity.WARN
    assert "select none of the node's" in f.message and "no bandwidth regression is judged" in f.message
    default = only(run(upgraded()), "bandwidth.regression")  # the default (`**`) selects every metric
    assert not [f for f in default if "select none" in f.message]


def test_rules_a_metric_shift_of_minus_one_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"accept.*shift|shift"):
        upgrade_plan(accept=[{"metric": "**", "shift": -1, "tolerance": 0}])


def test_rules_a_crashing_rule_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    from upgrade_gate.judge import rules

    def boom(ctx: object, entry: object) -> list[Finding]:
        raise KeyError("ports")

    spec = rules.REGISTRY["nic.roce_v2"]  # type: ignore[index]
    monkeypatch.setitem(rules.REGISTRY, spec.id, replace(spec, check=boom))  # type: ignore[call-overload]
    (f,) = only(run(upgraded()), "nic.roce_v2")
    assert f.severity is Severity.BLOCK and "could not be evaluated: KeyError" in f.message


def test_rules_baseline_without_candidate_and_no_candidates_block() -> None:
    other = mi300x_snapshot(node="mi300x-node-02")
    report = judge(
        baselines={BASE.node.name: BASE, other.node.name: other},
        candidates=[upgraded()],
        plan=upgrade_plan(),
        policy=POLICY,
        now=NOW,
    )
    (f,) = only(report, "evidence.missing")
    assert f.node == "mi300x-node-02" and "has a baseline but no candidate" in f.message
    plan = upgrade_plan(canaries={"nodes": ["mi300x-node-03"]})
    canary = judge(baselines={}, candidates=[upgraded()], plan=plan, policy=POLICY, now=NOW)
    assert "node mi300x-node-03 is a canary of plan rocm-6.2.0 but no candidate snapshot" in canary.findings[-1].message
    empty = judge(baselines={}, candidates=[], plan=None, policy=POLICY, now=NOW)
    assert empty.verdict is Verdict.BLOCK and empty.fleet_findings[0].message.startswith("no candidate snapshots")


def test_rules_duplicate_candidates_are_bad_input() -> None:
    from upgrade_gate.errors import InputError

    with pytest.raises(InputError, match=NODE):
        judge(baselines={}, candidates=[upgraded(), upgraded()], plan=None, policy=POLICY, now=NOW)


def test_rules_link_pairs_are_order_independent() -> None:
    cand = upgraded()
    flipped = tuple(
        GpuLink(a=lk.b, b=lk.a, link_type=lk.link_type, hops=lk.hops, weight=lk.weight) for lk in cand.gpu_links
    )
    assert not only(run(replace(cand, gpu_links=flipped)), "xgmi.link_changed")
