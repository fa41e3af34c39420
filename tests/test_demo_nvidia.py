"""`upgrade-gate demo --vendor nvidia` (issue 30): the incident on an 8x H100 fleet (driver 550 -> 570 reverses the
order on the canary: BLOCK with the CUDA_VISIBLE_DEVICES pin) and the healthy variant passing, each within a
laptop screen, through the real CLI entry point; the replay command the demo prints gives the same verdict."""

from __future__ import annotations

import contextlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from upgrade_gate.cli.main import run
from upgrade_gate.errors import ExitCode
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
    assert "gpu-node-01: driver 570.158.01, phases 0-1 passed." in blocked.out  # dcgmi diag stays green too
    after = json.loads((blocked.workdir / "after" / "snapshots" / "gpu-node-01.json").read_text())
    assert [(p["phase"], p["status"]) for p in after["phases"]] == [(0, "passed"), (1, "passed")]


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
