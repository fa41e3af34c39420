"""How the benchmarks call the real judge: the same inputs the `gate` command hands it.

`gate` loads the plan and the policy (the shipped default unless `--policy`), the baselines of the
candidates' nodes, a class reference per node class (the stored one, else `aggregate_class` over the
store's baselines of that class) and the denylist, then calls `judge(...)`. `prepare` builds those
inputs for a derived fleet (the references by `aggregate_class` over the fleet's baselines, as a store
without a saved class reference gives them); `JudgeCall.run` is the part that is timed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench import fleetgen

if TYPE_CHECKING:
    from upgrade_gate.judge.plan import ChangePlan
    from upgrade_gate.judge.policy import Policy
    from upgrade_gate.model import ClassReference, GateReport, NodeName, Snapshot

NOW = "2025-06-08T12:00:00Z"
PLAN_DOCUMENT = {
    "id": f"rocm-{fleetgen.TO_ROCM}",
    "change": {"rocm": {"from": fleetgen.FROM_ROCM, "to": fleetgen.TO_ROCM}},
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Inputs:
    """Everything `judge(...)` takes, for one fleet."""

    baselines: dict[NodeName, Snapshot]
    candidates: tuple[Snapshot, ...]
    references: dict[str, ClassReference]


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgeCall:
    """The judge with the shipped default policy and the bench's change plan."""

    plan: ChangePlan | None
    policy: Policy
    include_changes: bool = True  # what `gate` does (the diff goes into the reports)
    workers: int | None = None  # None: the judge's default (forked workers, one per core, on big fleets)

    def prepare(self, nodes: Sequence[fleetgen.FleetNode]) -> Inputs:
        """Baselines, candidates and class references (aggregated over the baselines) of `nodes`."""
        from upgrade_gate.store.aggregate import aggregate_class

        baselines = {n.name: n.baseline for n in nodes}
        classes: dict[str, list[Snapshot]] = {}
        for snap in baselines.values():
            if snap.node.node_class is not None:
                classes.setdefault(snap.node.node_class, []).append(snap)
        references = {cls: aggregate_class(cls, members) for cls, members in classes.items()}
        return Inputs(baselines=baselines, candidates=tuple(n.candidate for n in nodes), references=references)

    def run(self, inputs: Inputs) -> GateReport:
        """One `judge(...)` call."""
        from upgrade_gate.judge.judge import judge

        return judge(
            baselines=inputs.baselines,
            candidates=inputs.candidates,
            plan=self.plan,
            policy=self.policy,
            references=inputs.references,
            now=NOW,
            include_changes=self.include_changes,
            workers=self.workers,
        )

    def __call__(self, nodes: Sequence[fleetgen.FleetNode]) -> GateReport:
        """prepare + run."""
        return self.run(self.prepare(nodes))


def judge_call(*, include_changes: bool = True, plan: bool = True, workers: int | None = None) -> JudgeCall:
    """The default-policy judge with the bench plan (ROCm FROM_ROCM -> TO_ROCM)."""
    from upgrade_gate.judge.plan import plan_from_dict
    from upgrade_gate.judge.policy import load_policy

    return JudgeCall(
        plan=plan_from_dict(PLAN_DOCUMENT, source="bench plan") if plan else None,
        policy=load_policy(),
        include_changes=include_changes,
        workers=workers,
    )
