"""A fake node answers every probe of docs/PROBES.md through LocalRunner, consistently across tools."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from upgrade_gate.collect.runner import CommandResult, LocalRunner
from upgrade_gate.fakenode import FakeNode, build_fake_node, faults, mi300x_node

TIMEOUT = 30.0

COMMAND_PROBES = {
    "rocminfo": ("rocminfo",),
    "amdsmi_version": ("amd-smi", "version", "--json"),
    "amdsmi_list": ("amd-smi", "list", "--json"),
    "amdsmi_static": ("amd-smi", "static", "--json"),
    "amdsmi_firmware": ("amd-smi", "firmware", "--json"),
    "amdsmi_topology": ("amd-smi", "topology", "--json"),
    "rocmsmi": (
        "rocm-smi",
        "--showproductname",
        "--showbus",
        "--showuniqueid",
        "--showserial",
        "--showfwinfo",
        "--showvbios",
        "--showdriverversion",
        "--json",
    ),
    "rocmsmi_topo": ("rocm-smi", "--showtopo", "--json"),
    "lspci": ("lspci", "-D", "-nn", "-vvv"),
    "ibv_devinfo": ("ibv_devinfo", "-v"),
    "rdma_link": ("rdma", "link", "show"),
    "kernel": ("uname", "-r"),
    "dmesg": ("dmesg",),
}
"""The command probes of docs/PROBES.md (name -> argv), copied from the contract, not imported."""

FILE_PROBES = {
    "sysfs_sriov": ("sys/bus/pci/devices/*/sriov_numvfs", "sys/bus/pci/devices/*/sriov_totalvfs"),
    "sysfs_ib": ("sys/class/infiniband/*/fw_ver",),
    "sysfs_ib_pf": ("sys/bus/pci/devices/*/infiniband/*/fw_ver",),  # the catalogue's PF-path form (2025-06)
    "driver_version": ("sys/module/amdgpu/version",),
    "rocm_version": ("opt/rocm/.info/version",),
}


def run_probes(node: FakeNode) -> dict[str, CommandResult]:
    """Every docs/PROBES.md probe on `node`, file reads as `grep -H .` over the host-root globs."""
    runner = LocalRunner(env=node.env(os.environ))
    results = {name: runner.run(argv, timeout=TIMEOUT) for name, argv in COMMAND_PROBES.items()}
    for name, globs in FILE_PROBES.items():
        files = [str(p) for g in globs for p in sorted(node.host_root.glob(g))]
        assert files, f"{name}: no file under the host root"
        results[name] = runner.run(("grep", "-H", ".", *files), timeout=TIMEOUT)
    return results


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> tuple[FakeNode, dict[str, CommandResult]]:
    node = build_fake_node(tmp_path_factory.mktemp("healthy"), mi300x_node("node-01", seed=1))
    return node, run_probes(node)


@pytest.fixture(scope="module")
def reversed_node(tmp_path_factory: pytest.TempPathFactory) -> tuple[FakeNode, dict[str, CommandResult]]:
    spec = faults.reverse_enumeration(mi300x_node("node-01", seed=1))
    node = build_fake_node(tmp_path_factory.mktemp("reversed"), spec)
    return node, run_probes(node)


def gpu_bdfs_by_tool(results: dict[str, CommandResult]) -> dict[str, list[str]]:
    """The GPU BDFs each probe lists, in the order it lists them."""
    out = results
    rocminfo = [
        f"0000:{int(b) >> 8:02x}:00.0" for b in re.findall(r"BDFID:\s+(\d+)", out["rocminfo"].stdout) if b != "0"
    ]
    return {
        "rocminfo": rocminfo,
        "amdsmi_list": [g["bdf"] for g in json.loads(out["amdsmi_list"].stdout)],
        "amdsmi_static": [g["bus"]["bdf"] for g in json.loads(out["amdsmi_static"].stdout)["gpu_data"]],
        "amdsmi_topology": [g["bdf"] for g in json.loads(out["amdsmi_topology"].stdout)],
        "rocmsmi": [c["PCI Bus"].lower() for k, c in json.loads(out["rocmsmi"].stdout).items() if k != "system"],
        "lspci": re.findall(r"^(\S+) Processing accelerators \[1200\]: .*\[1002:74a1\]$", out["lspci"].stdout, re.M),
    }


def test_fakenode_every_probe_succeeds_with_output(healthy: tuple[FakeNode, dict[str, CommandResult]]) -> None:
    _, results = healthy
    for name, result in results.items():
        assert result.ok, f"{name}: {result.failure_reason()}"
        assert result.stdout.strip(), name
        assert result.stderr == "", name


def test_fakenode_tools_list_the_same_gpus(healthy: tuple[FakeNode, dict[str, CommandResult]]) -> None:
    node, results = healthy
    bdfs = gpu_bdfs_by_tool(results)
    expected = [g.bdf for g in node.spec.gpus]
    assert expected == ["0000:05:00.0", "0000:15:00.0", "0000:65:00.0", "0000:75:00.0",
                        "0000:85:00.0", "0000:95:00.0", "0000:e5:00.0", "0000:f5:00.0"]  # fmt: skip
    for tool, listed in bdfs.items():
        assert listed == expected, tool


def test_fakenode_tools_agree_on_serials_and_unique_ids(healthy: tuple[FakeNode, dict[str, CommandResult]]) -> None:
    node, results = healthy
    serials = [g.serial for g in node.spec.gpus]
    uids = [g.unique_id for g in node.spec.gpus]
    assert len(set(serials)) == 8 and len(set(uids)) == 8
    static = json.loads(results["amdsmi_static"].stdout)["gpu_data"]
    rocmsmi = [c for k, c in json.loads(results["rocmsmi"].stdout).items() if k != "system"]
    assert [g["board"]["product_serial"] for g in static] == serials
    assert [c["Serial Number"] for c in rocmsmi] == serials
    assert [int(g["asic"]["asic_serial"], 16) for g in static] == uids
    assert [int(c["Unique ID"], 16) for c in rocmsmi] == uids
    assert [int(u, 16) for u in re.findall(r"Uuid:\s+GPU-([0-9a-f]{16})", results["rocminfo"].stdout)] == uids
    listed = [g["uuid"] for g in json.loads(results["amdsmi_list"].stdout)]
    assert [u.replace("-", "")[-12:] for u in listed] == [f"{uid & 0xFFFFFFFFFFFF:012x}" for uid in uids]


def test_fakenode_firmware_and_versions_agree(healthy: tuple[FakeNode, dict[str, CommandResult]]) -> None:
    node, results = healthy
    fw = json.loads(results["amdsmi_firmware"].stdout)
    assert {e["fw_id"]: e["fw_version"] for e in fw[0]["fw_list"]}["PSP_SOSDRV"] == "00.36.01.50"
    card0 = json.loads(results["rocmsmi"].stdout)["card0"]
    # Same number, each tool's real format: rocm-smi prints SOS as 0x%08x (rocm_smi.py showFwInfo),
    # amd-smi as hex digit pairs (amdsmi_interface.py amdsmi_get_fw_info).
    assert card0["SOS firmware version"] == "0x00360150"
    assert "Packet Processor uCode:: 166" in results["rocminfo"].stdout
    assert json.loads(results["amdsmi_version"].stdout)[0]["rocm_version"] == "6.1.3"
    assert results["rocm_version"].stdout.endswith("/opt/rocm/.info/version:6.1.3-122\n")
    assert results["driver_version"].stdout.endswith("/sys/module/amdgpu/version:6.7.0\n")
    assert "ROCk module version 6.7.0 is loaded" in results["rocminfo"].stdout
    assert results["kernel"].stdout == "5.15.0-119-generic\n"
    assert node.spec.driver_version == json.loads(results["rocmsmi"].stdout)["system"]["Driver version"]


def test_fakenode_nics_agree_across_tools(healthy: tuple[FakeNode, dict[str, CommandResult]]) -> None:
    node, results = healthy
    names = [n.name for n in node.spec.nics]
    assert re.findall(r"^hca_id:\t(\S+)$", results["ibv_devinfo"].stdout, re.M) == names
    assert re.findall(r"^link (\S+)/1 state ACTIVE physical_state LINK_UP netdev (\S+) $", results["rdma_link"].stdout,
                      re.M) == [(n.name, n.netdev) for n in node.spec.nics]  # fmt: skip
    fw = re.findall(r"infiniband/(ionic_\d+)/fw_ver:(\S+)", results["sysfs_ib"].stdout)
    assert fw == [(n, "1.117.1-a-63") for n in names]
    by_pf = re.findall(r"devices/(\S+)/infiniband/(ionic_\d+)/fw_ver:", results["sysfs_ib_pf"].stdout)
    assert by_pf == [(n.bdf, n.name) for n in node.spec.nics]
    nic_bdfs = re.findall(r"^(\S+) Ethernet controller \[0200\]: .*\[1dd8:1002\]$", results["lspci"].stdout, re.M)
    assert nic_bdfs == [n.bdf for n in node.spec.nics]
    sriov = re.findall(r"devices/(\S+)/sriov_(numvfs|totalvfs):(\d+)", results["sysfs_sriov"].stdout)
    assert sorted(sriov) == sorted([(b, "numvfs", "0") for b in nic_bdfs] + [(b, "totalvfs", "16") for b in nic_bdfs])
    assert results["ibv_devinfo"].stdout.count("RoCE v2") == 16


def test_fakenode_reversed_enumeration_changes_order_but_not_lspci(
    healthy: tuple[FakeNode, dict[str, CommandResult]], reversed_node: tuple[FakeNode, dict[str, CommandResult]]
) -> None:
    before, after = gpu_bdfs_by_tool(healthy[1]), gpu_bdfs_by_tool(reversed_node[1])
    for tool in ("rocminfo", "amdsmi_list", "amdsmi_static", "amdsmi_topology", "rocmsmi"):
        assert after[tool] == list(reversed(before[tool])), tool
    assert after["lspci"] == before["lspci"]
    assert healthy[1]["sysfs_sriov"].stdout.replace(str(healthy[0].root), "") == reversed_node[1][
        "sysfs_sriov"
    ].stdout.replace(str(reversed_node[0].root), "")


def test_fakenode_identity_is_deterministic_and_unique_per_node() -> None:
    a1, a2, b = mi300x_node("node-a", seed=7), mi300x_node("node-a", seed=7), mi300x_node("node-b", seed=7)
    assert a1 == a2
    assert not {g.serial for g in a1.gpus} & {g.serial for g in b.gpus}
    assert not {g.unique_id for g in a1.gpus} & {g.unique_id for g in b.gpus}
    assert [g.bdf for g in a1.gpus] == [g.bdf for g in b.gpus]


def test_fakenode_env_puts_only_the_fake_bin_dir_on_path(tmp_path: Path) -> None:
    node = build_fake_node(tmp_path, mi300x_node("n"))
    env = node.env({"PATH": "/usr/bin:/bin", "HOME": "/root"})
    assert env == {"PATH": str(node.bin_dir), "HOME": "/root"}
    assert set(node.tools) >= {"rocminfo", "amd-smi", "grep", "all_reduce_perf", "mpirun"}
