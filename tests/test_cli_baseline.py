"""The `baseline` command group through `cli.main.run`, including each exit code it can give."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_store_gitstore import BDFS, git, snapshot_for
from upgrade_gate.cli.main import run
from upgrade_gate.snapshot.io import dumps_snapshot, write_snapshot


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, snap in {
        "a1": snapshot_for("node-a"),
        "b1": snapshot_for("node-b"),
        "a2": snapshot_for("node-a", rocm="6.2.0"),
        "c1": snapshot_for("node-c", bdfs=tuple(reversed(BDFS))),
        "x1": snapshot_for("node-x", node_class="other"),
    }.items():
        out[name] = tmp_path / f"{name}.json"
        write_snapshot(snap, out[name])
    return out


def _save(store: Path, *paths: Path, tag: str | None = None) -> int:
    args = ["baseline", "save", *map(str, paths), "--store", str(store)]
    return run([*args, "--tag", tag] if tag else args)


def test_cli_baseline_save_list_show_log(tmp_path: Path, files: dict[str, Path], capsys) -> None:
    store = tmp_path / "store"
    assert _save(store, files["a1"], files["b1"], tag="rocm-6.1.3") == 0
    assert "saved 2 node(s)" in capsys.readouterr().out
    assert run(["baseline", "save", str(files["a2"]), "--store", str(store), "-m", "upgrade node-a"]) == 0
    capsys.readouterr()
    assert run(["baseline", "list", "--store", str(store)]) == 0
    assert capsys.readouterr().out == "node-a\nnode-b\n"
    assert run(["baseline", "show", "node-a@rocm-6.1.3", "--store", str(store)]) == 0
    assert capsys.readouterr().out == dumps_snapshot(snapshot_for("node-a"))
    assert run(["baseline", "show", "node-a", "--store", str(store)]) == 0
    assert json.loads(capsys.readouterr().out)["software"]["rocm_version"] == "6.2.0"
    assert run(["baseline", "log", "node-a", "--store", str(store)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].endswith("upgrade node-a")
    assert lines[1].endswith("[rocm-6.1.3]")


def test_cli_baseline_store_from_environment(
    tmp_path: Path, files: dict[str, Path], capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UPGRADE_GATE_STORE", str(tmp_path / "store"))
    assert run(["baseline", "save", str(files["a1"])]) == 0
    capsys.readouterr()
    assert run(["baseline", "list"]) == 0
    assert capsys.readouterr().out == "node-a\n"


def test_cli_baseline_diff_prints_a_unified_diff(tmp_path: Path, files: dict[str, Path], capsys) -> None:
    store = tmp_path / "store"
    _save(store, files["a1"], tag="old")
    _save(store, files["a2"], tag="new")
    capsys.readouterr()
    assert run(["baseline", "diff", "node-a", "old", "new", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("--- node-a@old\n+++ node-a@new\n")
    assert '-    "rocm_version": "6.1.3"' in out and '+    "rocm_version": "6.2.0"' in out
    assert run(["baseline", "diff", "node-a", "old", "old", "--store", str(store)]) == 0
    assert "no differences" in capsys.readouterr().out


def test_cli_baseline_aggregate_writes_reference_and_names_odd_node(
    tmp_path: Path, files: dict[str, Path], capsys
) -> None:
    store = tmp_path / "store"
    _save(store, files["a1"], files["b1"], files["c1"], files["x1"])
    capsys.readouterr()
    out_file = tmp_path / "ref.json"
    args = ["baseline", "aggregate", "--class", "mi300x-4gpu", "--store", str(store)]
    assert run([*args, "--out", str(out_file), "--save"]) == 0
    captured = capsys.readouterr()
    reference = json.loads(out_file.read_text())
    assert reference["nodes"] == ["node-a", "node-b", "node-c"]  # node-x is of another class
    assert reference["gpu_order"] == list(BDFS)
    assert "odd one out: node-c: gpus[0].bdf: 0000:75:00.0 (class: 0000:05:00.0)" in captured.err
    assert json.loads(git(store, "show", "HEAD:classes/mi300x-4gpu.json")) == reference
    assert run([*args, "node-a", "node-b"]) == 0
    assert json.loads(capsys.readouterr().out)["nodes"] == ["node-a", "node-b"]
    assert run(["baseline", "aggregate", "--class", "none", "--store", str(store)]) == 3


def test_cli_baseline_deny_and_denylist(tmp_path: Path, files: dict[str, Path], capsys) -> None:
    store = tmp_path / "store"
    base = ["--store", str(store)]
    assert run(["baseline", "deny", "SN123", "--reason", "ECC storm", "--node", "node-a", *base]) == 0
    assert "denied GPU SN123 on node-a: ECC storm" in capsys.readouterr().out
    assert run(["baseline", "deny", "SN123", "--reason", "again", *base]) == 0
    assert "already denied on node-a" in capsys.readouterr().out
    assert run(["baseline", "denylist", *base]) == 0
    assert capsys.readouterr().out.startswith("SN123  ")


def test_cli_baseline_exit_codes(tmp_path: Path, files: dict[str, Path], capsys) -> None:
    store = tmp_path / "store"
    assert _save(store, files["a1"], tag="v1") == 0
    assert _save(store, files["a2"], tag="v1") == 3  # tag exists
    assert "tag 'v1' already exists" in capsys.readouterr().err
    assert _save(store, tmp_path / "missing.json") == 3
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": "1"}')
    assert _save(store, bad) == 3
    assert "bad.json" in capsys.readouterr().err
    assert run(["baseline", "show", "node-z", "--store", str(store)]) == 3
    assert run(["baseline", "show", "node-a@nope", "--store", str(store)]) == 3
    assert run(["baseline", "show", "node-a@", "--store", str(store)]) == 2
    assert run(["baseline", "save", str(files["a1"]), "--store", str(store), "--tag", "a..b"]) == 2
    capsys.readouterr()
    not_a_store = tmp_path / "plain"
    not_a_store.mkdir()
    (not_a_store / "x").write_text("x")
    assert run(["baseline", "list", "--store", str(not_a_store)]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(not_a_store) in err
