"""What a fake GPU node is: `NodeSpec` and the realistic MI300X default, `mi300x_node`.

A spec holds every value the fake tools print, so that one node is consistent across all of them
(same BDFs, serials, firmware and GPU order in rocminfo, amd-smi, rocm-smi, lspci, rccl-tests, RVS).
Semantic faults (a port down, a lost VF, a downgraded link, low bandwidth, a reversed GPU order) are
expressed as a different spec, see `faults.py`; tool-level faults (hang, missing, non-zero, garbage)
are `Faults`.

Design decisions:
- Identity is derived from `random.Random(f"{name}/{seed}")`: the same name and seed always give the
  same serials, unique ids, KFD gpu ids and NIC GUIDs; two nodes never share them. BDFs are a property
  of the server model, so every node of a class has the same BDF layout (as real fleets do).
- `enumeration_order[i]` is the position in `gpus` (sorted by BDF) of the GPU that rocminfo, amd-smi,
  rocm-smi, rccl-tests and RVS list i-th; lspci and sysfs always list by BDF. A reversed order is the
  incident of the seeds.
- Firmware defaults are the MI300X table printed by `amd-smi firmware` in ROCm/ROCm issue #4750
  (ROCm 6.3.3, amd-smi 24.7.1); rocminfo's "Packet Processor uCode" and "SDMA engine uCode" print the
  CP_MEC1 and SDMA0 entries so both tools agree.
- BDFs 05/15/65/75/85/95/e5/f5 are the 8-GPU layout of the corpus' lspci capture
  (lspci/mi350x-8gpu-lspci-grep-accelerators-unknown-device-name.txt); NICs sit on the next bus.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from upgrade_gate.parse.bdf import PciAddress

MI300X_FIRMWARE: tuple[tuple[str, str], ...] = (
    ("CP_MEC1", "166"),
    ("CP_MEC2", "166"),
    ("RLC", "65"),
    ("SDMA0", "22"),
    ("SDMA1", "22"),
    ("VCN", "06.11.30.0C"),
    ("PSP_SOSDRV", "00.36.01.50"),
    ("TA_RAS", "1B.36.02.0F"),
    ("TA_XGMI", "20.00.01.13"),
    ("PM", "04.85.103.184"),
)
"""amd-smi FW_ID -> FW_VERSION of an MI300X (ROCm/ROCm issue #4750), in amd-smi's order."""

MI300X_GPU_BUSES = (0x05, 0x15, 0x65, 0x75, 0x85, 0x95, 0xE5, 0xF5)
"""PCI buses of the 8 OAM GPUs (lspci capture of an 8-GPU MI3xx server)."""

DMESG_ACA_MODE1_RESET = "aca_mode1_reset"
"""Name of the injectable dmesg event: ACA hardware errors then a MODE1 reset of every GPU."""

DMESG_FATAL_INIT = "fatal_init"
"""Name of the injectable dmesg event: the first GPU fails to initialise and its probe fails (-12)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PcieLinkSpec:
    """Capability (LnkCap) and status (LnkSta) of one PCIe link."""

    speed_gts: float = 32.0
    width: int = 16
    max_speed_gts: float = 32.0
    max_width: int = 16


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One GPU as every tool of the node reports it."""

    bdf: str  # lower-case dddd:bb:dd.f
    serial: str  # board product serial (amd-smi board.product_serial, rocm-smi Serial Number)
    unique_id: int  # 64-bit (rocminfo Uuid, amd-smi asic_serial, rocm-smi Unique ID)
    kfd_gpu_id: int  # KFD gpu_id (amd-smi list kfd_id, RVS "GPU[node - id]")
    numa_node: int
    oam_id: int
    firmware: tuple[tuple[str, str], ...] = MI300X_FIRMWARE
    vbios: str = "113-M3000100-102"  # part number: rocm-smi "Card SKU" source, amd-smi ifwi.part_number
    ifwi_version: str = "00159017"
    link: PcieLinkSpec = field(default_factory=PcieLinkSpec)
    market_name: str = "AMD Instinct MI300X"
    product_name: str = "AMD Instinct MI300X OAM"
    device_id: int = 0x74A1
    gfx_target: str = "gfx942"
    compute_units: int = 304
    vram_mib: int = 196592
    partition: int | None = None  # compute partition number (DPX/QPX/CPX); None: the whole device
    pci_name: str = "Aqua Vanjaram [Instinct MI300X]"  # lspci's device name after the vendor
    pci_class: str = "Processing accelerators [1200]"  # lspci -nn class of the function

    @property
    def bus(self) -> int:
        """The PCI bus number."""
        return PciAddress.parse(self.bdf).bus

    @property
    def bdf_id(self) -> int:
        """rocminfo's BDFID: bus << 8 | device << 3 | function (a partition's function is its number)."""
        return PciAddress.parse(self.bdf).bdf_id

    @property
    def physical(self) -> bool:
        """True for a PCI function lspci and sysfs list: a whole device or a device's first partition.

        Partitions are no PCI functions (AMD: "partitions are an abstraction and not defined at the PCI
        subsystem level", ROCm/rocm-systems#5805): lspci shows the device once, while amd-smi, rocm-smi
        and rocminfo print each partition with its number in the BDF's function.
        """
        return self.partition in (None, 0)

    @property
    def unique_id_hex(self) -> str:
        """Unique id as 16 lower-case hex digits (rocminfo's `GPU-<hex>` form)."""
        return f"{self.unique_id:016x}"

    def firmware_version(self, block: str) -> str:
        """The version of one firmware block, "N/A" when the GPU has none."""
        return dict(self.firmware).get(block, "N/A")


@dataclass(frozen=True, slots=True, kw_only=True)
class NicSpec:
    """One RDMA NIC (an AMD Pensando Pollara "ionic_N" port, as in the corpus)."""

    name: str
    bdf: str
    netdev: str
    node_guid: str  # "0690:81ff:fe36:b328"
    numa_node: int
    ipv4: str
    fw_ver: str = "1.117.1-a-63"
    vendor_id: int = 0x1DD8
    device_id: int = 0x1002  # vendor_part_id 4098
    port_up: bool = True
    rdma_link_up: bool | None = None  # `rdma link` state when it disagrees with ibv_devinfo (None: port_up)
    gid_count: int = 4  # GIDs printed by ibv_devinfo -v; 0 = empty GID table
    roce_v2: bool = True
    link: PcieLinkSpec = field(default_factory=PcieLinkSpec)
    sriov_numvfs: int = 0
    sriov_totalvfs: int = 16
    write_bw_gbps: float = 391.34  # ib_write_bw BW average at 8 MiB with --report_gbits


@dataclass(frozen=True, slots=True, kw_only=True)
class BandwidthProfile:
    """How an rccl-tests sweep on this node compares with the corpus capture it is derived from."""

    factor: float = 1.0  # bus bandwidth multiplier (0.8 = a 20% drop)
    noise_pct: float = 0.5  # standard deviation of the seeded run-to-run noise, percent
    size_factors: tuple[tuple[int, float], ...] = ()  # (min_bytes, extra factor) for large messages


@dataclass(frozen=True, slots=True, kw_only=True)
class ThermalProfile:
    """What `amd-smi monitor -p -t` prints under the phase 2 load (see render_thermal)."""

    # Hotspot spread per device slot: the MI350X capture's GPU_T (55 58 54 61 55 61 56 59 °C) moved to
    # the load level of the MI300X capture under stress (GPU0 at 69 °C, 750 W).
    hotspot_c: tuple[int, ...] = (63, 66, 62, 69, 63, 69, 64, 67)
    memory_c: tuple[int, ...] = (50, 54, 50, 55, 50, 56, 52, 55)
    power_w: tuple[int, ...] = (702, 709, 701, 708, 707, 708, 706, 708)
    power_cap_w: int = 750
    hot: tuple[tuple[int, float], ...] = ()  # (device slot in BDF order, extra °C): faults.run_hot


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadProfile:
    """How the node's fake GPUs treat the real training script (fakenode.workload; faults.slow_workload ...).

    The script and PyTorch run for real on the CPUs; only the GPUs are imagined: their identities, an
    extra delay per step (a slower GPU), an extra delay before the first step (a slower device init).
    """

    ranks: int = 2  # gloo processes on CPU, whatever --nproc-per-node asks (one per GPU would be too many)
    step_delay_s: float = 0.0
    init_delay_s: float = 0.0
    collective_timeouts: int = 0  # watchdog timeout lines the log gets (the job itself completes)
    lr_scale: float = 1.0  # > 1: a learning rate that makes the loss diverge (a real divergence)
    index_pinned: bool = False  # the site's workload binds ranks by enumeration index
    output: str = ""  # "", "nothing", "truncated", "signal", "unknown-gpu": a broken workload
    gfx_jitter: tuple[tuple[int, float], ...] = ()  # (device slot, GFX% swing): faults.jittery_gpu, render_util


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSpec:
    """Everything the fake tools of one node print."""

    name: str
    node_class: str = "mi300x-8gpu"
    seed: int = 0
    gpus: tuple[GpuSpec, ...]
    enumeration_order: tuple[int, ...]
    nics: tuple[NicSpec, ...] = ()
    rocm_version: str = "6.1.3"
    rocm_build: str = "122"
    driver_version: str = "6.7.0"
    kernel: str = "5.15.0-119-generic"
    cpu_name: str = "Intel(R) Xeon(R) Platinum 8470"
    amdsmi_tool_version: str = "26.2.2+e1a6bc5663"
    amdsmi_library_version: str = "26.2.2"
    compute_partition: str = "SPX"
    memory_partition: str = "NPS1"
    static_partition_section: bool = True  # add amd-smi < 26's `partition` object to `static --json`
    gpu_link: str = "XGMI"  # link type between GPUs in amd-smi / rocm-smi topology: XGMI or PCIE
    mesh: BandwidthProfile = field(default_factory=BandwidthProfile)
    cluster: BandwidthProfile = field(default_factory=BandwidthProfile)
    rvs_failed_gpus: tuple[int, ...] = ()  # positions in `gpus` whose RVS gst misses its target
    agfhc_failed_tests: tuple[str, ...] = ()  # AGFHC test names that fail ("hbm_bw", ...)
    dmesg_events: tuple[str, ...] = ()
    thermal: ThermalProfile = field(default_factory=ThermalProfile)
    workload: WorkloadProfile = field(default_factory=WorkloadProfile)
    # Host facts (render_host.write_host_facts): DMI BIOS files, /proc/cmdline, os-release.
    bios_vendor: str = "American Megatrends International, LLC."
    bios_version: str = "2.1"
    bios_date: str = "03/15/2024"
    kernel_params: str = "root=/dev/mapper/ubuntu--vg-ubuntu--lv ro amd_iommu=on iommu=pt"
    os_release: str = "ubuntu-22.04"  # a key of render_host.OS_RELEASES

    def __post_init__(self) -> None:
        if sorted(self.enumeration_order) != list(range(len(self.gpus))):
            raise ValueError(f"enumeration_order {self.enumeration_order} is not a permutation of the GPUs")
        bdfs = [g.bdf for g in self.gpus]
        if bdfs != sorted(bdfs) or len(set(bdfs)) != len(bdfs):
            raise ValueError("gpus must be sorted by BDF without duplicates")

    @property
    def enumerated_gpus(self) -> tuple[GpuSpec, ...]:
        """The GPUs in the order rocminfo / amd-smi / HIP enumerate them."""
        return tuple(self.gpus[i] for i in self.enumeration_order)


def mi300x_node(
    name: str,
    *,
    seed: int = 0,
    gpu_count: int = 8,
    nic_count: int = 8,
    node_class: str = "mi300x-8gpu",
    rocm_version: str = "6.1.3",
    driver_version: str = "6.7.0",
    kernel: str = "5.15.0-119-generic",
) -> NodeSpec:
    """A healthy 8x MI300X OAM node with 8 Pollara NICs; identity is unique per (name, seed)."""
    if not 1 <= gpu_count <= len(MI300X_GPU_BUSES) or not 0 <= nic_count <= len(MI300X_GPU_BUSES):
        raise ValueError(f"gpu_count must be 1..8 and nic_count 0..8, got {gpu_count}, {nic_count}")
    rng = random.Random(f"{name}/{seed}")
    serial_base = 692409000000 + rng.randrange(0, 900) * 1000
    kfd_ids = rng.sample(range(1000, 65535), gpu_count)
    serials = sorted(rng.sample(range(1000), gpu_count))
    gpus = tuple(
        GpuSpec(
            bdf=f"0000:{bus:02x}:00.0",
            serial=str(serial_base + serials[i]),
            unique_id=rng.getrandbits(64) | (1 << 60),
            kfd_gpu_id=kfd_ids[i],
            numa_node=0 if i < gpu_count / 2 else 1,
            oam_id=(1, 0, 3, 2, 6, 7, 5, 4)[i],  # OAM ids of the corpus amd-smi static capture
        )
        for i, bus in enumerate(MI300X_GPU_BUSES[:gpu_count])
    )
    nics = ionic_nics(
        MI300X_GPU_BUSES[:nic_count],
        host_octet=1 + rng.randrange(250),
        guid=lambda: _guid(rng),
        numa_of=lambda i, _bus: 0 if i < nic_count / 2 else 1,
    )
    return NodeSpec(
        name=name,
        node_class=node_class,
        seed=seed,
        gpus=gpus,
        enumeration_order=tuple(range(gpu_count)),
        nics=nics,
        rocm_version=rocm_version,
        driver_version=driver_version,
        kernel=kernel,
    )


def ionic_nics(
    buses: Sequence[int],
    *,
    host_octet: int,
    guid: Callable[[], str],
    numa_of: Callable[[int, int], int],
    link: PcieLinkSpec | None = None,
) -> tuple[NicSpec, ...]:
    """One Pollara NIC on the bus after each GPU's: `ionic_<i>`, `enp<bus+1>s0np0`, 192.168.<i+1>.<host>."""
    return tuple(
        NicSpec(
            name=f"ionic_{i}",
            bdf=f"0000:{bus + 1:02x}:00.0",
            netdev=f"enp{bus + 1}s0np0",
            node_guid=guid(),
            numa_node=numa_of(i, bus),
            ipv4=f"192.168.{i + 1}.{host_octet}",
            link=link if link is not None else PcieLinkSpec(),
        )
        for i, bus in enumerate(buses)
    )


def _guid(rng: random.Random) -> str:
    """An ionic-style node GUID: the corpus' 0690:81ff:fe prefix, then 3 random bytes."""
    tail = rng.getrandbits(24)
    return f"0690:81ff:fe{tail >> 16:02x}:{tail & 0xFFFF:04x}"
