"""The judge's side of "re-measure when inconclusive": the phases' `Resampling` from the policy, and the
comparison with a node's baseline that a phase may run while it measures.

The validate stage cannot import the judge (stages import one way), so the CLI builds a
`validate.remeasure.Resampling` here and hands it to the pipeline:
- `max_samples`, `noise_floor`, `print_resolution` and `node_false_block` come from the policy's
  `bandwidth.regression` entry for the node class (one source: the same parameters the judge uses);
- with baselines, `BaselineComparison` judges the phase's measurements against the node's baseline with
  `judge.curves.assess` (like with like: same unit and settings, `ignore_settings` left out; the
  policy's `tolerance_overrides` applied) and names the keys and curves that are "re-measure".

The phase's look sees only its own metrics, but judges them at the node's multiplicity (the number of
curve metrics and groups in the node's baseline, what the gate will count): measured, a look at the
phase's own, smaller count called a 10% drop at one size "block" where the gate, stricter, did not,
so the phase stopped measuring and the gate then passed it (88% caught instead of 98.5%).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from upgrade_gate.judge import curves
from upgrade_gate.judge.plan import glob_match
from upgrade_gate.judge.policy import Policy
from upgrade_gate.judge.rules.bandwidth import REGRESSION, bandwidth_key, curve_params, merged_measurements
from upgrade_gate.model import Measurement, NodeName, Snapshot
from upgrade_gate.validate.remeasure import Resampling


def policy_params(policy: Policy, node_class: str | None) -> curves.Params:
    """`bandwidth.regression`'s statistics parameters for a node class (defaults when it has no entry)."""
    entry = policy.rule_for(REGRESSION, node_class)
    return curve_params(entry) if entry is not None else curves.Params()


REMEASURED = frozenset({"workload/samples_per_s"})
"""Phase 6's throughput: judged by `workload.throughput` with the same statistics, re-measured the same way."""


class BaselineComparison:
    """Which of a phase's measurements are inconclusive against the node's baseline (judge.curves)."""

    def __init__(self, baselines: Mapping[str, Snapshot], policy: Policy) -> None:
        self._baselines = dict(baselines)
        self._policy = policy

    def __call__(self, node: NodeName, measurements: Sequence[Measurement]) -> Mapping[str, str]:
        """Inconclusive keys (a metric, or a curve such as `mesh/all_reduce/busbw`) -> why."""
        baseline = self._baselines.get(node)
        if baseline is None:
            return {}
        entry = self._policy.rule_for(REGRESSION, baseline.node.node_class)
        if entry is None:
            return {}
        params = curve_params(entry)
        ignore = set(entry.strings("ignore_settings"))
        overrides = entry.number_map("tolerance_overrides")
        base, broken = merged_measurements(baseline)
        rows = []
        for m in measurements:
            b = base.get(m.key) if bandwidth_key(m.key) or m.key in REMEASURED else None
            if b is None or m.key in broken or b.unit != m.unit or not b.samples or not m.samples:
                continue
            if {k: v for k, v in b.settings.items() if k not in ignore} != {
                k: v for k, v in m.settings.items() if k not in ignore
            }:
                continue
            tolerance = next((t for g, t in overrides.items() if glob_match(g, m.key)), None)
            rows.append(
                curves.Row(
                    key=m.key,
                    baseline=b.samples,
                    candidate=m.samples,
                    higher_is_better=b.higher_is_better,
                    tolerance=tolerance,
                )
            )
        if not rows:
            return {}
        assessment = curves.assess(rows, params, multiplicity=multiplicity_of(base))
        return {d.key: d.why for d in (*assessment.groups, *assessment.metrics) if d.outcome == "remeasure"}


def multiplicity_of(base: Mapping[str, Measurement]) -> tuple[int, int]:
    """(curve metrics, groups) of a node whose baseline measured `base`: what the gate will count."""
    sizes: dict[str, int] = {}
    for key, m in base.items():
        if m.samples and bandwidth_key(key):
            group = curves.group_of(key)
            sizes[group] = sizes.get(group, 0) + 1
    curve = sum(n for n in sizes.values() if n >= 3)
    return curve, sum(1 for n in sizes.values() if n >= 3) + sum(n for n in sizes.values() if n < 3)


def resampling(
    policy: Policy, node_class: str | None = None, *, baselines: Mapping[str, Snapshot] | None = None
) -> Resampling:
    """The phases' sequential-test policy (and baseline comparison, when baselines are given)."""
    p = policy_params(policy, node_class)
    return Resampling(
        max_samples=p.max_samples,
        noise_floor=p.noise_floor,
        resolution=p.resolution,
        node_false_block=p.node_false_block,
        compare=BaselineComparison(baselines, policy) if baselines else None,
    )
