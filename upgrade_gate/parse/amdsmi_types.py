"""Result types of the amd-smi parsers (`upgrade_gate.parse.amdsmi`), one per command.

Kept apart from the parsing code so the JSON and text readers (`amdsmi_json`, `amdsmi_text`) and the
builders in `amdsmi` share them without import cycles. Every field a tool printed as `N/A` is `None`
and its name is listed in the record's `na_fields`; a field that was not printed at all (an older
release, a partial `--partition` view) is `None` and not listed. Nothing here is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from upgrade_gate.model import Bdf


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiVersion:
    """`amd-smi version`: tool, library, ROCm and driver versions as printed."""

    tool: str | None = None  # "AMDSMI Tool"
    tool_version: str | None = None  # "24.7.1+8dc45db"
    library_version: str | None = None
    rocm_version: str | None = None
    amdgpu_version: str | None = None
    hsmp_driver_version: str | None = None
    kernel_version: str | None = None  # amd-smi 23.x printed "Kernel version" instead of ROCm
    na_fields: tuple[str, ...] = ()
    rejected: tuple[tuple[str, str], ...] = ()  # (field, text as printed): an error text, not a version

    def printed(self, name: str) -> str | None:
        """The field as amd-smi printed it, error text included (for the snapshot's evidence issues)."""
        value: str | None = getattr(self, name)
        return value if value is not None else dict(self.rejected).get(name)


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiListGpu:
    """One GPU (or compute partition) of `amd-smi list`."""

    index: int
    bdf: Bdf | None
    uuid: str | None = None
    kfd_id: int | None = None
    node_id: int | None = None
    partition_id: int | None = None
    na_fields: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiList:
    """`amd-smi list`, with the `amd-smi version` banner when the capture starts with one."""

    form: str  # "text", "json-list" or "json-gpu-data"
    gpus: tuple[AmdSmiListGpu, ...]
    version: AmdSmiVersion | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiVbios:
    """The VBIOS block (`vbios`; amd-smi >= 26 calls it `ifwi`)."""

    source: str  # "vbios" or "ifwi": the section name the tool used
    name: str | None = None
    build_date: str | None = None
    part_number: str | None = None
    version: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiStaticGpu:
    """One GPU of `amd-smi static`."""

    index: int
    bdf: Bdf | None = None
    market_name: str | None = None
    product_name: str | None = None  # BOARD.PRODUCT_NAME
    vendor_id: str | None = None
    device_id: str | None = None  # "0x74a1"
    subsystem_id: str | None = None
    rev_id: str | None = None
    asic_serial: str | None = None  # "0x28246CE5673B4AA0" as printed
    oam_id: int | None = None
    compute_units: int | None = None
    gfx_target: str | None = None
    max_pcie_width: int | None = None
    max_pcie_speed_gts: float | None = None
    pcie_interface_version: str | None = None
    slot_type: str | None = None
    vbios: AmdSmiVbios | None = None
    driver_name: str | None = None
    driver_version: str | None = None
    compute_partition: str | None = None
    memory_partition: str | None = None
    partition_id: int | None = None
    numa_node: int | None = None
    numa_affinity: int | None = None
    vram_type: str | None = None
    vram_vendor: str | None = None
    vram_total_mib: int | None = None
    board_serial: str | None = None  # BOARD.PRODUCT_SERIAL
    board_model_number: str | None = None
    board_fru_id: str | None = None
    board_manufacturer: str | None = None
    na_fields: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiStatic:
    """`amd-smi static` (or a section of it, e.g. `--partition`)."""

    form: str  # "text", "json-list" (before amd-smi 26) or "json-gpu-data" (amd-smi >= 26)
    gpus: tuple[AmdSmiStaticGpu, ...]
    cpu_count: int = 0  # CPU blocks seen (not parsed further)
    truncated: bool = False  # the output contains "..." elisions (doc examples)


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiFirmwareGpu:
    """Firmware blocks of one GPU; `firmware` is None when the tool printed the list as N/A."""

    index: int
    firmware: dict[str, str] | None  # FW_ID -> FW_VERSION as printed
    na_fields: tuple[str, ...] = ()  # "fw_list" or "firmware.<FW_ID>" printed as N/A


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiFirmware:
    """`amd-smi firmware`."""

    form: str
    gpus: tuple[AmdSmiFirmwareGpu, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiTopoLink:
    """One ordered GPU pair of `amd-smi topology` (src != dst); None where the tool said N/A."""

    src: Bdf
    dst: Bdf
    src_index: int | None = None  # known in the JSON form only
    dst_index: int | None = None
    access: bool | None = None  # ENABLED / DISABLED
    weight: int | None = None
    hops: int | None = None
    link_type: str | None = None  # "XGMI", "PCIE", "UNKNOWN"
    numa_bw_min: int | None = None
    numa_bw_max: int | None = None
    coherent: str | None = None  # "C" / "NC"
    atomics: str | None = None  # "64,32" / "32" / "64"
    dma: str | None = None  # "T" / "F"
    bi_dir: str | None = None  # "T" / "F"


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiTopology:
    """`amd-smi topology`: the GPUs in the tool's order and every ordered pair between them."""

    form: str
    bdfs: tuple[Bdf, ...]
    links: tuple[AmdSmiTopoLink, ...]
    tables: tuple[str, ...] = ()  # link fields the output carried, e.g. ("access", "weight", "hops")


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiCurrentPartition:
    """One row of the CURRENT_PARTITION table of `amd-smi partition`."""

    gpu: int
    memory: str | None = None  # NPS1 / NPS2 / NPS4
    accelerator_type: str | None = None  # SPX / DPX / QPX / CPX / TPX
    profile_index: int | None = None
    partition_ids: tuple[int, ...] | None = None
    na_fields: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiMemoryPartition:
    """One GPU block of MEMORY_PARTITION: capabilities and current mode."""

    gpu: int
    caps: tuple[str, ...] | None = None
    current: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiPartitionProfile:
    """One row of ACCELERATOR_PARTITION_PROFILES, column name -> value (None for N/A)."""

    gpu: int
    values: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiPartition:
    """`amd-smi partition` (text)."""

    current: tuple[AmdSmiCurrentPartition, ...] = ()
    memory: tuple[AmdSmiMemoryPartition, ...] = ()
    profiles: tuple[AmdSmiPartitionProfile, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiXgmiMetric:
    """One GPU row of the LINK METRIC TABLE of `amd-smi xgmi`; None where N/A."""

    index: int
    bdf: Bdf
    bit_rate_gbps: float | None = None
    max_bandwidth_gbps: float | None = None
    link_type: str | None = None
    read_kb: tuple[int | None, ...] = ()  # per destination column
    write_kb: tuple[int | None, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiXgmiLinkStatus:
    """One cell of XGMI LINK STATUS; `status` None means unknown (N/A), never "down"."""

    src_index: int
    src_bdf: Bdf
    dst_index: int
    status: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiXgmiPortStatus:
    """One GPU row of GPU LINK PORT STATUS; each port None where N/A."""

    index: int
    bdf: Bdf
    ports: tuple[str | None, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiXgmi:
    """`amd-smi xgmi` text: whichever of its three tables the output carried."""

    destinations: tuple[str, ...] = ()  # metric-table destination column labels (BDF or GPUn)
    metrics: tuple[AmdSmiXgmiMetric, ...] = ()
    link_status: tuple[AmdSmiXgmiLinkStatus, ...] = ()
    port_status: tuple[AmdSmiXgmiPortStatus, ...] = ()
    truncated: bool = False
