"""`upgrade-gate demo --vendor nvidia` (issue 30): the incident on an 8x H100 fleet (driver 550 -> 570 reverses the
order on the canary: BLOCK with the CUDA_VISIBLE_DEVICES pin) and the healthy variant passing, each within a
laptop screen, through the real CLI entry point; the replay command the demo prints gives the same verdict.
Phases 0-2 (eligibility, dcgmi diag, nccl-tests all_reduce_perf) run on every node and the bandwidth rules judge
phase 2's measurements: a mesh bandwidth drop on the canary blocks."""

from __future__ import annotations

import contextlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.cli.main import run
from upgrade_gate.demo.nvidia import run_nvidia_demo
from upgrade_gate.errors import ExitCode
from upgrade_gate.fakenode.faults import scale_mesh_bandwidth
from upgrade_gate.fakenode.nvidia import NvidiaNodeSpec
from upgrade_gate.model import Verdict, replace
from upgrade_gate.store.gitstore import BaselineStore

SCREEN = 60  # lines of a laptop terminal


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    workdir: Path


def _run(*args: str) -> tuple[int, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = run(list(args))
    return code, buf.getvalue()


@pytest.fixture(scope="module")
def blocked(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    workdir = tmp_path_factory.mktemp("nvidia") / "blocked"
    code, out = _run("demo", "--vendor", "nvidia", "--workdir", str(workdir))
    return Ran(code=code, out=out, workdir=workdir)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    workdir = tmp_path_factory.mktemp("nvidia") / "healthy"
    code, out = _run("demo", "--vendor", "nvidia", "--healthy", "--workdir", str(workdir))
    return Ran(code=code, out=out, workdir=workdir)


def test_demo_nvidia_blocks_the_reversed_canary_with_the_cuda_pin(blocked: Ran) -> None:
    assert blocked.code == ExitCode.BLOCK, blocked.out
    assert len(blocked.out.splitlines()) <= SCREEN
    assert "GPU enumeration order changed: 8 of 8 indices moved (reversed)" in blocked.out
    assert "next: export CUDA_DEVICE_ORDER=PCI_BUS_ID" in blocked.out
    assert "export CUDA_VISIBLE_DEVICES=$U" in blocked.out and "ROCR_VISIBLE_DEVICES" not in blocked.out
    snapshot = json.loads((blocked.workdir / "before" / "snapshots" / "gpu-node-01.json").read_text())
    first = snapshot["gpus"][0]["unique_id"]
    assert f"U={first}," in blocked.out  # the baseline's GPU 0 comes first in the pin
    assert "Run `upgrade-gate demo --vendor nvidia --healthy`" in blocked.out
    assert "gpu-node-01: driver 570.158.01, phases 0-2 passed;" in blocked.out  # dcgmi diag, nccl-tests stay green


def test_demo_nvidia_replay_gives_the_same_verdict(blocked: Ran) -> None:
    old = Path.cwd()
    os.chdir(blocked.workdir)
    try:
        code, out = _run(
            "gate",
            "--store",
            "store",
            "--ref",
            "nvidia-550.127.05",
            "--plan",
            "plan.yaml",
            "--policy",
            "policy.yaml",
            "--candidate",
            "after/snapshots/gpu-node-01.json",
        )
    finally:
        os.chdir(old)
    assert code == ExitCode.BLOCK and "GPU enumeration order changed" in out
    assert "upgrade-gate gate --store store --ref nvidia-550.127.05" in blocked.out


def test_demo_nvidia_healthy_passes_and_promotes(healthy: Ran) -> None:
    assert healthy.code == ExitCode.PASS, healthy.out
    assert len(healthy.out.splitlines()) <= SCREEN
    assert "new baselines are tagged nvidia-570.158.01" in healthy.out
    with BaselineStore(healthy.workdir / "store") as store:
        promoted = store.load("gpu-node-01", store.pin("nvidia-570.158.01"))
    assert promoted.software.driver_version == "570.158.01"
    assert not (healthy.workdir / "fleet").exists()  # the fake nodes are removed without --keep


def _phases(path: Path) -> list[tuple[int, str]]:
    return [(p["phase"], p["status"]) for p in json.loads(path.read_text())["phases"]]


def _busbw(path: Path) -> float:
    (phase2,) = (p for p in json.loads(path.read_text())["phases"] if p["phase"] == 2)
    (value,) = (v for k, v in phase2["annotations"].items() if k.endswith("-measured-bw"))
    return float(value)


@pytest.mark.parametrize("story", ["blocked", "healthy"])
def test_demo_nvidia_runs_phases_0_to_2_on_every_node_and_judges_bandwidth(
    story: str, request: pytest.FixtureRequest
) -> None:
    ran: Ran = request.getfixturevalue(story)
    before = sorted((ran.workdir / "before" / "snapshots").glob("*.json"))
    after = sorted((ran.workdir / "after" / "snapshots").glob("*.json"))
    assert [p.stem for p in before] == [f"gpu-node-{i:02d}" for i in range(1, 9)] and [p.stem for p in after] == [
        "gpu-node-01"
    ]
    for path in [*before, *after]:
        assert _phases(path) == [(0, "passed"), (1, "passed"), (2, "passed")], path
        assert _busbw(path) > 0, path  # phase 2 measured the mesh: the baseline has a curve to compare with
    assert "run phases 0-2 on every node" in ran.out and "phases 0-2 passed; mesh avg busbw" in ran.out
    policy = (ran.workdir / "policy.yaml").read_text()
    assert "required_phases: [1, 2]" in policy and "enabled: false" not in policy and "h100-8gpu: [4, 5]" in policy
    judged = json.loads((ran.workdir / "reports" / "report.json").read_text())["rules_evaluated"]
    assert {"bandwidth.regression", "bandwidth.threshold", "bandwidth.not_comparable"} <= set(judged)


def _mesh_drop(spec: NvidiaNodeSpec) -> NvidiaNodeSpec:
    """The canary's nccl-tests all_reduce_perf measures 20% less bus bandwidth (the fake's mesh profile)."""
    return replace(spec, host=scale_mesh_bandwidth(spec.host, 0.8))


def test_demo_nvidia_blocks_a_mesh_bandwidth_drop_on_the_canary(tmp_path: Path) -> None:
    lines: list[str] = []
    outcome = run_nvidia_demo(
        tmp_path / "drop", healthy=True, say=lines.append, output_check=parser_check(), canary_fault=_mesh_drop
    )
    out = "\n".join(lines)
    assert outcome.verdict is Verdict.BLOCK, out
    (node,) = outcome.report.nodes
    (cause,) = node.causes
    assert "bandwidth.regression" in cause.rules and cause.headline.startswith(
        "intra-node all_reduce bus bandwidth -20%"
    )
    assert _phases(outcome.candidates[node.node]) == [(0, "passed"), (1, "passed"), (2, "passed")]
    assert _busbw(outcome.candidates[node.node]) < 0.85 * _busbw(
        outcome.workdir / "before" / "snapshots" / "gpu-node-02.json"
    )
    assert outcome.promoted_tag is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--vendor", "intel"), "--vendor intel: expected amd or nvidia"),
        (("--vendor", "nvidia", "--scenario", "index-pinned"), "--vendor nvidia: takes no --scenario"),
    ],
)
def test_demo_nvidia_bad_flags_exit_2(args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _run("demo", *args)
    assert code == ExitCode.USAGE
    assert message in capsys.readouterr().err
