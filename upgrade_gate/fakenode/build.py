"""Write a fake node to disk: fake executables, their response tables and a host-root tree.

Layout under `root`:
- `bin/`: one stub per tool (rocminfo, amd-smi, rocm-smi, lspci, ibv_devinfo, rdma, uname, dmesg,
  rvs, agfhc, all_reduce_perf, all_gather_perf, ib_write_bw, mpirun) and a link to the host's real
  `grep` (file-read probes run `grep -H .` over the host-root tree);
- `lib/_replay/`: a copy of `upgrade_gate.fakenode._replay`, the stdlib-only code the stubs run;
- `replay/<tool>.marshal`: what each tool answers (see `_replay.main`; `<tool>.json` is the same table
  for people, the tools read the marshal form because importing json costs start-up time);
  `replay/runs/` counts runs;
- `host/`: the sysfs and /opt files the probes read with `--host-root`: `sys/devices/pci0000:00/<bdf>`
  per GPU and NIC (NIC PFs carry `sriov_numvfs` / `sriov_totalvfs` and `infiniband/<dev>/fw_ver`),
  `sys/bus/pci/devices/<bdf>` and `sys/class/infiniband/<dev>` as relative symlinks into it like on a
  real host, `sys/module/amdgpu/version`, `opt/rocm/.info/version`, and the host facts
  (`sys/class/dmi/id/bios_*`, `proc/cmdline`, `etc/os-release`, `opt/rocm/lib/librccl.so.1`).

Design decisions:
- The stub's shebang is the current `sys.executable` with `-I -S` (isolated, no site): a fake tool
  starts in milliseconds and never imports the project or its dependencies.
- `FakeNode.env` puts `bin/` on PATH *alone*: a tool removed by a MISSING fault is then really missing
  even on a machine that has one (uname, dmesg, rdma are on most hosts). Everything a probe or phase
  needs is in `bin/` (grep is linked in); the stubs themselves need no PATH.
- Building twice into the same root replaces the previous node (the bin and replay dirs are rewritten).
"""

from __future__ import annotations

import json
import marshal
import os
import shutil
import stat
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from upgrade_gate.collect.probes import CATALOGUE
from upgrade_gate.fakenode import render_gpu, render_host, render_thermal, render_util, render_validation
from upgrade_gate.fakenode.faults import FaultKind, Faults
from upgrade_gate.fakenode.spec import NicSpec, NodeSpec
from upgrade_gate.fakenode.templates import load_json_template, load_template
from upgrade_gate.fakenode.workload import workload_table, write_torchrun
from upgrade_gate.parse.bdf import PciAddress

TOOLS = (
    "rocminfo",
    "amd-smi",
    "rocm-smi",
    "lspci",
    "ibv_devinfo",
    "rdma",
    "uname",
    "dmesg",
    "rvs",
    "agfhc",
    "all_reduce_perf",
    "all_gather_perf",
    "ib_write_bw",
    "mpirun",
    "torchrun",
    "grep",
    "readlink",
    "env",
)
"""Every executable a fake node can have ("grep", "readlink" and "env" are the host's real ones; "torchrun"
is the real PyTorch launcher on the node's imagined GPUs, see fakenode.workload)."""

_HOST_TOOLS = ("grep", "readlink", "env")  # the host's binaries: file-read probes, the workload phases' env

ROCMSMI_ARGV = next(spec.argv[1:] for spec in CATALOGUE if spec.name == "rocmsmi")
"""The options of the capture's `rocmsmi` probe (the catalogue's), which the fake rocm-smi answers."""

_REPLAY_PACKAGE = Path(__file__).parent / "_replay"


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeNode:
    """A fake node on disk."""

    spec: NodeSpec
    faults: Faults
    root: Path
    bin_dir: Path
    host_root: Path

    def env(self, base_env: Mapping[str, str]) -> dict[str, str]:
        """`base_env` with PATH set to the fake bin dir alone (see the module docstring)."""
        env = dict(base_env)
        env["PATH"] = str(self.bin_dir)
        return env

    @property
    def tools(self) -> tuple[str, ...]:
        """The executables installed (every tool but the MISSING ones)."""
        return tuple(t for t in TOOLS if (self.bin_dir / t).exists())


def build_fake_node(root: Path, spec: NodeSpec, faults: Faults = Faults()) -> FakeNode:
    """Write `spec` (with `faults`) under `root` and return the node."""
    unknown = set(faults.tools) - set(TOOLS)
    if unknown:
        raise ValueError(f"faults for unknown tools {sorted(unknown)}; known: {', '.join(TOOLS)}")
    for host_tool in _HOST_TOOLS:
        host_fault = faults.tools.get(host_tool)
        if host_fault is not None and host_fault.kind is not FaultKind.MISSING:
            raise ValueError(f"{host_tool} is the host's real one; only a MISSING fault applies to it")
    root = Path(os.path.abspath(root))
    bin_dir, data_dir, lib_dir, host_root = root / "bin", root / "replay", root / "lib", root / "host"
    for path in (bin_dir, data_dir, lib_dir, host_root):
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
    shutil.copytree(_REPLAY_PACKAGE, lib_dir / "_replay", ignore=shutil.ignore_patterns("__pycache__"))
    tables = response_tables(spec)
    for tool in TOOLS:
        if tool in faults.missing():
            continue
        if tool in _HOST_TOOLS:
            real = shutil.which(tool)
            if real is None:
                raise RuntimeError(f"the host has no {tool}; file-read probes of a fake node need it")
            (bin_dir / tool).symlink_to(real)
            continue
        table = dict(tables[tool])
        fault = faults.tools.get(tool)
        table["fault"] = fault.as_json() if fault is not None else None
        if tool == "torchrun":
            write_torchrun(bin_dir / tool, table, lib_dir, data_dir)
            continue
        (data_dir / f"{tool}.marshal").write_bytes(marshal.dumps(table))
        (data_dir / f"{tool}.json").write_text(json.dumps(table, indent=1), encoding="utf-8")
        _write_stub(bin_dir / tool, tool, lib_dir, data_dir)
    _write_host_tree(host_root, spec)
    _write_self(bin_dir / "upgrade-gate")
    return FakeNode(spec=spec, faults=faults, root=root, bin_dir=bin_dir, host_root=host_root)


def _write_self(path: Path) -> None:
    """upgrade-gate itself, as a node has it installed: the `rocm_libs` probe runs its own ELF reader
    (`upgrade-gate abi-list`) on the node's ROCm library folder. It is the real tool, not a replay."""
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m upgrade_gate "$@"\n', encoding="utf-8")
    path.chmod(0o755)


def response_tables(spec: NodeSpec) -> dict[str, dict[str, Any]]:
    """Every tool's response table (without faults) for `spec`."""
    rvs_list = render_validation.render_rvs_list(spec)
    gst = render_validation.render_rvs_gst(spec)
    agfhc = render_validation.render_agfhc(spec)
    rccl = _rccl_params(spec)
    return {
        "rocminfo": _static(((), render_gpu.render_rocminfo(spec))),
        "amd-smi": _static(
            (("version", "--json"), render_gpu.render_amdsmi_version(spec)),
            (("list", "--json"), render_gpu.render_amdsmi_list(spec)),
            (("static", "--json"), render_gpu.render_amdsmi_static(spec)),
            (("firmware", "--json"), render_gpu.render_amdsmi_firmware(spec)),
            (("topology", "--json"), render_gpu.render_amdsmi_topology(spec)),
            (("monitor", "-p", "-t"), render_thermal.render_amdsmi_monitor(spec)),
            cycle=render_util.monitor_util_response(spec),
        ),
        "rocm-smi": _static(
            (ROCMSMI_ARGV, render_gpu.render_rocmsmi(spec)),
            (("--showtopo", "--json"), render_gpu.render_rocmsmi_topology(spec)),
            (("--showbus", "--showtemp", "--showpower", "--json"), render_thermal.render_rocmsmi_thermal(spec)),
        ),
        "lspci": _static((("-D", "-nn", "-vvv"), render_host.render_lspci(spec))),
        "ibv_devinfo": _static((("-v",), render_host.render_ibv_devinfo(spec))),
        "rdma": _static((("link", "show"), render_host.render_rdma_link(spec))),
        "uname": _static((("-r",), render_host.render_uname_r(spec))),
        "dmesg": _static(((), render_host.render_dmesg(spec))),
        "rvs": {
            "responses": [
                {"match": "exact", "argv": ["-g"], "stdout": rvs_list.stdout, "exit_code": rvs_list.exit_code},
                {"match": "flags", "flags": ["-c"], "stdout": gst.stdout, "exit_code": gst.exit_code},
            ]
        },
        "agfhc": {
            "responses": [{"match": "flags", "flags": ["-r"], "stdout": agfhc.stdout, "exit_code": agfhc.exit_code}]
        },
        "all_reduce_perf": {"dynamic": "rccl", "params": rccl},
        "all_gather_perf": {"dynamic": "rccl", "params": rccl},
        "mpirun": {"dynamic": "mpirun", "params": rccl},
        "ib_write_bw": {"dynamic": "ib_write_bw", "params": _perftest_params(spec)},
        "torchrun": workload_table(spec),
    }


def _static(*answers: tuple[tuple[str, ...], str], cycle: dict[str, Any] | None = None) -> dict[str, Any]:
    responses = [{"match": "exact", "argv": list(argv), "stdout": out} for argv, out in answers]
    return {"responses": responses + ([cycle] if cycle is not None else [])}


def _rccl_params(spec: NodeSpec) -> dict[str, Any]:
    mesh_text = load_template("rccl-tests-allreduce-mi300x-8gpu.txt")
    lines = mesh_text.splitlines()
    header = [
        line for line in lines if line.startswith("#") and ("out-of-place" in line or "(B)" in line or "redop" in line)
    ]
    trailer = [line for line in lines if line.startswith("# Errors") or line.startswith("# Out of bounds")]
    version = next(line for line in lines if line.startswith("rccl-tests: Version ")).split("Version ", 1)[1]
    profiles = {}
    for key, name, profile in (
        ("mesh", "rccl-tests-allreduce-mi300x-8gpu.txt", spec.mesh),
        ("cluster", "rccl-tests-allreduce-mi300x-2node.txt", spec.cluster),
    ):
        profiles[key] = {
            "times": _rccl_times(load_template(name)),
            "factor": profile.factor,
            "noise_pct": profile.noise_pct,
            "size_factors": [list(p) for p in profile.size_factors],
        }
    return {
        "hostname": spec.name,
        "seed": f"{spec.name}/{spec.seed}",
        "version": version,
        "table_header": header,
        "trailer": [*trailer, "# Avg bus bandwidth    : {{AVG}}", "#"],
        "gpus": [{"bdf_short": PciAddress.parse(g.bdf).slot_text, "name": g.market_name} for g in spec.enumerated_gpus],
        "profiles": profiles,
        "programs": ["all_reduce_perf", "all_gather_perf"],
    }


def _rccl_times(text: str) -> list[list[float]]:
    """(size, out-of-place us, in-place us) rows of an rccl-tests capture."""
    rows = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 13 and fields[0].isdigit():
            rows.append([float(fields[0]), float(fields[5]), float(fields[9])])
    return rows


def _perftest_params(spec: NodeSpec) -> dict[str, Any]:
    curve = load_json_template("perftest-ib_write_bw-curve.json")
    column = curve["columns"].index("bw_average")
    return {
        "seed": f"{spec.name}/{spec.seed}",
        "noise_pct": 0.3,
        "default_device": spec.nics[0].name if spec.nics else "",
        "devices": {
            nic.name: {
                "port_up": nic.port_up,
                "gbps": nic.write_bw_gbps,
                "gids": [raw.hex() for raw, _ in render_host.gid_table(nic)],
            }
            for nic in spec.nics
        },
        "curve": [[row[0], row[column]] for row in curve["rows"]],
        "gpus": [{"name": g.market_name, "bus": g.bus, "gfx": g.gfx_target} for g in spec.enumerated_gpus],
        "client": load_template("perftest-ib_write_bw-client.txt"),
        "server": load_template("perftest-ib_write_bw-server.txt"),
    }


def _write_stub(path: Path, tool: str, lib_dir: Path, data_dir: Path) -> None:
    path.write_text(
        f"#!{sys.executable} -IS\n"
        "import sys\n"
        f"sys.path.insert(0, {str(lib_dir)!r})\n"
        "from _replay.main import main\n"
        f"sys.exit(main({tool!r}, {str(data_dir)!r}))\n",
        encoding="utf-8",
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def write_pci_tree(host: Path, gpu_bdfs: Iterable[str], nics: Iterable[NicSpec]) -> None:
    """The sysfs PCI tree of a fake node, whatever its GPU vendor: one device folder and bus link per GPU
    function, and per NIC its PF with SR-IOV counts, firmware and its `class/infiniband` link."""
    devices = host / "sys" / "devices" / "pci0000:00"
    links = host / "sys" / "bus" / "pci" / "devices"
    classes = host / "sys" / "class" / "infiniband"
    for path in (devices, links, classes):
        path.mkdir(parents=True)
    for bdf in gpu_bdfs:
        (devices / bdf).mkdir()
        (links / bdf).symlink_to(Path("..", "..", "..", "devices", "pci0000:00", bdf))
    for nic in nics:
        pf = devices / nic.bdf
        pf.mkdir()
        (pf / "sriov_numvfs").write_text(f"{nic.sriov_numvfs}\n", encoding="utf-8")
        (pf / "sriov_totalvfs").write_text(f"{nic.sriov_totalvfs}\n", encoding="utf-8")
        ib = pf / "infiniband" / nic.name
        ib.mkdir(parents=True)
        (ib / "fw_ver").write_text(f"{nic.fw_ver}\n", encoding="utf-8")
        (links / nic.bdf).symlink_to(Path("..", "..", "..", "devices", "pci0000:00", nic.bdf))
        (classes / nic.name).symlink_to(Path("..", "..", "devices", "pci0000:00", nic.bdf, "infiniband", nic.name))


def _write_host_tree(host: Path, spec: NodeSpec) -> None:
    # a compute partition is no PCI function: sysfs has the device once
    write_pci_tree(host, (g.bdf for g in spec.gpus if g.physical), spec.nics)
    module = host / "sys" / "module" / "amdgpu"
    module.mkdir(parents=True)
    (module / "version").write_text(f"{spec.driver_version}\n", encoding="utf-8")
    info = host / "opt" / "rocm" / ".info"
    info.mkdir(parents=True)
    (info / "version").write_text(f"{spec.rocm_version}-{spec.rocm_build}\n", encoding="utf-8")
    render_host.write_host_facts(host, spec)
