"""`upgrade-gate validate`: plan, results, `--out` snapshot, `--json`, and every exit code it gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.test_validate_support import FAST, healthy_spec, make_node
from upgrade_gate.cli.main import run
from upgrade_gate.cli.validate_cmds import parse_phases
from upgrade_gate.errors import UsageError
from upgrade_gate.fakenode import FakeNode, faults
from upgrade_gate.model import PhaseStatus, measurements_of
from upgrade_gate.snapshot.io import load_snapshot

REAL = Path(__file__).parent / "fixtures" / "validate" / "cluster-validation-config-excerpt.yaml"


@pytest.fixture(scope="module")
def fast_config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "cvf.yaml"
    path.write_text(yaml.safe_dump(dict(FAST)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> FakeNode:
    return make_node(tmp_path_factory.mktemp("cli"), healthy_spec())


def _use(node: FakeNode, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("PATH", str(node.bin_dir))
    return ["--node", node.spec.name, "--host-root", str(node.host_root)]


def test_validate_cli_parse_phases() -> None:
    assert parse_phases("0-5") == frozenset(range(6))
    assert parse_phases("2") == frozenset({2})
    assert parse_phases("0,2-3, 5") == frozenset({0, 2, 3, 5})
    assert parse_phases("2,workload,perturbation") == parse_phases("2,6-7") == frozenset({2, 6, 7})
    for bad in ("8", "3-1", "a", "", "0-8", "1,,2", "training"):
        with pytest.raises(UsageError):
            parse_phases(bad)


@pytest.mark.parametrize("args", [["--phases", "8"], ["--phases", "two"], ["--samples", "0"], ["--peer", "node-01"]])
def test_validate_cli_bad_flags_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["validate", "--node", "node-01", "--dry-run", *args]) == 2
    assert "upgrade-gate: error:" in capsys.readouterr().err


def test_validate_cli_bad_config_exits_3_naming_key_and_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cvf.yaml"
    path.write_text('apiVersion: v1\nkind: ConfigMap\ndata:\n  PHASE2_BW_THRESHOLD: "fast"\n', encoding="utf-8")
    assert run(["validate", "--config", str(path), "--dry-run", "--node", "n1"]) == 3
    err = capsys.readouterr().err
    assert f"{path}: PHASE2_BW_THRESHOLD: expected a number, got 'fast'" in err
    path.write_text("PHASE4_BW_TRESHOLD: '300'\n", encoding="utf-8")
    assert run(["validate", "--config", str(path), "--dry-run", "--node", "n1"]) == 3
    assert f"{path}: PHASE4_BW_TRESHOLD: unknown key" in capsys.readouterr().err


def test_validate_cli_dry_run_prints_the_plan_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing runnable: a dry run must not need any tool
    assert run(["validate", "--dry-run", "--config", str(REAL), "--node", "node-01", "--peer", "node-02"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"node node-01, peers node-02; config {REAL}\n")
    assert (
        "phase 2 gpu-mesh-validation  label amd.com/gpu-mesh-validation  budget 3120s" in out
    )  # 5 x 600 s sweeps + 120 s thermal sampling
    assert "  all_reduce_perf -b 1K -e 2G -f 2 -g NGPUS -n 6 -w 20  (x5, NGPUS from the snapshot" in out
    assert "pass: median Avg bus bandwidth >= PHASE2_BW_THRESHOLD 100 GB/s" in out
    assert "phase 5 cluster-rccl" in out and "PHASE5_MIN_WORKERS 2" in out
    assert "config keys not used by the local pipeline: " in out


def test_validate_cli_healthy_node_exits_0_and_writes_a_gateable_snapshot(
    fake: FakeNode,
    fast_config_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "candidate.json"
    code = run(["validate", *_use(fake, monkeypatch), "--config", str(fast_config_file), "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured
    lines = captured.out.splitlines()
    assert [line.split()[:4] for line in lines] == [
        ["phase", "0", "eligibility", "passed"],
        ["phase", "1", "gpu-hw-acceptance", "passed"],
        ["phase", "2", "gpu-mesh-validation", "passed"],
        ["phase", "3", "nic-health", "passed"],
    ]
    assert "measured 1" in lines[2]
    assert f"wrote {out}" in captured.err
    snapshot = load_snapshot(out)
    assert [p.phase for p in snapshot.phases] == [0, 1, 2, 3]
    assert all(p.status is PhaseStatus.PASSED for p in snapshot.phases)
    keys = {m.key for m in measurements_of(snapshot)}
    assert "mesh/all_reduce/avg_busbw" in keys and "mesh/all_reduce/busbw/1024" in keys
    assert len(snapshot.gpus) == 8 and snapshot.node.name == "node-01"


def test_validate_cli_json_and_failing_phase_exit_1(
    tmp_path: Path, fast_config_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    slow = make_node(tmp_path, faults.scale_mesh_bandwidth(healthy_spec(), 0.5))
    code = run(["validate", *_use(slow, monkeypatch), "--config", str(fast_config_file), "--json", "--samples", "2"])
    assert code == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["node"] == "node-01" and doc["passed"] is False
    assert [p["status"] for p in doc["phases"]] == ["passed", "passed", "failed", "not-run"]
    mesh = doc["phases"][2]
    assert mesh["reason"].startswith("bus-bw-below-threshold: all_reduce_perf Avg bus bandwidth 6")
    assert mesh["labels"] == {"amd.com/gpu-mesh-validation": "failed"}
    assert len(mesh["measurements"][0]["samples"]) == 2


def test_validate_cli_peer_in_local_mode_is_never_a_pass(
    fake: FakeNode, fast_config_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "validate",
        *_use(fake, monkeypatch),
        "--config",
        str(fast_config_file),
        "--phases",
        "0,4",
        "--peer",
        "node-02",
    ]
    assert run(args) == 1
    out = capsys.readouterr().out
    assert "phase 4 rail-bandwidth       error" in out
    assert "node node-02: the local executor runs commands on this host only" in out
