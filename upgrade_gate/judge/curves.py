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
   lower bound at the node's family-wise level is beyond it, and is inconclusive in between. A curve
   (a group of >= 3) is held to `curve_tolerance` (2%, issue 29: a whole sweep 5% down passed a 7%
   tolerance) unless an override or a plan's accept covers all of it; its estimate beyond it without
   proof is inconclusive (re-measure). A group with fewer than `min_samples` samples a side at some size
   has no test: it blocks when its drop is beyond `tolerance_few_samples` (10%); a curve whose drop is beyond
   its tolerance but not that is inconclusive (re-measure; a warning from files), never a pass. Rates derived
   and measured: bench/RESULTS-detection.md.
2. **Single metrics of a group of >= 3**: a metric's departure from the rest of its group (drop minus
   the leave-one-out group shift) blocks when it exceeds `c * se` with `c` the normal quantile at
   `node_false_block / (2 * tests)` (Bonferroni over the node's tests and, loosely, over looks: most
   metrics are decided at the first look) AND the drop itself exceeds `min_effect`. It passes when its
   upper bound at `miss_rate` is below `detect_drop` (a drop that large would have been seen).
   With a class reference of >= `class_min_nodes` nodes (`priors`), the baseline at each size is read with
   the class's curve shape as well as its own samples (`judge.curve_prior`): a second test of each size,
   whose standard error is ~25% smaller, that may add a block (one size 10% down from files where the
   node's own 5 v 5 samples cannot show it) and never removes one.
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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple

from upgrade_gate.judge.curve_stats import group_of as group_of
from upgrade_gate.validate.remeasure import FloorDecision as FloorDecision
from upgrade_gate.validate.remeasure import floor_check as floor_check
from upgrade_gate.validate.remeasure import log_samples as log_samples
from upgrade_gate.validate.remeasure import pooled_log_sigma as pooled_log_sigma
from upgrade_gate.validate.remeasure import pooled_sigma as pooled_sigma

if TYPE_CHECKING:
    import numpy as np

    from upgrade_gate.judge.curve_prior import Prior

Outcome = Literal["pass", "block", "remeasure", "not_comparable"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Params:
    """The statistics' knobs (policy parameters of `bandwidth.regression`)."""

    tolerance: float = 0.07  # a group's shift allowed (a single metric's, e.g. a sweep's average)
    curve_tolerance: float = 0.02  # a whole curve's (a group of >= 3) shift allowed, when below `tolerance`
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


class Row(NamedTuple):
    """One metric of one node: baseline and candidate samples, in the metric's unit (a tuple: a node
    builds ~150 of them per judge run, and a frozen dataclass costs ~3x more to build)."""

    key: str
    baseline: Sequence[float]
    candidate: Sequence[float]
    higher_is_better: bool = True
    shift: float = 0.0  # expected candidate / baseline - 1 (a plan's accept entry)
    tolerance: float | None = None  # per-metric tolerance (override or plan); None: the group's
    group: str | None = None  # None: derived from the key (group_of)


class Columns(NamedTuple):
    """One node's rows column by column (what `zip(*rows)` gives): the judge builds its usual node's this
    way with C-level maps instead of ~150 `Row`s. `assess_many` takes either form."""

    key: Sequence[str]
    baseline: Sequence[Sequence[float]] | np.ndarray  # an array: `judge.table`'s rows (NaN only pads)
    candidate: Sequence[Sequence[float]] | np.ndarray
    higher_is_better: Sequence[bool]
    shift: Sequence[float]
    tolerance: Sequence[float | None]
    group: Sequence[str | None]

    @classmethod
    def of(cls, rows: Sequence[Row]) -> Columns:
        """The rows as columns (none: empty columns)."""
        if not rows:
            return _NO_COLUMNS
        return cls(*zip(*rows, strict=True))


_NO_COLUMNS = Columns((), (), (), (), (), (), ())


class Decision(NamedTuple):
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
    return assess_many([rows], p, [multiplicity])[0]


def assess_many(
    nodes: Sequence[Sequence[Row] | Columns],
    p: Params = Params(),
    multiplicities: Sequence[tuple[int, int] | None] | None = None,
    priors: Sequence[Prior | None] | None = None,
) -> list[Assessment]:
    """`assess` of many nodes at once, vectorised across nodes (`judge.curve_batch`): what a fleet's gate runs.
    `priors`: each node's class reference per row, read by the per-size test (`judge.curve_prior`)."""
    from upgrade_gate.judge.curve_batch import assess_many as batch

    return batch(nodes, p, multiplicities, priors)
