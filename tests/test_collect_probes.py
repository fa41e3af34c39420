"""The probe catalogue: the docs/PROBES.md contract (generated, checked for drift here), glob expansion
under a host root, no-match records."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

from upgrade_gate.collect.probes import (
    DEFAULT_TIMEOUT_S,
    GREP_ARGV,
    READLINK_ARGV,
    probe_catalogue,
    probe_names,
)

# docs/PROBES.md, verbatim: name -> (argv without the host-expanded files, parser key).
PINNED = {
    "rocminfo": (("rocminfo",), "rocminfo"),
    "amdsmi_version": (("amd-smi", "version", "--json"), "amd-smi-version"),
    "amdsmi_list": (("amd-smi", "list", "--json"), "amd-smi-list"),
    "amdsmi_static": (("amd-smi", "static", "--json"), "amd-smi-static"),
    "amdsmi_firmware": (("amd-smi", "firmware", "--json"), "amd-smi-firmware"),
    "amdsmi_topology": (("amd-smi", "topology", "--json"), "amd-smi-topology"),
    "rocmsmi": (
        (
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
        "rocm-smi",
    ),
    "rocmsmi_topo": (("rocm-smi", "--showtopo", "--json"), "rocm-smi"),
    "lspci": (("lspci", "-D", "-nn", "-vvv"), "lspci"),
    "ibv_devinfo": (("ibv_devinfo", "-v"), "ibv_devinfo"),
    "rdma_link": (("rdma", "link", "show"), "rdma-link"),
    "sysfs_sriov": (GREP_ARGV, "sysfs-grep"),
    "sysfs_ib": (GREP_ARGV, "sysfs-grep"),
    "driver_version": (GREP_ARGV, "sysfs-grep"),
    "rocm_version": (GREP_ARGV, "sysfs-grep"),
    "rocm_libs": (("upgrade-gate", "abi-list"), "abi-list"),
    "kernel": (("uname", "-r"), "uname-r"),
    "dmesg": (("dmesg",), "dmesg"),
    "bios": (GREP_ARGV, "host-files"),
    "kernel_cmdline": (GREP_ARGV, "host-files"),
    "os_release": (GREP_ARGV, "host-files"),
    "rccl_library": (READLINK_ARGV, "readlink-rccl"),
}


def _host(tmp_path: Path) -> Path:
    """A fake host root: two PFs behind /sys/bus/pci/devices symlinks, one IB device, versions."""
    root = tmp_path / "host"
    for bdf, total in (("0000:c5:00.0", "16"), ("0000:05:00.0", "8")):
        real = root / "sys/devices/pci0000:00" / bdf
        real.mkdir(parents=True)
        (real / "sriov_numvfs").write_text("4\n")
        (real / "sriov_totalvfs").write_text(f"{total}\n")
        links = root / "sys/bus/pci/devices"
        links.mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../../devices/pci0000:00/{bdf}", links / bdf)
    ib = root / "sys/devices/pci0000:00/0000:c5:00.0/infiniband/mlx5_0"  # reached via the PF's symlink
    ib.mkdir(parents=True)
    (ib / "fw_ver").write_text("28.39.1002\n")
    (root / "sys/module/amdgpu").mkdir(parents=True)
    (root / "sys/module/amdgpu/version").write_text("6.8.5\n")
    return root


def test_catalogue_matches_probes_md_contract(tmp_path: Path) -> None:
    probes = probe_catalogue(tmp_path)
    assert tuple(p.name for p in probes) == tuple(PINNED) == probe_names()
    for probe in probes:
        argv, parser = PINNED[probe.name]
        assert probe.argv[: len(argv)] == argv, probe.name
        assert probe.parser == parser, probe.name
        assert probe.timeout_s == (300.0 if probe.name == "rocm_libs" else DEFAULT_TIMEOUT_S), probe.name


def test_catalogue_fallbacks_are_explicit(tmp_path: Path) -> None:
    by_name = {p.name: p for p in probe_catalogue(tmp_path)}
    assert by_name["rocmsmi"].fallback_for == (
        "amdsmi_list",
        "amdsmi_static",
        "amdsmi_firmware",
        "amdsmi_topology",
    )
    assert by_name["rocmsmi_topo"].fallback_for == ("amdsmi_topology",)
    assert not by_name["rocmsmi"].required and not by_name["rocmsmi_topo"].required
    assert all(p.fallback_for == () for n, p in by_name.items() if not n.startswith("rocmsmi"))


def test_catalogue_expands_globs_sorted_under_host_root(tmp_path: Path) -> None:
    root = _host(tmp_path)
    by_name = {p.name: p for p in probe_catalogue(root)}
    devices = f"{root}/sys/bus/pci/devices"
    assert by_name["sysfs_sriov"].argv == (
        *GREP_ARGV,
        f"{devices}/0000:05:00.0/sriov_numvfs",
        f"{devices}/0000:c5:00.0/sriov_numvfs",
        f"{devices}/0000:05:00.0/sriov_totalvfs",
        f"{devices}/0000:c5:00.0/sriov_totalvfs",
    )
    assert by_name["sysfs_ib"].argv == (*GREP_ARGV, f"{root}/sys/bus/pci/devices/0000:c5:00.0/infiniband/mlx5_0/fw_ver")
    assert by_name["driver_version"].argv == (*GREP_ARGV, f"{root}/sys/module/amdgpu/version")
    assert by_name["sysfs_sriov"].skip_reason is None


def test_catalogue_glob_without_match_is_a_skip_with_reason(tmp_path: Path) -> None:
    root = _host(tmp_path)
    rocm = next(p for p in probe_catalogue(root) if p.name == "rocm_version")
    assert rocm.argv == GREP_ARGV
    assert rocm.skip_reason == f"no files matched {root}/opt/rocm/.info/version"


def test_catalogue_relative_host_root_becomes_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _host(tmp_path)
    monkeypatch.chdir(tmp_path)
    probe = next(p for p in probe_catalogue(Path("host")) if p.name == "sysfs_ib")
    assert probe.argv[-1] == f"{root}/sys/bus/pci/devices/0000:c5:00.0/infiniband/mlx5_0/fw_ver"


def test_catalogue_timeout_override_applies_to_every_probe(tmp_path: Path) -> None:
    assert {p.timeout_s for p in probe_catalogue(tmp_path, timeout_s=2.5)} == {2.5}


def test_host_fact_probes_read_dmi_cmdline_os_release_and_the_rccl_soname(tmp_path: Path) -> None:
    root = tmp_path / "host"
    dmi = root / "sys/devices/virtual/dmi/id"
    dmi.mkdir(parents=True)
    for name, value in (("bios_vendor", "AMI"), ("bios_version", "2.1"), ("bios_date", "03/15/2024")):
        (dmi / name).write_text(value + "\n")
    (root / "sys/class/dmi").mkdir(parents=True)
    os.symlink("../../devices/virtual/dmi/id", root / "sys/class/dmi/id")  # as on a real host
    (root / "proc").mkdir()
    (root / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz ro iommu=pt\n")
    (root / "usr/lib").mkdir(parents=True)
    (root / "usr/lib/os-release").write_text("ID=ubuntu\n")
    (root / "etc").mkdir()
    os.symlink("../usr/lib/os-release", root / "etc/os-release")
    lib = root / "opt/rocm/lib"
    lib.mkdir(parents=True)
    (lib / "librccl.so.1.0.70200").write_bytes(b"")
    os.symlink("librccl.so.1.0.70200", lib / "librccl.so.1")
    probes = {p.name: p for p in probe_catalogue(root)}
    assert probes["bios"].argv[3:] == tuple(f"{root}/sys/class/dmi/id/bios_{f}" for f in ("vendor", "version", "date"))
    assert probes["kernel_cmdline"].argv[3:] == (f"{root}/proc/cmdline",)
    assert probes["os_release"].argv[3:] == (f"{root}/etc/os-release", f"{root}/usr/lib/os-release")
    assert probes["rccl_library"].argv == (*READLINK_ARGV, f"{root}/opt/rocm/lib/librccl.so.1")
    assert all(probes[n].required and probes[n].skip_reason is None for n in ("bios", "os_release", "rccl_library"))


def test_host_fact_probes_without_files_are_skipped_with_the_reason(tmp_path: Path) -> None:
    probes = {p.name: p for p in probe_catalogue(tmp_path)}
    assert probes["bios"].skip_reason is not None and "sys/class/dmi/id/bios_version" in probes["bios"].skip_reason
    assert probes["rccl_library"].skip_reason == f"no files matched {tmp_path}/opt/rocm/lib/librccl.so.1"


def test_absolute_symlinks_under_a_host_root_are_followed_inside_it(tmp_path: Path) -> None:
    # ROCm's packages install /opt/rocm -> /etc/alternatives/rocm -> /opt/rocm-6.2.0 (absolute links):
    # read through --host-root /host in a capture pod, they must resolve inside the host root.
    root = tmp_path / "host"
    real = root / "opt" / "rocm-6.2.0"
    (real / ".info").mkdir(parents=True)
    (real / ".info" / "version").write_text("6.2.0-66\n")
    (real / "lib").mkdir()
    (real / "lib" / "librccl.so.1.0.60200").write_bytes(b"")
    (real / "lib" / "librccl.so.1").symlink_to("librccl.so.1.0.60200")
    (root / "etc" / "alternatives").mkdir(parents=True)
    (root / "etc" / "alternatives" / "rocm").symlink_to("/opt/rocm-6.2.0")
    (root / "opt" / "rocm").symlink_to("/etc/alternatives/rocm")
    by_name = {p.name: p for p in probe_catalogue(root)}
    assert by_name["rocm_version"].skip_reason is None
    assert by_name["rocm_version"].argv[-1] == str(real / ".info" / "version")
    assert by_name["rocm_libs"].argv[-1] == str(real / "lib")
    # the soname link is resolved inside the root as well: readlink -f then names the same real file
    assert by_name["rccl_library"].argv[-1] == str(real / "lib" / "librccl.so.1.0.60200")


def test_a_symlink_loop_under_a_host_root_matches_nothing(tmp_path: Path) -> None:
    root = tmp_path / "host"
    (root / "opt").mkdir(parents=True)
    (root / "opt" / "rocm").symlink_to("/opt/rocm")
    rocm = next(p for p in probe_catalogue(root) if p.name == "rocm_version")
    assert rocm.skip_reason is not None


REPO = Path(__file__).resolve().parent.parent


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_probes_doc", REPO / "tools" / "gen_probes_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_probes_doc_is_generated_from_the_catalogue_and_up_to_date() -> None:
    generated = _generator().render()
    current = (REPO / "docs" / "PROBES.md").read_text(encoding="utf-8")
    assert current == generated, "docs/PROBES.md is stale: run python3 tools/gen_probes_doc.py"
    for name, (argv, parser) in PINNED.items():
        assert f"| `{name}` |" in current and f"`{parser}`" in current, name
        if argv[0] not in ("grep", "readlink", "upgrade-gate"):
            assert f"`{' '.join(argv)}`" in current, name


def test_probes_doc_check_mode_agrees(tmp_path: Path) -> None:
    gen = _generator()
    out = tmp_path / "PROBES.md"
    assert gen.main(["--check", "--out", str(out)]) == 1
    assert gen.main(["--out", str(out)]) == 0
    assert gen.main(["--check", "--out", str(out)]) == 0
