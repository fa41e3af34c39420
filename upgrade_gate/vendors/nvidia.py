"""NVIDIA data-centre nodes: nvidia-smi, DCGM, nccl-tests, the nvidia kernel module's log, CUDA's pins.

Probes (parsers in `upgrade_gate.parse`, real outputs and provenance in docs/vendors.md):
- `nvidia_smi` (`nvidia-smi -q -x`): GPUs in nvidia-smi's order (PCI bus order), BDF, serial, UUID, VBIOS,
  inforom and GSP firmware, driver and CUDA versions, MIG mode and devices, ECC and remapped rows.
- `nvidia_smi_topo` (`nvidia-smi topo -m`): the GPU/NIC matrix (NV<n> = NVLink, PIX/PXB/PHB/NODE/SYS = PCIe).
- `nvidia_smi_nvlink` (`nvidia-smi nvlink -s`): per-link speeds; optional, since PCIe boards have none and
  a node whose links all went down still says so through `nvidia_smi_topo` (no NV<n> cell).
- `driver_version`: `/sys/module/nvidia/version`, the loaded kernel module's own version (the same probe
  name as AMD's amdgpu file, so plans and policies name one probe).

Kubernetes (`Vendor.kube`): GPUs are the NVIDIA device plugin's `nvidia.com/gpu` resource; a GPU node
carries `nvidia.com/gpu.present=true` (GPU Feature Discovery, deployed by the GPU Operator); nvidia-smi and
NVML come into a container through the NVIDIA Container Toolkit, so no host directory is mounted, and a
monitor Job that allocates no GPU asks the toolkit for every GPU with `NVIDIA_VISIBLE_DEVICES=all` and the
`utility` capability (nvidia-smi/NVML only: the toolkit's documented environment variables). No nccl-tests
or PyTorch image is named by default: NVIDIA publishes no nccl-tests image of its own, so phase 5 and phases
6-7 need the site's image (`--rccl-image`, `--workload-image`), and AMD's default images are refused there.

The order pin (CUDA's words): CUDA enumerates FASTEST_FIRST unless `CUDA_DEVICE_ORDER=PCI_BUS_ID`, and
`CUDA_VISIBLE_DEVICES` takes `GPU-<uuid>` lists as well as indices (CUDA C Programming Guide, "CUDA
Environment Variables"); a UUID list survives a re-enumeration, an index list does not.
"""

from __future__ import annotations

from upgrade_gate.parse.nvidia_smi_query import UTIL_ARGV
from upgrade_gate.vendors.amd import MESH_ARGV
from upgrade_gate.vendors.base import CommandSpec, FileSpec, KubeFacts, OrderPin, UtilSampler, Vendor

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
    kube=KubeFacts(
        gpu_resource="nvidia.com/gpu",
        node_label=("nvidia.com/gpu.present", "true"),
        unallocated_env=(("NVIDIA_VISIBLE_DEVICES", "all"), ("NVIDIA_DRIVER_CAPABILITIES", "utility")),
    ),
    util=UtilSampler(argv=UTIL_ARGV),  # index, pci.bus_id, utilization.gpu: the BDF is on every line
    field_sources={  # snapshot.nvidia: every GPU field from -q -x but the NUMA node, which is topo -m's
        "gpus": ("nvidia_smi",),
        "gpus.numa_node": ("nvidia_smi_topo",),
        "gpu_links": ("nvidia_smi_topo",),
        "software.driver_version": ("driver_version", "nvidia_smi"),
    },
)
"""The NVIDIA vendor."""
