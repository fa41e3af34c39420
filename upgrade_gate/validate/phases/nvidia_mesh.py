"""Phase 2 on NVIDIA nodes: nccl-tests `all_reduce_perf` across every GPU, sampled with nvidia-smi.

nccl-tests and rccl-tests share their command line and table (rccl-tests is ROCm's port): the sweep,
the re-measurement, the measurements and the threshold (`PHASE2_BW_THRESHOLD`) are `phases.mesh`'s, and
the `rccl-tests` parser reads both (a real nccl-tests 2.18.3 run is a fixture:
tests/fixtures/rccl-tests/nccl-tests-2.18.3-16rank-2node-allreduce-cx8.txt). What differs is the thermal
sampling around the sweep: nvidia-smi's query instead of amd-smi (`phases.nvidia_thermal`).
"""

from __future__ import annotations

from upgrade_gate.validate.phases.mesh import MeshPhase
from upgrade_gate.validate.phases.nvidia_thermal import plan_line, start_nvidia_smi
from upgrade_gate.validate.phases.thermal import Starter


class NvidiaMeshPhase(MeshPhase):
    """Phase 2 of an NVIDIA node (number, name and CVF label as `MeshPhase`)."""

    thermal_start: Starter = staticmethod(start_nvidia_smi)
    thermal_plan: str = plan_line()
