"""Fake GPU nodes: directories of fake tools plus a host-root tree, for tests and `upgrade-gate demo`.

A fake node is what the real capture code and the CVF phases run against when there is no GPU: fake
`rocminfo`, `amd-smi`, `rocm-smi`, `lspci`, `ibv_devinfo`, `rdma`, `uname`, `dmesg`, `rvs`, `agfhc`,
`all_reduce_perf`, `all_gather_perf`, `ib_write_bw` and `mpirun` first (alone) on PATH, the host's real
`grep`, and `sys/...` + `opt/rocm/.info/version` under a host root, so `LocalRunner` with the probe
catalogue and `--host-root` works exactly as on a real node::

    spec = faults.reverse_enumeration(mi300x_node("node-01", seed=1))
    node = build_fake_node(tmp_path / "node-01", spec, Faults(tools={"amd-smi": faults.missing()}))
    runner = LocalRunner(env=node.env(os.environ))

Every output is a real output of the corpus (`../shared/corpus/`) with this node's values substituted
and the layout kept; where the corpus has no capture the format follows the tool's own source. The
outputs of one node agree with each other (same BDFs, serials, firmware and GPU order everywhere).

Templates (upgrade_gate/data/fakenode/; full list and derivations in tests/fixtures/fakenode/PROVENANCE.md):
| output | derived from |
|---|---|
| rocminfo | rocminfo/mi300x-8gpu-rocm6.2.3-support.txt (header, CPU agents, one GPU agent block) |
| amd-smi static/version --json | amd-smi/static-json-...-amdsmi26.2.2-...json, version-json-26.2.2-...json |
| amd-smi list/firmware/topology --json | ROCm/amdsmi amdsmi_cli/amdsmi_commands.py + amdsmi_logger.py (no capture) |
| rocm-smi --json, --showtopo --json | rocm-smi/mi100-6gpu-json-all-rocm5.7.1-telegraf.json |
| lspci -D -nn -vvv | lspci/cx7-socket-direct-...txt (block layout), mi300x-sriov-host-...txt (-nn names) |
| ibv_devinfo -v | ibv_devinfo/ibv_devinfo-8x-ionic-pollara-...txt (values), cx6-2port-ib-vv-...txt (tabs, -v lines) |
| rdma link show | ibv_devinfo/rdma-link-show-bnxt_re-2port-one-DOWN-DISABLED.txt |
| all_reduce_perf / all_gather_perf / mpirun | rccl-tests/mi300x-8gpu-k8s-...-a7809b3.txt, mi300x-2node-16rank-...txt |
| ib_write_bw | perftest/ib_write_bw-gdr-use_rocm-ionic0-client-...txt and ...-server-...txt |
| rvs / agfhc | rvs/rvs-1.1.0-g-list-mi300x-8gpu.txt, rvs-gst-mi300x-one-gpu-excerpt.txt, agfhc-1.23.2-...txt |
| dmesg | dmesg/mi50-athub-...txt and mi300x-8gpu-aca-...txt (benign lines), mi300x-8gpu-aca-...txt (event) |

Shapes: `mi300x_node` (8x MI300X SPX, the default), `shapes.mi300x_cpx_node` (MI300X in CPX/NPS4: 8
partitions per device sharing serial and UUID, told apart by BDF function) and `shapes.mi210_node` (4x
MI210 PCIe cards); see `shapes.py` for the corpus files behind their values.

Dated notes:
- 2025-06: the fake amd-smi speaks the 26.2.2 JSON of the only real `static --json` capture (with the
  pre-26 `partition` object added, see render_gpu) whatever ROCm version the spec names; list,
  firmware and topology are plain JSON lists as the amdsmi_logger source prints them.
- 2025-06: `all_reduce_perf -Z json` is refused ("invalid option") - no real capture of the JSON form.
"""

from upgrade_gate.fakenode import faults
from upgrade_gate.fakenode.build import ROCMSMI_ARGV, TOOLS, FakeNode, build_fake_node
from upgrade_gate.fakenode.faults import FaultKind, Faults, ToolFault
from upgrade_gate.fakenode.shapes import mi210_node, mi300x_cpx_node
from upgrade_gate.fakenode.spec import (
    DMESG_ACA_MODE1_RESET,
    DMESG_FATAL_INIT,
    BandwidthProfile,
    GpuSpec,
    NicSpec,
    NodeSpec,
    PcieLinkSpec,
    WorkloadProfile,
    mi300x_node,
)

__all__ = [
    "DMESG_ACA_MODE1_RESET",
    "DMESG_FATAL_INIT",
    "ROCMSMI_ARGV",
    "TOOLS",
    "BandwidthProfile",
    "FakeNode",
    "FaultKind",
    "Faults",
    "GpuSpec",
    "NicSpec",
    "NodeSpec",
    "PcieLinkSpec",
    "ToolFault",
    "WorkloadProfile",
    "build_fake_node",
    "faults",
    "mi210_node",
    "mi300x_cpx_node",
    "mi300x_node",
]
