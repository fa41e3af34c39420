"""CVF's absolute floors judged on evidence (`bandwidth.threshold`) and the generic metric check
(`metric.threshold`).

- `bandwidth.threshold` applies CVF's absolute floors to the candidate's samples:
  `PHASE2_BW_THRESHOLD` (GB/s) to `mesh/all_reduce/avg_busbw` (CVF compares "# Avg bus bandwidth"),
  `PHASE4_BW_THRESHOLD` (Gb/s) to every `rail/*/write_bw`, and requires `PHASE4_RAIL_COUNT` rails
  for classes that run phase 4. A missing metric for a phase that applies blocks. The floor test is
  `validate.remeasure.floor_check`, the one the phases run while they measure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from upgrade_gate.judge import curves
from upgrade_gate.judge.plan import glob_select
from upgrade_gate.judge.rules.base import OPERATORS, STATISTICS, NodeContext, finding, softer
from upgrade_gate.judge.rules.measured import REGRESSION, curve_params, merged_measurements, regression_entry, usable
from upgrade_gate.judge.rules.standalone import peer_phase_waived
from upgrade_gate.model import Finding, Measurement

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry


def check_threshold(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """CVF absolute floors judged on evidence: PHASE2_BW_THRESHOLD (mesh average), PHASE4_BW_THRESHOLD per rail.

    A floor fails when the samples' upper bound is below it, passes when the lower bound is above it,
    and in between asks for more samples (up to `max_samples` of `bandwidth.regression`); still in
    between at the limit, it warns. CVF's own single-sample decision (the first run) is quoted beside it.
    """
    t = ctx.policy.thresholds
    cand, _ = merged_measurements(ctx.candidate)
    params = curve_params(regression_entry(ctx, entry)) if _has_curve_params(ctx, entry) else curves.Params()
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
        rails = list(glob_select(entry.string("rail_metrics"), tuple(cand)))
        for key in rails:
            floors.append(
                (key, cand[key], "Gb/s", t.rail_bw_min_gbits, "PHASE4_BW_THRESHOLD", t.source("rail_bw_min_gbits"))
            )
    rail_sigma: float | None = None  # pooled over the rails when a floor needs the full test
    logs: dict[str, list[float]] = {}  # the rails' samples on the log scale: for the sigma and each rail's test
    for key, m, unit, floor, cvf_key, source in floors:
        if m is not None and m.unit == unit and clears(m.samples, floor):
            continue  # the usual rail: nothing to say (see `clears`)
        if rail_sigma is None:
            logs = {k: curves.log_samples(cand[k].samples, params) for k in rails if usable(cand[k].samples)}
            rail_sigma = curves.pooled_log_sigma(logs.values(), params)
        yield from _floor(
            ctx, entry, m, key, unit, floor, cvf_key, source, params, rail_sigma, len(floors), logs.get(key)
        )
    counted = entry.flag("check_rail_count") and not peer_phase_waived(ctx, 4)
    if ctx.policy.phase_applies(4, ctx.node_class) and counted and len(rails) < t.rail_count:
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


_MARGIN = 1e-9  # relative: far above the rounding of the log-mean and exp in `floor_check`


def clears(samples: tuple[float, ...], floor: float) -> bool:
    """True when `_floor` has nothing to say of these samples, decided without the statistics: some samples,
    all finite and every one at least the floor (with a margin). Then the upper bound (at least the
    geometric mean, at least the smallest sample) is not under the floor, so the test says pass or in
    between; in between, CVF's single-sample decision (the first run, at least the floor) passes too,
    and `_floor` yields nothing in either case."""
    return floor > 0 and usable(samples) and min(samples) >= floor * (1.0 + _MARGIN)


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
    logs: list[float] | None,
) -> Iterable[Finding]:
    """The floor test of one metric (`logs`: its samples on the log scale, when the caller has them)."""
    path = f"measurements[key={key}]"
    if m is None or not usable(m.samples):
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
    d = curves.floor_check(m.samples, floor, sigma=sigma, tests=tests, p=params, logs=logs)
    if d.outcome == "pass" or (d.outcome != "fail" and d.cvf_single == "passed"):
        return  # above the floor, or between the bounds and CVF passes it too: nothing says it is below
    cvf = f"CVF's single-sample decision (first run {m.samples[0]:.2f}): {d.cvf_single}"
    bounds = f"{d.n} sample(s), bounds {d.low:.2f} .. {d.high:.2f} {unit}"
    if d.outcome == "fail":
        message = (
            f"{key}: median {d.estimate:.2f} {unit} is below {cvf_key} {floor:g} {unit} ({source}): "
            f"upper bound under the floor ({bounds}); {cvf}"
        )
        severity = None
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
        keys = glob_select(check.metric, tuple(cand))
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
            if not usable(m.samples):
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
