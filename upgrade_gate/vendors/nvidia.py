"""NVIDIA data-centre nodes: nvidia-smi, DCGM, nccl-tests, the nvidia kernel module's log, CUDA's pins.

Probes (parsers in `upgrade_gate.parse`, real outputs and provenance in docs/vendors.md):
- `nvidia_smi` (`nvidia-smi -q -x`): GPUs in nvidia-smi's order (PCI bus order), BDF, serial, UUID, VBIOS,
  inforom and GSP firmware, driver and CUDA versions, MIG mode and devices, ECC and remapped rows.
- `nvidia_smi_topo` (`nvidia-smi topo -m`): the GPU/NIC matrix (NV<n> = NVLink, PIX/PXB/PHB/NODE/SYS = PCIe).
- `nvidia_smi_nvlink` (`nvidia-smi nvlink -s`): per-link speeds; optional, since PCIe boards have none and
  a node whose links all went down still says so through `nvidia_smi_topo` (no NV<n> cell).
- `driver_version`: `/sys/module/nvidia/version`, the loaded kernel module's own version (the same probe
  name as AMD's amdgpu file, so plans and policies name one probe).

The order pin (CUDA's words): CUDA enumerates FASTEST_FIRST unless `CUDA_DEVICE_ORDER=PCI_BUS_ID`, and
`CUDA_VISIBLE_DEVICES` takes `GPU-<uuid>` lists as well as indices (CUDA C Programming Guide, "CUDA
Environment Variables"); a UUID list survives a re-enumeration, an index list does not.
"""

from __future__ import annotations

from upgrade_gate.vendors.amd import MESH_ARGV
from upgrade_gate.vendors.base import CommandSpec, FileSpec, OrderPin, Vendor

NVIDIA = Vendor(
    name="nvidia",
    title="NVIDIA",
    marker_probe="nvidia_smi",
    gpu_probes=(
        CommandSpec(name="nvidia_smi", argv=("nvidia-smi", "-q", "-x"), parser="nvidia-smi-q-x"),
        CommandSpec(name="nvidia_smi_topo", argv=("nvidia-smi", "topo", "-m"), parser="nvidia-smi-topo"),
        CommandSpec(
            name="nvidia_smi_nvlink",
            argv=("nvidia-smi", "nvlink", "-s"),
            parser="nvidia-smi-nvlink",
            required=False,
            absent_warns=True,
        ),
    ),
    stack_probes=(FileSpec(name="driver_version", globs=("sys/module/nvidia/version",)),),
    dmesg_parser="dmesg-nvidia",
    kernel_patterns="dmesg_patterns_nvidia.yaml",
    anchor_probes=("nvidia_smi", "lspci", "kernel", "driver_version", "dmesg"),
    pin=OrderPin(
        uuid_var="CUDA_VISIBLE_DEVICES",
        index_var="CUDA_VISIBLE_DEVICES",
        fixed=(("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),),
        note="UUIDs survive re-enumeration, and CUDA's default order is FASTEST_FIRST, not PCI bus order",
    ),
    fake_shapes=("upgrade_gate.fakenode.nvidia.h100_node",),
    phase_commands={
        1: ("dcgmi", "diag", "-r", "2"),
        2: MESH_ARGV,
    },
    tools=("nvidia-smi", "dcgmi"),
    gpu_evidence=("nvidia_smi",),
    no_gpu=(
        "no NVIDIA GPU found on the node (nvidia-smi -q -x lists none; check `nvidia-smi` and `lsmod | grep nvidia`)"
    ),
)
"""The NVIDIA vendor."""
