"""Pure parsers for amd-smi: `version`, `list`, `static`, `firmware`, `topology`, `partition`, `xgmi`.

Each `parse_amdsmi_*` takes the command's stdout and returns a frozen result (types in
`amdsmi_types`) or raises `ParseError`. Where a command has a `--json` and a text form, the form is
detected by content (first non-blank character `{`/`[`). amd-smi prints the same per-GPU dict either
as JSON or, upper-cased, as an indented tree, so both forms are read into one mapping and built by the
same code here (`amdsmi_values.Fields`); tables (`topology` text, `partition`, `xgmi`) live in
`amdsmi_tables` / `amdsmi_xgmi`, JSON envelopes and topology links in `amdsmi_json`.

Tool quirks (dated notes):
- 2024 amd-smi 24.x: `static --json` is a top-level list with a `vbios` section; 2026 amd-smi 26.2.2
  wraps it in `{"gpu_data": [...]}`, renames `vbios` to `ifwi` and drops `partition` on SR-IOV hosts.
- amd-smi 23.x printed `driver.driver_version`; later releases `driver.name` + `driver.version`.
- `amd-smi list` gained KFD_ID / NODE_ID / PARTITION_ID in ROCm 6.2; 6.1.2 prints BDF + UUID only.
- `amd-smi firmware` versions are strings formatted by the library (hex dotted for PSP/TA/VCN,
  decimal dotted for PM, plain integers otherwise) and are kept exactly as printed.
- Outputs of other subcommands (`monitor`, `metric`, `bad-pages`, the bare dashboard) are not valid
  input for these parsers and are rejected with ParseError rather than read as empty GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from upgrade_gate.errors import ParseError
from upgrade_gate.model import replace
from upgrade_gate.parse.amdsmi_json import (
    check_unique,
    device_entries,
    gpu_index,
    topology_from_json,
)
from upgrade_gate.parse.amdsmi_tables import parse_partition_text, parse_topology_text
from upgrade_gate.parse.amdsmi_text import check_form, numbered_lines, parse_version_line, read_blocks
from upgrade_gate.parse.amdsmi_types import (
    AmdSmiFirmware,
    AmdSmiFirmwareGpu,
    AmdSmiList,
    AmdSmiListGpu,
    AmdSmiPartition,
    AmdSmiStatic,
    AmdSmiStaticGpu,
    AmdSmiTopology,
    AmdSmiVbios,
    AmdSmiVersion,
    AmdSmiXgmi,
)
from upgrade_gate.parse.amdsmi_values import Fields
from upgrade_gate.parse.amdsmi_xgmi import parse_xgmi_text
from upgrade_gate.parse.common import load_json, looks_like_json
from upgrade_gate.parse.preamble import parse_after_preamble
from upgrade_gate.parse.sanity import version_problem

_STATIC_SECTIONS = frozenset(
    {"asic", "bus", "vbios", "ifwi", "limit", "driver", "board", "ras", "partition", "numa", "vram"}
)
_VERSION_JSON_KEYS = {
    "version": "tool_version",
    "amdsmi_library_version": "library_version",
    "rocm_version": "rocm_version",
    "amdgpu_version": "amdgpu_version",
    "amd_hsmp_driver_version": "hsmp_driver_version",
    "kernel_version": "kernel_version",
}

Record = tuple[int, Fields]  # (GPU index, reader over its mapping)


def _records(text: str, *, tool: str) -> tuple[str, list[Record], AmdSmiVersion | None, bool, int]:
    """(form, GPU records, version banner, truncated, CPU block count) of a per-device output."""
    if looks_like_json(text):
        form, entries = device_entries(load_json(text, tool=tool), tool=tool)
        records = [
            (gpu_index(entry, tool=tool, pos=pos), Fields(tool, entry, path=f"[{pos}]"))
            for pos, entry in enumerate(entries)
        ]
        version, truncated, cpus = None, False, 0
    else:
        check_form(text, tool=tool)
        doc = read_blocks(text, tool=tool)
        form = "text"
        records = [(b.index, Fields(tool, b.data, where=b.where)) for b in doc.blocks if b.kind == "GPU"]
        version, truncated = doc.version, doc.truncated
        cpus = sum(1 for b in doc.blocks if b.kind == "CPU")
    check_unique([index for index, _ in records], tool=tool)
    if not records:
        raise ParseError(tool, 0, text[:80], "no GPU in output")
    return form, records, version, truncated, cpus


# --------------------------------------------------------------------------- version


def _parse_version(text: str) -> AmdSmiVersion:
    """`amd-smi version` (one `a: b | c: d` line) or `amd-smi version --json`."""
    tool = "amd-smi-version"
    if looks_like_json(text):
        doc = load_json(text, tool=tool)
        items = doc if isinstance(doc, list) else [doc]
        if len(items) != 1 or not isinstance(items[0], Mapping):
            raise ParseError(tool, 0, text[:80], "expected one version object")
        fields = Fields(tool, items[0])
        if not fields.has("version"):
            raise fields.error("version", "version object without 'version'")
        values: dict[str, Any] = {name: fields.text(key, name) for key, name in _VERSION_JSON_KEYS.items()}
        return _without_errors(AmdSmiVersion(tool=fields.text("tool", "tool"), na_fields=tuple(fields.na), **values))
    check_form(text, tool=tool)
    lines = [(n, line) for n, line in numbered_lines(text) if line.strip()]
    if len(lines) != 1:
        raise ParseError(tool, lines[1][0] if len(lines) > 1 else 0, text[:80], "expected one version line")
    return _without_errors(parse_version_line(lines[0][1], tool=tool, line_no=lines[0][0]))


_VERSION_FIELDS = ("tool_version", "library_version", "rocm_version", "amdgpu_version", "hsmp_driver_version")


def _without_errors(version: AmdSmiVersion) -> AmdSmiVersion:
    """Error texts printed where a version goes (`AMDSMI_STATUS_FILE_ERROR - Error opening file`, /proc/version
    with its spaces removed) are not kept as values: None, with the printed text in `rejected`."""
    rejected = []
    values: dict[str, Any] = {}
    for name in _VERSION_FIELDS:
        value = getattr(version, name)
        if value is not None and version_problem(value) is not None:
            rejected.append((name, value))
            values[name] = None
    return replace(version, rejected=tuple(rejected), **values) if rejected else version


# --------------------------------------------------------------------------- list


def _parse_list(text: str) -> AmdSmiList:
    """`amd-smi list` (text or --json): index, BDF, UUID and KFD/node/partition ids per GPU."""
    tool = "amd-smi-list"
    form, records, version, _, _ = _records(text, tool=tool)
    gpus = []
    for index, fields in records:
        if not fields.has("bdf"):
            raise fields.error("bdf", f"GPU {index} without a BDF")
        gpus.append(
            AmdSmiListGpu(
                index=index,
                bdf=fields.bdf("bdf", "bdf"),
                uuid=fields.text("uuid", "uuid"),
                kfd_id=fields.integer("kfd_id", "kfd_id"),
                node_id=fields.integer("node_id", "node_id"),
                partition_id=fields.integer("partition_id", "partition_id"),
                na_fields=tuple(fields.na),
            )
        )
    return AmdSmiList(form=form, gpus=tuple(gpus), version=version)


# --------------------------------------------------------------------------- static


def _vbios(fields: Fields) -> AmdSmiVbios | None:
    for source in ("vbios", "ifwi"):
        section = fields.child(source, "vbios")
        if section is not None:
            return AmdSmiVbios(
                source=source,
                name=section.text("name", "vbios.name"),
                build_date=section.text("build_date", "vbios.build_date"),
                part_number=section.text("part_number", "vbios.part_number"),
                version=section.text("version", "vbios.version"),
            )
    return None


def _static_gpu(index: int, fields: Fields) -> AmdSmiStaticGpu:
    if not fields.keys() & _STATIC_SECTIONS:
        raise ParseError(fields.tool, 0, f"GPU: {index}", f"GPU {index} has no static section")
    empty = Fields(fields.tool, {})
    asic = fields.child("asic") or empty
    bus = fields.child("bus") or empty
    driver = fields.child("driver") or empty
    board = fields.child("board") or empty
    part = fields.child("partition") or empty
    numa = fields.child("numa") or empty
    vram = fields.child("vram") or empty
    vbios = _vbios(fields)
    speed = bus.quantity("max_pcie_speed", "max_pcie_speed_gts")
    if speed is not None and speed[1] not in ("GT/s", "MT/s"):
        raise bus.error("max_pcie_speed", "expected GT/s or MT/s")
    vram_mib = vram.mib("size", "vram_total_mib")
    if vram_mib is None and vram.has("vram_size_mb"):
        vram_mib = vram.integer("vram_size_mb", "vram_total_mib")
    return AmdSmiStaticGpu(
        index=index,
        bdf=bus.bdf("bdf", "bdf"),
        market_name=asic.text("market_name", "market_name"),
        product_name=board.text("product_name", "product_name"),
        vendor_id=asic.text("vendor_id", "vendor_id"),
        device_id=asic.text("device_id", "device_id"),
        subsystem_id=asic.text("subsystem_id", "subsystem_id"),
        rev_id=asic.text("rev_id", "rev_id"),
        asic_serial=asic.text("asic_serial", "asic_serial"),
        oam_id=asic.integer("oam_id", "oam_id"),
        compute_units=asic.integer("num_compute_units", "compute_units"),
        gfx_target=asic.text("target_graphics_version", "gfx_target"),
        max_pcie_width=bus.integer("max_pcie_width", "max_pcie_width"),
        max_pcie_speed_gts=None if speed is None else (speed[0] / 1000 if speed[1] == "MT/s" else speed[0]),
        pcie_interface_version=bus.text("pcie_interface_version", "pcie_interface_version"),
        slot_type=bus.text("slot_type", "slot_type"),
        vbios=vbios,
        driver_name=driver.text("name", "driver_name"),
        driver_version=driver.text("version", "driver_version") or driver.text("driver_version", "driver_version"),
        compute_partition=part.text("compute_partition", "compute_partition"),
        memory_partition=part.text("memory_partition", "memory_partition"),
        partition_id=part.integer("partition_id", "partition_id"),
        numa_node=numa.integer("node", "numa_node"),
        numa_affinity=numa.integer("affinity", "numa_affinity"),
        vram_type=vram.text("type", "vram_type"),
        vram_vendor=vram.text("vendor", "vram_vendor"),
        vram_total_mib=vram_mib,
        board_serial=board.text("product_serial", "board_serial"),
        board_model_number=board.text("model_number", "board_model_number"),
        board_fru_id=board.text("fru_id", "board_fru_id"),
        board_manufacturer=board.text("manufacturer_name", "board_manufacturer"),
        na_fields=tuple(dict.fromkeys(fields.na)),
    )


def _parse_static(text: str) -> AmdSmiStatic:
    """`amd-smi static` (text, old JSON list or amd-smi >= 26 `gpu_data`): identity and config per GPU."""
    form, records, _, truncated, cpus = _records(text, tool="amd-smi-static")
    gpus = tuple(_static_gpu(index, fields) for index, fields in records)
    return AmdSmiStatic(form=form, gpus=gpus, cpu_count=cpus, truncated=truncated)


# --------------------------------------------------------------------------- firmware


def _fw_entries(fields: Fields) -> list[Fields] | None:
    if isinstance(fields.raw("fw_list"), str):
        if fields.text("fw_list", "fw_list") is None:
            return None
        raise fields.error("fw_list", "expected the firmware list")
    return fields.entries("fw_list")


def _parse_firmware(text: str) -> AmdSmiFirmware:
    """`amd-smi firmware` (text or --json): FW_ID -> FW_VERSION per GPU, versions as printed."""
    form, records, _, _, _ = _records(text, tool="amd-smi-firmware")
    gpus = []
    for index, fields in records:
        if not fields.has("fw_list"):
            raise fields.error("fw_list", f"GPU {index} without FW_LIST")
        entries = _fw_entries(fields)
        firmware: dict[str, str] | None = None
        na: list[str] = ["fw_list"] if entries is None else []
        if entries is not None:
            firmware = {}
            for entry in entries:
                fw_id = entry.text("fw_id", "fw_id")
                if fw_id is None:
                    raise entry.error("fw_id", "firmware entry without FW_ID")
                if not entry.has("fw_version"):
                    raise entry.error("fw_version", f"firmware {fw_id} without FW_VERSION")
                version = entry.text("fw_version", f"firmware.{fw_id}")
                if fw_id in firmware or f"firmware.{fw_id}" in na:
                    raise entry.error("fw_id", f"firmware {fw_id} printed twice")
                if version is None:
                    na.append(f"firmware.{fw_id}")
                else:
                    firmware[fw_id] = version
        gpus.append(AmdSmiFirmwareGpu(index=index, firmware=firmware, na_fields=tuple(na)))
    return AmdSmiFirmware(form=form, gpus=tuple(gpus))


# --------------------------------------------------------------------------- tables


def _parse_topology(text: str) -> AmdSmiTopology:
    """`amd-smi topology` (text tables or --json links): every ordered pair of distinct GPUs."""
    if looks_like_json(text):
        return topology_from_json(text, tool="amd-smi-topology")
    return parse_topology_text(text, tool="amd-smi-topology")


def _parse_partition(text: str) -> AmdSmiPartition:
    """`amd-smi partition` (text): current compute/memory partitions and profiles."""
    return parse_partition_text(text, tool="amd-smi-partition")


def _parse_xgmi(text: str) -> AmdSmiXgmi:
    """`amd-smi xgmi` (text): link metrics, link status and port status; N/A is unknown."""
    return parse_xgmi_text(text, tool="amd-smi-xgmi")


def parse_amdsmi_version(text: str) -> AmdSmiVersion:
    """`amd-smi version` (one `a: b | c: d` line) or `amd-smi version --json`, after any known preamble."""
    return parse_after_preamble(text, _parse_version)


def parse_amdsmi_list(text: str) -> AmdSmiList:
    """`amd-smi list` (text or --json): index, BDF, UUID and KFD/node/partition ids per GPU."""
    return parse_after_preamble(text, _parse_list)


def parse_amdsmi_static(text: str) -> AmdSmiStatic:
    """`amd-smi static` (text, old JSON list or amd-smi >= 26 `gpu_data`): identity and config per GPU."""
    return parse_after_preamble(text, _parse_static)


def parse_amdsmi_firmware(text: str) -> AmdSmiFirmware:
    """`amd-smi firmware` (text or --json): FW_ID -> FW_VERSION per GPU, versions as printed."""
    return parse_after_preamble(text, _parse_firmware)


def parse_amdsmi_topology(text: str) -> AmdSmiTopology:
    """`amd-smi topology` (text tables or --json links): every ordered pair of distinct GPUs."""
    return parse_after_preamble(text, _parse_topology)


def parse_amdsmi_partition(text: str) -> AmdSmiPartition:
    """`amd-smi partition` (text): current compute/memory partitions and profiles."""
    return parse_after_preamble(text, _parse_partition)


def parse_amdsmi_xgmi(text: str) -> AmdSmiXgmi:
    """`amd-smi xgmi` (text): link metrics, link status and port status; N/A is unknown."""
    return parse_after_preamble(text, _parse_xgmi)


PARSERS: dict[str, Callable[[str], object]] = {
    "amd-smi-version": parse_amdsmi_version,
    "amd-smi-list": parse_amdsmi_list,
    "amd-smi-static": parse_amdsmi_static,
    "amd-smi-firmware": parse_amdsmi_firmware,
    "amd-smi-topology": parse_amdsmi_topology,
    "amd-smi-partition": parse_amdsmi_partition,
    "amd-smi-xgmi": parse_amdsmi_xgmi,
}
