"""`validate --vendor amd|nvidia|auto` (issue 30): NVIDIA's phases 0-2 through the real CLI, capture, pipeline and
launcher on a fake 8x H100 node (dcgmi diag, nccl-tests all_reduce_perf, nvidia-smi --query-gpu); missing or broken
NVIDIA evidence is an error or a `thermal:` note, never a pass."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.test_validate_support import FAST
from upgrade_gate.cli.main import run
from upgrade_gate.cli.validate_cmds import resolve_vendor
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.probes import probe_catalogue
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.errors import UsageError
from upgrade_gate.fakenode import FakeNode
from upgrade_gate.fakenode.nvidia import build_nvidia_node, h100_node
from upgrade_gate.fakenode.nvidia_render import (
    render_nvlink,
    render_q_x,
    render_topo,
    write_stub_table,
    write_stub_tool,
)
from upgrade_gate.model import NodeName, PhaseStatus, Snapshot, replace
from upgrade_gate.parse.nvidia_smi_query import ARGV as QUERY_ARGV
from upgrade_gate.parse.rccl_tests import parse_rccl_tests
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import default_config
from upgrade_gate.validate.launcher import LocalLauncher
from upgrade_gate.validate.phase import PhaseContext
from upgrade_gate.validate.phases import (
    AcceptancePhase,
    DcgmAcceptancePhase,
    EligibilityPhase,
    MeshPhase,
    NvidiaMeshPhase,
    select_phases,
)
from upgrade_gate.vendors import AMD, NVIDIA

NODE = "gpu-node-01"


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "cvf.yaml"
    path.write_text(yaml.safe_dump({**FAST, "UPGRADE_GATE_SAMPLES": "1"}), encoding="utf-8")
    return path


def _node(tmp_path: Path) -> FakeNode:
    return build_nvidia_node(tmp_path / NODE, h100_node(NODE, seed=1))


def _validate(node: FakeNode, config: Path, monkeypatch: pytest.MonkeyPatch, *extra: str) -> int:
    monkeypatch.setenv("PATH", str(node.bin_dir))
    args = ["validate", "--node", NODE, "--host-root", str(node.host_root), "--config", str(config), "--json"]
    return run([*args, "--phases", "0-2", *extra])


def _phases(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    doc = json.loads(capsys.readouterr().out)
    phases: list[dict[str, object]] = doc["phases"]
    return phases


def _thermal(phase: dict[str, object]) -> list[dict[str, object]]:
    measurements = phase["measurements"]
    assert isinstance(measurements, list)
    return [m for m in measurements if str(m["key"]).startswith("thermal/")]


@pytest.mark.parametrize("flag", [("--vendor", "nvidia"), ()], ids=["--vendor nvidia", "auto"])
def test_validate_vendor_nvidia_runs_dcgmi_and_nccl_tests_on_a_healthy_h100_node(
    tmp_path: Path, config_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flag: tuple
) -> None:
    assert _validate(_node(tmp_path), config_file, monkeypatch, *flag) == 0
    phases = _phases(capsys)
    assert [(p["phase"], p["status"]) for p in phases] == [(0, "passed"), (1, "passed"), (2, "passed")]
    assert phases[1]["annotations"] == {"amd.com/gpu-hw-acceptance-dcgm-version": "3.3.3"}
    thermal = _thermal(phases[2])
    gpu0 = next(m for m in thermal if m["key"] == "thermal/gpu0/temp_c_max")
    assert gpu0["settings"]["tool"] == " ".join(QUERY_ARGV)  # type: ignore[index]
    assert gpu0["settings"]["sensor"] == "gpu"  # type: ignore[index]
    assert gpu0["settings"]["bdf"] == "0000:1b:00.0"  # type: ignore[index]
    assert {m["key"] for m in thermal} >= {f"thermal/gpu{i}/power_w_mean" for i in range(8)}
    assert not [r for r in phases[2]["reasons"] if str(r).startswith("thermal:")]  # type: ignore[attr-defined]


def test_validate_vendor_nvidia_without_the_nvidia_smi_query_notes_missing_thermal_evidence(
    tmp_path: Path, config_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = _node(tmp_path)
    spec = h100_node(NODE, seed=1)  # an nvidia-smi that answers the capture's probes, not the query
    write_stub_tool(
        node,
        "nvidia-smi",
        {("-q", "-x"): render_q_x(spec), ("topo", "-m"): render_topo(spec), ("nvlink", "-s"): render_nvlink(spec)},
    )
    _validate(node, config_file, monkeypatch, "--vendor", "nvidia")
    mesh = _phases(capsys)[2]
    assert _thermal(mesh) == []  # no reading recorded, so thermal.outlier sees missing evidence (blocks)
    notes = [str(r) for r in mesh["reasons"] if str(r).startswith("thermal:")]  # type: ignore[attr-defined]
    assert notes and notes[0].startswith("thermal: nvidia-smi failed (")


def test_validate_vendor_nvidia_missing_all_reduce_perf_is_an_error_exit_1(
    tmp_path: Path, config_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = _node(tmp_path)
    (node.bin_dir / "all_reduce_perf").unlink()
    assert _validate(node, config_file, monkeypatch, "--vendor", "nvidia") == 1
    mesh = _phases(capsys)[2]
    assert mesh["status"] == "error"
    assert "all_reduce_perf" in str(mesh["reason"])


def test_validate_vendor_nvidia_cut_nccl_tests_output_is_an_error(
    tmp_path: Path, config_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = _node(tmp_path)
    real = Path(__file__).parent / "fixtures" / "rccl-tests" / "nccl-tests-2.18.3-16rank-2node-allreduce-cx8.txt"
    cut = real.read_text(encoding="utf-8").split("# Out of bounds")[0]  # no footer: the run did not finish
    response = {"match": "flags", "flags": ["-b"], "stdout": cut}
    write_stub_table(node, "all_reduce_perf", {"responses": [response], "fault": None})
    assert _validate(node, config_file, monkeypatch, "--vendor", "nvidia") == 1
    mesh = _phases(capsys)[2]
    assert mesh["status"] == "error"
    assert "Avg bus bandwidth" in str(mesh["reason"]), mesh["reason"]


def test_validate_vendor_dry_run_names_nvidia_commands(
    config_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["validate", "--dry-run", "--node", NODE, "--config", str(config_file), "--vendor", "nvidia"]) == 0
    out = capsys.readouterr().out
    assert "vendor nvidia: NVIDIA probes and phases 1-2\n" in out
    assert "  dcgmi diag -r 2, timeout 600s" in out
    assert f"  thermal: {' '.join(QUERY_ARGV)} before, every 20s" in out
    assert "amd-smi" not in out and "rvs" not in out


def test_validate_vendor_unknown_exits_2(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["validate", "--dry-run", "--node", NODE, "--config", str(config_file), "--vendor", "intel"]) == 2
    assert "--vendor intel: expected one of amd, nvidia" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("tools", "expected"),
    [(("nvidia-smi",), "nvidia"), (("nvidia-smi", "rocminfo"), "amd"), (("rocminfo",), "amd"), ((), "amd")],
)
def test_validate_vendor_auto_is_nvidia_only_with_nvidia_smi_and_no_rocminfo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tools: tuple[str, ...], expected: str
) -> None:
    for tool in tools:
        path = tmp_path / tool
        path.write_text("#!/bin/sh\n", encoding="utf-8")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert resolve_vendor("auto").name == expected
    assert resolve_vendor("amd") is AMD
    with pytest.raises(UsageError):
        resolve_vendor("NVIDIA")


def test_validate_vendor_selects_phases_1_and_2_by_vendor() -> None:
    nvidia = select_phases(frozenset(range(8)), NVIDIA)
    amd = select_phases(frozenset(range(8)))
    assert [p.number for p in nvidia] == [p.number for p in amd] == list(range(8))
    assert isinstance(nvidia[1], DcgmAcceptancePhase) and isinstance(nvidia[2], NvidiaMeshPhase)
    assert isinstance(amd[1], AcceptancePhase) and type(amd[2]) is MeshPhase
    assert [(p.name, p.label_key) for p in nvidia] == [(p.name, p.label_key) for p in amd]


# --------------------------------------------------------------------------- phase 0 in the vendor's words


def _nvidia_snapshot(tmp_path: Path) -> Snapshot:
    node = _node(tmp_path)
    bundle = capture(
        LocalRunner(env=node.env(os.environ)),
        node=NODE,
        host_root=node.host_root,
        probes=probe_catalogue(node.host_root, vendor=NVIDIA),
    )
    return build_snapshot(bundle)


def _phase0(snapshot: Snapshot) -> tuple[PhaseStatus, str | None]:
    ctx = PhaseContext(
        node=NodeName(NODE), config=default_config(), launcher=LocalLauncher({NODE: None}), snapshot=snapshot
    )
    result = EligibilityPhase().run(ctx)
    return result.status, result.reason


def test_validate_vendor_phase0_no_gpu_in_nvidia_words(tmp_path: Path) -> None:
    snapshot = _nvidia_snapshot(tmp_path)
    status, reason = _phase0(replace(snapshot, gpus=()))
    assert status is PhaseStatus.FAILED
    assert reason == (
        "no NVIDIA GPU found on the node (nvidia-smi -q -x lists none; check `nvidia-smi` and `lsmod | grep nvidia`)"
    )
    broken = tuple(
        replace(p, ok=False, reason="nvidia-smi could not communicate with the NVIDIA driver")
        if p.name == "nvidia_smi"
        else p
        for p in snapshot.probes
    )
    status, reason = _phase0(replace(snapshot, gpus=(), probes=broken))
    assert status is PhaseStatus.ERROR
    assert reason == "no GPU evidence: nvidia_smi: nvidia-smi could not communicate with the NVIDIA driver"


def test_validate_vendor_phase0_amd_words_name_the_cvf_label() -> None:
    assert f"{cvf.NFD_AMD_GPU}=true" in AMD.no_gpu
    assert AMD.gpu_evidence == ("rocminfo", "amdsmi_list") and NVIDIA.gpu_evidence == ("nvidia_smi",)


def test_fake_nvidia_all_reduce_perf_prints_the_nccl_tests_header(tmp_path: Path) -> None:
    import subprocess

    node = _node(tmp_path)
    argv = ["all_reduce_perf", "-b", "1K", "-e", "8K", "-f", "2", "-g", "8", "-n", "2", "-w", "1"]
    out = subprocess.run(argv, env=node.env(os.environ), capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[:2] == [
        "# nccl-tests version 2.18.3 nccl-headers=23003 nccl-library=23003",
        "# Collective test starting: all_reduce_perf",
    ]
    assert "rccl-tests: Version" not in out and "NCCL version 2.30.3+cuda13.0" in lines
    assert lines[-2:] == ["# Collective test concluded: all_reduce_perf", "#"]
    result = parse_rccl_tests(out)
    assert result.ranks == 8 and result.devices[0].bdf == "0000:1b:00.0"
