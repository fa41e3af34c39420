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
- `bandwidth.regression` judges a node's comparable metrics together with `judge.curves` (its
  docstring has the statistics and the measured rates): a sweep is one curve whose shift is compared
  with the tolerance, a size blocks when it departs from the rest of its curve beyond a
  multiplicity-aware threshold, and an inconclusive comparison is a "re-measure" (the phases re-run it
  up to `max_samples`, `validate.remeasure`; here it warns, or blocks with `inconclusive: block`). A
  plan's `accept` metric entry replaces the expectation: candidate ~ baseline * (1 + shift), with its
  own tolerance.
- The floors (`bandwidth.threshold`) and `metric.threshold` live in `rules.floors`; the merged
  measurements and the shared parameters in `rules.measured`. Their specs are registered here.
"""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from upgrade_gate.judge import curve_prior, curves, stats
from upgrade_gate.judge.curve_stats import group_of
from upgrade_gate.judge.plan import glob_match, metric_expectation
from upgrade_gate.judge.rules.base import NodeContext, ParamSpec, finding, softer, spec
from upgrade_gate.judge.rules.floors import check_metric, check_threshold
from upgrade_gate.judge.rules.measured import REGRESSION as REGRESSION
from upgrade_gate.judge.rules.measured import THERMAL_PREFIX as THERMAL_PREFIX
from upgrade_gate.judge.rules.measured import (
    WORKLOAD_PREFIXES,
    bandwidth_keys,
    comparable_keys,
    comparable_set,
    regression_entry,
    sample_table,
    settings_diff,
    usable_keys,
)
from upgrade_gate.judge.rules.measured import bandwidth_key as bandwidth_key
from upgrade_gate.judge.rules.measured import curve_params as curve_params
from upgrade_gate.judge.rules.measured import merged_measurements as merged_measurements
from upgrade_gate.model import ClassReference, Finding, Measurement, Severity, Snapshot
from upgrade_gate.model.columnar import shared_epoch, shared_settings
from upgrade_gate.parse.common import digits

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry


def check_not_comparable(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Baseline metrics the candidate cannot be compared on (absent, other settings/unit, no samples)."""
    assert ctx.baseline is not None
    params = regression_entry(ctx, entry)
    ignore = params.strings("ignore_settings")
    pick = _selector(params)
    base, base_broken = merged_measurements(ctx.baseline)
    cand, cand_broken = merged_measurements(ctx.candidate)
    base_usable, cand_usable = usable_keys(ctx.baseline), usable_keys(ctx.candidate)
    for key, why in sorted({**base_broken, **cand_broken}.items()):
        if pick(key) and not key.startswith(WORKLOAD_PREFIXES):  # workload.evidence speaks for those
            yield finding(ctx, entry, f"{key}: {why}", device=key, path=f"measurements[key={key}]")
    comparable = comparable_set(ctx.baseline, ctx.candidate, ignore)
    yield from _implausible(ctx, entry, comparable_keys(ctx.baseline, ctx.candidate, ignore))
    keys = bandwidth_keys(ctx.baseline)
    new = [k for k in bandwidth_keys(ctx.candidate) if k not in base and pick(k) and k not in cand_broken]
    if new:  # measured now, never before: nothing judges them against this node (a baseline without phase 2)
        yield _unmatched(ctx, entry, new, configuration=not keys and not ctx.baseline.phases)
    if len(comparable) == len(keys):  # the usual node: everything compares
        return
    for key in keys:
        if key in comparable or not pick(key) or key in base_broken or key in cand_broken:
            continue
        b, c = base[key], cand.get(key)
        path = f"measurements[key={key}]"
        expected: object
        actual: object
        if c is None:
            message, expected, actual = f"{key}: measured in the baseline, absent from the candidate", key, None
        elif b.unit != c.unit:
            message, expected, actual = f"{key}: unit {b.unit} in the baseline, {c.unit} now", b.unit, c.unit
        elif diffs := settings_diff(b.settings, c.settings, ignore):
            message = f"{key}: not comparable, settings differ: {'; '.join(diffs)}"
            expected, actual = dict(b.settings), dict(c.settings)
        elif key not in base_usable or key not in cand_usable:
            message = f"{key}: no usable samples (baseline {len(b.samples)}, candidate {len(c.samples)})"
            expected, actual = len(b.samples), len(c.samples)
        else:
            continue
        yield finding(ctx, entry, message, device=key, path=path, expected=expected, actual=actual, evidence=b.source)


IMPLAUSIBLE = 100.0
"""A candidate metric every sample of which is this many times better than every sample of its baseline
(higher: above; lower-is-better: below) is not an improvement any change gives, but broken evidence: a unit
or parser error, a value written by hand. The statistics read it as a curve that disagrees with itself and
only warned (1e6 GB/s at one size of a 127 GB/s sweep passed, 2026-12-07)."""


PLAUSIBLE = "a value a run can measure"
"""The `expected` of a broken-evidence finding (`_implausible`): what `judge.cause_groups` reads to put the
metric's other findings under it (a broken sample is the cause of the "regression" it makes)."""


def _implausible(ctx: NodeContext, entry: RuleEntry, keys: tuple[str, ...]) -> Iterable[Finding]:
    """Comparable metrics `IMPLAUSIBLE` times better than the baseline, or with a sample below zero where the
    baseline has none: a few array operations a node over the sample tables (nothing is read sample by
    sample unless one is found)."""
    assert ctx.baseline is not None
    if not keys:
        return
    base, cand = sample_table(ctx.baseline), sample_table(ctx.candidate)
    brow, crow = base.layout.rows(keys), cand.layout.rows(keys)
    (b_low, b_high, b_fin), (c_low, c_high, c_fin) = base.summary(), cand.summary()  # a batch's views: free
    b_low, b_high, c_low, c_high = b_low[brow], b_high[brow], c_low[crow], c_high[crow]
    whole = b_fin[brow] & c_fin[crow]
    if not whole.all():  # a row shorter than its table (NaN-padded) or not finite: from its samples, NaN skipped
        odd = np.flatnonzero(~whole)
        b, c = base.block(brow[odd]), cand.block(crow[odd])
        b_low[odd], b_high[odd] = np.fmin.reduce(b, 1), np.fmax.reduce(b, 1)
        c_low[odd], c_high[odd] = np.fmin.reduce(c, 1), np.fmax.reduce(c, 1)
    better = base.better[brow]
    with np.errstate(invalid="ignore", over="ignore"):
        negative = (c_low < 0) & (b_low >= 0)  # no rate, time or size is below zero
        up = better & (b_high > 0) & (c_low > IMPLAUSIBLE * b_high) & ~negative
        down = ~better & (b_low > 0) & (c_high * IMPLAUSIBLE < b_low) & ~negative
        if not (negative.any() or up.any() or down.any()):
            return
    for i in np.flatnonzero(negative | up | down).tolist():
        key, was, now = keys[i], float(b_high[i] if up[i] else b_low[i]), float(c_high[i] if down[i] else c_low[i])
        if negative[i]:
            said = f"a sample of {now:.6g}, below zero, where the baseline's are {was:.6g} or more"
        else:
            said = f"{now:.6g} against the baseline's {was:.6g}, over {IMPLAUSIBLE:g}x {'better' if up[i] else 'lower'}"
            said += " in every sample"
        yield finding(
            ctx,
            entry,
            f"{key}: {said}: no run measures that, the evidence is broken",
            device=key,
            path=f"measurements[key={key}]",
            expected=PLAUSIBLE,
            actual=now,
            evidence=merged_measurements(ctx.candidate)[0][key].source,
        )


def _unmatched(ctx: NodeContext, entry: RuleEntry, keys: list[str], *, configuration: bool) -> Finding:
    """One finding for the candidate's metrics the baseline never measured, grouped by curve: a block when
    the baseline measured others (it lost these), info when it measured none (a configuration snapshot,
    the change window's usual baseline: the CVF floors and the class judge them)."""
    groups: dict[str, int] = {}
    for key in keys:
        group = group_of(key)
        groups[group] = groups.get(group, 0) + 1
    shown = ", ".join(f"{g} ({n})" if n > 1 else g for g, n in list(groups.items())[:6])
    more = f" and {len(groups) - 6} more" if len(groups) > 6 else ""
    if configuration:
        message = (
            f"the baseline measured nothing (a configuration snapshot): the {len(keys)} metric(s) measured now "
            f"are judged by the CVF floors and the class reference only, not for a regression of this node: "
            f"{shown}{more}"
        )
    else:
        message = (
            f"{len(keys)} metric(s) measured now are absent from the baseline, so no regression of them can be "
            f"judged: {shown}{more} (save a baseline that measured them)"
        )
    return finding(
        ctx,
        entry,
        message,
        device=next(iter(groups)),
        path="measurements",
        expected="each measured metric in the baseline",
        actual=keys[:20],
        evidence="baseline store",
        severity=Severity.INFO if configuration else None,
    )


def _selector(entry: RuleEntry) -> Callable[[str], bool]:
    """`selected(entry, key)` for bandwidth keys, with the entry's globs read once."""
    globs = entry.strings("metrics")
    if "**" in globs:
        return _every
    return lambda key: any(glob_match(g, key) for g in globs)


def _every(key: str) -> bool:
    return True


def regression_rows(ctx: NodeContext, entry: RuleEntry) -> list[curves.Row]:
    """The comparable metrics of a node as `curves.Row`s (plan expectations and overrides applied)."""
    assert ctx.baseline is not None
    ignore = entry.strings("ignore_settings")
    overrides = entry.number_map("tolerance_overrides")
    pick = _selector(entry)
    every = pick is _every
    accepts = ctx.plan is not None and bool(ctx.plan.accept_metrics)
    base = merged_measurements(ctx.baseline)[0]
    cand = merged_measurements(ctx.candidate)[0]
    row = curves.Row
    keys = comparable_keys(ctx.baseline, ctx.candidate, ignore)  # sorted
    if every and not overrides and not accepts:  # the usual node: every comparable key, as measured
        return [row(k, base[k].samples, cand[k].samples, base[k].higher_is_better, 0.0, None, None) for k in keys]
    rows = []
    for key in keys:
        if not every and not pick(key):
            continue
        b, c = base[key], cand[key]
        tolerance = next((t for g, t in overrides.items() if glob_match(g, key)), None) if overrides else None
        expectation = metric_expectation(ctx.plan, key) if accepts else None
        if expectation is not None:  # a planned shift is judged on its own, against the plan's tolerance
            accepted, index = expectation
            rows.append(
                row(
                    key,
                    b.samples,
                    c.samples,
                    b.higher_is_better,
                    accepted.shift,
                    accepted.tolerance,
                    f"{key} (plan accept[{index}])",
                )
            )
        else:
            rows.append(row(key, b.samples, c.samples, b.higher_is_better, 0.0, tolerance, None))
    return rows


_SAMPLES, _BETTER = operator.attrgetter("samples"), operator.attrgetter("higher_is_better")


def regression_columns(ctx: NodeContext, entry: RuleEntry) -> curves.Columns:
    """`regression_rows` as `curves.Columns`; the usual node's (every comparable key as measured) are built
    column by column with C-level maps, not row by row (the same values: tests/test_judge_vector.py)."""
    assert ctx.baseline is not None
    if not _usual(ctx, entry):
        return curves.Columns.of(regression_rows(ctx, entry))
    keys = comparable_keys(ctx.baseline, ctx.candidate, entry.strings("ignore_settings"))  # sorted
    if not keys:
        return curves.Columns.of([])
    b = list(map(merged_measurements(ctx.baseline)[0].__getitem__, keys))
    c = list(map(merged_measurements(ctx.candidate)[0].__getitem__, keys))
    n = len(keys)
    return curves.Columns(
        keys,
        list(map(_SAMPLES, b)),
        list(map(_SAMPLES, c)),
        list(map(_BETTER, b)),
        (0.0,) * n,
        (None,) * n,
        (None,) * n,
    )


def _usual(ctx: NodeContext, entry: RuleEntry) -> bool:
    """Every comparable key is judged as measured: no metric globs, no overrides, no planned shifts."""
    return (
        "**" in entry.strings("metrics")
        and not entry.number_map("tolerance_overrides")
        and not (ctx.plan is not None and ctx.plan.accept_metrics)
    )


def table_columns(ctx: NodeContext, entry: RuleEntry) -> curves.Columns:
    """`regression_columns` with the samples as arrays taken from the two snapshots' sample tables
    (`judge.table`, shared with the other rules) instead of sample tuples: what the batch statistics read.
    The same values (tests/test_judge_table.py); a node that is not the usual one gets `regression_columns`."""
    assert ctx.baseline is not None
    if not _usual(ctx, entry):
        return regression_columns(ctx, entry)
    keys = comparable_keys(ctx.baseline, ctx.candidate, entry.strings("ignore_settings"))  # sorted
    if not keys:
        return curves.Columns.of([])
    base, cand = sample_table(ctx.baseline), sample_table(ctx.candidate)
    rows = base.layout.rows(keys)
    n = len(keys)
    return curves.Columns(
        keys,
        base.block(rows),
        cand.block(cand.layout.rows(keys)),
        list(map(base.flags.__getitem__, rows.tolist())),
        (0.0,) * n,
        (None,) * n,
        (None,) * n,
    )


_ClassShape = dict[str, tuple[float, float, str, dict[str, str], bool | None]]


def _class_shape(ref: ClassReference, entry: RuleEntry) -> _ClassShape:
    """The class metrics that may read a node's baseline (`judge.curve_prior`): key -> (log median, its
    variance, unit, settings less the ignored ones, direction), from classes of >= `class_min_nodes` nodes.
    The variance is the class median's: (pi/2) (1.4826 MAD / median)^2 / nodes, the MAD over the per-node
    medians (level differences between nodes included: it only errs large)."""
    least = entry.integer("class_min_nodes")
    ignore = set(entry.strings("ignore_settings"))
    shape: _ClassShape = {}
    for m in ref.metrics:
        if m.n_nodes < least or not m.median > 0 or m.key.startswith(THERMAL_PREFIX):
            continue
        spread = curve_prior.MAD_TO_SIGMA * m.spread / m.median
        settings = {k: v for k, v in m.settings.items() if k not in ignore}
        var = math.pi / 2.0 * spread * spread / m.n_nodes
        shape[m.key] = (math.log(m.median), var, m.unit, settings, m.higher_is_better)
    return shape


class _ClassRows(NamedTuple):
    """`class_prior`'s answer for one key list when every baseline measurement is like the class's (the usual
    node), and what that takes: the rows with a class entry (`at`) and their class units and settings, the
    rows whose class has a direction (`at_way`) and those directions."""

    prior: curve_prior.Prior
    at: list[int]
    units: list[str]
    settings: list[dict[str, str]]
    at_way: list[int]
    better: list[bool]


_ROWS: dict[tuple[int, int], tuple[object, object, _ClassShape, dict[tuple[str, ...], _ClassRows | None], int]] = {}


def _class_rows(ref: ClassReference, entry: RuleEntry, keys: tuple[str, ...]) -> _ClassRows | None:
    """The prior of `keys` from the class shape (built once per reference and entry), once per key list: a
    fleet's nodes mostly share one key list."""
    hit = _ROWS.get((id(ref), id(entry)))
    epoch = shared_epoch()  # the decode's shared maps were emptied since: take the class's maps again
    if hit is None or hit[0] is not ref or hit[1] is not entry or hit[4] != epoch:
        if len(_ROWS) >= 16:
            _ROWS.clear()
        hit = _ROWS[(id(ref), id(entry))] = (ref, entry, _class_shape(ref, entry), {}, epoch)
    shape, by_keys = hit[2], hit[3]
    if keys in by_keys:
        return by_keys[keys]
    got = [shape.get(k) for k in keys]
    at = [i for i, g in enumerate(got) if g is not None]
    rows = None
    if at:
        centre = np.array([np.nan if g is None else g[0] for g in got])
        var = np.array([np.nan if g is None else g[1] for g in got])
        centre.flags.writeable = var.flags.writeable = False
        at_way = [i for i in at if got[i][4] is not None]  # type: ignore[index]
        rows = _ClassRows(
            curve_prior.Prior(centre, var),
            at,
            [got[i][2] for i in at],  # type: ignore[index]
            [shared_settings(got[i][3]) for i in at],  # type: ignore[index]
            at_way,
            [got[i][4] for i in at_way],  # type: ignore[index,misc]
        )
    if len(by_keys) >= 64:
        by_keys.clear()
    by_keys[keys] = rows
    return rows


def _picked(items: list[Measurement], at: list[int]) -> list[Measurement]:
    return list(map(items.__getitem__, at)) if len(at) != len(items) else items


def class_prior(ctx: NodeContext, entry: RuleEntry, keys: Sequence[str]) -> curve_prior.Prior | None:
    """The node's class reference per regression row (`keys`), like with like only: the baseline's unit,
    settings (less `ignore_settings`) and direction equal to the class's. None: no reference, or nothing alike.
    Units and directions are compared as lists, settings key by key (the ignored ones dropped only where they
    differ: the rails' `peer`)."""
    ref = ctx.reference
    if ref is None or not ref.metrics or not keys or ctx.baseline is None:
        return None
    rows = _class_rows(ref, entry, tuple(keys))
    if rows is None:
        return None
    every = list(map(merged_measurements(ctx.baseline)[0].__getitem__, keys))
    b = _picked(every, rows.at)
    units, settings = list(map(_UNIT, b)), list(map(_SETTINGS, b))
    better = list(map(_BETTER, _picked(every, rows.at_way)))
    ignore = entry.strings("ignore_settings")
    off: list[int] = []
    if units != rows.units or better != rows.better:  # rare: another unit or direction somewhere
        way = dict(zip(rows.at_way, rows.better, strict=True))
        off += (
            i
            for i, m, unit in zip(rows.at, b, rows.units, strict=True)
            if m.unit != unit or way.get(i, m.higher_is_better) is not m.higher_is_better
        )
    # the class's maps are the decode's shared ones (`_class_rows`): the usual row is the same object, and only
    # the others are compared item by item (the rails: `peer`); 143 maps compared by content cost ~40 us a node
    off += (
        rows.at[n]
        for n, same in enumerate(map(operator.is_, settings, rows.settings))
        if not same and {k: v for k, v in settings[n].items() if k not in ignore} != rows.settings[n]
    )
    if not off:
        return rows.prior
    if len(set(off)) == len(rows.at):
        return None
    centre = rows.prior.centre.copy()
    centre[off] = np.nan
    return curve_prior.Prior(centre, rows.prior.var)


_UNIT, _SETTINGS = operator.attrgetter("unit"), operator.attrgetter("settings")


# The batch being judged (`prime_regression`): candidate id -> (candidate, baseline, entry, columns, assessment).
_PRIMED: dict[int, tuple[Snapshot, Snapshot, RuleEntry, curves.Columns, curves.Assessment]] = {}


@contextlib.contextmanager
def prime_regression(contexts: Sequence[NodeContext]) -> Iterator[None]:
    """Compute `bandwidth.regression`'s statistics for a batch of nodes at once (`curves.assess_many`,
    vectorised across the nodes); `check_regression` then reads each node's result. Nothing outlives the
    `with` block. Nodes whose rule is disabled or who have no baseline are left out, as the judge skips them."""
    todo: dict[curves.Params, list[tuple[NodeContext, RuleEntry, curves.Columns]]] = {}
    for ctx in contexts:
        entry = ctx.policy.rule_for(REGRESSION, ctx.node_class)
        if ctx.baseline is None or entry is None or not entry.enabled:
            continue
        todo.setdefault(curve_params(entry), []).append((ctx, entry, table_columns(ctx, entry)))
    _PRIMED.clear()
    try:
        for params, items in todo.items():
            priors = [class_prior(ctx, entry, rows.key) for ctx, entry, rows in items]
            assessed = curves.assess_many([rows for _, _, rows in items], params, None, priors)
            for (ctx, entry, rows), assessment in zip(items, assessed, strict=True):
                assert ctx.baseline is not None
                _PRIMED[id(ctx.candidate)] = (ctx.candidate, ctx.baseline, entry, rows, assessment)
        yield
    finally:
        _PRIMED.clear()


def _assessed(ctx: NodeContext, entry: RuleEntry, params: curves.Params) -> tuple[curves.Columns, curves.Assessment]:
    hit = _PRIMED.get(id(ctx.candidate))
    if hit is not None and hit[0] is ctx.candidate and hit[1] is ctx.baseline and hit[2] is entry:
        return hit[3], hit[4]
    columns = regression_columns(ctx, entry)
    return columns, curves.assess_many([columns], params, None, [class_prior(ctx, entry, columns.key)])[0]


def check_regression(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Sweeps as curves, sizes against their curve, re-measure when inconclusive (judge.curves)."""
    assert ctx.baseline is not None
    params = curve_params(entry)
    columns, assessment = _assessed(ctx, entry, params)
    if not columns.key:
        yield from _none_selected(ctx, entry)
        return
    base = merged_measurements(ctx.baseline)[0]
    cand_m = merged_measurements(ctx.candidate)[0]
    inconclusive = entry.string("inconclusive")
    skipped: dict[str, list[str]] = {}
    for d in assessment.metrics:
        if d.outcome == "not_comparable":
            skipped.setdefault(d.group, []).append(d.key.rsplit("/", 1)[-1])
    for group, sizes in sorted(skipped.items()):
        sizes.sort(key=lambda x: (not digits(x), int(x) if digits(x) else 0, x))
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
    judged = [d for d in (*assessment.groups, *assessment.metrics) if d.outcome not in ("pass", "not_comparable")]
    if not judged:  # the usual node: every curve and metric passed
        return
    measured = set(columns.key)
    seen: set[str] = set()
    for d in judged:
        if d.key in seen:
            continue
        seen.add(d.key)
        metric = base[d.key] if d.key in measured else None
        unit = metric.unit if metric is not None else ""
        where = "curve" if metric is None else "metric"
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
            evidence=metric.source if metric is not None else None,
            severity=severity,
        )


def _none_selected(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """A warning when the policy's `metrics` globs select none of the node's comparable metrics: the rule
    then judges nothing there, which is said, not left silent (break test 2026-12-07: `metrics: []` with
    the class check off printed "PASS with nothing to report")."""
    globs = entry.strings("metrics")
    if "**" in globs:
        return
    assert ctx.baseline is not None
    comparable = comparable_keys(ctx.baseline, ctx.candidate, entry.strings("ignore_settings"))
    if not comparable:
        return
    shown = ", ".join(globs[:4]) + (", ..." if len(globs) > 4 else "") if globs else "none"
    yield finding(
        ctx,
        entry,
        f"the policy's metrics globs ({shown}) select none of the node's {len(comparable)} comparable "
        "bandwidth metric(s): no bandwidth regression is judged on this node",
        severity=softer(entry.severity),
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
            "curve_tolerance": ParamSpec(
                kind="number",
                default=0.02,
                doc="a whole curve's (sweep's, rails') shift allowed when below tolerance; a plan's accept or an "
                "override that covers the whole curve replaces it",
                minimum=0,
                maximum=1,
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
                default=0.0005,
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
                doc="candidate samples per metric before an inconclusive test decides; the bandwidth phases re-measure "
                "an inconclusive metric up to this many runs (validate --policy)",
                minimum=1,
                maximum=1024,
            ),
            "noise_floor": ParamSpec(
                kind="number", default=0.005, doc="smallest relative run-to-run noise assumed", minimum=0, maximum=1
            ),
            "class_min_nodes": ParamSpec(
                kind="integer",
                default=8,
                doc="a class reference of at least this many nodes reads the baseline with the class's curve shape "
                "in the per-size test (judge.curve_prior); a larger number than any class turns that off",
                minimum=3,
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
