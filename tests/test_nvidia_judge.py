"""NVIDIA snapshots through the vendor-neutral judge (issue 30): the same device.order_changed rule, with the
pin in CUDA's words (CUDA_DEVICE_ORDER=PCI_BUS_ID, CUDA_VISIBLE_DEVICES by UUID) in the finding and the cause."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.probes import probe_catalogue
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.fakenode.nvidia import NvidiaNodeSpec, build_nvidia_node, h100_node, reverse_order
from upgrade_gate.judge.causes import group_causes
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import NodeName, Severity, Snapshot, replace
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.vendors import NVIDIA

NODE = NodeName("gpu-node-01")
NOW = "2026-12-05T12:00:00Z"
POLICY_FILE = Path(__file__).resolve().parent.parent / "examples" / "policies" / "nvidia-bundles.yaml"
POLICY = load_policy(POLICY_FILE)


def _snapshot(root: Path, spec: NvidiaNodeSpec) -> Snapshot:
    node = build_nvidia_node(root, spec)
    probes = probe_catalogue(node.host_root, vendor=NVIDIA)
    bundle = capture(
        LocalRunner(env=node.env(os.environ)),
        node=NODE,
        host_root=node.host_root,
        output_check=parser_check(),
        probes=probes,
    )
    return build_snapshot(bundle)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Snapshot, Snapshot]:
    root = tmp_path_factory.mktemp("nvidia")
    spec = h100_node(NODE, seed=1)
    return _snapshot(root / "before", spec), _snapshot(root / "after", reverse_order(spec))


def test_nvidia_judge_order_change_blocks_with_the_cuda_pin(pair: tuple[Snapshot, Snapshot]) -> None:
    baseline, candidate = pair
    report = judge(baselines={NODE: baseline}, candidates=[candidate], plan=None, policy=POLICY, now=NOW)
    order = [f for f in report.nodes[0].findings if f.rule == "device.order_changed"]
    assert order and order[0].severity is Severity.BLOCK
    uuids = ",".join(str(g.unique_id) for g in sorted(baseline.gpus, key=lambda g: g.index))
    pin = f"export CUDA_DEVICE_ORDER=PCI_BUS_ID; export CUDA_VISIBLE_DEVICES={uuids}"
    assert pin in (order[0].hint or ""), order[0].hint
    assert "ROCR_VISIBLE_DEVICES" not in (order[0].hint or "")
    grouped = group_causes(report, baselines={NODE: baseline}, candidates={NODE: candidate})
    cause = next(c for c in grouped.nodes[0].causes if c.severity is Severity.BLOCK)
    assert cause.next_step == pin


def test_nvidia_judge_same_node_again_has_no_order_finding(pair: tuple[Snapshot, Snapshot], tmp_path: Path) -> None:
    baseline, _ = pair
    again = _snapshot(tmp_path / "again", h100_node(NODE, seed=1))
    report = judge(baselines={NODE: baseline}, candidates=[again], plan=None, policy=POLICY, now=NOW)
    rules = {f.rule for f in report.nodes[0].findings if f.severity is Severity.BLOCK}
    assert not {r for r in rules if r.startswith("device.")}, rules


def test_nvidia_judge_policy_requires_the_vendors_anchor_probes() -> None:
    entry = next(e for e in POLICY.rules if e.id == "evidence.missing")
    assert tuple(entry.strings("required_probes")) == NVIDIA.anchor_probes


def test_nvidia_judge_an_amd_policy_requires_the_nvidia_nodes_own_probes(pair: tuple[Snapshot, Snapshot]) -> None:
    """One policy for a mixed fleet: the AMD-worded `required_probes` (rocminfo, rocm_version) read as the
    node's vendor's anchors on an NVIDIA node, so the same node passes, and one whose nvidia-smi record is
    gone still blocks (fail closed). It used to block on "probe rocminfo is absent"."""
    baseline, _ = pair
    amd_policy = load_policy(POLICY_FILE.parent / "ci-bundles.yaml")
    report = judge(baselines={NODE: baseline}, candidates=[baseline], plan=None, policy=amd_policy, now=NOW)
    blocked = {f.message for f in report.nodes[0].findings if f.severity is Severity.BLOCK}
    assert not any("rocminfo" in m or "rocm_version" in m for m in blocked), blocked
    no_smi = replace(baseline, probes=tuple(p for p in baseline.probes if p.name != "driver_version"))
    report = judge(baselines={}, candidates=[no_smi], plan=None, policy=amd_policy, now=NOW)
    blocked = {f.message for f in report.nodes[0].findings if f.severity is Severity.BLOCK}
    assert "probe driver_version is absent from the candidate" in blocked, blocked


def test_nvidia_judge_gsp_timeout_in_dmesg_blocks_on_the_hopper_gpu(
    pair: tuple[Snapshot, Snapshot], tmp_path: Path
) -> None:
    # The corpus Xid 119 line (gpud dmesg-with-xid-119.log, tests/fixtures/dmesg-nvidia) on this node's GPU 0.
    xid = (
        "[ 1843.308145] NVRM: Xid (PCI:0000:1b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of "
        "waiting for RPC response from GPU0 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4)."
    )
    baseline, _ = pair
    candidate = _snapshot(tmp_path / "xid", replace(h100_node(NODE, seed=1), extra_dmesg=(xid,)))
    assert [(e.kind, e.severity, e.bdf) for e in candidate.events] == [
        ("nvidia.gsp_rpc_timeout", "fatal", "0000:1b:00.0")
    ]
    report = judge(baselines={NODE: baseline}, candidates=[candidate], plan=None, policy=POLICY, now=NOW)
    blocked = [f for f in report.nodes[0].findings if f.severity is Severity.BLOCK]
    assert [f.rule for f in blocked] == ["dmesg.fatal"], [f.message for f in blocked]
