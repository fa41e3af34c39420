"""Bandwidth rules: regression against the baseline, comparability, CVF's absolute thresholds, and a
generic metric check with a closed set of operators.

Design decisions:
- Like with like only: two measurements of a key compare only when unit and settings are equal
  (sweep sizes, iterations, ranks, datatype, NCCL_*/RCCL_* env). Anything else is a
  `bandwidth.not_comparable` finding, never a silent pass: a metric measured in the baseline that is
  absent from the candidate, measured with other settings, in another unit, or with no samples.
  Settings named in `ignore_settings` (default `peer`: phase 4 pairs a rail with whatever node is
  free, as CVF does) are left out of the comparison.
- The same key twice in one snapshot (its own measurements and a phase's) is merged when unit and
  settings agree (samples pooled) and is not comparable otherwise.
- `bandwidth.regression` decides per metric with `judge.stats` (its docstring has the reasoning and
  the measured rates): a metric blocks when its Hodges-Lehmann relative drop exceeds the tolerance
  (which carries the per-node multiple-testing control) AND, with >= min_samples per side, the
  one-sided Mann-Whitney test is significant. A drop beyond the tolerance that is not significant is
  a warning. With fewer samples the wider `tolerance_few_samples` alone decides (the message says
  so). A plan's `accept` metric entry replaces the expectation: candidate ~ baseline * (1 + shift),
  with its own tolerance.
- `bandwidth.threshold` applies CVF's absolute floors to the candidate's medians:
  `PHASE2_BW_THRESHOLD` (GB/s) to `mesh/all_reduce/avg_busbw` (CVF compares "# Avg bus bandwidth"),
  `PHASE4_BW_THRESHOLD` (Gb/s) to every `rail/*/write_bw`, and requires `PHASE4_RAIL_COUNT` rails
  for classes that run phase 4. A missing metric for a phase that applies blocks.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from upgrade_gate.judge import stats
from upgrade_gate.judge.plan import glob_match, metric_expectation
from upgrade_gate.judge.rules.base import OPERATORS, STATISTICS, NodeContext, ParamSpec, finding, softer, spec
from upgrade_gate.model import Finding, Measurement, Snapshot, measurements_of

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry

REGRESSION = "bandwidth.regression"


# Several rules read the merged measurements of the same snapshot; a judge run builds them once per
# snapshot. Keyed by identity (snapshots hold dicts, so they are not hashable) with the snapshot kept
# alive in the entry so an id is never reused while cached; small, since rules run node by node.
_MERGED: dict[int, tuple[Snapshot, tuple[dict[str, Measurement], dict[str, str]]]] = {}
_MERGED_MAX = 16


def merged_measurements(snapshot: Snapshot) -> tuple[dict[str, Measurement], dict[str, str]]:
    """Measurements by key (duplicates pooled), and keys that could not be merged -> why (do not mutate)."""
    hit = _MERGED.get(id(snapshot))
    if hit is not None and hit[0] is snapshot:
        return hit[1]
    merged = _merge(snapshot)
    if len(_MERGED) >= _MERGED_MAX:
        _MERGED.clear()
    _MERGED[id(snapshot)] = (snapshot, merged)
    return merged


def _merge(snapshot: Snapshot) -> tuple[dict[str, Measurement], dict[str, str]]:
    out: dict[str, Measurement] = {}
    broken: dict[str, str] = {}
    for m in measurements_of(snapshot):
        have = out.get(m.key)
        if have is None:
            out[m.key] = m
        elif have.unit == m.unit and have.settings == m.settings:
            out[m.key] = Measurement(
                key=m.key,
                unit=m.unit,
                samples=have.samples + m.samples,
                settings=dict(m.settings),
                source=have.source,
                higher_is_better=have.higher_is_better,
            )
        else:
            broken[m.key] = f"measured twice with different settings ({have.settings} vs {m.settings})"
    return out, broken


def _settings_diff(a: Mapping[str, str], b: Mapping[str, str], ignore: tuple[str, ...]) -> list[str]:
    if a == b:
        return []
    keys = sorted((set(a) | set(b)) - set(ignore))
    return [f"{k} {a.get(k, 'unset')} -> {b.get(k, 'unset')}" for k in keys if a.get(k) != b.get(k)]


def _selected(entry: RuleEntry, key: str) -> bool:
    globs = entry.strings("metrics")
    return "**" in globs or any(glob_match(g, key) for g in globs)


def _regression_entry(ctx: NodeContext, fallback: RuleEntry) -> RuleEntry:
    return ctx.policy.rule_for(REGRESSION, ctx.node_class) or fallback


def _usable(samples: tuple[float, ...]) -> bool:
    # A NaN or an infinity anywhere makes the sum non-finite (bandwidths never overflow a float).
    return bool(samples) and math.isfinite(sum(samples))


def check_not_comparable(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Baseline metrics the candidate cannot be compared on (absent, other settings/unit, no samples)."""
    assert ctx.baseline is not None
    params = _regression_entry(ctx, entry)
    ignore = params.strings("ignore_settings")
    base, base_broken = merged_measurements(ctx.baseline)
    cand, cand_broken = merged_measurements(ctx.candidate)
    for key, why in sorted({**base_broken, **cand_broken}.items()):
        if _selected(params, key):
            yield finding(ctx, entry, f"{key}: {why}", device=key, path=f"measurements[key={key}]")
    for key in sorted(base):
        if not _selected(params, key) or key in base_broken or key in cand_broken:
            continue
        b, c = base[key], cand.get(key)
        path = f"measurements[key={key}]"
        expected: object
        actual: object
        if c is None:
            message, expected, actual = f"{key}: measured in the baseline, absent from the candidate", key, None
        elif b.unit != c.unit:
            message, expected, actual = f"{key}: unit {b.unit} in the baseline, {c.unit} now", b.unit, c.unit
        elif diffs := _settings_diff(b.settings, c.settings, ignore):
            message = f"{key}: not comparable, settings differ: {'; '.join(diffs)}"
            expected, actual = dict(b.settings), dict(c.settings)
        elif not _usable(b.samples) or not _usable(c.samples):
            message = f"{key}: no usable samples (baseline {len(b.samples)}, candidate {len(c.samples)})"
            expected, actual = len(b.samples), len(c.samples)
        else:
            continue
        yield finding(ctx, entry, message, device=key, path=path, expected=expected, actual=actual, evidence=b.source)


def check_regression(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Per-metric regression: drop beyond tolerance AND a one-sided rank test (see judge.stats)."""
    assert ctx.baseline is not None
    ignore = entry.strings("ignore_settings")
    overrides = entry.number_map("tolerance_overrides")
    alpha, min_samples = entry.number("alpha"), entry.integer("min_samples")
    few = entry.number("tolerance_few_samples")
    resolution = entry.number("print_resolution")
    base, base_broken = merged_measurements(ctx.baseline)
    cand, cand_broken = merged_measurements(ctx.candidate)
    for key in sorted(base.keys() & cand.keys()):
        if not _selected(entry, key) or key in base_broken or key in cand_broken:
            continue
        b, c = base[key], cand[key]
        if b.unit != c.unit or _settings_diff(b.settings, c.settings, ignore):
            continue
        if not _usable(b.samples) or not _usable(c.samples):
            continue
        tolerance = next((t for g, t in overrides.items() if glob_match(g, key)), entry.number("tolerance"))
        shift, accepted_by = 0.0, None
        expectation = metric_expectation(ctx.plan, key)
        if expectation is not None:
            accepted, index = expectation
            shift, tolerance, accepted_by = accepted.shift, accepted.tolerance, f"accept[{index}]"
        # A value printed as 0.13 moves 7.7% with one printed step: under two steps is not evidence.
        floor = 2 * resolution / abs(stats.median(b.samples)) if stats.median(b.samples) else 0.0
        tolerance = max(tolerance, floor)
        try:
            cmp = stats.compare(
                key,
                b.samples,
                c.samples,
                higher_is_better=b.higher_is_better,
                shift=shift,
                min_samples=min_samples,
                tolerance=tolerance,
            )
        except ValueError as exc:
            yield finding(ctx, entry, str(exc), device=key, path=f"measurements[key={key}]")
            continue
        outcome = stats.decide(
            cmp, tolerance=tolerance, alpha=alpha, tolerance_few_samples=few, min_samples=min_samples
        )
        if outcome == "ok":
            continue
        what = (
            f"{key}: {cmp.drop:.1%} worse than the baseline (median {cmp.baseline_median:.2f} -> "
            f"{cmp.candidate_median:.2f} {b.unit}, {cmp.n_baseline} vs {cmp.n_candidate} samples)"
        )
        plan_note = f" of plan {accepted_by}" if accepted_by else ""
        if cmp.p_value is None:
            why = (
                f"beyond the {max(tolerance, few):.0%} tolerance for fewer than {min_samples} samples per side "
                "(no rank test possible: the drop alone decides)"
            )
        elif outcome == "block":
            why = f"beyond the {tolerance:.0%} tolerance{plan_note}; one-sided Mann-Whitney p={cmp.p_value:.4f}"
        else:
            why = (
                f"beyond the {tolerance:.0%} tolerance{plan_note} but not significant "
                f"(one-sided Mann-Whitney p={cmp.p_value:.4f} > {alpha:g})"
            )
        yield finding(
            ctx,
            entry,
            f"{what}, {why}",
            device=key,
            path=f"measurements[key={key}]",
            expected=cmp.baseline_median,
            actual=cmp.candidate_median,
            evidence=b.source,
            severity=None if outcome == "block" else softer(entry.severity),
        )


def _median(m: Measurement) -> float | None:
    return statistics.median(m.samples) if _usable(m.samples) else None


def check_threshold(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """CVF absolute floors: PHASE2_BW_THRESHOLD on the mesh average, PHASE4_BW_THRESHOLD per rail."""
    t = ctx.policy.thresholds
    cand, _ = merged_measurements(ctx.candidate)
    mesh_key = entry.string("mesh_metric")
    if ctx.policy.phase_applies(2, ctx.node_class):
        yield from _floor(
            ctx,
            entry,
            cand.get(mesh_key),
            mesh_key,
            "GB/s",
            t.mesh_avg_busbw_min_gbs,
            "PHASE2_BW_THRESHOLD",
            t.source("mesh_avg_busbw_min_gbs"),
        )
    if ctx.policy.phase_applies(4, ctx.node_class):
        rails = sorted(k for k in cand if glob_match(entry.string("rail_metrics"), k))
        for key in rails:
            yield from _floor(
                ctx,
                entry,
                cand[key],
                key,
                "Gb/s",
                t.rail_bw_min_gbits,
                "PHASE4_BW_THRESHOLD",
                t.source("rail_bw_min_gbits"),
            )
        if entry.flag("check_rail_count") and len(rails) < t.rail_count:
            yield finding(
                ctx,
                entry,
                f"{len(rails)} rail bandwidth measurement(s), PHASE4_RAIL_COUNT is {t.rail_count} "
                f"({t.source('rail_count')})",
                path=f"measurements[key={entry.string('rail_metrics')}]",
                expected=t.rail_count,
                actual=len(rails),
                evidence="phase 4",
            )


def _floor(
    ctx: NodeContext,
    entry: RuleEntry,
    m: Measurement | None,
    key: str,
    unit: str,
    floor: float,
    cvf_key: str,
    source: str,
) -> Iterable[Finding]:
    path = f"measurements[key={key}]"
    if m is None or _median(m) is None:
        yield finding(
            ctx,
            entry,
            f"{key}: no measurement to check against {cvf_key} {floor:g} {unit}",
            device=key,
            path=path,
            expected=floor,
            actual=None,
        )
        return
    value = _median(m)
    assert value is not None
    if m.unit != unit:
        yield finding(
            ctx,
            entry,
            f"{key}: unit {m.unit}, but {cvf_key} is in {unit}",
            device=key,
            path=path,
            expected=unit,
            actual=m.unit,
            evidence=m.source,
        )
    elif value < floor:
        yield finding(
            ctx,
            entry,
            f"{key}: median {value:.2f} {unit} is below {cvf_key} {floor:g} {unit} ({source})",
            device=key,
            path=path,
            expected=floor,
            actual=value,
            evidence=m.source,
        )


def check_metric(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Generic checks `statistic(samples) <op> value` on metrics matching a glob (closed operator set)."""
    cand, _ = merged_measurements(ctx.candidate)
    for check in entry.checks("checks"):
        keys = sorted(k for k in cand if glob_match(check.metric, k))
        if not keys:
            yield finding(
                ctx,
                entry,
                f"no measurement matches {check.metric} (check {check.statistic} {check.op} {check.value:g})",
                path=f"measurements[key={check.metric}]",
                expected=check.value,
            )
        for key in keys:
            m = cand[key]
            if not _usable(m.samples):
                yield finding(ctx, entry, f"{key}: no usable samples", device=key, path=f"measurements[key={key}]")
                continue
            value = float(STATISTICS[check.statistic](m.samples))
            if not OPERATORS[check.op](value, check.value):
                yield finding(
                    ctx,
                    entry,
                    f"{key}: {check.statistic} {value:.2f} {m.unit} fails {check.op} {check.value:g}",
                    device=key,
                    path=f"measurements[key={key}]",
                    expected=f"{check.op} {check.value:g}",
                    actual=value,
                    evidence=m.source,
                )


SPECS = (
    spec(
        REGRESSION,
        "a metric dropped beyond its tolerance, confirmed by a one-sided rank test",
        check_regression,
        needs_baseline=True,
        params={
            "tolerance": ParamSpec(
                kind="number", default=stats.DEFAULT_TOLERANCE, doc="relative drop allowed", minimum=0, maximum=1
            ),
            "alpha": ParamSpec(
                kind="number", default=stats.DEFAULT_ALPHA, doc="per-metric rank-test level", minimum=1e-6, maximum=0.5
            ),
            "tolerance_few_samples": ParamSpec(
                kind="number",
                default=stats.DEFAULT_TOLERANCE_FEW_SAMPLES,
                doc="relative drop allowed without a rank test (fewer than min_samples per side)",
                minimum=0,
                maximum=1,
            ),
            "min_samples": ParamSpec(
                kind="integer", default=stats.DEFAULT_MIN_SAMPLES, doc="samples per side for the test", minimum=3
            ),
            "metrics": ParamSpec(kind="strings", default=("**",), doc="metric key globs judged"),
            "ignore_settings": ParamSpec(kind="strings", default=("peer",), doc="settings not compared"),
            "tolerance_overrides": ParamSpec(kind="number_map", default={}, doc="metric glob -> tolerance"),
            "print_resolution": ParamSpec(
                kind="number",
                default=0.01,
                doc="smallest step the tools print (rccl-tests, perftest: 2 decimals); a drop of under two "
                "steps is no evidence, so small values get a wider tolerance",
                minimum=0,
            ),
        },
    ),
    spec(
        "bandwidth.not_comparable",
        "a baseline metric is absent, or measured with other settings/unit (uses bandwidth.regression's params)",
        check_not_comparable,
        needs_baseline=True,
    ),
    spec(
        "bandwidth.threshold",
        "CVF absolute floors: PHASE2_BW_THRESHOLD (mesh), PHASE4_BW_THRESHOLD and PHASE4_RAIL_COUNT (rails)",
        check_threshold,
        params={
            "mesh_metric": ParamSpec(kind="string", default="mesh/all_reduce/avg_busbw", doc="phase 2 metric"),
            "rail_metrics": ParamSpec(kind="string", default="rail/*/write_bw", doc="phase 4 metric glob"),
            "check_rail_count": ParamSpec(kind="boolean", default=True, doc="require PHASE4_RAIL_COUNT rails"),
        },
    ),
    spec(
        "metric.threshold",
        "generic checks statistic(samples) <op> value with a closed operator set (ge gt le lt eq ne)",
        check_metric,
        params={"checks": ParamSpec(kind="checks", default=(), doc="list of {metric, op, value, statistic}")},
    ),
)
