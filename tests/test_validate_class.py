"""`validate --out` keeps the node class (README workflow 1): from --class, else from the snapshot it replaces."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from upgrade_gate.cli.main import run
from upgrade_gate.demo.fleet import ROCM_6_1_3, node_spec
from upgrade_gate.errors import ExitCode
from upgrade_gate.fakenode import build_fake_node
from upgrade_gate.model import NodeName
from upgrade_gate.snapshot.io import load_snapshot


def _run(*argv: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return run(list(argv))


def test_validate_out_keeps_the_class_of_the_snapshot_it_replaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = build_fake_node(tmp_path / "fake", node_spec(NodeName("gpu-node-01"), ROCM_6_1_3))
    monkeypatch.setenv("PATH", str(node.bin_dir))
    out = tmp_path / "gpu-node-01.json"
    root = ["--host-root", str(node.host_root)]
    assert _run("snapshot", "--local", "--node", "gpu-node-01", "--class", "mi300x-8gpu", "--out", str(out), *root) == 0
    assert _run("validate", "--node", "gpu-node-01", "--phases", "0", "--out", str(out), *root) == ExitCode.PASS
    snapshot = load_snapshot(out)
    assert snapshot.node.node_class == "mi300x-8gpu" and [p.phase for p in snapshot.phases] == [0]
    assert _run("validate", "--node", "gpu-node-01", "--phases", "0", "--class", "other", "--out", str(out), *root) == 0
    assert load_snapshot(out).node.node_class == "other"  # --class overrides


def test_validate_out_takes_no_class_from_another_nodes_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = build_fake_node(tmp_path / "fake", node_spec(NodeName("gpu-node-01"), ROCM_6_1_3))
    monkeypatch.setenv("PATH", str(node.bin_dir))
    out = tmp_path / "snap.json"
    root = ["--host-root", str(node.host_root)]
    assert _run("snapshot", "--local", "--node", "gpu-node-02", "--class", "mi300x-8gpu", "--out", str(out), *root) == 0
    assert _run("validate", "--node", "gpu-node-01", "--phases", "0", "--out", str(out), *root) == ExitCode.PASS
    assert load_snapshot(out).node.node_class is None
