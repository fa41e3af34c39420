"""Fail closed on NVIDIA nodes (issue 30): nvidia-smi (or dcgmi, or nccl-tests) hung, missing, failing or printing
garbage never passes. The faults are the replay stub's, as on AMD's fake nodes (`fakenode.faults`); the capture,
the snapshot, the phases and the judge are the real ones, and the verdict leads with the missing evidence, not
with "changed" lines read off the broken record."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.probes import probe_catalogue
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.fakenode.faults import Faults, ToolFault, garbage, hang, missing, nonzero
from upgrade_gate.fakenode.nvidia import build_nvidia_node, h100_node
from upgrade_gate.judge.causes import group_causes
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import NodeName, PhaseStatus, Severity, Snapshot, Verdict
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.validate.config import default_config
from upgrade_gate.validate.launcher import LocalLauncher
from upgrade_gate.validate.phases import select_phases
from upgrade_gate.validate.pipeline import run_pipeline
from upgrade_gate.vendors import NVIDIA

NODE = NodeName("gpu-node-01")
NOW = "2026-12-05T12:00:00Z"
POLICY = load_policy(Path(__file__).resolve().parent.parent / "examples" / "policies" / "nvidia-bundles.yaml")
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
    "NVIDIA driver is installed and running."
)  # nvidia-smi's own message (corpus; parse.nvidia_smi_messages)


def _snapshot(root: Path, faults: Faults | None = None) -> tuple[Snapshot, dict[str, str]]:
    node = build_nvidia_node(root, h100_node(NODE, seed=1), faults)
    env = node.env(os.environ)
    bundle = capture(LocalRunner(env=env), node=NODE, host_root=node.host_root, output_check=parser_check(),
                     probes=probe_catalogue(node.host_root, vendor=NVIDIA), timeout=3.0)  # fmt: skip
    return build_snapshot(bundle), env


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    return _snapshot(tmp_path_factory.mktemp("nv-base"))[0]


@pytest.mark.parametrize(
    "fault",
    [hang(), missing(), nonzero(9, NO_DRIVER), garbage(), hang(argv_prefix=("topo",))],
    ids=["hang", "missing", "no-driver", "garbage", "topo-hang"],
)
def test_nvidia_smi_broken_blocks_and_names_the_missing_evidence_first(
    tmp_path: Path, baseline: Snapshot, fault: ToolFault
) -> None:
    candidate, _ = _snapshot(tmp_path, Faults(tools={"nvidia-smi": fault}))
    report = judge(baselines={NODE: baseline}, candidates=[candidate], plan=None, policy=POLICY, now=NOW)
    assert report.verdict is Verdict.BLOCK
    grouped = group_causes(report, baselines={NODE: baseline}, candidates={NODE: candidate})
    first = next(c for c in grouped.nodes[0].causes if c.severity is Severity.BLOCK)
    findings = grouped.nodes[0].findings
    text = " ".join([first.headline, *first.details, *(findings[i].message for i in first.findings)])
    assert "nvidia_smi" in text, text  # the broken probe leads, by name
    changed = [f for f in report.nodes[0].findings if f.rule in ("device.order_changed", "firmware.changed")]
    assert not changed, [f.message for f in changed]  # a broken record is not read as change
    blocking = {i for i, f in enumerate(findings) if f.severity is Severity.BLOCK}
    others = [findings[i].message for i in sorted(blocking - set(first.findings))]
    assert not others, others  # every blocking finding is explained by the broken tool (numa_node, links ...)


@pytest.mark.parametrize(
    ("tool", "fault"),
    [("dcgmi", nonzero(1, "Error: unable to establish a connection to the specified host: localhost")),
     ("dcgmi", garbage()), ("all_reduce_perf", garbage()), ("all_reduce_perf", nonzero(1, "NCCL error")),
     ("all_reduce_perf", missing())],
    ids=["dcgmi-nonzero", "dcgmi-garbage", "nccl-garbage", "nccl-nonzero", "nccl-missing"],
)  # fmt: skip
def test_nvidia_phase_tool_broken_is_never_a_pass(tmp_path: Path, tool: str, fault: ToolFault) -> None:
    snapshot, env = _snapshot(tmp_path, Faults(tools={tool: fault}))
    results = run_pipeline([NODE], phases=select_phases(frozenset({0, 1, 2}), NVIDIA), config=default_config(),
                           launcher=LocalLauncher({NODE: env}), snapshots={NODE: snapshot})[NODE]  # fmt: skip
    by_phase = {r.phase: r for r in results}
    phase = 1 if tool == "dcgmi" else 2
    assert by_phase[0].status is PhaseStatus.PASSED
    assert by_phase[phase].status in (PhaseStatus.FAILED, PhaseStatus.ERROR), by_phase[phase]
    assert by_phase[phase].reason, by_phase[phase]
