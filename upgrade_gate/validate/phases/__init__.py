"""The six CVF phases, one module each, the workload phases 6-7, and the default set in phase order."""

from __future__ import annotations

from upgrade_gate.validate.phase import GroupPhase, NodePhase
from upgrade_gate.validate.phases.acceptance import AcceptancePhase
from upgrade_gate.validate.phases.cluster import ClusterPhase
from upgrade_gate.validate.phases.eligibility import EligibilityPhase
from upgrade_gate.validate.phases.mesh import MeshPhase
from upgrade_gate.validate.phases.nic import NicHealthPhase
from upgrade_gate.validate.phases.rail import RailPhase
from upgrade_gate.validate.phases.workload import PerturbationPhase, WorkloadPhase


def default_phases() -> tuple[NodePhase | GroupPhase, ...]:
    """CVF's phases 0-5 in order (the workload phases are asked for by number or name: `all_phases`)."""
    return (EligibilityPhase(), AcceptancePhase(), MeshPhase(), NicHealthPhase(), RailPhase(), ClusterPhase())


def all_phases() -> tuple[NodePhase | GroupPhase, ...]:
    """Phases 0-7: CVF's six, then the reference training run (6) and the device-order perturbation (7)."""
    return (*default_phases(), WorkloadPhase(), PerturbationPhase())


def select_phases(numbers: frozenset[int]) -> tuple[NodePhase | GroupPhase, ...]:
    """The phases (0-7) whose number is in `numbers`, in order."""
    return tuple(p for p in all_phases() if p.number in numbers)


__all__ = [
    "AcceptancePhase",
    "ClusterPhase",
    "EligibilityPhase",
    "MeshPhase",
    "NicHealthPhase",
    "PerturbationPhase",
    "RailPhase",
    "WorkloadPhase",
    "all_phases",
    "default_phases",
    "select_phases",
]
