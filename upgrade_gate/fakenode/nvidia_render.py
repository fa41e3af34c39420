"""What the fake NVIDIA node's tools print (formats and sources: `fakenode.nvidia`'s docstring)."""

from __future__ import annotations

import json
import marshal
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from upgrade_gate.fakenode.build import _rccl_params, _write_stub
from upgrade_gate.fakenode.render_host import _lspci_block
from upgrade_gate.fakenode.templates import fill, load_template
from upgrade_gate.parse.bdf import PciAddress

if TYPE_CHECKING:
    from upgrade_gate.fakenode.build import FakeNode
    from upgrade_gate.fakenode.nvidia import NvidiaGpuSpec, NvidiaNodeSpec

_NVIDIA_VENDOR = "NVIDIA Corporation"
_SUBSYSTEM_ID = 0x16C1  # HGX H100 baseboard subsystem, printed as pci_sub_system_id "16C110DE"


def render_q_x(spec: NvidiaNodeSpec) -> str:
    """`nvidia-smi -q -x`: the driver facts, then one `<gpu>` per GPU in nvidia-smi's order."""
    head = fill(
        load_template("nvidia-smi-q-x-header.txt"),
        {
            "TIMESTAMP": spec.timestamp,
            "DRIVER": spec.driver.version,
            "CUDA": spec.driver.cuda,
            "ATTACHED": len(spec.gpus),
        },
    )
    blocks = [
        _gpu_block(gpu, minor, spec, pending=minor in spec.remap_pending_gpus)
        for minor, gpu in enumerate(spec.enumerated)
    ]
    return head + "".join(blocks) + load_template("nvidia-smi-q-x-footer.txt")


def _gpu_block(gpu: NvidiaGpuSpec, minor: int, spec: NvidiaNodeSpec, *, pending: bool) -> str:
    address = PciAddress.parse(gpu.bdf)
    bus_id = f"0000{address.domain:04X}:{address.bus:02X}:{address.device:02X}.{address.function}"
    return fill(
        load_template("nvidia-smi-q-x-gpu.txt"),
        {
            "BUS_ID": bus_id,
            "PRODUCT": gpu.product_name,
            "ARCH": gpu.architecture,
            "MIG": spec.mig,
            "SERIAL": gpu.serial,
            "UUID": gpu.uuid,
            "MINOR": minor,
            "VBIOS": gpu.vbios,
            "BOARD_ID": f"0x{address.bus << 8:x}",
            "BOARD_PART": gpu.board_part,
            "GPU_PART": gpu.gpu_part,
            "MODULE_ID": gpu.module_id,
            "INFOROM_IMG": gpu.inforom_img,
            "INFOROM_OEM": gpu.inforom_oem,
            "INFOROM_ECC": gpu.inforom_ecc,
            "DRIVER": spec.driver.version,
            "PCI_BUS": f"{address.bus:02X}",
            "PCI_DEVICE_ID": f"{gpu.device_id:04X}10DE",
            "PCI_SUBSYSTEM_ID": f"{_SUBSYSTEM_ID:04X}10DE",
            "PCIE_GEN": gpu.pcie_gen,
            "FB_TOTAL": gpu.fb_total_mib,
            "REMAPPED_UNC": 1 if pending else 0,
            "REMAP_PENDING": "Yes" if pending else "No",
        },
    )


def render_topo(spec: NvidiaNodeSpec) -> str:
    """`nvidia-smi topo -m`: the GPU matrix in nvidia-smi's order, then the Legend."""
    gpus = spec.enumerated
    names = [f"GPU{i}" for i in range(len(gpus))]
    lines = ["\t" + "\t".join([*names, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    for i, gpu in enumerate(gpus):
        cells = [" X " if j == i else f"NV{min(gpu.nvlinks, other.nvlinks)}" for j, other in enumerate(gpus)]
        affinity = ("0-55,112-167", "56-111,168-223")[gpu.numa_node]
        lines.append("\t".join([names[i], *cells, affinity, str(gpu.numa_node), "", "N/A"]))
    return "\n".join(lines) + "\n\n" + load_template("nvidia-smi-topo-m-legend.txt")


def render_nvlink(spec: NvidiaNodeSpec) -> str:
    """`nvidia-smi nvlink -s`: every GPU's links in nvidia-smi's order."""
    out = []
    for i, gpu in enumerate(spec.enumerated):
        out.append(f"GPU {i}: {gpu.product_name} (UUID: {gpu.uuid})\n")
        out.extend(f"\t Link {k}: {gpu.nvlink_gbs} GB/s\n" for k in range(gpu.nvlinks))
    return "".join(out)


def render_lspci_gpus(spec: NvidiaNodeSpec) -> str:
    """`lspci -D -nn -vvv`: the NVIDIA GPUs' blocks and the host's NIC blocks, in BDF order."""
    blocks: list[tuple[str, str]] = []
    for index, gpu in enumerate(spec.gpus):
        blocks.append((gpu.bdf, _gpu_lspci(index, gpu)))
    for index, nic in enumerate(spec.host.nics, start=len(spec.gpus)):
        blocks.append((nic.bdf, _lspci_block(index, nic)))
    return "".join(text for _, text in sorted(blocks))


def _gpu_lspci(index: int, gpu: NvidiaGpuSpec) -> str:
    ids = f"[10de:{gpu.device_id:04x}]"
    speed = {4: "16", 5: "32"}.get(gpu.pcie_gen, "32")
    return fill(
        load_template("lspci-device-vvv.txt"),
        {
            "BDF": gpu.bdf,
            "CLASS": "3D controller [0302]",
            "DEVICE_NAME": f"{_NVIDIA_VENDOR} {gpu.pci_name} {ids}",
            "SUBSYSTEM_NAME": f"{_NVIDIA_VENDOR} Device [10de:{_SUBSYSTEM_ID:04x}]",
            "BAR0": f"{0x20000000000 + index * 0x4000000000:x}",
            "BAR0_SIZE": "16M",
            "DRIVER": "nvidia",
            "MODULE": "nvidia",
            "SRIOV": "",
            "IRQ": 200 + index * 33,
            "NUMA": gpu.numa_node,
            "IOMMU_GROUP": 20 + index,
            "ROM": f"{0xF6800000 - index * 0x100000:x}",
            "MAX_SPEED": speed,
            "MAX_WIDTH": 16,
            "SPEED": speed,
            "SPEED_CMP": "ok",
            "WIDTH": 16,
            "WIDTH_CMP": "ok",
        },
    )


def render_dmesg(spec: NvidiaNodeSpec) -> str:
    """`dmesg`: the nvidia module's load line (corpus NVSentinel excerpt's form), then any extra lines."""
    line = (
        "[    5.118203] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  "
        f"{spec.driver.version}  Release Build  (dvs-builder@U22-I3-B10-02-5)  Mon Jun  2 13:13:04 UTC 2025\n"
    )
    return line + "".join(f"{extra}\n" for extra in spec.extra_dmesg)


def render_dcgmi_diag(spec: NvidiaNodeSpec) -> str:
    """`dcgmi diag -r 2`: the corpus p4de run (DCGM 3.3.3) with this node's driver, device ids and failures.

    Only result cells change, re-padded to the table's column width; a GPU in `dcgm_failed_gpus` makes the
    GPU Memory test two rows, `Pass - GPU: <the others>` then `Fail - GPU: <n>` under a blank name (the
    per-GPU form of DCGM 3.3.1, NVIDIA/go-dcgm #52): every GPU keeps a result, as DCGM prints it.
    """
    ids = ",".join(f"{g.device_id:04x}" for g in spec.enumerated)
    failed = ", ".join(str(i) for i in spec.dcgm_failed_gpus)
    passed = ", ".join(str(i) for i in range(len(spec.enumerated)) if i not in spec.dcgm_failed_gpus)
    cells = {
        "Driver Version Detected": [spec.driver.version],
        "GPU Device IDs Detected": [ids],
        "GPU Memory": ([f"Pass - GPU: {passed}"] if passed else []) + [f"Fail - GPU: {failed}"]
        if failed
        else ["Pass - All"],
    }
    lines = []
    for line in load_template("dcgmi-diag-r2-a100x8-dcgm3.3.3.txt").splitlines(keepends=True):
        parts = line.rstrip("\n").split("|")
        if len(parts) == 4 and parts[1].strip() in cells:
            width = len(parts[2]) - 2
            values = cells[parts[1].strip()]
            for i, value in enumerate(values):
                if len(value) > width:
                    raise ValueError(f"dcgmi cell {value!r} wider than the table's {width} columns")
                name = parts[1] if i == 0 else " " * len(parts[1])
                lines.append(f"|{name}| {value:<{width}} |\n")
            continue
        lines.append(line)
    return "".join(lines)


NCCL_TESTS_VERSION = "# nccl-tests version 2.18.3 nccl-headers=23003 nccl-library=23003"
NCCL_VERSION = "NCCL version 2.30.3+cuda13.0"
"""The header lines of the real nccl-tests 2.18.3 run (tests/fixtures/rccl-tests/nccl-tests-2.18.3-*.txt)."""


def nccl_params(spec: NvidiaNodeSpec) -> dict[str, Any]:
    """The replay's `rccl` generator parameters for nccl-tests on this node: the fake AMD node's timing
    profile (the table's numbers are a fake's either way), nccl-tests 2.18.3's header and trailer lines
    (`# nccl-tests version`, `# Collective test starting`, `unalign: 0`, `NCCL version`, `# Collective test
    concluded`; no `rccl-tests: Version` line), and this node's GPUs in nvidia-smi's order."""
    params = _rccl_params(spec.host)
    params["gpus"] = [{"bdf_short": PciAddress.parse(g.bdf).slot_text, "name": g.product_name} for g in spec.enumerated]
    params["nccl"] = {
        "before": [NCCL_TESTS_VERSION, "# Collective test starting: {{TOOL}}"],
        "header_tail": " unalign: 0",
        "after_devices": [NCCL_VERSION],
    }
    params["trailer"] = [*params["trailer"], "# Collective test concluded: {{TOOL}}", "#"]
    return params


def render_query_gpu(spec: NvidiaNodeSpec) -> str:
    """`nvidia-smi --query-gpu=index,pci.bus_id,temperature.gpu,temperature.memory,power.draw
    --format=csv,noheader,nounits`: the documented CSV (`parse.nvidia_smi_query`), one line per GPU in
    nvidia-smi's order with the 8-digit domain; values seeded per GPU (a fake's, in H100 ranges)."""
    lines = []
    for index, gpu in enumerate(spec.enumerated):
        rng = random.Random(f"{spec.name}/{spec.host.seed}/{gpu.uuid}/thermal")
        core = 38 + rng.randrange(6)
        domain, rest = gpu.bdf.split(":", 1)
        bus_id = f"0000{domain}:{rest}".upper()
        lines.append(f"{index}, {bus_id}, {core}, {core + 6 + rng.randrange(4)}, {310 + rng.random() * 40:.2f}")
    return "\n".join(lines) + "\n"


def render_query_util(spec: NvidiaNodeSpec) -> str:
    """`nvidia-smi --query-gpu=index,pci.bus_id,utilization.gpu --format=csv,noheader,nounits`: the documented
    CSV (`parse.nvidia_smi_query.UTIL_ARGV`), one line per GPU; a busy GPU's percent, seeded per GPU (a fake's)."""
    lines = []
    for index, gpu in enumerate(spec.enumerated):
        rng = random.Random(f"{spec.name}/{spec.host.seed}/{gpu.uuid}/util")
        domain, rest = gpu.bdf.split(":", 1)
        lines.append(f"{index}, {f'0000{domain}:{rest}'.upper()}, {96 + rng.randrange(4)}")
    return "\n".join(lines) + "\n"


def write_stub_tool(node: FakeNode, tool: str, answers: Mapping[tuple[str, ...], str]) -> None:
    """Install (or replace) fake `tool` on `node`, answering exactly the argv of `answers`."""
    table = {"responses": [{"match": "exact", "argv": list(argv), "stdout": out} for argv, out in answers.items()]}
    write_stub_table(node, tool, table)


def write_stub_table(node: FakeNode, tool: str, table: Mapping[str, Any]) -> None:
    """Install (or replace) fake `tool` on `node` answering from a replay table (`fakenode._replay`), with the
    node's fault for `tool` (`node.faults`, as `build_fake_node` applies them; a missing tool is not installed)."""
    path = node.bin_dir / tool
    path.unlink(missing_ok=True)
    if tool in node.faults.missing():
        return
    fault = node.faults.tools.get(tool)
    table = {**table, "fault": fault.as_json() if fault is not None else None}
    data_dir = node.root / "replay"
    (data_dir / f"{tool}.marshal").write_bytes(marshal.dumps(table))
    (data_dir / f"{tool}.json").write_text(json.dumps(table, indent=1), encoding="utf-8")
    _write_stub(path, tool, node.root / "lib", data_dir)
