"""Statistics for "is the candidate slower than its baseline?", per node, over many bandwidth metrics.

The problem: a healthy MI300X node carries ~60-80 bandwidth metrics (the phase-2 sweep's sizes, the
phase-5 sweeps, the rails), each with a few samples per side. Testing each at 5% would block most
healthy nodes (1 - 0.95^60 = 95%). The default must keep the per-node false-block rate at or below
1% with 3% run-to-run noise and 5 samples per side, and still catch a 10% drop.

Why not a Holm or Bonferroni correction of the rank test: with 5 samples per side the exact one-sided
Mann-Whitney U p-value cannot go below 1/C(10,5) = 1/252 = 0.004, while Holm over 60 metrics at a 5%
family level needs 0.05/60 = 0.0008 for its first rejection: a corrected rank test never fires, a
silent fail-open. Correcting only over the metrics that already exceed the tolerance has the same
flaw where it hurts most: a regression across the whole sweep puts ~23 metrics in the family, needs
p <= 0.05/23 = 0.002 < 0.004, and passes, so the broader the regression the less it is seen (found
2026-11 in this module's own scenario tests). So the multiple-testing control sits in the effect
size, and a metric blocks only when BOTH hold:

1. Effect: its robust relative drop exceeds the tolerance (default 7%). The drop is the
   Hodges-Lehmann shift (median of all candidate-minus-baseline pairwise differences) over the
   baseline median: about as efficient as the mean under normal noise, so the tolerance can sit
   close to the noise floor, but not moved by one outlying run. The tolerance is the Bonferroni
   critical value of that estimate: at 3% noise and 5+5 samples its standard error is ~1.95%, and
   7% is ~3.6 sigma, a one-sided tail of ~1.7e-4 per metric, ~1% over 60 independent metrics.
2. Significance: the one-sided Mann-Whitney U test (scipy.stats.mannwhitneyu, exact for small
   samples) at alpha = 5% per metric. It is a guard, not the family control: it stops a drop that one
   or two outlying samples produced (with 5+5 samples p <= 0.05 needs at most 4 of the 25 pairs out
   of order).

Measured by simulation (2026-11, numpy + scipy, Gaussian 3% noise, 5 samples per side, independent
metrics, the worst case: real sweeps are positively correlated across sizes; 20,000 healthy nodes,
4,000 / 2,000 / 500 degraded ones): the false-block rate of a healthy node is 0.78% with 60 metrics
and 0.94% with 80; a 10% drop in one single metric is caught 95% of the time, a 15% drop in one
metric and a 10% drop across all metrics 100%. The benchmark helper re-measures this (bench/).

Fewer than `min_samples` (3) per side: no rank test is possible and the drop alone decides, against a
wider tolerance (`tolerance_few_samples`, default 10%: with one sample per side at 3% noise the drop's
standard error is 4.2%, so 7% would block a healthy rail one time in twenty). The finding says so.

"Lower is better" metrics (latencies) are handled by flipping the sign of the drop and the test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

DEFAULT_TOLERANCE = 0.07
DEFAULT_TOLERANCE_FEW_SAMPLES = 0.10
DEFAULT_ALPHA = 0.05
DEFAULT_MIN_SAMPLES = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """One metric, baseline vs candidate: the estimated drop and (when possible) the rank test."""

    key: str
    baseline_median: float
    candidate_median: float
    drop: float  # relative, positive = worse; Hodges-Lehmann with >= 1 sample each side
    p_value: float | None  # one-sided Mann-Whitney U; None with too few samples or within tolerance
    n_baseline: int
    n_candidate: int


def median(values: Sequence[float]) -> float:
    """statistics.median, without its generality: this runs for every metric of every node."""
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def hodges_lehmann(baseline: Sequence[float], candidate: Sequence[float]) -> float:
    """Median of all pairwise differences candidate[i] - baseline[j]."""
    return median([c - b for c in candidate for b in baseline])


def compare(
    key: str,
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    higher_is_better: bool = True,
    shift: float = 0.0,
    min_samples: int = DEFAULT_MIN_SAMPLES,
    tolerance: float | None = None,
) -> Comparison:
    """Drop and p-value of `candidate` against `baseline` scaled by (1 + shift).

    With `tolerance` given, the (comparatively costly) rank test runs only when the drop exceeds it:
    a metric within tolerance cannot block, so its p-value is never needed.
    """
    if not baseline or not candidate:
        raise ValueError(f"{key}: no samples to compare")
    expected = [b * (1.0 + shift) for b in baseline] if shift else list(baseline)
    centre = median(expected)
    if not math.isfinite(centre) or centre == 0:
        raise ValueError(f"{key}: baseline median is {centre}, a relative drop is undefined")
    hl = hodges_lehmann(expected, candidate)
    drop = (-hl if higher_is_better else hl) / abs(centre)
    p_value = None
    wanted = tolerance is None or drop > tolerance
    if wanted and len(baseline) >= min_samples and len(candidate) >= min_samples:
        p_value = rank_test(expected, candidate, higher_is_better=higher_is_better)
    return Comparison(
        key=key,
        baseline_median=median(baseline),
        candidate_median=median(candidate),
        drop=drop,
        p_value=p_value,
        n_baseline=len(baseline),
        n_candidate=len(candidate),
    )


def rank_test(baseline: Sequence[float], candidate: Sequence[float], *, higher_is_better: bool = True) -> float:
    """One-sided Mann-Whitney U p-value for "candidate is worse than baseline"."""
    from scipy.stats import mannwhitneyu

    alternative = "less" if higher_is_better else "greater"
    result = mannwhitneyu(list(candidate), list(baseline), alternative=alternative, method="auto")
    return float(result.pvalue)


Outcome = Literal["ok", "warn", "block"]


def decide(
    cmp: Comparison,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    alpha: float = DEFAULT_ALPHA,
    tolerance_few_samples: float = DEFAULT_TOLERANCE_FEW_SAMPLES,
    min_samples: int = DEFAULT_MIN_SAMPLES,
) -> Outcome:
    """One metric's decision (module docstring): block, warn (beyond tolerance, not significant) or ok.

    `cmp` comes from `compare(..., min_samples=min_samples)` with the same (or no) tolerance.
    """
    if cmp.n_baseline < min_samples or cmp.n_candidate < min_samples:
        return "block" if cmp.drop > max(tolerance, tolerance_few_samples) else "ok"
    if cmp.drop <= tolerance:
        return "ok"
    if cmp.p_value is None:  # pragma: no cover - compare() always tests beyond tolerance with enough samples
        return "block"
    return "block" if cmp.p_value <= alpha else "warn"
