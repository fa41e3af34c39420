"""Issue 27: a device-level cause names the device (index, BDF, serial) in its default console line, and is
routed by component (a GPU's PCIe link to the platform, a NIC's to the network).

Real fake-node captures of one healthy node and of the same node with one thing changed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.fakenode import Faults, NodeSpec, build_fake_node, faults, mi300x_node
from upgrade_gate.judge.causes import group_causes
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import Cause, CauseCategory, NodeName, Severity, Snapshot, replace
from upgrade_gate.report.interface import ReportContext, ReportFormat
from upgrade_gate.report.registry import render
from upgrade_gate.snapshot.build import build_snapshot

NODE = NodeName("gpu-node-01")
NOW = "2026-12-05T12:00:00Z"
POLICY = load_policy(Path(__file__).resolve().parent.parent / "examples" / "policies" / "ci-bundles.yaml")


def _snapshot(root: Path, spec: NodeSpec) -> Snapshot:
    node = build_fake_node(root, spec, Faults())
    runner = LocalRunner(env=node.env(os.environ))
    return build_snapshot(capture(runner, node=NODE, host_root=node.host_root, output_check=parser_check()))


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    return _snapshot(tmp_path_factory.mktemp("healthy") / "n", mi300x_node(NODE, seed=1))


def _causes(baseline: Snapshot, candidate: Snapshot) -> tuple[list[Cause], str]:
    report = judge(baselines={NODE: baseline}, candidates=[candidate], plan=None, policy=POLICY, now=NOW)
    report = group_causes(report, baselines={NODE: baseline}, candidates={NODE: candidate})
    ctx = ReportContext(report=report, baselines={NODE: baseline}, candidates={NODE: candidate})
    console = render(ReportFormat.CONSOLE, ctx)
    return [c for c in report.nodes[0].causes if c.severity is Severity.BLOCK], console


def test_cause_devices_one_gpu_firmware_drift_names_the_gpu(healthy: Snapshot, tmp_path: Path) -> None:
    spec = mi300x_node(NODE, seed=1)
    gpu = spec.gpus[3]
    drifted = tuple((k, "1661" if k == "CP_MEC1" else v) for k, v in gpu.firmware)
    spec = replace(spec, gpus=tuple(replace(g, firmware=drifted) if g is gpu else g for g in spec.gpus))
    candidate = _snapshot(tmp_path / "n", spec)
    causes, console = _causes(healthy, candidate)
    assert len(causes) == 1
    target = next(g for g in candidate.gpus if str(g.bdf) == gpu.bdf)
    named = f"on GPU {target.index} ({gpu.bdf}, serial {gpu.serial})"
    assert named in causes[0].headline and "CP_MEC1" in causes[0].headline
    first_line = next(line for line in console.splitlines() if "firmware moved" in line)
    assert gpu.bdf in first_line and gpu.serial in first_line  # the default console line, no -v


def test_cause_devices_gpu_link_downgrade_goes_to_the_platform(healthy: Snapshot, tmp_path: Path) -> None:
    candidate = _snapshot(tmp_path / "n", faults.downgrade_gpu_link(mi300x_node(NODE, seed=1), 0))
    causes, _ = _causes(healthy, candidate)
    assert len(causes) == 1
    assert causes[0].owner == "platform on-call" and causes[0].category is CauseCategory.HARDWARE
    assert "0000:05:00.0" in causes[0].headline


def test_cause_devices_nic_link_downgrade_goes_to_the_network(healthy: Snapshot, tmp_path: Path) -> None:
    candidate = _snapshot(tmp_path / "n", faults.downgrade_nic_link(mi300x_node(NODE, seed=1), 0))
    causes, _ = _causes(healthy, candidate)
    assert causes and causes[0].owner == "network on-call"
