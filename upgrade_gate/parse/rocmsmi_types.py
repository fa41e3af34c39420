"""Result types of the rocm-smi parsers (`upgrade_gate.parse.rocmsmi`).

Fields rocm-smi printed as `N/A` (or `None` / `Unsupported` in the concise table) are None and named
in `na_fields`; fields it did not print are None and not named. Values are kept as printed where
they are identifiers (firmware versions, serials, device ids) and converted where they are numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from upgrade_gate.model import Bdf


@dataclass(frozen=True, slots=True, kw_only=True)
class RocmSmiGpu:
    """One GPU of `rocm-smi --show*` / `-a` text sections or of `--json` (`cardN`)."""

    index: int  # rocm-smi's device index (`GPU[n]`, `card<n>` in JSON)
    device_id: str | None = None  # "GPU ID" before ROCm 6, "Device ID" since
    device_name: str | None = None
    device_rev: str | None = None
    subsystem_id: str | None = None
    guid: str | None = None
    unique_id: str | None = None
    serial: str | None = None
    bdf: Bdf | None = None
    vbios: str | None = None
    card_series: str | None = None
    card_model: str | None = None
    card_vendor: str | None = None
    card_sku: str | None = None
    firmware: dict[str, str] = field(default_factory=dict)  # "MEC" -> "69", "TA RAS" -> "27.00.01.60"
    vram_total_bytes: int | None = None
    vram_used_bytes: int | None = None
    numa_node: int | None = None
    numa_affinity: int | None = None
    errors: tuple[str, ...] = ()  # "<section>: <message>" from `ERROR: GPU[n] : ...` lines
    na_fields: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RocmSmiLink:
    """One GPU pair (a < b, rocm-smi device indices) of the topology."""

    a: int
    b: int
    weight: int | None = None
    hops: int | None = None
    link_type: str | None = None  # "XGMI", "PCIE"; None where N/A


@dataclass(frozen=True, slots=True, kw_only=True)
class RocmSmiInfo:
    """`rocm-smi --json` or the `--show*` / `-a` text sections: per-GPU identity, firmware, topology."""

    form: str  # "json" or "text"
    gpus: tuple[RocmSmiGpu, ...]
    driver_version: str | None = None
    links: tuple[RocmSmiLink, ...] = ()
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RocmSmiTopology:
    """`rocm-smi --showtopo` text: the weight / hops / link type matrices and NUMA nodes."""

    gpus: tuple[int, ...]
    links: tuple[RocmSmiLink, ...]
    numa: tuple[RocmSmiGpu, ...] = ()  # index, numa_node and numa_affinity only
    matrices: tuple[str, ...] = ()  # which matrices were printed: "weight", "hops", "link_type"
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RocmSmiConciseRow:
    """One device row of the concise `rocm-smi` table (no arguments)."""

    device: int
    node: int | None = None
    device_id: str | None = None  # "IDs (DID, GUID)" since ROCm 6.2, "[Model : Revision]" in 6.0/6.1
    guid: str | None = None
    revision: str | None = None
    name: str | None = None  # wrapped second row of the 6.0/6.1 layout, truncated by the tool
    temp_c: float | None = None
    power_w: float | None = None
    memory_partition: str | None = None
    compute_partition: str | None = None
    partition_id: int | None = None
    sclk_mhz: float | None = None
    mclk_mhz: float | None = None
    fan_percent: float | None = None
    perf: str | None = None
    power_cap_w: float | None = None
    vram_percent: float | None = None
    gpu_percent: float | None = None
    na_fields: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RocmSmiConcise:
    """The concise table: its columns as printed and one row per device (or partition)."""

    columns: tuple[str, ...]
    rows: tuple[RocmSmiConciseRow, ...]
    warnings: tuple[str, ...] = ()
