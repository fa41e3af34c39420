"""GPU-side outputs of a fake node: rocminfo, amd-smi (version/list/static/firmware/topology), rocm-smi.

Every renderer lists the GPUs in `spec.enumeration_order` (rocminfo agent order = HIP order = amd-smi
GPU index = rocm-smi cardN), which is what a reversed enumeration changes.

Formats (sources in tests/fixtures/fakenode/PROVENANCE.md):
- rocminfo: the corpus `rocminfo --support` of an 8x MI300X host (ROCm 6.2.3); header and the two CPU
  agents verbatim, one GPU agent block repeated with Uuid/Node/BDFID/uCode values substituted.
- amd-smi `static --json` and `version --json`: the corpus amd-smi 26.2.2 captures; identity, bus, IFWI,
  driver, board serial and NUMA values substituted per GPU, JSON re-serialised with `json.dumps(indent=4)`
  (which reproduces amd-smi's own formatting, see corpus INDEX.md #35).
- amd-smi `list/firmware/topology --json`: no real capture exists; their structure follows ROCm/amdsmi
  `amdsmi_cli/amdsmi_commands.py` (list(), firmware(), topology() JSON branch) and `amdsmi_logger.py`
  (`json.dumps(list_of_gpu_dicts, indent=4)`), read via the search tool.
- rocm-smi `--json`: the corpus rocm-smi 5.7.1 JSON (`"\\n" + json.dumps(indent=4)`), keys and their
  order restricted to what the probe's flags request; topology as the flat "(Topology) ... between DRM
  devices a and b" keys under "system".

Dated notes:
- 2025-08 (amd-smi 26.0): `static` moved the partition object to `amd-smi partition` (ROCm/amdsmi
  commit 88473b7) and wraps GPU lists in {"gpu_data": [...]}; 26.x also prints "ifwi" where older
  versions printed "vbios". `spec.static_partition_section` (default on) adds the pre-26 `partition`
  object after "ras" so a snapshot can read the partition mode; switch it off for the exact 26.x form.
- amd-smi's list UUID is `amdsmi_uuid_gen(asic_serial, device_id, 0xff)` (src/amd_smi/amd_smi_uuid.cc):
  "<serial[63:56]>ff<did>-0000-1000-80<serial[55:48]>-<serial[47:32]><serial[31:0]>".
"""

from __future__ import annotations

import copy
import json
from typing import Any

from upgrade_gate.fakenode.spec import GpuSpec, NodeSpec
from upgrade_gate.fakenode.templates import fill, load_json_template, load_template
from upgrade_gate.parse.firmware_names import amdsmi_number, rocmsmi_format

_ROCM_SMI_FW_NAMES = {
    "CP_MEC1": "MEC",
    "CP_MEC2": "MEC2",
    "RLC": "RLC",
    "RLC_RESTORE_LIST_CNTL": "RLC SRLC",
    "RLC_RESTORE_LIST_GPM_MEM": "RLC SRLG",
    "RLC_RESTORE_LIST_SRM_MEM": "RLC SRLS",
    "SDMA0": "SDMA",
    "SDMA1": "SDMA2",
    "PM": "SMC",
    "PSP_SOSDRV": "SOS",
    "TA_RAS": "TA RAS",
    "TA_XGMI": "TA XGMI",
    "VCN": "VCN",
}
"""amd-smi FW_ID -> rocm-smi block name ("<name> firmware version")."""


def _rocmsmi_version(block: str, printed: str) -> str:
    """amd-smi's version string of `block` as rocm-smi prints the same number (rocm_smi.py showFwInfo)."""
    number = amdsmi_number(block, printed)
    return printed if number is None else rocmsmi_format(_ROCM_SMI_FW_NAMES[block], number)


XGMI_WEIGHT = 15  # amd-smi topology doc example for 8x MI300X (corpus amd-smi/topology-...-weight15.txt)
XGMI_NUMA_BW = "50000-50000"
PCIE_WEIGHT, PCIE_HOPS = 40, 2  # PCIe-only GPUs: corpus amd-smi/topology-2gpu-pcie-access-disabled.txt
CPU_AGENTS = 2  # the rocminfo template's two Xeon agents (KFD nodes 0 and 1)


def amdsmi_uuid(gpu: GpuSpec) -> str:
    """amd-smi's UUID of a GPU (amdsmi_uuid_gen with function index 0xff)."""
    s = gpu.unique_id
    head = f"{s >> 56:02x}ff{gpu.device_id:04x}-0000-1000-80{(s >> 48) & 0xFF:02x}"
    return f"{head}-{(s >> 32) & 0xFFFF:04x}{s & 0xFFFFFFFF:08x}"


def kfd_node(index: int) -> int:
    """KFD node id of the GPU enumerated `index`-th (after the CPU nodes)."""
    return CPU_AGENTS + index


def render_rocminfo(spec: NodeSpec) -> str:
    """`rocminfo` of the node."""
    parts = [
        fill(load_template("rocminfo-header.txt"), {"ROCK_VERSION": spec.driver_version, "CPU_NAME": spec.cpu_name})
    ]
    agent = load_template("rocminfo-gpu-agent.txt")
    for index, gpu in enumerate(spec.enumerated_gpus):
        node = kfd_node(index)
        vram_kb = gpu.vram_mib * 1024
        parts.append(
            fill(
                agent,
                {
                    "AGENT": node + 1,
                    "GFX": gpu.gfx_target,
                    "UNIQUE_ID_HEX": gpu.unique_id_hex,
                    "MARKETING_NAME": gpu.market_name,
                    "NODE": node,
                    "CHIP_ID": f"{gpu.device_id}(0x{gpu.device_id:x})",
                    "BDFID": gpu.bdf_id,
                    "COMPUTE_UNITS": gpu.compute_units,
                    "PP_UCODE": gpu.firmware_version("CP_MEC1"),
                    "SDMA_UCODE": gpu.firmware_version("SDMA0"),
                    "VRAM_KB": f"{vram_kb}(0x{vram_kb:x})",
                },
            )
        )
    parts.append("*** Done ***\n")
    return "".join(parts)


def render_amdsmi_version(spec: NodeSpec) -> str:
    """`amd-smi version --json`."""
    doc = load_json_template("amd-smi-version.json")
    doc[0].update(
        version=spec.amdsmi_tool_version,
        amdsmi_library_version=spec.amdsmi_library_version,
        rocm_version=spec.rocm_version,
        amdgpu_version=spec.driver_version,
    )
    return json.dumps(doc, indent=4) + "\n"


def render_amdsmi_list(spec: NodeSpec) -> str:
    """`amd-smi list --json` (structure from amdsmi_commands.py `list()`)."""
    rows = [
        {
            "gpu": index,
            "bdf": gpu.bdf,
            "uuid": amdsmi_uuid(gpu),
            "kfd_id": gpu.kfd_gpu_id,
            "node_id": kfd_node(index),
            "partition_id": gpu.partition or 0,
        }
        for index, gpu in enumerate(spec.enumerated_gpus)
    ]
    return json.dumps(rows, indent=4) + "\n"


def render_amdsmi_static(spec: NodeSpec) -> str:
    """`amd-smi static --json` (amd-smi 26.2.2 layout of the corpus capture)."""
    corpus: list[dict[str, Any]] = load_json_template("amd-smi-static-mi300x-8gpu.json")["gpu_data"]
    numa_blocks = {0: corpus[0]["numa"], 1: corpus[4]["numa"]}
    out = []
    for index, gpu in enumerate(spec.enumerated_gpus):
        entry = copy.deepcopy(corpus[spec.gpus.index(gpu) % len(corpus)])
        entry["gpu"] = index
        asic = entry["asic"]
        asic.update(
            market_name=gpu.market_name,
            device_id=f"0x{gpu.device_id:x}",
            subsystem_id=f"0x{gpu.device_id:x}",
            asic_serial=f"0x{gpu.unique_id:016X}",
            oam_id=gpu.oam_id,
            num_compute_units=gpu.compute_units,
            target_graphics_version=gpu.gfx_target,
        )
        bus = entry["bus"]
        bus["bdf"] = gpu.bdf
        bus["max_pcie_width"] = gpu.link.max_width
        bus["max_pcie_speed"] = {"value": _speed_value(gpu.link.max_speed_gts), "unit": "GT/s"}
        bus["pcie_interface_version"] = f"Gen {_pcie_gen(gpu.link.max_speed_gts)}"
        entry["ifwi"].update(part_number=gpu.vbios, version=gpu.ifwi_version)
        entry["driver"]["version"] = spec.driver_version
        entry["board"].update(product_serial=gpu.serial, product_name=gpu.product_name)
        numa = copy.deepcopy(numa_blocks.get(gpu.numa_node, numa_blocks[0]))
        numa.update(node=gpu.numa_node, affinity=gpu.numa_node)
        entry["numa"] = numa
        entry["vram"]["size"]["value"] = gpu.vram_mib
        if spec.static_partition_section:
            entry = _insert_after(
                entry,
                "ras",
                "partition",
                {
                    "compute_partition": spec.compute_partition,
                    "memory_partition": spec.memory_partition,
                    "partition_id": gpu.partition or 0,
                },
            )
        out.append(entry)
    return json.dumps({"gpu_data": out}, indent=4) + "\n"


def render_amdsmi_firmware(spec: NodeSpec) -> str:
    """`amd-smi firmware --json` (structure from amdsmi_commands.py `firmware()`)."""
    rows = [
        {"gpu": index, "fw_list": [{"fw_id": block, "fw_version": version} for block, version in gpu.firmware]}
        for index, gpu in enumerate(spec.enumerated_gpus)
    ]
    return json.dumps(rows, indent=4) + "\n"


def render_amdsmi_topology(spec: NodeSpec) -> str:
    """`amd-smi topology --json` (JSON branch of amdsmi_commands.py `topology()`): full XGMI mesh."""
    gpus = spec.enumerated_gpus
    xgmi = spec.gpu_link == "XGMI"
    rows = []
    for src_index, src in enumerate(gpus):
        links = []
        for dst_index, dst in enumerate(gpus):
            own = src_index == dst_index
            links.append(
                {
                    "gpu": dst_index,
                    "bdf": dst.bdf,
                    "weight": 0 if own else (XGMI_WEIGHT if xgmi else PCIE_WEIGHT),
                    "link_status": "ENABLED",
                    "link_type": "SELF" if own else spec.gpu_link,
                    "num_hops": 0 if own else (1 if xgmi else PCIE_HOPS),
                    "bandwidth": "N/A" if own or not xgmi else XGMI_NUMA_BW,
                    "coherent": "SELF" if own else ("C" if xgmi else "N/A"),
                    "atomics": "SELF" if own else ("64,32" if xgmi else "N/A"),
                    "dma": "SELF" if own else ("T" if xgmi else "N/A"),
                    "bi_dir": "SELF" if own else ("T" if xgmi else "N/A"),
                }
            )
        rows.append({"gpu": src_index, "bdf": src.bdf, "links": links})
    return json.dumps(rows, indent=4) + "\n"


def render_rocmsmi(spec: NodeSpec) -> str:
    """`rocm-smi --showproductname --showbus --showuniqueid --showserial --showfwinfo --showvbios
    --showdriverversion --json`.

    "VBIOS version" is the VBIOS part number (the corpus' rocm-smi 5.7.1 JSON: "113-D3430400-037"; amd-smi
    prints the same string as vbios/ifwi part_number), after "Unique ID" as rocm-smi orders its keys."""
    doc: dict[str, dict[str, str]] = {}
    for index, gpu in enumerate(spec.enumerated_gpus):
        card: dict[str, str] = {
            "Unique ID": hex(gpu.unique_id),
            "VBIOS version": gpu.vbios,
            "Serial Number": gpu.serial,
            "PCI Bus": gpu.bdf.upper(),
        }
        firmware = {_ROCM_SMI_FW_NAMES[b]: _rocmsmi_version(b, v) for b, v in gpu.firmware if b in _ROCM_SMI_FW_NAMES}
        for name in sorted(firmware):
            card[f"{name} firmware version"] = firmware[name]
        parts = gpu.vbios.split("-")
        card.update(
            {
                "Card series": gpu.product_name,
                "Card model": f"0x{gpu.device_id:04x}",
                "Card vendor": "Advanced Micro Devices, Inc. [AMD/ATI]",
                "Card SKU": parts[1] if len(parts) == 3 and len(parts[1]) > 1 else "unknown",
            }
        )
        doc[f"card{index}"] = card
    doc["system"] = {"Driver version": spec.driver_version}
    return "\n" + json.dumps(doc, indent=4) + "\n"


def render_rocmsmi_topology(spec: NodeSpec) -> str:
    """`rocm-smi --showtopo --json`: NUMA per card, pairwise weight / hops / link type under "system"."""
    gpus = spec.enumerated_gpus
    doc: dict[str, dict[str, str]] = {
        f"card{i}": {"(Topology) Numa Node": str(g.numa_node), "(Topology) Numa Affinity": str(g.numa_node)}
        for i, g in enumerate(gpus)
    }
    pairs = [(a, b) for a in range(len(gpus)) for b in range(a + 1, len(gpus))]
    system: dict[str, str] = {}
    xgmi = spec.gpu_link == "XGMI"
    weight, hops = (XGMI_WEIGHT, 1) if xgmi else (PCIE_WEIGHT, PCIE_HOPS)
    for label, value in (("Weight", str(weight)), ("Hops", str(hops)), ("Link type", spec.gpu_link)):
        for a, b in pairs:
            system[f"(Topology) {label} between DRM devices {a} and {b}"] = value
    doc["system"] = system
    return "\n" + json.dumps(doc, indent=4) + "\n"


def _insert_after(entry: dict[str, Any], after: str, key: str, value: object) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in entry.items():
        out[k] = v
        if k == after:
            out[key] = value
    return out


def _speed_value(gts: float) -> float | int:
    return int(gts) if gts == int(gts) else gts


def _pcie_gen(gts: float) -> int:
    return {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}.get(gts, 0)
