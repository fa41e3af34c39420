"""Which of a policy's rule parameters judge more leniently than the shipped default: named, never silent.

A policy may weaken a rule without switching it off: `tolerance_overrides: {'**': 1.0}`, both of
`pcie.downgrade`'s comparisons false, a clock skew of years, `block_severities: []` (break test
2026-12-07: each passed a canary that the default blocks, without a word, while `enabled: false` on
the same rule was announced and kept the checklist from reading `pass`). So every declared parameter
says here, on purpose, which way judges more leniently (`LOOSER`; a test holds the table to the rule
registry, so a new parameter must take a side), and:
- `gate` names each loosened parameter on stderr beside the rules switched off (`Policy.switched_off`);
- a checklist item whose rule is loosened for a node reads `unverified`, as for a rule switched off: a
  person attests it or the checklist blocks (`judge.checklist`);
- a parameter choice that leaves a rule nothing to judge is refused on load (`refuse_degenerate`).
A stricter or neutral change is the site's business and is not named.

Directions: `higher` / `lower` (a number), `false` (a boolean switched off), `fewer` (a default item
dropped from a list), `more` (an item added to a list of things ignored), `severity` (a severity word
below the default's: block > warn > info), `other` (any change: which metric is judged), `map` (a
`tolerance_overrides` value above the rule's shipped `tolerance`), `unlisted` (a shipped warn severity
that this entry neither warns nor blocks on), `neutral` (sampling effort or which test, not the bar).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from upgrade_gate.errors import ConfigError

if TYPE_CHECKING:
    from upgrade_gate.judge.plan import ChangePlan
    from upgrade_gate.judge.policy import Policy, RuleEntry

PLAN_JUDGED = ("bandwidth.regression", "fleet.odd_one_out")
"""The rules that judge a plan-accepted measurement against the plan's shift and tolerance."""

LOOSER: Mapping[tuple[str, str], str] = {
    ("firmware.unplanned", "ignore_blocks"): "more",
    ("gpu.health", "missing_evidence"): "severity",
    ("gpu.health", "nonzero_unchanged"): "severity",
    ("gpu.health", "reported_by"): "fewer",
    ("pcie.downgrade", "compare_to_max"): "false",
    ("pcie.downgrade", "compare_to_baseline"): "false",
    ("bandwidth.regression", "tolerance"): "higher",
    ("bandwidth.regression", "curve_tolerance"): "higher",
    ("bandwidth.regression", "alpha"): "higher",
    ("bandwidth.regression", "tolerance_few_samples"): "higher",
    ("bandwidth.regression", "min_samples"): "neutral",  # which test (rank or relative), each with its own bar
    ("bandwidth.regression", "metrics"): "other",
    ("bandwidth.regression", "ignore_settings"): "more",
    ("bandwidth.regression", "tolerance_overrides"): "map",
    ("bandwidth.regression", "print_resolution"): "higher",
    ("bandwidth.regression", "node_false_block"): "lower",
    ("bandwidth.regression", "detect_drop"): "neutral",
    ("bandwidth.regression", "miss_rate"): "neutral",
    ("bandwidth.regression", "min_effect"): "higher",
    ("bandwidth.regression", "max_samples"): "neutral",
    ("bandwidth.regression", "noise_floor"): "higher",
    ("bandwidth.regression", "class_min_nodes"): "higher",
    ("bandwidth.regression", "inconclusive"): "severity",
    ("bandwidth.threshold", "mesh_metric"): "other",
    ("bandwidth.threshold", "rail_metrics"): "other",
    ("bandwidth.threshold", "check_rail_count"): "false",
    ("metric.threshold", "checks"): "neutral",  # the site's own checks; the default has none
    ("evidence.taken_at", "clock_skew_s"): "higher",
    ("evidence.missing", "required_phases"): "fewer",
    ("evidence.missing", "required_probes"): "fewer",
    ("evidence.missing", "nic_probes"): "fewer",
    ("evidence.missing", "class_min_nodes"): "lower",
    ("evidence.missing", "unreported_gpu_fields"): "fewer",
    ("dmesg.fatal", "block_severities"): "fewer",
    ("dmesg.fatal", "warn_severities"): "unlisted",  # a shipped warn severity now neither blocks nor warns
    ("fleet.odd_one_out", "check_metrics"): "false",
    ("fleet.odd_one_out", "metric_tolerance"): "higher",
    ("fleet.odd_one_out", "metric_spread_k"): "higher",
    ("fleet.odd_one_out", "metric_min_nodes"): "higher",
    ("fleet.odd_one_out", "ignore_settings"): "more",
    ("thermal.outlier", "threshold_c"): "higher",
    ("thermal.outlier", "baseline_threshold_c"): "higher",
    ("thermal.outlier", "min_peers"): "higher",
    ("thermal.outlier", "class_min_nodes"): "higher",
    ("thermal.outlier", "missing_evidence"): "severity",
    ("workload.evidence", "without_baseline"): "severity",
    ("workload.throughput", "tolerance"): "higher",
    ("workload.loss_curve", "tolerance"): "higher",
    ("workload.loss_curve", "floor"): "higher",
    ("workload.init_time", "max_ratio"): "higher",
    ("workload.init_time", "min_increase_s"): "higher",
    ("workload.allreduce_latency", "max_us"): "higher",
    ("workload.allreduce_latency", "tolerance"): "higher",
    ("workload.allreduce_latency", "max_bytes"): "lower",
    ("workload.index_dependent", "throughput_tolerance"): "higher",
    ("workload.utilisation_spread", "max_ratio"): "higher",
    ("workload.utilisation_spread", "min_increase_pct"): "higher",
    ("workload.utilisation_spread", "missing_evidence"): "severity",
}

_RANK = {"block": 3, "warn": 2, "info": 1}


def _looser(direction: str, value: Any, shipped: Any, shipped_entry: Mapping[str, Any]) -> bool:
    if direction == "higher":
        return bool(value > shipped)
    if direction == "lower":
        return bool(value < shipped)
    if direction == "false":
        return bool(shipped) and not value
    if direction == "fewer":
        return bool(set(shipped) - set(value))
    if direction == "more":
        return bool(set(value) - set(shipped))
    if direction == "severity":
        return _RANK.get(str(value), 3) < _RANK.get(str(shipped), 3)
    if direction == "other":
        return bool(value != shipped)
    if direction == "unlisted":
        return bool(set(shipped) - set(value) - set(shipped_entry.get("_block", ())))
    if direction == "map":
        return any(v > shipped_entry.get("tolerance", 0.0) for v in dict(value).values())
    return False


def loosened(entry: RuleEntry, shipped: RuleEntry | None) -> tuple[str, ...]:
    """`entry`'s parameters set more leniently than the shipped default's general entry for its rule."""
    if shipped is None:
        return ()
    out = []
    context = {**shipped.params, "_block": entry.params.get("block_severities", ())}
    for name, value in sorted(entry.params.items()):
        direction = LOOSER.get((entry.id, name), "neutral")
        default = shipped.params.get(name)
        if default is not None and _looser(direction, value, default, context):
            out.append(f"{name} {_show(value)} (shipped: {_show(default)})")
    return tuple(out)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(map(str, value)) + "]"
    return repr(value) if isinstance(value, dict) else str(value)


def policy_loosened(policy: Policy, shipped: Policy) -> tuple[str, ...]:
    """One phrase per enabled entry of `policy` that loosens parameters, e.g.
    `pcie.downgrade for lab: compare_to_max false (shipped: true)`."""
    out = []
    for entry in policy.rules:
        if not entry.enabled:
            continue
        found = loosened(entry, shipped.rule_for(entry.id, None))
        if found:
            where = f"{entry.id} for {', '.join(entry.applies_to)}" if entry.applies_to else entry.id
            out.append(f"{where}: {', '.join(found)}")
    return tuple(out)


def refuse_degenerate(entry: RuleEntry, where: str) -> None:
    """A ConfigError for parameters that leave an enabled rule nothing to judge (switching it off takes
    `enabled: false`, which the verdict names and the checklist does not count as a pass)."""
    if not entry.enabled:
        return
    both_off = not entry.params.get("compare_to_max", True) and not entry.params.get("compare_to_baseline", True)
    if entry.id == "pcie.downgrade" and both_off:
        raise ConfigError(
            f"{where}: pcie.downgrade with compare_to_max and compare_to_baseline both false judges nothing; "
            "switch it off with `enabled: false` if that is meant"
        )


def plan_loosened(plan: ChangePlan | None, policy: Policy, node_class: str | None) -> tuple[str, ...]:
    """The plan's metric accepts whose tolerance is wider than the policy's `bandwidth.regression` tolerance
    for `node_class`: the measurements they match are judged more leniently than the policy would (a plan's
    `{metric: "mesh/**", tolerance: 1.0}` passed a -20% bus bandwidth with no finding: break test 2026-12-07).
    A plan declares an expected cost on purpose; a wider bar is still named, and is not a checklist pass."""
    entry = policy.rule_for("bandwidth.regression", node_class)
    if plan is None or entry is None or not entry.enabled:
        return ()
    bar = entry.number("tolerance")
    return tuple(
        f"{plan.source}: accept[{i}] {a.metric} shift {a.shift:+.0%} within {a.tolerance:.0%} (the policy's: {bar:.0%})"
        for i, a in enumerate(plan.accept_metrics)
        if a.tolerance > bar
    )
