"""capture(): every probe through one runner, explicit fallbacks, failures as values, and the round trip
capture -> bundle (folder and tar.gz) -> load_bundle -> ReplayRunner."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from upgrade_gate.collect.bundle import NOT_IN_BUNDLE, Bundle, ReplayRunner, load_bundle, write_bundle
from upgrade_gate.collect.capture import capture, check_node_name
from upgrade_gate.collect.probes import Probe, probe_names
from upgrade_gate.collect.runner import CommandResult, LocalRunner
from upgrade_gate.errors import InputError
from upgrade_gate.model import replace

WHEN = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
SLEEP = shutil.which("sleep") or "/bin/sleep"

# Small stand-in outputs: capture does not parse, so any bytes do; the parsers are tested on the corpus.
DEFAULT_TOOLS = {
    "rocminfo": "echo 'ROCk module is loaded'",
    "amd-smi": 'echo "[{\\"gpu\\": 0, \\"cmd\\": \\"$1\\"}]"',
    "rocm-smi": 'echo \'{"card0": {"GPU ID": "0x74a1"}}\'',
    "lspci": "echo '0000:05:00.0 Processing accelerators [1200]: AMD [1002:74a1]'",
    "ibv_devinfo": "echo 'hca_id:\tmlx5_0'",
    "rdma": "echo 'link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev eth0'",
    "uname": "echo 6.8.0-45-generic",
    "dmesg": "echo '[    1.0] amdgpu: loaded'",
}


def fake_node(tmp_path: Path, **overrides: str | None) -> tuple[Path, Path]:
    """A folder of fake tools (plus the real grep) and a host root; an override of None removes a tool."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    grep = shutil.which("grep")
    assert grep is not None
    (bindir / "grep").symlink_to(grep)
    for name, body in {**DEFAULT_TOOLS, **overrides}.items():
        if body is None:
            continue
        path = bindir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    root = tmp_path / "host"
    (root / "sys/module/amdgpu").mkdir(parents=True)
    (root / "sys/module/amdgpu/version").write_text("6.8.5\n")
    (root / "opt/rocm/.info").mkdir(parents=True)
    (root / "opt/rocm/.info/version").write_text("6.2.0-66\n")
    return bindir, root


def local(bindir: Path) -> LocalRunner:
    """A LocalRunner that sees only the fake tools."""
    return LocalRunner(env={"PATH": str(bindir), "LC_ALL": "C"})


def _capture(tmp_path: Path, timeout: float | None = None, tools: dict[str, str | None] | None = None) -> Bundle:
    bindir, root = fake_node(tmp_path, **(tools or {}))
    return capture(local(bindir), node="gpu-node-1", host_root=root, timeout=timeout, taken_at=WHEN)


def test_capture_healthy_node_runs_every_primary_probe_and_no_fallback(tmp_path: Path) -> None:
    bundle = _capture(tmp_path)
    primaries = tuple(n for n in probe_names() if not n.startswith("rocmsmi"))
    assert tuple(r.name for r in bundle.records) == primaries
    assert bundle.node == "gpu-node-1" and bundle.taken_at == "2025-06-01T12:00:00Z"
    assert bundle.host_root == str(tmp_path / "host")
    bad = [(r.name, r.reason) for r in bundle.records if not r.ok]
    assert bad == []
    static = bundle.record("amdsmi_static")
    assert static is not None and static.result.stdout == '[{"gpu": 0, "cmd": "static"}]\n'
    driver = bundle.record("driver_version")
    assert driver is not None
    assert driver.result.stdout == f"{tmp_path}/host/sys/module/amdgpu/version:6.8.5\n"


def test_capture_amdsmi_failure_runs_rocmsmi_fallback_and_records_it(tmp_path: Path) -> None:
    amd_smi = 'if [ "$1" = static ]; then echo "amdsmi.AmdSmiLibraryException" >&2; exit 1; fi; echo "[]"'
    bundle = _capture(tmp_path, tools={"amd-smi": amd_smi})
    rocmsmi = bundle.record("rocmsmi")
    assert rocmsmi is not None and rocmsmi.ok
    assert rocmsmi.fallback_for == ("amdsmi_static",)
    assert rocmsmi.note == "stands in for amdsmi_static (amd-smi: exit code 1: amdsmi.AmdSmiLibraryException)"
    assert bundle.record("rocmsmi_topo") is None  # amdsmi_topology was fine


def test_capture_missing_amdsmi_falls_back_for_every_amdsmi_probe(tmp_path: Path) -> None:
    bundle = _capture(tmp_path, tools={"amd-smi": None})
    rocmsmi, topo = bundle.record("rocmsmi"), bundle.record("rocmsmi_topo")
    assert rocmsmi is not None and topo is not None
    assert rocmsmi.fallback_for == ("amdsmi_list", "amdsmi_static", "amdsmi_firmware", "amdsmi_topology")
    assert topo.fallback_for == ("amdsmi_topology",)
    version = bundle.record("amdsmi_version")
    assert version is not None and version.result.missing


def test_capture_failing_probes_are_recorded_never_raised(tmp_path: Path) -> None:
    bundle = _capture(
        tmp_path,
        timeout=0.5,
        tools={
            "rocminfo": f"exec {SLEEP} 300",
            "lspci": None,
            "ibv_devinfo": "echo 'Failed to get IB devices list' >&2; exit 255",
            "dmesg": r"printf '\001\377 not a kernel log \033[31m'",
        },
    )
    by_name = {r.name: r for r in bundle.records}
    assert by_name["rocminfo"].result.timed_out and not by_name["rocminfo"].ok
    assert by_name["lspci"].result.missing and by_name["lspci"].reason == "lspci: missing binary"
    assert by_name["ibv_devinfo"].result.returncode == 255
    assert by_name["ibv_devinfo"].reason == "ibv_devinfo: exit code 255: Failed to get IB devices list"
    assert by_name["dmesg"].ok and by_name["dmesg"].result.stdout == "\x01\ufffd not a kernel log \x1b[31m"
    assert {r.timeout_s for r in bundle.records} == {0.5}


def test_capture_unexecutable_tool_is_recorded_not_raised(tmp_path: Path) -> None:
    bindir, root = fake_node(tmp_path)
    (bindir / "rocminfo").write_bytes(b"\x7fELF-not-really")  # execve: ENOEXEC
    bundle = capture(local(bindir), node="n1", host_root=root, taken_at=WHEN)
    record = bundle.record("rocminfo")
    assert record is not None and not record.ok and record.result.missing
    assert "Exec format error" in record.result.stderr


def test_capture_glob_without_match_is_ok_empty_with_reason(tmp_path: Path) -> None:
    bundle = _capture(tmp_path)
    ib = bundle.record("sysfs_ib")
    assert ib is not None and ib.ok and ib.result.stdout == ""
    assert ib.reason == f"no files matched {tmp_path}/host/sys/bus/pci/devices/*/infiniband/*/fw_ver"


def test_capture_output_check_rejection_triggers_fallback(tmp_path: Path) -> None:
    bindir, root = fake_node(tmp_path)

    def check(probe: Probe, result: CommandResult) -> str | None:
        return "amd-smi-topology: not JSON at line 1" if probe.name == "amdsmi_topology" else None

    bundle = capture(local(bindir), node="n1", host_root=root, output_check=check, taken_at=WHEN)
    topology, topo = bundle.record("amdsmi_topology"), bundle.record("rocmsmi_topo")
    assert topology is not None and topology.ok
    assert topology.note == "output unusable: amd-smi-topology: not JSON at line 1"
    assert topo is not None and topo.fallback_for == ("amdsmi_topology",)
    rocmsmi = bundle.record("rocmsmi")
    assert rocmsmi is not None and rocmsmi.fallback_for == ("amdsmi_topology",)


@pytest.mark.parametrize("name", ["GPU-Node", "node_1", "-node", "node-", "a" * 254, "", "a..b"])
def test_capture_rejects_non_dns1123_node_name(tmp_path: Path, name: str) -> None:
    bindir, root = fake_node(tmp_path)
    with pytest.raises(InputError, match="not a DNS-1123 name"):
        capture(local(bindir), node=name, host_root=root)


def test_check_node_name_accepts_dns1123_subdomains() -> None:
    assert check_node_name("gpu-01.rack-3.example") == "gpu-01.rack-3.example"


@pytest.mark.parametrize("out_name", ["bundle", "bundle.tar.gz", "bundle.tgz"])
def test_bundle_round_trip_gives_identical_results(tmp_path: Path, out_name: str) -> None:
    bundle = _capture(tmp_path, tools={"amd-smi": None, "dmesg": r"printf 'a\r\nb\n\342\204\242 \377'"})
    out = write_bundle(bundle, tmp_path / "out" / out_name)
    loaded = load_bundle(out)
    assert loaded == bundle
    replay = ReplayRunner(loaded)
    for record in bundle.records:
        assert replay.run(record.result.argv, timeout=1) == record.result


def test_replay_capture_reproduces_the_bundle(tmp_path: Path) -> None:
    bundle = _capture(tmp_path, tools={"amd-smi": 'if [ "$1" = firmware ]; then exit 3; fi; echo "[]"'})
    loaded = load_bundle(write_bundle(bundle, tmp_path / "b.tar.gz"))
    again = capture(
        ReplayRunner(loaded),
        node=loaded.node,
        host_root=Path(loaded.host_root),
        probes=loaded.probes(),
        taken_at=WHEN,
    )
    assert again == bundle


def test_replay_runner_unknown_argv_is_missing_not_in_bundle(tmp_path: Path) -> None:
    result = ReplayRunner(_capture(tmp_path)).run(["rocm-smi", "--showall"], timeout=1)
    assert result.missing and not result.ok and result.stderr == NOT_IN_BUNDLE
    assert result.argv == ("rocm-smi", "--showall")


def test_tarball_is_reproducible(tmp_path: Path) -> None:
    bundle = _capture(tmp_path)
    first = write_bundle(bundle, tmp_path / "a.tar.gz").read_bytes()
    second = write_bundle(replace(bundle), tmp_path / "b.tar.gz").read_bytes()
    assert first == second
