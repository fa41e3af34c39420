"""`upgrade-gate capture` and `upgrade-gate parse`: output and every exit code they can give."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import CORPUS
from tests.test_collect_capture import fake_node
from upgrade_gate.cli.main import run
from upgrade_gate.collect.bundle import load_bundle
from upgrade_gate.parse.registry import all_parsers


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake node first (and alone) on PATH; returns its host root."""
    bindir, root = fake_node(tmp_path, rocminfo=None, lspci="echo 'pcilib: error' >&2; exit 1")
    monkeypatch.setenv("PATH", str(bindir))
    return root


@pytest.mark.parametrize("out_name", ["bundle", "bundle.tar.gz"])
def test_capture_cmd_writes_bundle_and_exits_0_despite_failed_probes(
    node: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], out_name: str
) -> None:
    out = tmp_path / out_name
    code = run(["capture", "--out", str(out), "--node", "gpu-7", "--host-root", str(node), "--timeout", "5"])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert "FAILED  rocminfo         rocminfo: missing binary" in lines
    assert "FAILED  lspci            lspci: exit code 1: pcilib: error" in lines
    assert any(line.startswith("ok      kernel ") for line in lines)
    # 20 primaries (15 + the 4 host-fact probes + rocm_libs); the stand-in amd-smi output may also trigger
    # both rocm-smi fallbacks via the parsers
    assert re.match(rf"wrote {re.escape(str(out))}: (20|22) probes, 2 failed", lines[-1])
    bundle = load_bundle(out)
    assert bundle.node == "gpu-7" and bundle.host_root == str(node)
    assert {r.timeout_s for r in bundle.records} == {5.0}
    lspci = bundle.record("lspci")
    assert lspci is not None and lspci.result.returncode == 1


def test_capture_cmd_bad_node_name_exits_3(node: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run(["capture", "--out", str(tmp_path / "b"), "--node", "GPU_7", "--host-root", str(node)])
    assert code == 3
    assert "node name 'GPU_7' is not a DNS-1123 name" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_capture_cmd_unwritable_out_exits_4_before_probing(
    node: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "other").write_text("x")
    code = run(["capture", "--out", str(out), "--node", "n1", "--host-root", str(node)])
    captured = capsys.readouterr()
    assert code == 4
    assert "exists and is not an empty folder" in captured.err
    assert captured.out == ""  # refused before any probe ran


def test_capture_cmd_write_failure_exits_4(node: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "b.tar.gz"
    assert run(["capture", "--out", str(out), "--node", "n1", "--host-root", str(node)]) == 4


@pytest.mark.skipif("amd-smi-static" not in all_parsers(), reason="amd-smi parsers not present")
def test_capture_cmd_unparseable_amdsmi_output_triggers_rocmsmi_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bindir, root = fake_node(tmp_path, **{"amd-smi": "echo 'Segmentation fault (core dumped)'"})
    monkeypatch.setenv("PATH", str(bindir))
    out = tmp_path / "b"
    assert run(["capture", "--out", str(out), "--node", "n1", "--host-root", str(root)]) == 0
    bundle = load_bundle(out)
    static, rocmsmi = bundle.record("amdsmi_static"), bundle.record("rocmsmi")
    assert static is not None and static.ok and (static.note or "").startswith("output unusable: amd-smi-static")
    assert rocmsmi is not None and "amdsmi_static" in rocmsmi.fallback_for


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--timeout", "0"], "--timeout must be a positive number"),
        (["--host-root", "/nonexistent/host"], "--host-root /nonexistent/host: not a folder"),
    ],
)
def test_capture_cmd_bad_flags_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert run(["capture", "--out", str(tmp_path / "b"), "--node", "n1", *extra]) == 2
    assert message in capsys.readouterr().err


def test_capture_cmd_missing_out_is_usage_error() -> None:
    assert run(["capture"]) == 2


def test_parse_cmd_unknown_tool_exits_2_listing_tools(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "out.txt").write_text("x\n")
    assert run(["parse", "--tool", "no-such-tool", str(tmp_path / "out.txt")]) == 2
    err = capsys.readouterr().err
    assert "unknown tool 'no-such-tool'; known tools: " in err
    for tool in all_parsers():
        assert tool in err


needs_rocminfo = pytest.mark.skipif("rocminfo" not in all_parsers(), reason="rocminfo parser not present")


@needs_rocminfo
def test_parse_cmd_missing_file_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["parse", "--tool", "rocminfo", str(tmp_path / "absent.txt")]) == 3
    assert f"{tmp_path / 'absent.txt'}: no such file" in capsys.readouterr().err


@needs_rocminfo
def test_parse_cmd_parse_error_exits_3_naming_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("\x00\x01 not rocminfo\n")
    assert run(["parse", "--tool", "rocminfo", str(garbage)]) == 3
    err = capsys.readouterr().err
    assert err.startswith("upgrade-gate: error: rocminfo: ") and str(garbage) in err
    assert err.count("\n") == 1


@needs_rocminfo
def test_parse_cmd_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    sample = CORPUS / "rocminfo" / "mi300x-8gpu-rocm6.2.3-support.txt"
    if not sample.exists():
        pytest.skip("corpus not present")
    assert run(["parse", "--tool", "rocminfo", str(sample)]) == 0
    assert isinstance(json.loads(capsys.readouterr().out), dict | list)
