"""Issue 27: a compute/memory partition change is one cause, and a plan can declare it.

Real fake-node captures (the tools print the corpus formats, `fakenode.shapes.mi300x_cpx_node`: MI300X in
CPX/NPS4, 8 partitions per device sharing its serial and UUID) of one node, in SPX/NPS1 and in CPX/NPS4.
The judge runs with the shipped policy for capture bundles (no phase results in a capture).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.errors import ConfigError
from upgrade_gate.fakenode import Faults, NodeSpec, build_fake_node, faults, mi300x_cpx_node, mi300x_node
from upgrade_gate.judge.causes import group_causes
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.plan import ChangePlan, plan_from_dict
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import GateReport, GpuSerial, NodeName, Severity, Snapshot, Verdict, replace
from upgrade_gate.snapshot.build import build_snapshot

NODE = NodeName("gpu-node-01")
NOW = "2026-12-05T12:00:00Z"
POLICY = load_policy(Path(__file__).resolve().parent.parent / "examples" / "policies" / "ci-bundles.yaml")


def _cpx() -> NodeSpec:
    return mi300x_cpx_node(NODE, seed=1, gpu_count=8, nic_count=8, node_class="mi300x-8gpu")


def _snapshot(root: Path, spec: NodeSpec) -> Snapshot:
    node = build_fake_node(root, spec, Faults())
    bundle = capture(
        LocalRunner(env=node.env(os.environ)), node=NODE, host_root=node.host_root, output_check=parser_check()
    )
    return build_snapshot(bundle, node_class="mi300x-8gpu")


@pytest.fixture(scope="module")
def spx(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    return _snapshot(tmp_path_factory.mktemp("spx") / "n", mi300x_node(NODE, seed=1))


@pytest.fixture(scope="module")
def cpx(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    return _snapshot(tmp_path_factory.mktemp("cpx") / "n", _cpx())


def _plan(before: str, after: str) -> ChangePlan:
    modes = {"SPX": {"compute": "SPX", "memory": "NPS1"}, "CPX": {"compute": "CPX", "memory": "NPS4"}}
    change = {"partition": {"from": modes[before], "to": modes[after]}}
    return plan_from_dict({"id": f"{before}-to-{after}", "change": change}, source="plan.yaml")


def _gate(baseline: Snapshot, candidate: Snapshot, plan: ChangePlan | None = None) -> GateReport:
    report = judge(
        baselines={NODE: baseline}, candidates=[candidate], plan=plan, policy=POLICY, now="2026-12-05T12:00:00Z"
    )
    return group_causes(report, baselines={NODE: baseline}, candidates={NODE: candidate})


def test_partition_spx_to_cpx_unplanned_is_one_cause_named_as_such(spx: Snapshot, cpx: Snapshot) -> None:
    report = _gate(spx, cpx)
    assert report.verdict is Verdict.BLOCK
    causes = [c for c in report.nodes[0].causes if c.severity is Severity.BLOCK]
    assert len(causes) == 1, [c.headline for c in causes]
    assert causes[0].headline == "compute partition SPX -> CPX, memory NPS1 -> NPS4 on 8 GPUs (8 -> 64 logical GPUs)"
    assert len(causes[0].findings) == len(report.nodes[0].findings)  # the 1,988 link lines and 56 partitions folded
    assert "deny" not in (causes[0].next_step or "") and "partition:" in (causes[0].next_step or "")


def test_partition_cpx_to_spx_unplanned_names_no_missing_gpu_and_no_denylist(spx: Snapshot, cpx: Snapshot) -> None:
    report = _gate(cpx, spx)
    causes = [c for c in report.nodes[0].causes if c.severity is Severity.BLOCK]
    assert [c.key for c in causes] == ["partition:change"]
    assert causes[0].headline.startswith("compute partition CPX -> SPX, memory NPS4 -> NPS1 on 8 GPUs")
    assert not any("deny" in (c.next_step or "") or "missing" in c.headline for c in report.nodes[0].causes)


@pytest.mark.parametrize(("before", "after"), [("SPX", "CPX"), ("CPX", "SPX")])
def test_partition_planned_change_passes_a_healthy_node(spx: Snapshot, cpx: Snapshot, before: str, after: str) -> None:
    sides = {"SPX": spx, "CPX": cpx}
    report = _gate(sides[before], sides[after], _plan(before, after))
    assert report.verdict is Verdict.PASS, [f.message for f in report.findings if f.severity is Severity.BLOCK][:5]


def test_partition_plan_for_other_modes_does_not_cover_it(spx: Snapshot, cpx: Snapshot) -> None:
    report = _gate(spx, cpx, _plan("CPX", "SPX"))  # the plan says the other way round
    assert report.verdict is Verdict.BLOCK
    assert report.nodes[0].causes[0].key == "partition:change"


def test_partition_plan_still_blocks_a_partition_with_a_foreign_serial(spx: Snapshot, cpx: Snapshot) -> None:
    gpus = tuple(replace(g, serial=GpuSerial("999999999999")) if g.index == 13 else g for g in cpx.gpus)
    report = _gate(spx, replace(cpx, gpus=gpus), _plan("SPX", "CPX"))
    assert report.verdict is Verdict.BLOCK
    assert any(f.rule.startswith("device.") for f in report.findings if f.severity is Severity.BLOCK)


def test_partition_plan_still_blocks_reordered_physical_devices(
    spx: Snapshot, tmp_path_factory: pytest.TempPathFactory
) -> None:
    reordered = _snapshot(tmp_path_factory.mktemp("rev") / "n", faults.reverse_enumeration(_cpx()))
    report = _gate(spx, reordered, _plan("SPX", "CPX"))
    assert report.verdict is Verdict.BLOCK
    assert any(f.rule == "device.order_changed" for f in report.findings)


def test_partition_plan_mode_is_checked_by_the_schema() -> None:
    with pytest.raises(ConfigError, match=r"plan\.yaml.*partition"):
        plan_from_dict({"id": "x", "change": {"partition": {"to": {"compute": "cpx"}}}}, source="plan.yaml")
