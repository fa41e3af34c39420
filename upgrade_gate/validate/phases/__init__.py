"""The six CVF phases, one module each, the workload phases 6-7, and the default set in phase order.

A vendor (`vendors.Vendor`) picks its own phase 1 and 2: AMD's RVS/AGFHC and rccl-tests with amd-smi
sampling, NVIDIA's `dcgmi diag -r 2` and nccl-tests with nvidia-smi sampling (docs/vendors.md); phases 0
and 3-7 run the same commands for both (phase 0 words its findings, and picks its default selector, by
the vendor; phases 3-4 read the snapshot and run `ib_write_bw` from host memory, phase 5's nccl-tests and
rccl-tests share their command line, phase 6 samples utilisation with the vendor's tool: docs/vendors.md).
"""

from __future__ import annotations

from upgrade_gate.validate.phase import GroupPhase, NodePhase
from upgrade_gate.validate.phases.acceptance import AcceptancePhase
from upgrade_gate.validate.phases.cluster import ClusterPhase
from upgrade_gate.validate.phases.dcgm import DcgmAcceptancePhase
from upgrade_gate.validate.phases.eligibility import EligibilityPhase
from upgrade_gate.validate.phases.mesh import MeshPhase
from upgrade_gate.validate.phases.nic import NicHealthPhase
from upgrade_gate.validate.phases.nvidia_mesh import NvidiaMeshPhase
from upgrade_gate.validate.phases.rail import RailPhase
from upgrade_gate.validate.phases.workload import PerturbationPhase, WorkloadPhase
from upgrade_gate.vendors import AMD, NVIDIA, Vendor


def default_phases(vendor: Vendor = AMD) -> tuple[NodePhase | GroupPhase, ...]:
    """CVF's phases 0-5 in order, phases 1-2 the vendor's (the workload phases: `all_phases`)."""
    gpu: tuple[NodePhase, NodePhase] = (
        (DcgmAcceptancePhase(), NvidiaMeshPhase()) if vendor.name == NVIDIA.name else (AcceptancePhase(), MeshPhase())
    )
    return (EligibilityPhase(vendor), *gpu, NicHealthPhase(), RailPhase(), ClusterPhase())


def all_phases(vendor: Vendor = AMD) -> tuple[NodePhase | GroupPhase, ...]:
    """Phases 0-7: CVF's six, then the reference training run (6) and the device-order perturbation (7)."""
    return (*default_phases(vendor), WorkloadPhase(vendor), PerturbationPhase(vendor))


def select_phases(numbers: frozenset[int], vendor: Vendor = AMD) -> tuple[NodePhase | GroupPhase, ...]:
    """The phases (0-7) whose number is in `numbers`, in order, phases 1-2 the vendor's."""
    return tuple(p for p in all_phases(vendor) if p.number in numbers)


__all__ = [
    "AcceptancePhase",
    "ClusterPhase",
    "DcgmAcceptancePhase",
    "EligibilityPhase",
    "MeshPhase",
    "NicHealthPhase",
    "NvidiaMeshPhase",
    "PerturbationPhase",
    "RailPhase",
    "WorkloadPhase",
    "all_phases",
    "default_phases",
    "select_phases",
]
