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

from upgrade_gate.judge import curves, stats
from upgrade_gate.judge.plan import glob_match, metric_expectation
from upgrade_gate.judge.rules.base import OPERATORS, STATISTICS, NodeContext, ParamSpec, finding, softer, spec
from upgrade_gate.model import Finding, Measurement, Severity, Snapshot, measurements_of

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry

REGRESSION = "bandwidth.regression"
THERMAL_PREFIX = "thermal/"
"""Measurements under this prefix (phase 2's temperatures and power) are judged by `rules.thermal` only."""


def bandwidth_key(key: str) -> bool:
    """True for a measurement the bandwidth rules judge (everything but the thermal readings)."""
    return not key.startswith(THERMAL_PREFIX)


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
    if not bandwidth_key(key):
        return False
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


def curve_params(entry: RuleEntry) -> curves.Params:
    """`judge.curves.Params` from `bandwidth.regression`'s policy parameters."""
    return curves.Params(
        tolerance=entry.number("tolerance"),
        alpha=entry.number("alpha"),
        node_false_block=entry.number("node_false_block"),
        detect_drop=entry.number("detect_drop"),
        miss_rate=entry.number("miss_rate"),
        min_effect=entry.number("min_effect"),
        max_samples=entry.integer("max_samples"),
        min_samples=entry.integer("min_samples"),
        tolerance_few_samples=entry.number("tolerance_few_samples"),
        noise_floor=entry.number("noise_floor"),
        resolution=entry.number("print_resolution"),
    )


def regression_rows(ctx: NodeContext, entry: RuleEntry) -> list[curves.Row]:
    """The comparable metrics of a node as `curves.Row`s (plan expectations and overrides applied)."""
    assert ctx.baseline is not None
    ignore = entry.strings("ignore_settings")
    overrides = entry.number_map("tolerance_overrides")
    every = "**" in entry.strings("metrics")
    accepts = ctx.plan is not None and bool(ctx.plan.accept_metrics)
    base, base_broken = merged_measurements(ctx.baseline)
    cand, cand_broken = merged_measurements(ctx.candidate)
    rows = []
    for key in sorted(base.keys() & cand.keys()):
        if not bandwidth_key(key) or not (every or _selected(entry, key)) or key in base_broken or key in cand_broken:
            continue
        b, c = base[key], cand[key]
        if b.unit != c.unit or _settings_diff(b.settings, c.settings, ignore):
            continue
        if not _usable(b.samples) or not _usable(c.samples):
            continue
        tolerance = next((t for g, t in overrides.items() if glob_match(g, key)), None) if overrides else None
        shift, group = 0.0, None
        expectation = metric_expectation(ctx.plan, key) if accepts else None
        if expectation is not None:  # a planned shift is judged on its own, against the plan's tolerance
            accepted, index = expectation
            shift, tolerance, group = accepted.shift, accepted.tolerance, f"{key} (plan accept[{index}])"
        rows.append(
            curves.Row(
                key=key,
                baseline=b.samples,
                candidate=c.samples,
                higher_is_better=b.higher_is_better,
                shift=shift,
                tolerance=tolerance,
                group=group,
            )
        )
    return rows


def check_regression(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Sweeps as curves, sizes against their curve, re-measure when inconclusive (judge.curves)."""
    assert ctx.baseline is not None
    params = curve_params(entry)
    rows = regression_rows(ctx, entry)
    if not rows:
        return
    base = merged_measurements(ctx.baseline)[0]
    cand_m = merged_measurements(ctx.candidate)[0]
    units = {r.key: base[r.key].unit for r in rows}
    sources = {r.key: base[r.key].source for r in rows}
    assessment = curves.assess(rows, params)
    inconclusive = entry.string("inconclusive")
    skipped: dict[str, list[str]] = {}
    for d in assessment.metrics:
        if d.outcome == "not_comparable":
            skipped.setdefault(d.group, []).append(d.key.rsplit("/", 1)[-1])
    for group, sizes in sorted(skipped.items()):
        sizes.sort(key=lambda x: (not x.isdigit(), int(x) if x.isdigit() else 0, x))
        yield finding(
            ctx,
            entry,
            f"{group}: {len(sizes)} value(s) under two printed steps ({2 * params.resolution:g}, e.g. rccl-tests' "
            f"busbw 0.00 under ~256 B) at {', '.join(sizes[:8])}{', ...' if len(sizes) > 8 else ''}: "
            "nothing is comparable there; not judged",
            device=group,
            path=f"measurements[key={group}]",
            severity=Severity.INFO,
        )
    judged = [*assessment.groups, *(d for d in assessment.metrics if d.outcome != "not_comparable")]
    seen: set[str] = set()
    for d in judged:
        if d.key in seen or d.outcome in ("pass", "not_comparable"):
            continue
        seen.add(d.key)
        unit = units.get(d.key, "")
        where = "curve" if d.key not in units else "metric"
        what = (
            f"{d.key}: {where} {d.drop:.1%} worse than the baseline (bounds {d.low:.1%} .. {d.high:.1%}; "
            f"{d.n_baseline} vs {d.n_candidate} samples{', ' + unit if unit else ''})"
        )
        if d.outcome == "block":
            severity = None
            message = f"{what}: {d.why}"
        else:
            severity = softer(entry.severity) if inconclusive == "warn" else None  # anything else fails closed
            message = f"{what}: {d.why}; the phase should re-measure it"
        yield finding(
            ctx,
            entry,
            message,
            device=d.key,
            path=f"measurements[key={d.key}]",
            # a metric: its medians (as reports and cause headlines read them); a curve: its level
            # relative to the baseline (1.0), so the shift reads the same way
            expected=stats.median(base[d.key].samples) if d.key in base else 1.0,
            actual=stats.median(cand_m[d.key].samples) if d.key in cand_m else round(1.0 - d.drop, 4),
            evidence=sources.get(d.key),
            severity=severity,
        )


def _median(m: Measurement) -> float | None:
    return statistics.median(m.samples) if _usable(m.samples) else None


def check_threshold(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """CVF absolute floors judged on evidence: PHASE2_BW_THRESHOLD (mesh average), PHASE4_BW_THRESHOLD per rail.

    A floor fails when the samples' upper bound is below it, passes when the lower bound is above it,
    and in between asks for more samples (up to `max_samples` of `bandwidth.regression`); still in
    between at the limit, it warns. CVF's own single-sample decision (the first run) is quoted beside it.
    """
    t = ctx.policy.thresholds
    cand, _ = merged_measurements(ctx.candidate)
    params = curve_params(_regression_entry(ctx, entry)) if _has_curve_params(ctx, entry) else curves.Params()
    mesh_key = entry.string("mesh_metric")
    floors: list[tuple[str, Measurement | None, str, float, str, str]] = []
    if ctx.policy.phase_applies(2, ctx.node_class):
        floors.append(
            (
                mesh_key,
                cand.get(mesh_key),
                "GB/s",
                t.mesh_avg_busbw_min_gbs,
                "PHASE2_BW_THRESHOLD",
                t.source("mesh_avg_busbw_min_gbs"),
            )
        )
    rails: list[str] = []
    if ctx.policy.phase_applies(4, ctx.node_class):
        rails = sorted(k for k in cand if glob_match(entry.string("rail_metrics"), k))
        for key in rails:
            floors.append(
                (key, cand[key], "Gb/s", t.rail_bw_min_gbits, "PHASE4_BW_THRESHOLD", t.source("rail_bw_min_gbits"))
            )
    rail_sigma = curves.pooled_sigma([cand[k].samples for k in rails if _usable(cand[k].samples)], params)
    for key, m, unit, floor, cvf_key, source in floors:
        yield from _floor(ctx, entry, m, key, unit, floor, cvf_key, source, params, rail_sigma, len(floors))
    if ctx.policy.phase_applies(4, ctx.node_class) and entry.flag("check_rail_count") and len(rails) < t.rail_count:
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


def _has_curve_params(ctx: NodeContext, entry: RuleEntry) -> bool:
    return ctx.policy.rule_for(REGRESSION, ctx.node_class) is not None


def _floor(
    ctx: NodeContext,
    entry: RuleEntry,
    m: Measurement | None,
    key: str,
    unit: str,
    floor: float,
    cvf_key: str,
    source: str,
    params: curves.Params,
    rail_sigma: float,
    tests: int,
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
        return
    sigma = rail_sigma if key.startswith("rail/") else curves.pooled_sigma([m.samples], params)
    d = curves.floor_check(m.samples, floor, sigma=sigma, tests=tests, p=params)
    if d.outcome == "pass":
        return
    cvf = f"CVF's single-sample decision (first run {m.samples[0]:.2f}): {d.cvf_single}"
    bounds = f"{d.n} sample(s), bounds {d.low:.2f} .. {d.high:.2f} {unit}"
    if d.outcome == "fail":
        message = (
            f"{key}: median {d.estimate:.2f} {unit} is below {cvf_key} {floor:g} {unit} ({source}): "
            f"upper bound under the floor ({bounds}); {cvf}"
        )
        severity = None
    elif d.cvf_single == "passed":
        return  # between the bounds and CVF passes it too: nothing says it is below
    else:  # between the bounds: a single unlucky sample never fails a node; more samples decide
        limit = "after the limit of" if d.outcome == "inconclusive" else "re-measure, up to"
        message = (
            f"{key}: median {d.estimate:.2f} {unit} is not shown above or below {cvf_key} {floor:g} {unit} "
            f"({source}; {bounds}; {limit} {params.max_samples} samples); {cvf}"
        )
        severity = softer(entry.severity)
    yield finding(
        ctx,
        entry,
        message,
        device=key,
        path=path,
        expected=floor,
        actual=round(d.estimate, 2),
        evidence=m.source,
        severity=severity,
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
        "a curve shifted beyond its tolerance, or one metric departs from its curve (judge.curves)",
        check_regression,
        needs_baseline=True,
        params={
            "tolerance": ParamSpec(
                kind="number", default=stats.DEFAULT_TOLERANCE, doc="relative drop allowed", minimum=0, maximum=1
            ),
            "alpha": ParamSpec(
                kind="number",
                default=stats.DEFAULT_ALPHA,
                doc="a curve passes when its one-sided (1 - alpha) upper bound is within the tolerance",
                minimum=1e-6,
                maximum=0.5,
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
                doc="smallest step the tools print (rccl-tests, perftest: 2 decimals); under two steps nothing is "
                "comparable (not judged), and a drop of under two steps is no evidence",
                minimum=0,
            ),
            "node_false_block": ParamSpec(
                kind="number",
                default=0.01,
                doc="node-level false-block rate of the single-metric tests (Bonferroni over the node's metrics)",
                minimum=1e-6,
                maximum=0.5,
            ),
            "detect_drop": ParamSpec(
                kind="number", default=0.10, doc="a single-metric drop that must be seen", minimum=0, maximum=1
            ),
            "miss_rate": ParamSpec(
                kind="number",
                default=0.0025,
                doc="per look, chance to settle a detect_drop as within",
                minimum=1e-6,
                maximum=0.5,
            ),
            "min_effect": ParamSpec(
                kind="number", default=0.05, doc="a single metric's drop below this never blocks", minimum=0, maximum=1
            ),
            "max_samples": ParamSpec(
                kind="integer",
                default=20,
                doc="candidate samples per metric before an inconclusive test decides",
                minimum=1,
            ),
            "noise_floor": ParamSpec(
                kind="number", default=0.005, doc="smallest relative run-to-run noise assumed", minimum=0, maximum=1
            ),
            "inconclusive": ParamSpec(
                kind="string",
                default="warn",
                doc="an inconclusive comparison below max_samples: warn (the phase should have re-measured it) or "
                "block (fail closed until it is re-measured)",
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
