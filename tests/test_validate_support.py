"""Helpers shared by the tests of the validate stage: fake nodes, their snapshots, a fast config.

Kept in a `test_validate_*` module (the tests of this stage own that name); it defines no tests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.fakenode import FakeNode, Faults, NodeSpec, build_fake_node, mi300x_node
from upgrade_gate.model import Bdf, Gpu, Nic, NicPort, NodeInfo, PcieLink, ProbeStatus, Snapshot, Software, replace
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.validate.config import CvfConfig, parse_cvf_config
from upgrade_gate.validate.launcher import LocalLauncher

FAST_STAGES = json.dumps(
    [
        {"Name": "gpu-stress", "Framework": "RVS", "Recipe": "gst_single", "TimeoutSeconds": 60},
        {"Name": "hbm-lvl1", "Framework": "AGFHC", "Recipe": "hbm_lvl1", "TimeoutSeconds": 60},
    ]
)
FAST: dict[str, Any] = {
    "GPU_VALIDATION_STAGES_JSON": FAST_STAGES,
    "PHASE4_RAIL_COUNT": "2",
    "UPGRADE_GATE_PHASE4_SERVER_START_S": "0",
    "UPGRADE_GATE_SAMPLES": "3",
}
"""A config that keeps fake-node runs short: two recipes, two rails, no server head start, 3 samples."""


def fast_config(**extra: Any) -> CvfConfig:
    """FAST plus `extra` keys, parsed like a ConfigMap."""
    return parse_cvf_config({**FAST, **extra}, source="test-config")


def make_node(root: Path, spec: NodeSpec, faults: Faults | None = None) -> FakeNode:
    """Write a fake node under root/<name>."""
    return build_fake_node(root / spec.name, spec, faults or Faults())


def snapshot_of(node: FakeNode) -> Snapshot:
    """Capture the fake node with every probe and build its snapshot (the real chain)."""
    bundle = capture(LocalRunner(env=node.env(os.environ)), node=node.spec.name, host_root=node.host_root)
    return build_snapshot(bundle)


def launcher_for(*nodes: FakeNode) -> LocalLauncher:
    """A LocalLauncher running each fake node's tools with its own PATH."""
    return LocalLauncher({n.spec.name: n.env(os.environ) for n in nodes})


def with_vfs(spec: NodeSpec, numvfs: int) -> NodeSpec:
    """Every NIC with `numvfs` SR-IOV VFs enabled."""
    return replace(spec, nics=tuple(replace(n, sriov_numvfs=numvfs) for n in spec.nics))


def healthy_spec(name: str = "node-01") -> NodeSpec:
    """The default healthy 8-GPU, 8-NIC MI300X node."""
    return mi300x_node(name, seed=1)


def nic_snapshot(
    *,
    nics: int = 8,
    port_state: str = "PORT_ACTIVE",
    gids: int | None = 4,
    numvfs: int | None = 8,
    width: int = 16,
    fw: str | None = "1.117.1-a-63",
    probes: tuple[ProbeStatus, ...] = (),
    gpus: int = 8,
) -> Snapshot:
    """A hand-built snapshot with `nics` Pollara NICs (for phase 0/3 unit tests)."""
    pcie = [
        PcieLink(bdf=Bdf(f"0000:{i:02x}:00.0"), vendor_device="1002:74a1", speed_gts=32.0, width=16)
        for i in range(gpus)
    ]
    nic_list = []
    for i in range(nics):
        bdf = Bdf(f"0000:{0x80 + i:02x}:00.0")
        down = width < 16 and i == 0
        pcie.append(
            PcieLink(
                bdf=bdf,
                vendor_device="1dd8:1002",
                speed_gts=32.0,
                width=width if i == 0 else 16,
                max_speed_gts=32.0,
                max_width=16,
                downgraded=down,
            )
        )
        port = NicPort(
            port=1,
            state=port_state if i == 0 else "PORT_ACTIVE",
            phys_state="LINK_UP" if (i or port_state == "PORT_ACTIVE") else "DISABLED",
            link_layer="Ethernet",
            gid_count=gids if i == 0 else 4,
            roce_v2=(gids or 0) > 0 if i == 0 else True,
        )
        nic_list.append(
            Nic(
                name=f"ionic_{i}",
                bdf=bdf,
                fw_ver=fw,
                ports=(port,),
                sriov_numvfs=numvfs if i == 0 else 8,
                sriov_totalvfs=16,
            )
        )
    return Snapshot(
        node=NodeInfo(name="node-01"),  # type: ignore[arg-type]
        taken_at="2026-01-01T00:00:00Z",
        tool_version="test",
        software=Software(),
        gpus=tuple(Gpu(index=i, bdf=Bdf(f"0000:{i:02x}:00.0")) for i in range(gpus)),
        pcie=tuple(pcie),
        nics=tuple(nic_list),
        probes=probes,
    )
