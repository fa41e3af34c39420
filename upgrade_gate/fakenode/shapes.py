"""More node shapes than the default 8x MI300X SPX: MI300X in CPX mode and 4x MI210 PCIe cards.

Every shape is a `NodeSpec`, so every fake tool prints a consistent picture of it in the real formats
(render_gpu / render_host); only values differ. Sources of the values:

- MI300X CPX (`mi300x_cpx_node`): each MI300X splits into 8 compute partitions (one per XCD). The
  partitions of one device share its board serial and its UUID and differ only in the function of
  their BDF (05:00.0 ... 05:00.7): AMD documents that the partition id is reported in the BDF function
  (ROCm/rocm_smi_lib#208, ROCm/rocm-systems#5805), and only the first function is a PCI function that
  lspci and sysfs list. Each partition has 304 / 8 = 38 compute units and 1/8 of the VRAM: corpus
  sysfs/kfd-topology-node3-mem_banks-0-properties-mi300x-cpx.txt (size_in_bytes 25767706624, 24 GiB
  per CPX partition); amd-smi prints the partition number in `list`'s partition_id and in `static`'s
  partition object (corpus amd-smi/static-partition-mi300a-4apu-cpx-24-partitions.txt, PARTITION_ID
  cycling per device). Memory partitioning is NPS4 as in corpus
  amd-smi/monitor-mi300x-cpx-nps4-doc-example.txt.
- 4x MI210 (`mi210_node`): the Dell 4x MI210 host of corpus
  lspci/mi210x4-lspci-grep-vga-and-amd-bridges-driver-not-loaded.txt (GPUs at 4c/63/cc/e3:00.0,
  "Display controller", "Aldebaran/MI200 [Instinct MI210]"); device id 0x740f, VBIOS 113-D67301-063,
  unique-id form and firmware of the MI210s in corpus
  rocm-smi/mi210x3-mi50-mi100-mixed-5gpu-showallinfo-fru-corrupt-rocm5.4.txt (MEC 69, RLC 17, SDMA 8,
  SMC 00.68.56.00, SOS 0x0027007f, TA RAS 27.00.01.60, TA XGMI 32.00.00.13, VCN 0x0110101b), as
  amd-smi FW_IDs; gfx90a with 104 CUs and 64 GiB (MI210 specification); PCIe Gen4 x16 links; GPU pairs
  linked over PCIe (weight 40, 2 hops, corpus amd-smi/topology-2gpu-pcie-access-disabled.txt). Its two
  RDMA NICs are the fake node's Pollara model (the only NIC the fake tools print) on the buses after
  the first two GPUs.
"""

from __future__ import annotations

import random

from upgrade_gate.fakenode.spec import GpuSpec, NodeSpec, PcieLinkSpec, ionic_nics, mi300x_node
from upgrade_gate.model import replace
from upgrade_gate.parse.bdf import PciAddress

MI300X_CPX_PARTITIONS = 8
MI210_GPU_BUSES = (0x4C, 0x63, 0xCC, 0xE3)
MI210_FIRMWARE: tuple[tuple[str, str], ...] = (
    ("CP_MEC1", "69"),
    ("CP_MEC2", "69"),
    ("RLC", "17"),
    ("SDMA0", "8"),
    ("SDMA1", "8"),
    ("VCN", "0x0110101b"),
    ("PSP_SOSDRV", "0x0027007f"),
    ("TA_RAS", "27.00.01.60"),
    ("TA_XGMI", "32.00.00.13"),
    ("PM", "00.68.56.00"),
)
"""MI210 firmware as rocm-smi 5.4 printed it (corpus), under amd-smi's FW_ID names."""


def mi300x_cpx_node(
    name: str,
    *,
    seed: int = 0,
    gpu_count: int = 2,
    nic_count: int = 2,
    partitions: int = MI300X_CPX_PARTITIONS,
    node_class: str = "mi300x-cpx",
) -> NodeSpec:
    """MI300X devices in CPX/NPS4: `partitions` logical GPUs per device, sharing serial and UUID."""
    whole = mi300x_node(name, seed=seed, gpu_count=gpu_count, nic_count=nic_count, node_class=node_class)
    gpus: list[GpuSpec] = []
    for device in whole.gpus:
        address = PciAddress.parse(device.bdf)
        for part in range(partitions):
            gpus.append(
                replace(
                    device,
                    bdf=str(address.with_function(part)),
                    partition=part,
                    compute_units=device.compute_units // partitions,
                    vram_mib=device.vram_mib // partitions,
                )
            )
    return replace(
        whole,
        gpus=tuple(gpus),
        enumeration_order=tuple(range(len(gpus))),
        compute_partition="CPX",
        memory_partition="NPS4",
    )


def mi210_node(
    name: str,
    *,
    seed: int = 0,
    gpu_count: int = 4,
    nic_count: int = 2,
    node_class: str = "mi210-4gpu",
) -> NodeSpec:
    """A 4x MI210 PCIe server (Gen4 x16, no XGMI hive) with `nic_count` RDMA NICs."""
    if not 1 <= gpu_count <= len(MI210_GPU_BUSES) or not 0 <= nic_count <= len(MI210_GPU_BUSES):
        raise ValueError(f"gpu_count must be 1..4 and nic_count 0..4, got {gpu_count}, {nic_count}")
    rng = random.Random(f"{name}/{seed}/mi210")
    serial_base = 2124000000 + rng.randrange(0, 9000) * 100
    link = PcieLinkSpec(speed_gts=16.0, width=16, max_speed_gts=16.0, max_width=16)
    gpus = tuple(
        GpuSpec(
            bdf=f"0000:{bus:02x}:00.0",
            serial=f"PCB{serial_base + i:010d}",
            unique_id=rng.getrandbits(64) | (1 << 60),
            kfd_gpu_id=rng.randrange(1000, 65535),
            numa_node=0 if bus < 0x80 else 1,
            oam_id=i,
            firmware=MI210_FIRMWARE,
            vbios="113-D67301-063",
            ifwi_version="113-D67301-063",
            link=link,
            market_name="AMD Instinct MI210",
            product_name="AMD Instinct MI210",
            device_id=0x740F,
            gfx_target="gfx90a",
            compute_units=104,
            vram_mib=65536,
            pci_name="Aldebaran/MI200 [Instinct MI210]",
            pci_class="Display controller [0380]",
        )
        for i, bus in enumerate(MI210_GPU_BUSES[:gpu_count])
    )
    nics = ionic_nics(
        MI210_GPU_BUSES[:nic_count],
        host_octet=1 + rng.randrange(250),
        guid=lambda: f"0690:81ff:fe{rng.getrandbits(8):02x}:{rng.getrandbits(16):04x}",
        numa_of=lambda _i, bus: 0 if bus < 0x80 else 1,
        link=link,
    )
    return NodeSpec(
        name=name,
        node_class=node_class,
        seed=seed,
        gpus=gpus,
        enumeration_order=tuple(range(gpu_count)),
        nics=nics,
        rocm_version="6.2.3",
        rocm_build="100",
        driver_version="6.8.5",
        kernel="6.8.0-49-generic",
        cpu_name="Intel(R) Xeon(R) Platinum 8462Y+",
        gpu_link="PCIE",
        static_partition_section=False,  # MI210 has no compute or memory partition modes
    )
