"""Workload rules (issue 25): the node still trains as fast, converges the same way, starts as quickly,
has no collective timeouts, and keeps its ranks on the same GPUs when the device list is permuted.

They read the measurements and device maps of phases 6 (`workload`) and 7 (`perturbation`, see
`validate.phases.workload`) and phase 2's small-message all_reduce latencies (`latency/all_reduce/...`).
Every finding names the metric, the baseline value and the candidate value in one line.

- `workload.evidence`: fail closed. A workload phase that errored, was skipped or was not run; a
  baseline that measured the workload while the candidate did not; a run whose settings (model,
  batch, steps, precision, world size, backend) differ from the baseline's (not comparable).
- `workload.throughput`: `workload/samples_per_s` (one sample per step after warm-up) against the
  baseline's with the statistics of bandwidth (`judge.curves`, `bandwidth.regression`'s parameters but
  the rule's own `tolerance`, 6%: a run is one sample of the node's run-to-run noise, which the steps
  cannot average out, and 7% caught a 10% drop 98.5% of the time at 1% run noise, bench/bench_workload.py;
  a drop beyond the tolerance whose lower confidence bound is beyond it blocks; an inconclusive one is
  what phase 6 re-measures (more runs) and warns here). Those statistics read steps that stall as
  outliers, though a job delivers its samples over its total time: so the rate over the measured steps'
  total time (the harmonic mean of the per-step rates: every step trains world_size x batch samples,
  which the contract parser checks) blocks too when it drops beyond TOTAL_TOLERANCE or the rule's
  `tolerance`, whichever is larger (break test 2026-12-07: every other step at 400 samples/s, -58% of
  the job's throughput, and 5 of 25 steps stalled 4 s, -83%, passed on the median).
- `workload.loss_curve`: the loss at every step within `tolerance` (relative, with `floor` as the
  smallest denominator) of the baseline's: same seed, same steps, same data. A loss that is not finite
  was already a failed phase 6.
- `workload.init_time`: process start to the first completed step, blocking when it is above
  `max_ratio` times the baseline's AND at least `min_increase_s` more (the incident: 1.2 s -> 9.8 s).
- `workload.collective_timeouts`: any NCCL/RCCL timeout or error line in the job's log blocks (the
  incident: 0 -> 4.7 timeouts an hour); more warnings than the baseline warn.
- `workload.allreduce_latency`: phase 2's all_reduce time at small messages (<= `max_bytes`): above
  `max_us` (the incident's acceptance table: 500 µs) blocks, and so does a rise beyond the baseline's
  by more than `tolerance` (judged on the samples' medians).
- `workload.index_dependent` (in `rules.workload_perturbation`): a perturbation run (phase 7) whose
  rank -> GPU UUID map differs from phase 6's, or whose throughput falls below phase 6's by more than
  `throughput_tolerance` (15%; the runs are minutes apart on one node, but one run is one sample of the
  machine's load, so the per-step statistics alone would read a busy minute as a regression), or whose
  loss curve departs from phase 6's: the workload binds GPUs by enumeration index. Blocks by default;
  the next step is the UUID pin.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from upgrade_gate.judge import curves, stats
from upgrade_gate.judge.rules.base import NodeContext, ParamSpec, finding, softer, spec
from upgrade_gate.judge.rules.measured import (
    WORKLOAD_PREFIXES,
    curve_params,
    keys_under,
    merged_measurements,
    sample_table,
    settings_diff,
)
from upgrade_gate.model import Finding, Measurement, PhaseResult, PhaseStatus, Snapshot

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry

THROUGHPUT = "workload/samples_per_s"
LOSS = "workload/loss"
INIT = "workload/init_s"
TIMEOUTS = "workload/collective_timeouts"
ERRORS = "workload/collective_errors"
WARNINGS = "workload/collective_warnings"
LATENCY_PREFIX = "latency/all_reduce/time_us/"
PERTURBATIONS = ("reversed", "rotated")


def _phase(snapshot: Snapshot, number: int) -> PhaseResult | None:
    return next((r for r in snapshot.phases if r.phase == number), None)


def _measures(snapshot: Snapshot) -> dict[str, Measurement]:
    return merged_measurements(snapshot)[0]


def _median(m: Measurement) -> float:
    return statistics.median(m.samples)


def _path(key: str) -> str:
    return f"measurements[key={key}]"


def _as_its_bandwidth(
    base: dict[str, Measurement], cand: dict[str, Measurement], key: str, diffs: list[str], ignore: tuple[str, ...]
) -> bool:
    """True when a latency's settings changed as its size's bus bandwidth's did (phase 2 gives a latency its
    bandwidth's settings: a GPU lost changes both, `ranks 8 -> 7`)."""
    bandwidth = "mesh/all_reduce/busbw/" + key.removeprefix(LATENCY_PREFIX)
    b, c = base.get(bandwidth), cand.get(bandwidth)
    return b is not None and c is not None and settings_diff(b.settings, c.settings, ignore) == diffs


def check_evidence(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Workload phases that gave no evidence, a lost workload, runs that do not compare."""
    for number in (6, 7):
        result = _phase(ctx.candidate, number)
        if result is not None and result.status in (PhaseStatus.ERROR, PhaseStatus.SKIPPED, PhaseStatus.NOT_RUN):
            yield finding(
                ctx,
                entry,
                f"phase {number} ({result.name}) {result.status.value}: {result.reason or 'no reason'}",
                device=result.name,
                path=f"phases[phase={number}]",
                expected=PhaseStatus.PASSED.value,
                actual=result.status.value,
                evidence=f"phase {number}",
            )
    for number in (6, 7):
        result = _phase(ctx.candidate, number)
        if result is not None and result.status is PhaseStatus.PASSED:
            for key, why in _contract_broken(result):
                yield finding(
                    ctx,
                    entry,
                    f"phase {number} ({result.name}) passed, but {why}: no evidence backs the pass",
                    device=key,
                    path=f"phases[phase={number}]",
                    expected="the measurements and device map a passed run records",
                    actual=why,
                    evidence=f"phase {number}",
                )
    for side, snap in (("candidate", ctx.candidate), ("baseline", ctx.baseline)):
        if snap is None:
            continue
        for key, why in sorted(merged_measurements(snap)[1].items()):
            if key.startswith(WORKLOAD_PREFIXES):  # pooled samples outvoted a -60% phase 6 (break test 2026-12-07)
                yield finding(
                    ctx,
                    entry,
                    f"{key} in the {side}: {why}: the run's evidence cannot be read",
                    device=key,
                    path=_path(key),
                    expected="one measurement, in its phase",
                    actual=why,
                    evidence=side if side == "candidate" else "baseline store",
                )
    if ctx.baseline is None:
        return
    base, cand = _measures(ctx.baseline), _measures(ctx.candidate)
    yield from _latency_evidence(ctx, entry, base, cand)
    for number, key in ((6, THROUGHPUT), (7, f"perturbation/{PERTURBATIONS[0]}/samples_per_s")):
        if key in base and _phase(ctx.candidate, number) is None:
            yield finding(
                ctx,
                entry,
                f"phase {number}: the baseline ran the workload ({key} {_median(base[key]):.1f}), the candidate "
                "did not: nothing says the node still trains",
                device=key,
                path=f"phases[phase={number}]",
                expected="a result",
                actual=None,
                evidence="baseline store",
            )
    six = _phase(ctx.candidate, 6)
    if six is not None and six.status is PhaseStatus.PASSED and THROUGHPUT in cand and THROUGHPUT not in base:
        # break test 2026-12-07: a baseline saved before phases 6-7 ran left a -60% run, init x10 and a doubled
        # loss unjudged, and the checklist read "as in the baseline: pass"
        yield finding(
            ctx,
            entry,
            f"phase 6 ran, but the baseline has no workload run ({THROUGHPUT} {_median(cand[THROUGHPUT]):.1f} now): "
            "throughput, init time, loss and timeouts are not compared with the node's own; save a baseline "
            "with phases 6-7 before the change",
            device=THROUGHPUT,
            path="phases[phase=6]",
            expected="a baseline workload run",
            actual=None,
            evidence="baseline store",
            severity=entry.severity_param("without_baseline"),
        )
    yield from _not_comparable(ctx, entry, base, cand)


def _not_comparable(
    ctx: NodeContext, entry: RuleEntry, base: dict[str, Measurement], cand: dict[str, Measurement]
) -> Iterable[Finding]:
    """A workload or latency measurement whose unit or settings differ from the baseline's: not compared,
    so said and blocked (break test 2026-12-07: only the throughput's settings were checked, and an init time
    x11, a doubled loss or a latency x22 with one changed setting, or a latency in ms, passed)."""
    assert ctx.baseline is not None
    regression = ctx.policy.rule_for("bandwidth.regression", ctx.node_class)
    ignore = regression.strings("ignore_settings") if regression is not None else ()
    latency = keys_under(ctx.baseline, LATENCY_PREFIX)
    said: set[tuple[str, ...]] = set()  # a run's settings change, said once for the run's measurements
    expected: object
    actual: object
    for key in (THROUGHPUT, LOSS, INIT, *COUNTS, *latency):
        b, c = base.get(key), cand.get(key)
        if b is None or c is None:
            continue  # absent: the contract and _latency_evidence speak
        if b.unit != c.unit:
            why, expected, actual = f"unit {b.unit} in the baseline, {c.unit} now", b.unit, c.unit
        elif diffs := settings_diff(b.settings, c.settings, ignore if key in latency else ()):
            if key in latency and _as_its_bandwidth(base, cand, key, diffs, ignore):
                continue  # its size's bus bandwidth changed settings alike: bandwidth.not_comparable speaks
            if key not in latency:
                if tuple(diffs) in said:
                    continue
                said.add(tuple(diffs))
            why, expected, actual = f"settings differ: {'; '.join(diffs)}", dict(b.settings), dict(c.settings)
        elif key == THROUGHPUT and _implausible(b, c):
            # as bandwidth.not_comparable's: more than 100x the baseline in every step is no run (1e308 passed)
            why = f"every step over {_IMPLAUSIBLE:g}x the baseline's fastest ({max(b.samples):g}): no run gives that"
            expected, actual = max(b.samples), min(c.samples)
        else:
            continue
        yield finding(
            ctx,
            entry,
            f"{key}: not comparable with the baseline's run, {why}",
            device=key,
            path=_path(key),
            expected=expected,
            actual=actual,
            evidence="phase 2" if key in latency else "phase 6",
        )


_IMPLAUSIBLE = 100.0


def _implausible(b: Measurement, c: Measurement) -> bool:
    """Every candidate step over `_IMPLAUSIBLE` times the baseline's fastest: no run gives that."""
    return bool(b.samples) and bool(c.samples) and min(c.samples) > _IMPLAUSIBLE * max(b.samples)


COUNTS = (TIMEOUTS, ERRORS, WARNINGS)
PHASE_KEYS = {
    6: (THROUGHPUT, LOSS, INIT, *COUNTS),
    7: tuple(f"perturbation/{how}/{what}" for how in PERTURBATIONS for what in ("samples_per_s", "loss")),
}
"""What the workload rules judge of a passed phase, which `validate.phases.workload` always records: a run that
gave no usable output, a loss that is not finite, or a collective timeout is a phase that errored or failed,
never one that passed without them. (Step times are recorded too, and judged by no rule.)"""


def _contract_broken(result: PhaseResult) -> Iterable[tuple[str, str]]:
    """(key, why) for each way a passed phase 6 or 7 lacks the evidence its pass rests on: a measurement absent,
    recorded twice, without samples or with a sample no run gives (not finite; a negative or fractional count;
    a rate that is not positive, a negative init time), or no rank -> GPU map."""
    seen: dict[str, Measurement] = {}
    for each in result.measurements:
        if each.key in seen and each.key in PHASE_KEYS[result.phase]:
            yield each.key, f"{each.key} is recorded twice"
        seen.setdefault(each.key, each)
    for key in PHASE_KEYS[result.phase]:
        m = seen.get(key)
        if m is None:
            yield key, f"{key} is absent"
        elif not m.samples:
            yield key, f"{key} has no samples"
        elif not all(math.isfinite(v) for v in m.samples):
            yield key, f"{key} holds a sample that is not finite"
        elif key in COUNTS and any(v < 0 or v != int(v) for v in m.samples):
            yield key, f"{key} holds {next(v for v in m.samples if v < 0 or v != int(v))!r}, not a count"
        elif key.endswith("/samples_per_s") and any(v <= 0 for v in m.samples):
            yield key, f"{key} holds {min(m.samples)!r}, which no run measures"
        elif key == INIT and any(v < 0 for v in m.samples):
            yield key, f"{key} holds {min(m.samples)!r}, a negative time"
    if not result.device_map:
        yield "device_map", "its rank -> GPU map is empty"


def _latency_evidence(
    ctx: NodeContext, entry: RuleEntry, base: dict[str, Measurement], cand: dict[str, Measurement]
) -> Iterable[Finding]:
    """Phase 2's all_reduce latencies: one the baseline measured that the candidate's phase 2 did not, or a
    time no run measures (not finite, zero or negative)."""
    assert ctx.baseline is not None
    keys = keys_under(ctx.baseline, LATENCY_PREFIX)  # per key layout, once
    if not keys or _phase(ctx.candidate, 2) is None:
        return  # evidence.missing names a phase 2 that did not run
    measured = sample_table(ctx.candidate)
    rows = measured.layout.rows(keys)
    if (rows >= 0).all():  # the usual node: every one measured, each whole row finite and above 0
        low, _, whole = measured.summary()
        if whole[rows].all() and (low[rows] > 0).all():
            return
    for key in (k for k in keys if base[k].samples):
        m = cand.get(key)
        if m is not None and m.samples and all(math.isfinite(v) and v > 0 for v in m.samples):
            continue
        if m is None or not m.samples:
            why = f"the baseline measured {key}, the candidate's phase 2 did not"
        else:
            odd = next(v for v in m.samples if not (math.isfinite(v) and v > 0))
            why = f"{key} holds {odd!r} µs, which no run measures"
        yield finding(
            ctx,
            entry,
            f"{why}: the latency evidence is missing",
            device=key,
            path=_path(key),
            expected="a positive time per sample",
            actual=None if m is None else list(m.samples[:5]),
            evidence="phase 2",
        )


def _comparable(ctx: NodeContext, key: str) -> tuple[Measurement, Measurement] | None:
    if ctx.baseline is None:
        return None
    b, c = _measures(ctx.baseline).get(key), _measures(ctx.candidate).get(key)
    if b is None or c is None or b.settings != c.settings or not b.samples or not c.samples:
        return None  # workload.evidence names why
    return b, c


def throughput_decision(
    ctx: NodeContext, b: Measurement, c: Measurement, key: str, tolerance: float | None = None
) -> curves.Decision | None:
    """The curves statistics on one throughput metric (None: it passes), at `tolerance` if given."""
    regression = ctx.policy.rule_for("bandwidth.regression", ctx.node_class)
    params = curve_params(regression) if regression is not None else curves.Params()
    if tolerance is not None:
        params = dataclasses.replace(params, tolerance=tolerance)
    row = curves.Row(key=key, baseline=b.samples, candidate=c.samples, higher_is_better=True, group=key)
    with np.errstate(over="ignore", invalid="ignore"):  # samples near the float limit: workload.evidence blocks them
        assessment = curves.assess([row], params)
    worst = [d for d in (*assessment.metrics, *assessment.groups) if d.outcome in ("block", "remeasure")]
    blocks = [d for d in worst if d.outcome == "block"]
    return (blocks or worst)[0] if worst else None


TOTAL_TOLERANCE = 0.15
"""Drop of the rate over the measured steps' total time that blocks (a rule `tolerance` above it wins): one
run's total has no confidence bound, and a healthy run's occasional slow step costs a few per cent."""


def delivered(m: Measurement) -> float:
    """Samples/s over the total time of the steps `m` holds: the harmonic mean of its per-step rates."""
    return len(m.samples) / sum(1.0 / v for v in m.samples)


def check_throughput(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Samples/s of the reference run against the baseline's (the statistics of bandwidth)."""
    pair = _comparable(ctx, THROUGHPUT)
    if pair is None:
        return
    b, c = pair
    if _implausible(b, c):
        return  # no run gives that: workload.evidence blocks it; the statistics would overflow
    decision = throughput_decision(ctx, b, c, THROUGHPUT, entry.number("tolerance"))
    if decision is None or decision.outcome != "block":
        limit = max(TOTAL_TOLERANCE, entry.number("tolerance"))
        bt, ct = delivered(b), delivered(c)
        if (bt - ct) / bt > limit:
            yield finding(
                ctx,
                entry,
                f"{THROUGHPUT}: baseline {bt:.1f} samples/s, candidate {ct:.1f} samples/s over the measured steps' "
                f"total time ({(ct - bt) / bt:+.1%}; beyond the {limit:.0%} tolerance; median {_median(b):.1f} -> "
                f"{_median(c):.1f}: steps that stalled)",
                device=THROUGHPUT,
                path=_path(THROUGHPUT),
                expected=round(bt, 3),
                actual=round(ct, 3),
                evidence="phase 6",
            )
            return
    if decision is None:
        return
    bm, cm = _median(b), _median(c)
    change = (cm - bm) / bm
    severity = entry.severity if decision.outcome == "block" else softer(entry.severity)
    how = "beyond" if decision.outcome == "block" else "inconclusive against"
    yield finding(
        ctx,
        entry,
        f"{THROUGHPUT}: baseline {bm:.1f} samples/s, candidate {cm:.1f} samples/s ({change:+.1%}; {how} the "
        f"{decision.threshold:.0%} tolerance, {decision.n_baseline}+{decision.n_candidate} steps)",
        device=THROUGHPUT,
        path=_path(THROUGHPUT),
        expected=round(bm, 3),
        actual=round(cm, 3),
        evidence="phase 6",
        severity=severity,
    )


def _loss_departure(b: Sequence[float], c: Sequence[float], floor: float) -> tuple[int, float] | None:
    """The step where `c` departs most from `b` (relative), or None when the lengths differ."""
    if len(b) != len(c) or not b:
        return None
    worst = max(range(len(b)), key=lambda i: abs(c[i] - b[i]) / max(abs(b[i]), floor))
    return worst, abs(c[worst] - b[worst]) / max(abs(b[worst]), floor)


def check_loss_curve(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """The loss at every step within the tolerance of the baseline's (same seed, steps, data)."""
    pair = _comparable(ctx, LOSS)
    if pair is None:
        return
    b, c = pair
    tolerance, floor = entry.number("tolerance"), entry.number("floor")
    worst = _loss_departure(b.samples, c.samples, floor)
    if worst is None:
        message = f"{LOSS}: baseline {len(b.samples)} steps, candidate {len(c.samples)}: the curves do not compare"
        yield finding(
            ctx, entry, message, device=LOSS, path=_path(LOSS), expected=len(b.samples), actual=len(c.samples)
        )
        return
    step, departure = worst
    if departure > tolerance:
        yield finding(
            ctx,
            entry,
            f"{LOSS}: step {step}: baseline {b.samples[step]:.4f}, candidate {c.samples[step]:.4f} "
            f"({departure:.1%} apart, tolerance {tolerance:.0%}; final {b.samples[-1]:.4f} -> {c.samples[-1]:.4f})",
            device=LOSS,
            path=_path(LOSS),
            expected=round(b.samples[step], 6),
            actual=round(c.samples[step], 6),
            evidence="phase 6",
        )


def check_init_time(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Process start to the first completed step against the baseline's."""
    pair = _comparable(ctx, INIT)
    if pair is None:
        return
    b, c = (_median(m) for m in pair)
    ratio, more = entry.number("max_ratio"), entry.number("min_increase_s")
    if c > b * ratio and c - b >= more:
        yield finding(
            ctx,
            entry,
            f"{INIT}: baseline {b:.1f} s, candidate {c:.1f} s (x{c / b:.1f}; allowed x{ratio:g} or +{more:g} s)",
            device=INIT,
            path=_path(INIT),
            expected=round(b, 3),
            actual=round(c, 3),
            evidence="phase 6",
        )


def check_collective(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """NCCL/RCCL timeouts and errors in the job's log block; more warnings than the baseline warn."""
    cand = _measures(ctx.candidate)
    base = _measures(ctx.baseline) if ctx.baseline is not None else {}
    for key in (TIMEOUTS, ERRORS, WARNINGS):
        m = cand.get(key)
        if m is None:
            continue
        now = int(sum(m.samples))
        before = int(sum(base[key].samples)) if key in base else None
        if key != WARNINGS and now > 0:
            severity = entry.severity
        elif key == WARNINGS and before is not None and now > before:
            severity = softer(entry.severity)
        else:
            continue
        yield finding(
            ctx,
            entry,
            f"{key}: baseline {before if before is not None else 'not measured'}, candidate {now} in the job's log",
            device=key,
            path=_path(key),
            expected=0 if key != WARNINGS else before,
            actual=now,
            evidence="phase 6",
            severity=severity,
        )


def check_latency(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Phase 2's small-message all_reduce time against the incident's 500 µs and the baseline."""
    cand = _measures(ctx.candidate)
    base = _measures(ctx.baseline) if ctx.baseline is not None else {}
    limit, tolerance, largest = entry.number("max_us"), entry.number("tolerance"), entry.integer("max_bytes")
    for key in keys_under(ctx.candidate, LATENCY_PREFIX):
        size = key.rsplit("/", 1)[-1]
        if not size.isascii() or not size.isdigit() or int(size) > largest or not cand[key].samples:
            continue
        # statistics.median's value without its generality (both sides have samples here)
        now = stats.median(cand[key].samples)
        b = base.get(key)
        before = stats.median(b.samples) if b is not None and b.samples and b.settings == cand[key].settings else None
        shown = f"{before:.1f} µs" if before is not None else "not measured"
        if now > limit:
            why = f"above {limit:g} µs"
        elif before is not None and before > 0 and (now - before) / before > tolerance:
            why = f"{(now - before) / before:+.0%}, beyond the {tolerance:.0%} tolerance"
        else:
            continue
        yield finding(
            ctx,
            entry,
            f"{key}: baseline {shown}, candidate {now:.1f} µs ({why})",
            device=key,
            path=_path(key),
            expected=before if before is not None else f"<= {limit:g}",
            actual=now,
            evidence="phase 2",
        )


SPECS = (
    spec(
        "workload.evidence",
        "a workload phase (6, 7) that errored, was skipped or not run; a baseline workload the candidate lost; "
        "runs whose settings differ",
        check_evidence,
        plan_can_accept=False,
        params={
            "without_baseline": ParamSpec(
                kind="string",
                default="block",
                doc="severity when phase 6 ran but the baseline has no workload run to compare it with: block, "
                "warn or info (anything else blocks)",
            ),
        },
    ),
    spec(
        "workload.throughput",
        "the reference run's samples/s below its baseline's (the statistics of bandwidth.regression)",
        check_throughput,
        needs_baseline=True,
        params={
            "tolerance": ParamSpec(
                kind="number",
                default=0.06,
                doc="drop allowed (bench/RESULTS-workload.md: 6% catches 10% at >= 99% with 1% run noise)",
                minimum=0,
                maximum=1,  # a relative drop: 5 (500%) switched the rule off without a word (break test 2026-12-07)
            ),
        },
    ),
    spec(
        "workload.loss_curve",
        "the reference run's loss curve departs from its baseline's (same seed, steps and data)",
        check_loss_curve,
        needs_baseline=True,
        params={
            "tolerance": ParamSpec(kind="number", default=0.05, doc="relative departure at any step", minimum=0),
            "floor": ParamSpec(kind="number", default=0.1, doc="smallest loss a departure is relative to", minimum=0),
        },
    ),
    spec(
        "workload.init_time",
        "process start to the first completed step well above the baseline's",
        check_init_time,
        needs_baseline=True,
        params={
            "max_ratio": ParamSpec(kind="number", default=2.0, doc="candidate / baseline allowed", minimum=1),
            "min_increase_s": ParamSpec(kind="number", default=2.0, doc="seconds more that always pass", minimum=0),
        },
    ),
    spec(
        "workload.collective_timeouts",
        "NCCL/RCCL timeouts or errors in the reference run's log (more warnings than the baseline warn)",
        check_collective,
        plan_can_accept=False,
    ),
    spec(
        "workload.allreduce_latency",
        "phase 2's small-message all_reduce time above 500 µs or above its baseline's",
        check_latency,
        params={
            "max_us": ParamSpec(kind="number", default=500.0, doc="the incident's RCCL latency ceiling", minimum=0),
            "tolerance": ParamSpec(kind="number", default=0.5, doc="rise over the baseline's median", minimum=0),
            "max_bytes": ParamSpec(kind="integer", default=65536, doc="largest small message", minimum=1),
        },
    ),
)
"""Registered in `rules.__init__`; defaults in the shipped policy."""
