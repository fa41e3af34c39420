"""Re-measure when inconclusive: the sequential test the bandwidth phases run, and CVF floors on evidence.

Issue 14: a comparison that is neither clearly within its limit nor clearly beyond it takes more samples
before it is decided. A phase (2 and 5: rccl-tests sweeps, `phases.sweeps`; 4: the rails, `phases.rail`)
first runs its tool `samples` times, then *looks*: for every metric it compares with something
- a CVF floor (PHASE2_BW_THRESHOLD, PHASE4_BW_THRESHOLD, TESTS_JSON): `floor_check` below;
- the node's baseline, when the caller injected a `Comparison` (the judge's curve statistics:
  `judge.remeasure`; this stage never imports the judge),
and re-runs the same tool, through the same runner and code path, `step` more times for every unit in doubt,
until nothing is inconclusive or `max_samples` is reached. The unit is what is in doubt: a rail; for a
sweep, the sizes in doubt alone (rccl-tests `-b FIRST -e LAST`, at most `MAX_RANGES` ranges of consecutive
sizes per look: `plan_sweep`), or the whole sweep when its curve, its average or its floor is (measured,
bench/detect_nodes.py: re-running the whole sweep for one size cost 7.0 samples per metric on healthy nodes
at 3% noise, the sizes alone ~6). Then it decides: a floor fails only when the samples' upper bound is below
it; still in between at the limit, it passes with a note (a single unlucky sample never fails a healthy
node); the judge reads the samples again and warns. How many samples each unit took is written to the phase
result (`<label>-samples` annotation, and the reason of a failure).

Bounds: each extra run has the phase's own per-run timeout (PHASE2_JOB_WAIT_TIME, PHASE4_PAIR_WAIT_TIME,
MPIJOB_WAIT_TIME), clamped to the phase deadline; the pipeline sizes the phase budget for `max_samples` runs
(or UPGRADE_GATE_PHASE<N>_TIMEOUT_S caps it); a look re-running ranges of a sweep takes up to `MAX_RANGES`
runs per extra sample, each of a few sizes (shorter than the whole sweep). A run that fails during
re-measurement (missing tool, timeout, non-zero exit, unreadable output, budget used up) is recorded like
any first run's failure: the phase fails closed.

The floor statistic (`floor_check`) lives here because both this stage and the judge's
`bandwidth.threshold` use it (one implementation): log-scale mean with a standard error from a pooled,
floored sigma; z at `node_false_block / (2 * tests)` with `tests` the node's floors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal, NamedTuple, Protocol

from upgrade_gate.model import Measurement, NodeName

_Z_CACHE: dict[float, float] = {}
MAX_RANGES = 3  # ranges of a sweep's sizes re-run per look (`plan_sweep`)
_SIZE_KEY = re.compile(r"/busbw(?:_inplace)?/(?P<bytes>\d+)$")


class FloorKnobs(Protocol):
    """The parameters the floor test reads (`Resampling`, and the judge's `curves.Params`)."""

    @property
    def noise_floor(self) -> float:
        """Smallest relative run-to-run noise assumed."""
        ...

    @property
    def resolution(self) -> float:
        """Smallest step the tool prints."""
        ...

    @property
    def node_false_block(self) -> float:
        """Node-level false-fail rate."""
        ...

    @property
    def max_samples(self) -> int:
        """Samples per metric before an inconclusive floor decides."""
        ...


class Comparison(Protocol):
    """An injected comparison with a node's baseline: the keys of `measurements` still inconclusive -> why."""

    def __call__(self, node: NodeName, measurements: Sequence[Measurement]) -> Mapping[str, str]:
        """Inconclusive keys (a key may also be a group such as `mesh/all_reduce/busbw`) and why."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Resampling:
    """The sequential test's policy in the phases (from `bandwidth.regression` of the policy; see the CLI).

    `max_samples` 0 (the default for callers that give none): the phases keep their fixed sample count
    and still judge floors on evidence. `step` 0: as many runs per look as the first look took.
    """

    max_samples: int = 0
    step: int = 0
    noise_floor: float = 0.005
    resolution: float = 0.01
    node_false_block: float = 0.01
    compare: Comparison | None = None

    def limit(self, samples: int) -> int:
        """Most runs of one unit, for a phase that starts with `samples`."""
        return max(samples, self.max_samples)

    def next_count(self, have: int, samples: int) -> int:
        """Runs after the next look of a unit that has `have` (never past the limit)."""
        return min(self.limit(samples), have + max(1, self.step or samples))


class FloorDecision(NamedTuple):
    """A CVF floor judged on the samples, with CVF's own single-sample decision beside it. A NamedTuple
    (read-only, built positionally): the judge builds one per rail of every node (~1 us against ~2.5 us
    for a frozen slotted dataclass, issue 29)."""

    outcome: Literal["pass", "fail", "remeasure", "inconclusive"]
    estimate: float
    low: float
    high: float
    n: int
    cvf_single: Literal["passed", "failed"]


def z_upper(p: float) -> float:
    """The standard normal quantile with `p` above it (cached)."""
    z = _Z_CACHE.get(p)
    if z is None:
        z = _Z_CACHE[p] = NormalDist().inv_cdf(1.0 - min(max(p, 1e-12), 0.5))
    return z


def log_samples(samples: Sequence[float], p: FloorKnobs) -> list[float]:
    """The samples on the log scale the floor statistics use, floored at half a printed step."""
    tiny = p.resolution / 2
    return [math.log(max(x, tiny)) for x in samples]


def floor_check(
    samples: Sequence[float],
    floor: float,
    *,
    sigma: float,
    tests: int,
    p: FloorKnobs,
    logs: Sequence[float] | None = None,
) -> FloorDecision:
    """Below the floor only when the upper bound says so; above when the lower bound does (log scale).
    `logs`: `log_samples(samples, p)`, when the caller has them already (`judge.rules.floors`)."""
    if logs is None:
        logs = log_samples(samples, p)
    n = len(logs)
    centre = math.fsum(logs) / n
    se = max(sigma, p.noise_floor) / math.sqrt(n)
    z = z_upper(p.node_false_block / (2 * max(1, tests)))
    low, high = math.exp(centre - z * se), math.exp(centre + z * se)
    outcome: Literal["pass", "fail", "remeasure", "inconclusive"]
    if high < floor:
        outcome = "fail"
    elif low >= floor:
        outcome = "pass"
    elif n < p.max_samples:
        outcome = "remeasure"
    else:
        outcome = "inconclusive"
    single: Literal["passed", "failed"] = "passed" if samples and samples[0] >= floor else "failed"
    return FloorDecision(outcome, math.exp(centre), low, high, n, single)


def pooled_sigma(samples: Sequence[Sequence[float]], p: FloorKnobs) -> float:
    """Pooled within-metric log sigma of several metrics' samples (e.g. a node's rails), floored."""
    return pooled_log_sigma([log_samples(values, p) for values in samples if len(values) >= 2], p)


def pooled_log_sigma(logged: Iterable[Sequence[float]], p: FloorKnobs) -> float:
    """`pooled_sigma` of metrics already on the log scale (`log_samples`)."""
    squares, dof = 0.0, 0
    for logs in logged:
        if len(logs) < 2:
            continue
        mean = math.fsum(logs) / len(logs)
        squares += math.fsum((x - mean) ** 2 for x in logs)
        dof += len(logs) - 1
    if dof < 4:
        return p.noise_floor
    return max(math.sqrt(squares / dof), p.noise_floor)


def in_between(d: FloorDecision) -> bool:
    """True when the samples neither clear the floor nor fall below it (re-measure, or at the limit)."""
    return d.outcome in ("remeasure", "inconclusive")


def rail_floors(
    samples: Mapping[int, Sequence[float]], floor: float, *, rail_count: int, p: FloorKnobs
) -> dict[int, FloorDecision]:
    """Phase 4's look at a pair's rails: each rail against the floor, sigma pooled over the rails."""
    sigma = pooled_sigma(list(samples.values()), p)
    tests = floor_tests(rail_count)
    return {r: floor_check(v, floor, sigma=sigma, tests=tests, p=p) for r, v in samples.items()}


def floor_tests(rail_count: int) -> int:
    """The floors of one node (its rails and its mesh average), as `bandwidth.threshold` counts them."""
    return rail_count + 1


def floor_message(d: FloorDecision) -> str:
    """The evidence of a floor decision, one clause (sample count, upper bound, CVF's single sample)."""
    return f"{d.n} sample(s), upper bound {d.high:.2f}; CVF's single-sample decision: {d.cvf_single}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepPlan:
    """A re-measurement of an rccl-tests sweep: `runs` runs of the whole sweep, or of one range of its sizes.

    `span` (first, last) bytes: rccl-tests run with `-b first -e last` (and the sweep's `-f`), which
    measures `sizes` alone; None: the whole sweep (every size and `# Avg bus bandwidth`).
    """

    span: tuple[int, int] | None
    runs: int
    sizes: tuple[int, ...]


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int) -> tuple[int, ...]:
    """The sizes of rccl-tests' factor loop (`for (size = min; size <= max; size *= factor)`); () if not one."""
    if min_bytes <= 0 or factor <= 1:
        return ()
    out, size = [], min_bytes
    while size <= max_bytes:
        out.append(size)
        size *= factor
    return tuple(out)


def size_of(key: str) -> int | None:
    """`.../busbw/<bytes>` or `.../busbw_inplace/<bytes>` -> bytes; None for anything else (a curve, the average)."""
    m = _SIZE_KEY.search(key)
    return int(m.group("bytes")) if m else None


def plan_sweep(
    inconclusive: Iterable[str],
    *,
    whole: bool,
    sizes: Sequence[int],
    counts: Mapping[int, int],
    full: int,
    samples: int,
    p: Resampling,
) -> tuple[SweepPlan, ...]:
    """What to re-run of a sweep whose look found `inconclusive` keys (and `whole`: a floor on its average).

    The unit of re-measurement is what is in doubt: a key of one size (out of place or in place) re-runs
    that size alone, so the sizes already decided keep their samples; a curve (`.../busbw`), the
    average, a key of no known size or `whole` re-run the whole sweep (one plan). Sizes in doubt are
    re-run as ranges of consecutive sweep sizes (`-b` first, `-e` last, the sweep's factor), at most
    `MAX_RANGES` per look (the closest ranges merge, so a settled size between them is measured too):
    a look costs at most `MAX_RANGES` tool runs per extra sample, each shorter than the whole sweep.
    `counts`: samples per size so far; `full`: whole sweeps so far. Each look adds
    `Resampling.next_count` runs; nothing passes the limit. () when nothing is left to re-run.
    """
    limit = p.limit(samples)
    doubtful: set[int] = set()
    for key in inconclusive:
        size = size_of(key)
        if size is None or size not in counts:
            whole = True
        else:
            doubtful.add(size)
    if whole and full < limit:
        return (SweepPlan(span=None, runs=p.next_count(full, samples) - full, sizes=tuple(sizes)),)
    at = {size: i for i, size in enumerate(sizes)}
    below = sorted(at[s] for s in doubtful if counts[s] < limit)
    ranges: list[list[int]] = []
    for i in below:
        if ranges and i == ranges[-1][1] + 1:
            ranges[-1][1] = i
        else:
            ranges.append([i, i])
    while len(ranges) > MAX_RANGES:
        k = min(range(len(ranges) - 1), key=lambda j: ranges[j + 1][0] - ranges[j][1])
        ranges[k : k + 2] = [[ranges[k][0], ranges[k + 1][1]]]
    plans = []
    for lo, hi in ranges:
        doubt = [sizes[i] for i in below if lo <= i <= hi]
        runs = min(p.next_count(counts[s], samples) - counts[s] for s in doubt)
        plans.append(SweepPlan(span=(sizes[lo], sizes[hi]), runs=runs, sizes=tuple(sizes[lo : hi + 1])))
    return tuple(plans)
