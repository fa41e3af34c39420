"""Result types of the `nvidia-smi -q -x` parser (`upgrade_gate.parse.nvidia_smi_xml`).

They mirror what the vendor-neutral snapshot model (`upgrade_gate.model.snapshot.Gpu`) holds for an AMD
GPU, so a later NVIDIA snapshot builder maps field to field: index, BDF, serial, UUID (`unique_id`),
product name, PCI device id, firmware blocks (`firmware`, block -> version as printed), VBIOS, and the
partitions (MIG devices here; CPX/NPS compute and memory partitions on AMD).

Fields nvidia-smi printed as `N/A` are None and named in `na_fields` (element path under `<gpu>`,
e.g. "serial", "retired_pages/pending_retirement", "volatile/dram_uncorrectable"); fields it did not print at all (an
older DTD, a consumer board) are None and not named. Identifiers stay as printed; counters are ints.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from upgrade_gate.model import Bdf


@dataclass(frozen=True, slots=True, kw_only=True)
class MigDevice:
    """One MIG device (`<mig_devices><mig_device>`): a partition of a GPU, like a CPX partition on AMD."""

    index: int
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    multiprocessor_count: int | None = None
    memory_total_mib: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EccState:
    """ECC mode and counters (`<ecc_mode>`, `<ecc_errors>`): counter name -> count, as printed."""

    current_mode: str | None = None  # "Enabled" / "Disabled"
    pending_mode: str | None = None
    volatile: dict[str, int] = field(default_factory=dict)  # "dram_uncorrectable" -> 0
    aggregate: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetiredPages:
    """Dynamic page retirement (`<retired_pages>`; Volta/Turing, N/A on row-remapping GPUs)."""

    single_bit_count: int | None = None
    double_bit_count: int | None = None
    pending: bool | None = None  # `<pending_retirement>`: a reboot/reset retires the pages


@dataclass(frozen=True, slots=True, kw_only=True)
class RemappedRows:
    """Row remapping (`<remapped_rows>`; A100 and later): a pending remap needs a GPU reset, a failure
    means the GPU is out of spare rows."""

    correctable: int | None = None
    uncorrectable: int | None = None
    pending: bool | None = None
    failure: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NvidiaGpu:
    """One `<gpu>` element of `nvidia-smi -q -x`."""

    index: int  # position in the document: nvidia-smi's index, PCI bus order (not CUDA's FASTEST_FIRST)
    bdf: Bdf
    minor_number: int | None = None  # /dev/nvidia<N>
    product_name: str | None = None
    architecture: str | None = None  # "Ampere", "Hopper" (absent before driver ~470)
    serial: str | None = None
    uuid: str | None = None  # "GPU-513536b6-7d19-9063-b049-1e69664bb298": what CUDA_VISIBLE_DEVICES pins
    vbios: str | None = None
    firmware: dict[str, str] = field(default_factory=dict)  # "inforom.img" -> "G506.0212.00.01", "gsp" -> ...
    device_id: str | None = None  # "0x20b2" (from pci_device_id "20B210DE": device 20B2, vendor 10DE)
    vendor_id: str | None = None  # "0x10de"
    subsystem_id: str | None = None  # pci_sub_system_id as printed ("147F10DE")
    board_part_number: str | None = None
    module_id: int | None = None  # `<gpu_module_id>`: the HGX baseboard slot
    compute_mode: str | None = None  # "Default" / "Exclusive_Process" / "Prohibited" (/ "Exclusive_Thread")
    mig_current: str | None = None  # "Enabled" / "Disabled"; None where N/A (no MIG support)
    mig_pending: str | None = None
    mig_devices: tuple[MigDevice, ...] = ()
    ecc: EccState | None = None
    retired_pages: RetiredPages | None = None
    remapped_rows: RemappedRows | None = None
    clock_reasons_element: str | None = None  # "clocks_event_reasons" (DTD v12+) or "clocks_throttle_reasons"
    clock_reasons_active: tuple[str, ...] = ()  # reasons printed "Active", prefix dropped: "sw_power_cap"
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    fb_total_mib: int | None = None
    fabric_state: str | None = None  # NVSwitch systems: "Completed"; None where N/A
    fabric_status: str | None = None
    reset_required: bool | None = None  # `<gpu_reset_status><reset_required>`
    na_fields: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class NvidiaSmiLog:
    """`nvidia-smi -q -x`: the driver-wide facts and one `NvidiaGpu` per `<gpu>` element.

    `attached_gpus` is what the driver sees; `nvidia-smi -q -x -i N` prints that count with one `<gpu>`,
    so `complete` (every attached GPU present) is a property the snapshot builder must require of the
    whole-node probe rather than a parse error.
    """

    dtd: str | None  # "nvsmi_device_v12.dtd": the schema generation, from the DOCTYPE
    timestamp: str | None
    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int
    gpus: tuple[NvidiaGpu, ...]

    @property
    def complete(self) -> bool:
        """True when every GPU the driver attached is in the document."""
        return len(self.gpus) == self.attached_gpus
