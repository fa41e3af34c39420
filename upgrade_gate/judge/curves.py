"""Node-level bandwidth statistics: sweeps judged as curves, sizes with a multiplicity-aware threshold,
and the sequential re-measurement outcome. Vectorised with numpy (helpers in `judge.curve_stats`), no
scipy. CVF floors judged on evidence are `validate.remeasure.floor_check` (re-exported here), the one
test both the phases and `bandwidth.threshold` run.

Why (issue 14, measured in bench/): testing 77 metrics one by one against a 7% tolerance blocked
1.6% of healthy nodes at 3% noise, caught a 10% drop at one size 95% of the time, and blocked 98% of
nodes whose whole sweep fell 5% although the tolerance was 7%: the tolerance was not a node-level
threshold. So a node's metrics are judged in three parts, all on log ratios (a relative drop):

1. **Groups** (a sweep's sizes, `<scope>/<op>/busbw/<bytes>`; the rails, `rail/*/<metric>`; any other
   metric on its own). The group's shift is the inverse-variance weighted mean of its metrics'
   Hodges-Lehmann drops, with a standard error that is the larger of the model's and the spread of
   the per-metric drops (sizes of one run are correlated). It is compared with the tolerance: the
   group passes when its one-sided (1 - alpha) upper bound is within the tolerance, blocks when its
   lower bound at the node's family-wise level is beyond it, and is inconclusive in between.
2. **Single metrics of a group of >= 3**: a metric's departure from the rest of its group (drop minus
   the leave-one-out group shift) blocks when it exceeds `c * se` with `c` the normal quantile at
   `node_false_block / (2 * tests)` (Bonferroni over the node's tests and, loosely, over looks: most
   metrics are decided at the first look) AND the drop itself exceeds `min_effect`. It passes when its
   upper bound at `miss_rate` is below `detect_drop` (a drop that large would have been seen).
3. **Sequential**: anything inconclusive with fewer than `max_samples` candidate samples is a
   "re-measure" outcome (the phase takes more samples of it); at `max_samples` the block condition
   alone decides. The outcome carries the sample counts, so the verdict says how many it took.

Noise: a metric's per-sample sigma (in log units) is the pooled within-node scale of its group
(robust: residuals clipped at 4 MAD), floored at `noise_floor`, plus the print quantisation
(`resolution` / value, uniform: step^2 / 12). A value below two printed steps (rccl-tests prints
busbw 0.00 under ~256 B) is not comparable: reported, never blocking (issue 10).

The Hodges-Lehmann drop's variance under normal noise is (pi/3) sigma^2 (1/nb + 1/nc).

A phase's look (`judge.remeasure`) sees only the phase's metrics: `assess(..., multiplicity=)` gives
it the node's counts of curve metrics and groups, so its thresholds are the ones the gate applies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from upgrade_gate.judge.curve_stats import group_of as group_of
from upgrade_gate.judge.curve_stats import log_tol, logged, padded, rel, row_median, sum_sq_dev
from upgrade_gate.validate.remeasure import FloorDecision as FloorDecision
from upgrade_gate.validate.remeasure import floor_check as floor_check
from upgrade_gate.validate.remeasure import pooled_sigma as pooled_sigma
from upgrade_gate.validate.remeasure import z_upper

Outcome = Literal["pass", "block", "remeasure", "not_comparable"]
_HL = math.sqrt(math.pi / 3.0)
LAST_LOOK = 0.8  # share of the later looks' alpha spent at the last one (measured in bench/detect_nodes.py)


@dataclass(frozen=True, slots=True, kw_only=True)
class Params:
    """The statistics' knobs (policy parameters of `bandwidth.regression`)."""

    tolerance: float = 0.07  # a group's (curve's) shift allowed
    alpha: float = 0.05  # a group passes when its one-sided (1 - alpha) upper bound is within tolerance
    node_false_block: float = 0.01  # node-level false-block rate of the single-metric tests
    detect_drop: float = 0.10  # a single-metric drop that must be seen
    miss_rate: float = 0.0005  # per look, for `detect_drop`
    min_effect: float = 0.05  # a single metric's drop below this never blocks
    max_samples: int = 20  # candidate samples per metric before the sequential test must decide
    min_samples: int = 3  # fewer per side: the drop alone decides, against tolerance_few_samples
    tolerance_few_samples: float = 0.10
    noise_floor: float = 0.005
    resolution: float = 0.01  # the tools print 2 decimals


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One metric of one node: baseline and candidate samples, in the metric's unit."""

    key: str
    baseline: Sequence[float]
    candidate: Sequence[float]
    higher_is_better: bool = True
    shift: float = 0.0  # expected candidate / baseline - 1 (a plan's accept entry)
    tolerance: float | None = None  # per-metric tolerance (override or plan); None: the group's
    group: str | None = None  # None: derived from the key (group_of)


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What the statistics say about one metric (or one group, `key` = the group)."""

    key: str
    group: str
    outcome: Outcome
    drop: float  # relative, positive = worse
    low: float  # confidence bounds of the drop (relative)
    high: float
    threshold: float  # the drop (or departure) beyond which it blocks
    n_baseline: int
    n_candidate: int
    why: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Assessment:
    """One node's decisions: every metric and group that did not simply pass, and the sample counts."""

    metrics: tuple[Decision, ...]  # not "pass" (block, remeasure, not_comparable)
    groups: tuple[Decision, ...]  # not "pass"
    n_metrics: int
    samples: int  # candidate samples over the judged metrics
    max_samples: int

    def worst(self) -> Outcome:
        """block > remeasure > pass (not comparable never decides)."""
        outcomes = {d.outcome for d in (*self.metrics, *self.groups)}
        if "block" in outcomes:
            return "block"
        if "remeasure" in outcomes:
            return "remeasure"
        return "pass"


def assess(rows: Sequence[Row], p: Params = Params(), *, multiplicity: tuple[int, int] | None = None) -> Assessment:
    """Judge one node's metrics (see the module docstring).

    `multiplicity` (curve metrics, groups): the node's counts when `rows` are only part of what the
    node is judged on (a phase looking at its own metrics), so its thresholds are the gate's.
    """
    if not rows:
        return Assessment(metrics=(), groups=(), n_metrics=0, samples=0, max_samples=0)
    raw_b = padded([r.baseline for r in rows])
    raw_c = padded([r.candidate for r in rows])
    shifts = np.array([r.shift for r in rows])
    with np.errstate(invalid="ignore"):
        centre = row_median(raw_b) * (1.0 + shifts)
        nc = np.count_nonzero(~np.isnan(raw_c), axis=1)
        live = (centre > 2 * p.resolution) & (nc > 0)  # NaN (no baseline sample) is not live
    skipped = [
        Decision(
            key=rows[i].key,
            group=rows[i].group or group_of(rows[i].key),
            outcome="not_comparable",
            drop=0.0,
            low=0.0,
            high=0.0,
            threshold=0.0,
            n_baseline=len(rows[i].baseline),
            n_candidate=len(rows[i].candidate),
            why=f"baseline median {0.0 if np.isnan(centre[i]) else float(centre[i]):g} is under two printed steps "
            f"({2 * p.resolution:g}): nothing is comparable there",
        )
        for i in map(int, np.flatnonzero(~live))
    ]
    if not live.any():
        return Assessment(metrics=tuple(skipped), groups=(), n_metrics=0, samples=0, max_samples=0)
    if live.all():
        kept, lb, lc = list(rows), raw_b, raw_c
    else:
        idx = np.flatnonzero(live)
        kept, lb, lc = [rows[int(i)] for i in idx], raw_b[idx], raw_c[idx]
    metrics, groups, n = _assess_live(kept, lb, lc, shifts[live], p, multiplicity)
    return Assessment(
        metrics=tuple(skipped) + metrics,
        groups=groups,
        n_metrics=len(kept),
        samples=int(np.sum(n)),
        max_samples=int(np.max(n)),
    )


def _assess_live(
    rows: list[Row],
    raw_b: np.ndarray,
    raw_c: np.ndarray,
    shifts: np.ndarray,
    p: Params,
    multiplicity: tuple[int, int] | None = None,
) -> tuple[tuple[Decision, ...], tuple[Decision, ...], np.ndarray]:
    m = len(rows)
    floor = p.resolution / 2
    sign = np.array([1.0 if r.higher_is_better else -1.0 for r in rows])
    lb = logged(raw_b, floor)
    if shifts.any():
        lb = lb + np.log1p(shifts)[:, None]
    lc = logged(raw_c, floor)
    nb = np.sum(~np.isnan(lb), axis=1)
    nc = np.sum(~np.isnan(lc), axis=1)
    drop = -sign * row_median((lc[:, :, None] - lb[:, None, :]).reshape(m, -1))  # log units, + = worse
    quant = p.resolution / np.exp(row_median(lb))  # one printed step, relative
    clean = quant < 0.01
    # groups: a curve (or the rails) of >= 3 metrics is one group; smaller ones are singletons
    names = [r.group or group_of(r.key) for r in rows]
    members: dict[str, list[int]] = {}
    for i, g in enumerate(names):
        members.setdefault(g, []).append(i)
    gid = np.empty(m, dtype=np.intp)
    labels: list[str] = []
    curve = np.zeros(m, dtype=bool)
    for g, ms in sorted(members.items()):
        if len(ms) >= 3:
            gid[ms] = len(labels)
            labels.append(g)
            curve[ms] = True
        else:
            for i in ms:
                gid[i] = len(labels)
                labels.append(rows[i].key)
    n_groups = len(labels)
    # noise: pooled within-node sigma per curve (clean metrics only), else the node's, floored
    db, fb = sum_sq_dev(lb)
    dc, fc = sum_sq_dev(lc)
    dev = np.concatenate([db, dc], axis=1)
    flat = np.abs(dev[clean]).ravel()
    flat = flat[~np.isnan(flat)]
    mad = 1.4826 * float(np.partition(flat, flat.size // 2)[flat.size // 2]) if flat.size else 0.0
    if mad > 0:
        dev = np.clip(dev, -4 * mad, 4 * mad)
    ss = np.where(clean, np.nansum(dev**2, axis=1), 0.0)
    dof = np.where(clean, fb + fc, 0)
    ss_g = np.bincount(gid, ss, n_groups)
    dof_g = np.bincount(gid, dof, n_groups)
    node_sigma = math.sqrt(float(ss.sum()) / float(dof.sum())) if dof.sum() >= 4 else 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        sigma_g = np.where(dof_g >= 4, np.sqrt(ss_g / np.maximum(dof_g, 1)), node_sigma)
    sigma = np.maximum(sigma_g[gid], p.noise_floor)
    se = _HL * np.sqrt((sigma**2 + quant**2 / 12.0) * (1.0 / nb + 1.0 / nc))
    few = (nb < p.min_samples) | (nc < p.min_samples)
    coarse = 2 * quant >= p.detect_drop  # a drop worth seeing is under two printed steps: samples cannot help
    tests = max(1, int(curve.sum())) if multiplicity is None else max(1, multiplicity[0])
    # Alpha spending over the looks of the sequential test: the first look (as many candidate samples as
    # baseline ones) spends node_false_block / 4 over the node's tests; every later look (a re-measure
    # adds candidate samples only, so its error stays correlated with the first through the fixed
    # baseline) shares another quarter (measured: without it re-measuring doubled the false blocks).
    later = max(1, -(-p.max_samples // max(1, int(nb.min()))) - 1)
    c_first = z_upper(p.node_false_block / (4 * tests))
    c_later = z_upper(p.node_false_block / (4 * tests * later))
    c_last = c_later
    if later > 1:  # of the later looks' quarter, LAST_LOOK is the last one's (at max_samples, where it must decide)
        c_last = z_upper(p.node_false_block * LAST_LOOK / (4 * tests))
        c_later = z_upper(p.node_false_block * (1 - LAST_LOOK) / (4 * tests * (later - 1)))
    c_each = np.where(nc <= nb, c_first, np.where(nc >= p.max_samples, c_last, c_later))
    c_single = c_first
    z_miss = z_upper(p.miss_rate)
    z_pass = z_upper(p.alpha)
    z_block = z_upper(p.node_false_block / (2 * (n_groups if multiplicity is None else max(1, multiplicity[1]))))
    # groups, jointly: inverse-variance weighted shift vs the tolerance
    w = 1.0 / se**2
    wsum = np.bincount(gid, w, n_groups)
    wd = np.bincount(gid, w * drop, n_groups)
    centre = wd / wsum
    size = np.bincount(gid, None, n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = np.bincount(gid, w * (drop - centre[gid]) ** 2, n_groups) / (np.maximum(size - 1, 1) * wsum)
    se_g = np.sqrt(np.maximum(1.0 / wsum, np.where(size > 1, spread, 0.0)))
    tol_m = np.array([r.tolerance if r.tolerance is not None else np.nan for r in rows])
    tol_g = np.full(n_groups, p.tolerance)
    overridden = ~np.isnan(tol_m)
    if overridden.any():  # a group takes an override only when every member has one (the largest)
        all_set = np.bincount(gid, overridden, n_groups) == size
        mx = np.full(n_groups, -np.inf)
        np.maximum.at(mx, gid[overridden], tol_m[overridden])
        tol_g = np.where(all_set, mx, tol_g)
    lt_g = -np.log1p(-np.minimum(tol_g, 0.999))
    few_g = np.bincount(gid, few, n_groups) > 0
    if int(nc.min()) == int(nc.max()) and int(nb.min()) == int(nb.max()):  # the usual case: one count
        nc_g = np.full(n_groups, int(nc[0]))
        nb_g = np.full(n_groups, int(nb[0]))
    else:
        nc_g = np.full(n_groups, np.iinfo(np.int64).max)
        np.minimum.at(nc_g, gid, nc)
        nb_g = np.full(n_groups, np.iinfo(np.int64).max)
        np.minimum.at(nb_g, gid, nb)
    low_g, high_g = centre - z_block * se_g, centre + z_pass * se_g
    few_limit = -np.log1p(-np.minimum(np.maximum(tol_g, p.tolerance_few_samples), 0.999))
    g_block = np.where(few_g, centre > few_limit, low_g > lt_g)
    g_pass = np.where(few_g, ~g_block, high_g <= lt_g)
    g_last = nc_g >= p.max_samples
    groups_out: list[Decision] = []
    metric_out: list[Decision] = []
    single_of = {int(gid[i]): i for i in np.flatnonzero(~curve)}
    for k in (int(x) for x in np.flatnonzero(~g_pass)):
        tol = float(tol_g[k])
        if g_block[k]:
            outcome: Outcome = "block"
            why = (
                f"fewer than {p.min_samples} samples per side: the drop alone decides against "
                f"{rel(float(few_limit[k])):.0%}"
                if few_g[k]
                else f"beyond the {tol:.0%} tolerance (lower bound {rel(float(low_g[k])):.1%})"
            )
        elif not g_last[k]:
            outcome = "remeasure"
            why = (
                f"inconclusive against the {tol:.0%} tolerance with {nc_g[k]} samples: "
                f"re-measure (up to {p.max_samples})"
            )
        elif centre[k] > lt_g[k]:
            outcome, why = (
                "block",
                f"beyond the {tol:.0%} tolerance on the estimate after {nc_g[k]} samples (the limit)",
            )
        else:
            continue
        d = Decision(
            key=labels[k],
            group=labels[k],
            outcome=outcome,
            drop=rel(float(centre[k])),
            low=rel(float(low_g[k])),
            high=rel(float(high_g[k])),
            threshold=tol,
            n_baseline=int(nb_g[k]),
            n_candidate=int(nc_g[k]),
            why=why,
        )
        groups_out.append(d)
        if k in single_of:
            metric_out.append(d)
    # single metrics of a curve: departure from the rest of the curve (leave-one-out)
    rest = wsum[gid] - w
    with np.errstate(invalid="ignore", divide="ignore"):
        loo = (wd[gid] - w * drop) / rest
        se_r = np.sqrt(se**2 + 1.0 / rest)
    r = drop - loo
    min_eff = np.where(overridden, -np.log1p(-np.minimum(np.nan_to_num(tol_m), 0.999)), log_tol(p.min_effect))
    min_eff = np.maximum(min_eff, -np.log1p(-np.minimum(2 * quant, 0.999)))  # under two printed steps: no evidence
    block = curve & ~few & (r > c_each * se_r) & (drop > min_eff)
    settled = (r + z_miss * se_r < log_tol(p.detect_drop)) | (drop + z_miss * se < min_eff) | coarse
    few_block = curve & few & (drop > log_tol(max(p.tolerance, p.tolerance_few_samples)))
    remeasure = curve & ~few & ~block & ~settled & (nc < p.max_samples)
    for i in (int(x) for x in np.flatnonzero(block | few_block | remeasure)):
        if few_block[i]:
            outcome, why = "block", f"fewer than {p.min_samples} samples per side: the drop alone decides"
        elif block[i]:
            outcome = "block"
            why = (
                f"departs from the rest of its curve by {rel(float(r[i])):.1%} > "
                f"{c_each[i]:.2f} standard errors ({rel(float(c_each[i] * se_r[i])):.1%})"
            )
        else:
            outcome, why = "remeasure", f"inconclusive with {nc[i]} samples: re-measure (up to {p.max_samples})"
        metric_out.append(
            Decision(
                key=rows[i].key,
                group=names[i],
                outcome=outcome,
                drop=rel(float(drop[i])),
                low=rel(float(drop[i] - c_single * se[i])),
                high=rel(float(drop[i] + c_single * se[i])),
                threshold=rel(float(loo[i] + c_each[i] * se_r[i])),
                n_baseline=int(nb[i]),
                n_candidate=int(nc[i]),
                why=why,
            )
        )
    return tuple(metric_out), tuple(groups_out), nc
