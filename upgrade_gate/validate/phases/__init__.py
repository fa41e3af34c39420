"""The six CVF phases, one module each, and the default set in phase order."""

from __future__ import annotations

from upgrade_gate.validate.phase import GroupPhase, NodePhase
from upgrade_gate.validate.phases.acceptance import AcceptancePhase
from upgrade_gate.validate.phases.cluster import ClusterPhase
from upgrade_gate.validate.phases.eligibility import EligibilityPhase
from upgrade_gate.validate.phases.mesh import MeshPhase
from upgrade_gate.validate.phases.nic import NicHealthPhase
from upgrade_gate.validate.phases.rail import RailPhase


def default_phases() -> tuple[NodePhase | GroupPhase, ...]:
    """Phases 0-5 in order."""
    return (EligibilityPhase(), AcceptancePhase(), MeshPhase(), NicHealthPhase(), RailPhase(), ClusterPhase())


def select_phases(numbers: frozenset[int]) -> tuple[NodePhase | GroupPhase, ...]:
    """The default phases whose number is in `numbers`, in order."""
    return tuple(p for p in default_phases() if p.number in numbers)


__all__ = [
    "AcceptancePhase",
    "ClusterPhase",
    "EligibilityPhase",
    "MeshPhase",
    "NicHealthPhase",
    "RailPhase",
    "default_phases",
    "select_phases",
]
