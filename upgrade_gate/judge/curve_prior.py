"""A node's baseline read with its class's curve shape: the per-size test's sharper form (issue 29).

Why: a size's drop compares 5 candidate samples with 5 baseline samples, so the baseline's own noise is
half the drop's variance. With 140 sizes a node at <= 1% healthy nodes blocked, no test on the node's own
samples catches one size 10% down more than 96% of the time (bench/RESULTS-detection.md). But the nodes of
a class measure one curve shape: the class reference (`baseline save`, the median of every node's baseline
medians per size) says where this node's baseline should be at each size, up to the node's own level.

The model, on log values (one curve of one node, size i):

- B_i, C_i: the baseline's and the candidate's one-sample Hodges-Lehmann centres (the median of the Walsh
  averages; var (pi/3) sigma^2 / n under normal noise);
- K_i: the class median (a plan's accepted shift applied), var v_K from the class's spread over its nodes;
- the node's level L: the median over the curve of B_i - K_i; e_i = B_i - K_i - L, the baseline's departure
  from the class shape;
- tau^2: how far this node's true shape departs from the class's, per node: the upper bound (`TAU_Z`
  standard errors of a MAD-based variance) of the robust spread of its e_i (1.4826 MAD), squared, less their
  sampling variance, floored at `SHAPE_FLOOR`^2. The upper bound, not the estimate: an underestimated tau
  overstates what the class knows, and blocked 1.3-1.4% of healthy nodes whose shapes differ by 1%;
- the class's prediction P_i = K_i + L, var v_P = tau^2 + v_K; the baseline estimate
  B*_i = B_i - s_i e_i with s_i = v_B / (v_B + v_P) (inverse-variance weights), var v_B v_P / (v_B + v_P).

The drop is then C_i against B*_i, se* = sqrt(v_C + v_B v_P / (v_B + v_P)) instead of sqrt(v_C + v_B), and its
departure from the rest of its curve (the same leave-one-out as the plain test, on these drops) is held to
the look's multiplicity-aware threshold at `AIDED_SHARE` of its alpha. The class only adds blocks: a size the
plain test blocks stays blocked (a class that reads a baseline low would otherwise veto a real drop: review
2026-12-07), and the plain test keeps its whole threshold; the aided test's half share keeps the two
together near the plain test's healthy rate. Safeguards, so that a node whose baseline really has its own
shape is not blocked for it:

- a size whose baseline departs from the class prediction by more than `OUTLIER_Z` standard errors is not
  aided (its own baseline alone decides);
- an aided size also needs its own evidence: the plain departure beyond `OWN_Z` standard errors (a 1% one-
  sided level) and both drops beyond `min_effect`;
- a curve aids only with >= `MIN_MEMBERS` sizes the class measured alike; the class needs
  `class_min_nodes` nodes (rules.bandwidth builds the prior, like with like only).

Rates measured (in-process and through the CLI): bench/RESULTS-detection.md. Nothing else changes: the
curve-level test, the re-measure and settle logic read the plain drops; without a
class reference (one node, a phase's look) the plain test decides alone.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from upgrade_gate.judge.curve_stats import row_median
from upgrade_gate.validate.remeasure import z_upper

SHAPE_FLOOR = 0.005  # the smallest shape difference assumed between a node and its class (log units)
OUTLIER_Z = 3.0
OWN_Z = z_upper(0.01)
MIN_MEMBERS = 5
_WALSH_MAX = 32  # wider rows (re-measured to many samples) take the median: Walsh averages grow as n^2
MAD_TO_SIGMA = 1.4826  # a normal sample's sigma per median absolute deviation
_MAD_VAR = 5.44  # n var(MAD-based sigma^2) / sigma^4 under normal noise: 2 / 0.3675 (the MAD's efficiency)
TAU_Z = 2.0
AIDED_SHARE = 0.5  # of a look's per-size alpha, the class-aided test's (the plain test keeps all of its own)


class Prior(NamedTuple):
    """One node's class reference per row (its `Columns` order): the log of the class median (NaN: none or
    not like with like) and that log's variance."""

    centre: np.ndarray
    var: np.ndarray


class Aided(NamedTuple):
    """The rows the class shape aids, their drop (log, + = worse) and its standard error."""

    rows: np.ndarray  # bool per row
    drop: np.ndarray
    se: np.ndarray


def centres(x: np.ndarray, *, full: bool) -> tuple[np.ndarray, float]:
    """Per row: the one-sample Hodges-Lehmann centre (NaN padding skipped) and its variance factor (pi/3;
    pi/2 for the median taken on rows wider than `_WALSH_MAX`)."""
    width = x.shape[1]
    if width > _WALSH_MAX:
        return row_median(x, full=full), math.pi / 2.0
    i, j = np.triu_indices(width)
    walsh = (np.take(x, i, axis=1) + np.take(x, j, axis=1)) / 2.0  # np.take: ~2.5x fancy indexing's speed
    return row_median(walsh, full=full), math.pi / 3.0


def grouped_median(values: np.ndarray, gid: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Median of `values` per group id (NaN where a group has none) and the count per group."""
    counts = np.bincount(gid, minlength=n_groups)
    out = np.full(n_groups, np.nan)
    if not len(values):
        return out, counts
    order = np.lexsort((values, gid))
    ordered = values[order]
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    has = counts > 0
    lo = (starts + (counts - 1) // 2)[has]
    hi = (starts + counts // 2)[has]
    out[has] = (ordered[lo] + ordered[hi]) / 2.0
    return out, counts


def _node_median(values: np.ndarray, ok: np.ndarray, row_node: np.ndarray, n_nodes: int) -> np.ndarray:
    """Median of `values[ok]` per node (NaN where a node has none). The usual batch (every node the same number
    of rows, in node order) is one NaN-padded array whose rows `row_median` takes; the same order statistics
    as `grouped_median`'s, so the same bits."""
    m = len(values)
    width = m // n_nodes
    if n_nodes == 1 or (
        width * n_nodes == m
        and bool((np.diff(row_node) >= 0).all())
        and bool((np.bincount(row_node, minlength=n_nodes) == width).all())
    ):
        return row_median(np.where(ok, values, np.nan).reshape(n_nodes, width))
    pick = np.flatnonzero(ok)
    return grouped_median(values[pick], row_node[pick], n_nodes)[0]


def aided(
    *,
    lb: np.ndarray,
    lc: np.ndarray,
    full: bool,
    sign: np.ndarray,
    prior_centre: np.ndarray,
    prior_var: np.ndarray,
    unit_var: np.ndarray,
    nb: np.ndarray,
    nc: np.ndarray,
    eligible: np.ndarray,
    gid: np.ndarray,
    n_groups: int,
    row_node: np.ndarray,
    n_nodes: int,
) -> Aided | None:
    """The class-aided drops (module docstring). `lb`/`lc`: log samples (the plan's shift in `lb`), `prior_centre`
    likewise shifted; `unit_var`: a sample's log variance (sigma^2 + quantisation); `eligible`: curve rows with a
    prior and enough samples. None when no row is aided."""
    ok = eligible & np.isfinite(prior_centre) & np.isfinite(prior_var)
    if not ok.any():
        return None
    b, factor_b = centres(lb, full=full)
    c, factor_c = centres(lc, full=full)
    x = b - prior_centre
    pick = np.flatnonzero(ok)
    level, members = grouped_median(x[pick], gid[pick], n_groups)
    ok &= members[gid] >= MIN_MEMBERS
    if not ok.any():
        return None
    e = x - level[gid]  # NaN outside the aided groups: never read there
    v_b = factor_b * unit_var / nb
    v_c = factor_c * unit_var / nc
    spread = _node_median(np.abs(e), ok, row_node, n_nodes)
    sampling = _node_median(v_b + prior_var, ok, row_node, n_nodes)
    per_node = np.bincount(row_node[ok], minlength=n_nodes)
    upper = 1.0 + TAU_Z * np.sqrt(_MAD_VAR / np.maximum(per_node, 1))  # the spread's upper bound, not its estimate
    with np.errstate(invalid="ignore"):
        tau2 = np.maximum(SHAPE_FLOOR**2, np.nan_to_num((MAD_TO_SIGMA * spread) ** 2 * upper - sampling))
    v_p = tau2[row_node] + prior_var
    with np.errstate(invalid="ignore"):
        ok &= np.abs(e) <= OUTLIER_Z * np.sqrt(v_b + v_p)  # NaN: not aided
    if not ok.any():
        return None
    share = np.where(ok, v_b / (v_b + v_p), 0.0)
    base = b - share * np.where(ok, e, 0.0)
    drop = -sign * (c - base)
    se = np.sqrt(v_c + np.where(ok, v_b * v_p / (v_b + v_p), v_b))
    return Aided(ok, drop, se)
