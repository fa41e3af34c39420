"""Non-invasive observation: the judge's view of a node between changes and during a soak.

A soak observation (`window observe`) and a fleet watch round (`fleet watch`) re-capture a node and
gate it against its baseline without the invasive CVF phases (acceptance, rails, multi-node RCCL),
which would take a production node out of service. What they judge: the snapshot (identity, order,
firmware, software, links, SR-IOV, NICs and their ports), kernel events and probe health; with
`mesh`, also the phase 2 mesh test and its bandwidth against the baseline's.

Design decisions
- The view is made by trimming both sides the same way, not by switching rules off: a measurement
  or phase that the observation did not run is removed from the baseline too, so no rule compares
  something against nothing, and every rule that does apply runs exactly as at the gate.
- `evidence.missing`'s required phases become the phases the observation runs (none, phase 2,
  phase 6, or both), so a mesh observation whose phase 2 did not run still blocks, a workload one
  whose phase 6 did not run (or gave no evidence) blocks too, and the others never ask for one.
  The invasive phases (1, 4, 5, and 2 without `mesh`) are declared not applicable, so their CVF
  floors are not asked of an observation; phase 3's snapshot checks (NIC count, ports) still apply.
- `workload` (issue 25: the soak watches the workload, on the cadence of `fleet.soak_workload`): phase
  6 and its `workload/` measurements are kept on both sides, so the `workload.*` rules judge the run
  against the baseline's exactly as at the gate (throughput, loss curve, init time, collective
  timeouts); a baseline without phase 6 leaves only the candidate's own checks (timeouts, the
  phase's status). Phase 7, the perturbation, is not part of a soak.
"""

from __future__ import annotations

from upgrade_gate.judge.policy import Policy
from upgrade_gate.model import Snapshot, replace

MESH_PHASE = 2
WORKLOAD_PHASE = 6
INVASIVE_PHASES = (1, 2, 4, 5)
_EVIDENCE = "evidence.missing"


def observed_phases(*, mesh: bool, workload: bool = False) -> tuple[int, ...]:
    """The phases an observation runs: phase 2 with `mesh`, phase 6 with `workload`."""
    return tuple(p for p, on in ((MESH_PHASE, mesh), (WORKLOAD_PHASE, workload)) if on)


def observation_view(snapshot: Snapshot, *, mesh: bool, workload: bool = False) -> Snapshot:
    """The snapshot trimmed to what an observation measures (phase 2 kept only with `mesh`, phase 6
    only with `workload`)."""
    keep = set(observed_phases(mesh=mesh, workload=workload))
    phases = tuple(p for p in snapshot.phases if p.phase in keep)
    prefixes = (*(("mesh/",) if mesh else ()), *(("workload/",) if workload else ()))
    measurements = tuple(m for m in snapshot.measurements if m.key.startswith(prefixes))
    return replace(snapshot, phases=phases, measurements=measurements)


def observation_policy(policy: Policy, *, mesh: bool, workload: bool = False) -> Policy:
    """The policy with `evidence.missing` requiring only the phases an observation runs."""
    phases = observed_phases(mesh=mesh, workload=workload)
    rules = tuple(
        replace(entry, params={**entry.params, "required_phases": phases}) if entry.id == _EVIDENCE else entry
        for entry in policy.rules
    )
    skipped = tuple(p for p in INVASIVE_PHASES if p not in phases)
    not_applicable = {cls: tuple(sorted(set(ps) | set(skipped))) for cls, ps in policy.phases_not_applicable.items()}
    not_applicable["*"] = tuple(sorted(set(not_applicable.get("*", ())) | set(skipped)))
    what = "".join(part for part, on in ((", mesh", mesh), (", workload", workload)) if on)
    return replace(policy, rules=rules, phases_not_applicable=not_applicable, name=f"{policy.name} (observation{what})")
