"""`upgrade-gate capture --vendor nvidia` (issue 30): the NVIDIA catalogue through the real capture command on a
fake 8x H100 node (its tools alone on PATH), then `snapshot` of the bundle; an unknown vendor is exit 2."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from upgrade_gate.cli.main import run
from upgrade_gate.errors import ExitCode
from upgrade_gate.fakenode.nvidia import build_nvidia_node, h100_node
from upgrade_gate.snapshot.io import load_snapshot


def _run(*args: str) -> tuple[int, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = run(list(args))
    return code, buf.getvalue()


def test_nvidia_capture_cli_writes_a_bundle_the_snapshot_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = build_nvidia_node(tmp_path / "node", h100_node("gpu-node-01", seed=1))
    monkeypatch.setenv("PATH", str(node.bin_dir))  # the fake node's tools alone, as FakeNode.env does
    bundle = tmp_path / "gpu-node-01"
    host = str(node.host_root)
    argv = ["capture", "--vendor", "nvidia", "--node", "gpu-node-01", "--host-root", host, "--out", str(bundle)]
    code, out = _run(*argv)
    assert code == ExitCode.PASS and "14 probes, 0 failed" in out, out
    code, _ = _run("snapshot", str(bundle), "--out", str(tmp_path / "s.json"))
    assert code == ExitCode.PASS
    snap = load_snapshot(tmp_path / "s.json")
    assert len(snap.gpus) == 8 and snap.gpus[0].unique_id and snap.software.driver_version == "550.127.05"


def test_nvidia_capture_cli_unknown_vendor_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _run("capture", "--vendor", "intel", "--out", str(tmp_path / "b"))
    assert code == ExitCode.USAGE
    assert "--vendor intel: expected one of amd, nvidia" in capsys.readouterr().err
