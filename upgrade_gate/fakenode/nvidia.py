"""Fake NVIDIA nodes: 8x H100 SXM5 (an HGX/DGX H100 board) whose `nvidia-smi` prints real formats.

An NVIDIA node has the common host of the fake AMD node (ibv_devinfo, rdma, uname and the host facts,
rendered by `fakenode.render_host` from `NvidiaNodeSpec.host`; the replay stubs of `fakenode.build`) and
no AMD tool or file (no rocminfo, amd-smi, rocm-smi, rvs, agfhc, `/sys/module/amdgpu`, `/opt/rocm`), plus
NVIDIA's: a fake `nvidia-smi` answering the probes of `vendors.NVIDIA` (`-q -x`, `topo -m`, `nvlink -s`),
`/sys/module/nvidia/version`, NVIDIA GPU blocks in lspci and the nvidia module's load line in dmesg::

    spec = reverse_order(h100_node("gpu-node-01", seed=1, driver=DRIVER_570))
    node = build_nvidia_node(tmp_path / "gpu-node-01", spec)
    bundle = capture(LocalRunner(env=node.env(os.environ)), ..., probes=probe_catalogue(node.host_root, vendor=NVIDIA))

Formats and values (tests/fixtures/fakenode/PROVENANCE-nvidia.md lists every source):
- `nvidia-smi -q -x`: the real A100 DTD v12 document of the corpus (telegraf a100-sxm4-v12.xml): its
  header and one `<gpu>` element with this node's values in place, the MIG block in the "None" form of
  the telegraf T4 and RTX 4000 documents (a GPU with MIG off). Product name and memory (81559 MiB) are the
  corpus DGX H100 table's; architecture, VBIOS, inforom and part numbers those of a real Hopper SXM5
  `nvidia-smi -q` (H800, liguodongiot/llm-action docs/llm-base/nvidia-smi.md); GSP firmware prints the
  driver version as in the corpus A100 document.
- `nvidia-smi topo -m`: the corpus DGX H100 matrix's GPU rows (tabs, " X ", NV18 between every pair,
  CPU and NUMA affinity, the empty cell before "GPU NUMA ID" of driver 580) and the Legend block of the
  siboehm capture. The NIC columns are left out: no complete NIC legend is in the corpus (docs/vendors.md).
- `nvidia-smi nvlink -s`: the siboehm capture's layout, 18 links per GPU at 26.562 GB/s.
- `dcgmi diag -r 2` (phase 1): the corpus p4de run (DCGM 3.3.3, 8x A100) with this node's driver and device
  ids in its result cells; `dcgm_failed_gpus` fails the GPU Memory test on those GPUs.
- GPU BDFs 1b, 43, 52, 61, 9d, c3 are the corpus DGX H100 table's; d1 and df (its cut GPUs 6-7) follow
  the DGX H100 layout. Serials are 13 digits like the real ones, UUIDs random per (name, seed).
- `<remapped_rows>`: the DTD v12 form a Hopper GPU prints (the telegraf RTX 4000 v13 block less the two
  `_inactive` elements v13 added), all zero and "No"; `with_pending_remap` sets `remapped_row_pending` Yes
  and `remapped_row_unc` 1 on chosen GPUs (the fault `gpu.health` blocks on).
- Drivers: 550.127.05 / CUDA 12.4 (a real `nvidia-smi` header, thamada/nvidia-smi nvsim/A40x10_smi.py) and
  570.158.01 (the corpus NVSentinel dmesg's module) / CUDA 12.8 (the R570 branch's CUDA level).

`reverse_order` is the incident: the GPUs print in reverse order, index 0 now the last board. On a real
node nvidia-smi orders by PCI bus and CUDA by FASTEST_FIRST unless CUDA_DEVICE_ORDER=PCI_BUS_ID; the
fault stands for an enumeration that moved under the workload, told through the one probe that says it.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from upgrade_gate.fakenode import render_host
from upgrade_gate.fakenode.build import FakeNode, write_pci_tree
from upgrade_gate.fakenode.faults import Faults
from upgrade_gate.fakenode.nvidia_render import (
    nccl_params,
    render_dcgmi_diag,
    render_dmesg,
    render_lspci_gpus,
    render_nvlink,
    render_q_x,
    render_query_gpu,
    render_query_util,
    render_topo,
    write_stub_table,
    write_stub_tool,
)
from upgrade_gate.fakenode.spec import NodeSpec, PcieLinkSpec, ionic_nics
from upgrade_gate.model import replace
from upgrade_gate.parse.nvidia_smi_query import ARGV as QUERY_GPU_ARGV
from upgrade_gate.parse.nvidia_smi_query import UTIL_ARGV as QUERY_UTIL_ARGV
from upgrade_gate.vendors import NVIDIA

H100_BUSES = (0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF)
H100_AFFINITY = ("0-55,112-167", "56-111,168-223")  # NUMA 0 and 1, corpus DGX H100 topo -m


@dataclass(frozen=True, slots=True, kw_only=True)
class Driver:
    """An NVIDIA driver release and the CUDA level nvidia-smi prints with it."""

    version: str
    cuda: str


DRIVER_550 = Driver(version="550.127.05", cuda="12.4")
DRIVER_570 = Driver(version="570.158.01", cuda="12.8")


@dataclass(frozen=True, slots=True, kw_only=True)
class NvidiaGpuSpec:
    """One GPU as nvidia-smi reports it."""

    bdf: str  # lower-case dddd:bb:dd.f
    serial: str
    uuid: str  # GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
    module_id: int
    numa_node: int
    product_name: str = "NVIDIA H100 80GB HBM3"
    architecture: str = "Hopper"
    device_id: int = 0x2330
    vbios: str = "96.00.51.00.0E"
    inforom_img: str = "G520.0205.00.02"
    inforom_oem: str = "2.1"
    inforom_ecc: str = "7.16"
    board_part: str = "692-2G520-0205-000"
    gpu_part: str = "2324-865-A1"
    fb_total_mib: int = 81559
    pcie_gen: int = 5
    nvlinks: int = 18
    nvlink_gbs: str = "26.562"
    pci_name: str = "GH100 [H100 SXM5 80GB]"


@dataclass(frozen=True, slots=True, kw_only=True)
class NvidiaNodeSpec:
    """An NVIDIA node: its GPUs in nvidia-smi's order, its driver, and the common host (`host`)."""

    host: NodeSpec  # NICs, kernel, host facts (its AMD fields are not used)
    gpus: tuple[NvidiaGpuSpec, ...]  # sorted by BDF
    order: tuple[int, ...]  # positions in `gpus`, in the order nvidia-smi prints them
    driver: Driver = DRIVER_550
    timestamp: str = "Thu Dec  3 09:12:44 2026"
    mig: str = "Disabled"
    extra_dmesg: tuple[str, ...] = field(default_factory=tuple)  # kernel-log lines after the boot lines
    dcgm_failed_gpus: tuple[int, ...] = ()  # nvidia-smi indices whose GPU Memory test fails in dcgmi diag
    remap_pending_gpus: tuple[int, ...] = ()  # nvidia-smi indices with a row remap pending (`with_pending_remap`)

    @property
    def name(self) -> str:
        """The node name."""
        return self.host.name

    @property
    def enumerated(self) -> tuple[NvidiaGpuSpec, ...]:
        """The GPUs in nvidia-smi's order."""
        return tuple(self.gpus[i] for i in self.order)


def h100_node(
    name: str, *, seed: int = 0, driver: Driver = DRIVER_550, nic_count: int = 8, node_class: str = "h100-8gpu"
) -> NvidiaNodeSpec:
    """A healthy 8x H100 SXM5 node with `nic_count` RDMA NICs; identity unique per (name, seed)."""
    if not 0 <= nic_count <= len(H100_BUSES):
        raise ValueError(f"nic_count must be 0..8, got {nic_count}")
    rng = random.Random(f"{name}/{seed}/h100")
    serial_base = 1_652_000_000_000 + rng.randrange(0, 900_000) * 100
    gpus = tuple(
        NvidiaGpuSpec(
            bdf=f"0000:{bus:02x}:00.0",
            serial=str(serial_base + i),
            uuid=_uuid(rng),
            module_id=i + 1,
            numa_node=0 if i < 4 else 1,
        )
        for i, bus in enumerate(H100_BUSES)
    )
    nics = ionic_nics(
        H100_BUSES[:nic_count],
        host_octet=1 + rng.randrange(250),
        guid=lambda: f"0690:81ff:fe{rng.getrandbits(8):02x}:{rng.getrandbits(16):04x}",
        numa_of=lambda i, _bus: 0 if i < 4 else 1,
        link=PcieLinkSpec(speed_gts=32.0, width=16, max_speed_gts=32.0, max_width=16),
    )
    host = NodeSpec(
        name=name,
        node_class=node_class,
        seed=seed,
        gpus=(),
        enumeration_order=(),
        nics=nics,
        kernel="5.15.0-119-generic",
        cpu_name="Intel(R) Xeon(R) Platinum 8480C",
        kernel_params="root=/dev/mapper/ubuntu--vg-ubuntu--lv ro intel_iommu=on iommu=pt",
    )
    return NvidiaNodeSpec(host=host, gpus=gpus, order=tuple(range(len(gpus))), driver=driver)


def _uuid(rng: random.Random) -> str:
    raw = f"{rng.getrandbits(128):032x}"
    return f"GPU-{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}"


def reverse_order(spec: NvidiaNodeSpec) -> NvidiaNodeSpec:
    """The incident: the GPUs enumerate in reverse order (see the module docstring)."""
    return replace(spec, order=tuple(reversed(spec.order)))


def with_pending_remap(spec: NvidiaNodeSpec, *indices: int) -> NvidiaNodeSpec:
    """A fault: the GPUs at these nvidia-smi indices have a row remap pending (an uncorrectable error was
    remapped and waits for a GPU reset): `<remapped_row_pending>Yes` and one uncorrectable remapped row."""
    for index in indices:
        if not 0 <= index < len(spec.gpus):
            raise ValueError(f"GPU index {index} out of range 0..{len(spec.gpus) - 1}")
    return replace(spec, remap_pending_gpus=tuple(sorted({*spec.remap_pending_gpus, *indices})))


def with_driver(spec: NvidiaNodeSpec, driver: Driver) -> NvidiaNodeSpec:
    """The same node on another driver (identity unchanged)."""
    return replace(spec, driver=driver)


_REPLAY_PACKAGE = Path(__file__).parent / "_replay"  # the stubs' stdlib-only code, as fakenode.build copies it
_HOST_TOOLS = ("grep", "readlink", "env")  # the host's own binaries, as on the AMD fake node


def build_nvidia_node(root: Path, spec: NvidiaNodeSpec, faults: Faults | None = None) -> FakeNode:
    """Write `spec` under `root`: `bin/` (fake nvidia-smi, lspci, ibv_devinfo, rdma, uname, dmesg; the host's
    grep, readlink and env), `replay/` and `lib/` as `build_fake_node` lays them out, and the host-root
    tree (NIC sysfs, GPU devices, `/sys/module/nvidia/version`, host facts, no `/opt/rocm`). `faults` are
    tool-level faults by tool name ("nvidia-smi", "dcgmi", "all_reduce_perf", ...: hang, missing, non-zero,
    garbage; `fakenode.faults`), applied by the same replay stub as on AMD's fake nodes."""
    faults = faults if faults is not None else Faults()
    root = Path(os.path.abspath(root))
    bin_dir, data_dir, lib_dir, host_root = root / "bin", root / "replay", root / "lib", root / "host"
    for path in (bin_dir, data_dir, lib_dir, host_root):
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
    shutil.copytree(_REPLAY_PACKAGE, lib_dir / "_replay", ignore=shutil.ignore_patterns("__pycache__"))
    for tool in _HOST_TOOLS:
        if tool in faults.missing():
            continue
        real = shutil.which(tool)
        if real is None:
            raise RuntimeError(f"the host has no {tool}; file-read probes of a fake node need it")
        (bin_dir / tool).symlink_to(real)
    node = FakeNode(spec=spec.host, faults=faults, root=root, bin_dir=bin_dir, host_root=host_root)
    answers: dict[str, dict[tuple[str, ...], str]] = {
        "nvidia-smi": {
            ("-q", "-x"): render_q_x(spec),
            ("topo", "-m"): render_topo(spec),
            ("nvlink", "-s"): render_nvlink(spec),
            QUERY_GPU_ARGV[1:]: render_query_gpu(spec),
            QUERY_UTIL_ARGV[1:]: render_query_util(spec),
        },
        "dcgmi": {tuple(NVIDIA.phase_commands[1][1:]): render_dcgmi_diag(spec)},
        "lspci": {("-D", "-nn", "-vvv"): render_lspci_gpus(spec)},
        "ibv_devinfo": {("-v",): render_host.render_ibv_devinfo(spec.host)},
        "rdma": {("link", "show"): render_host.render_rdma_link(spec.host)},
        "uname": {("-r",): render_host.render_uname_r(spec.host)},
        "dmesg": {(): render_dmesg(spec)},
    }
    for tool, table in answers.items():
        write_stub_tool(node, tool, table)
    write_stub_table(node, "all_reduce_perf", {"dynamic": "rccl", "params": nccl_params(spec)})
    _write_host_tree(host_root, spec)
    return node


def _write_host_tree(host: Path, spec: NvidiaNodeSpec) -> None:
    write_pci_tree(host, (gpu.bdf for gpu in spec.gpus), spec.host.nics)
    module = host / "sys" / "module" / "nvidia"
    module.mkdir(parents=True)
    (module / "version").write_text(f"{spec.driver.version}\n", encoding="utf-8")
    render_host.write_host_facts(host, spec.host)
    shutil.rmtree(host / "opt" / "rocm")  # write_host_facts adds ROCm's RCCL library: an NVIDIA node has none
