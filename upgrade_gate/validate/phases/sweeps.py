"""rccl-tests sweeps shared by phase 2 (one node) and phase 5 (across nodes): run, parse, merge samples.

A sweep is repeated `samples` times (the judge's rank test needs >= 3 samples per side; CVF itself runs
once). Each run is parsed with the rccl-tests parser and turned into measurements with its
`to_measurements`; runs are merged per key into one Measurement whose samples are the runs' values.

Design decisions:
- The first run that fails (tool missing, timed out, non-zero exit, unreadable output) stops the
  repeats: later runs would fail the same way and only spend the budget. The runs that completed keep
  their measurements (evidence), the failure is a reason.
- Runs whose settings differ (rccl-tests reduced maxBytes on one run) are never merged: that is an
  error, because their numbers are not comparable.
- The threshold is judged on evidence (`validate.remeasure.floor_check` over the runs' `# Avg bus
  bandwidth`): below it only when the upper bound is; in between, the sweep is re-run (a `SweepLook`,
  up to the policy's `max_samples`), and still in between at the limit it is not failed (the judge
  warns). The median is what the `-measured-bw` annotation carries; `#wrong` > 0 in any run fails.
- Re-measuring re-runs the whole sweep (one run measures every size), through the same runner, argv,
  parser and checks as the first runs; a failing extra run stops it and is recorded (fail closed).
- The sweep a run printed (its `# nThread ... minBytes ... maxBytes ... step: ... iters:` header) must
  be the sweep the phase asked for (`check_requested`): an output of another sweep (8B..8G when 1K..2G
  was asked, a replayed or swapped file, a tool that ignored a flag, maxBytes reduced for memory) says
  nothing about the requested one. That is missing evidence (error), never a pass; so is a run that
  printed no header at all.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Measurement, NodeName
from upgrade_gate.parse.rccl_tests import RcclTestsResult, parse_rccl_tests, to_measurements
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.phase import Outcome, PhaseContext, TimedRunner
from upgrade_gate.validate.remeasure import (
    Resampling,
    floor_check,
    floor_message,
    floor_tests,
    in_between,
    pooled_sigma,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepLook:
    """What a look at a sweep's runs compares: its floor and, when injected, the nodes' baselines."""

    resampling: Resampling
    nodes: tuple[NodeName, ...]
    prefix: str
    op: str
    env: Mapping[str, str]
    threshold: float | None
    threshold_key: str
    tests: int = 1

    def inconclusive(self, results: Sequence[RcclTestsResult]) -> str | None:
        """Why the sweep needs more runs (None: every comparison is decided)."""
        why: list[str] = []
        values = [r.avg_busbw_gbs for r in results if r.avg_busbw_gbs is not None]
        if self.threshold is not None and values:
            d = floor_check(values, self.threshold, sigma=pooled_sigma([values], self.resampling), tests=self.tests,
                            p=self.resampling)  # fmt: skip
            if in_between(d):
                why.append(f"Avg bus bandwidth {d.estimate:.2f} not shown above or below {self.threshold_key}")
        compare = self.resampling.compare
        if compare is not None:
            measured = sweep_measurements(results, Outcome(), prefix=self.prefix, op=self.op, env=self.env)
            for node in self.nodes:
                keys = sorted(compare(node, measured))
                if keys:
                    shown = ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")
                    why.append(f"{len(keys)} comparison(s) with {node}'s baseline inconclusive ({shown})")
        return "; ".join(why) or None


def mesh_look(ctx: PhaseContext, env: Mapping[str, str]) -> SweepLook:
    """Phase 2's look: `mesh/all_reduce/*` of the node against PHASE2_BW_THRESHOLD and its baseline."""
    return SweepLook(
        resampling=ctx.resampling,
        nodes=(ctx.node,),
        prefix="mesh",
        op="all_reduce",
        env=env,
        threshold=ctx.config.phase2_bw_threshold,
        threshold_key="PHASE2_BW_THRESHOLD",
        tests=floor_tests(ctx.config.phase4_rail_count),
    )


def run_sweeps(
    runner: TimedRunner,
    argv: Sequence[str],
    *,
    samples: int,
    timeout: float,
    out: Outcome,
    tool: str,
    look: SweepLook | None = None,
) -> list[RcclTestsResult]:
    """Run `argv` `samples` times, then again while `look` finds it inconclusive (up to its limit).

    Parsed results of the runs that succeeded; the first failing run stops the runs and is recorded.
    """
    results: list[RcclTestsResult] = []
    target, why = samples, None
    limit = look.resampling.limit(samples) if look is not None else samples
    while len(results) < target:
        run = runner.run(argv, timeout=timeout)
        if out.tool_failure(run):
            break
        try:
            results.append(parse_rccl_tests(run.stdout))
        except ParseError as exc:
            out.error(f"{tool}: unreadable output: {exc}")
            break
        if look is not None and len(results) == target and target < limit:
            now = look.inconclusive(results)
            if now is not None:
                why = f"{now} after {target} run(s)"
                target = look.resampling.next_count(target, samples)
    out.took(tool, len(results), why)
    return results


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestedSweep:
    """What the phase asked rccl-tests to sweep (-b, -e, -f, -n, -w)."""

    min_bytes: int
    max_bytes: int
    factor: int
    iters: int
    warmup_iters: int


def sweep_options(config: CvfConfig, gpus_per_process: int | str) -> tuple[str, ...]:
    """rccl-tests' sweep options as CVF's phase 2 and 5 pass them (`-b -e -f -g -n -w`)."""
    return (
        "-b",
        config.phase2_start_msg_size,
        "-e",
        config.phase2_end_msg_size,
        "-f",
        str(config.phase2_step_factor),
        "-g",
        str(gpus_per_process),
        "-n",
        str(config.phase2_iter_count),
        "-w",
        str(config.phase2_warmup_iter_count),
    )


def requested_sweep(config: CvfConfig) -> RequestedSweep:
    """The sweep phases 2 and 5 ask for (the PHASE2_* keys), in the units rccl-tests prints."""
    return RequestedSweep(
        min_bytes=config.phase2_start_bytes,
        max_bytes=config.phase2_end_bytes,
        factor=config.phase2_step_factor,
        iters=config.phase2_iter_count,
        warmup_iters=config.phase2_warmup_iter_count,
    )


def check_requested(results: Sequence[RcclTestsResult], out: Outcome, *, tool: str, asked: RequestedSweep) -> None:
    """Error for every run whose printed sweep is not the one asked for (see the module docstring)."""
    for i, result in enumerate(results, 1):
        s = result.settings
        if s is None:
            out.error(f"{tool}: run {i} printed no sweep header (# nThread ... minBytes ...): cannot tell what it ran")
            continue
        printed = {
            "minBytes": s.min_bytes,
            "maxBytes": s.max_bytes_reduced_to if s.max_bytes_reduced_to is not None else s.max_bytes,
            "step": f"{s.step}({s.step_kind})",
            "iters": s.iters,
            "warmup iters": s.warmup_iters,
        }
        wanted = {
            "minBytes": asked.min_bytes,
            "maxBytes": asked.max_bytes,
            "step": f"{asked.factor}(factor)",
            "iters": asked.iters,
            "warmup iters": asked.warmup_iters,
        }
        wrong = [f"{k} {printed[k]} (asked {wanted[k]})" for k in wanted if printed[k] != wanted[k]]
        if wrong:
            why = " after rccl-tests reduced maxBytes for memory" if s.max_bytes_reduced_to is not None else ""
            out.error(
                f"{tool}: run {i} swept another sweep than asked{why}: {', '.join(wrong)}; its numbers are not evidence"
            )


def merge_samples(per_run: Iterable[Sequence[Measurement]], out: Outcome) -> tuple[Measurement, ...]:
    """One Measurement per key with every run's samples; mismatched settings are an error."""
    merged: dict[str, Measurement] = {}
    for measurements in per_run:
        for m in measurements:
            have = merged.get(m.key)
            if have is None:
                merged[m.key] = m
            elif have.settings != m.settings or have.unit != m.unit:
                out.error(f"{m.key}: runs used different settings ({have.settings} vs {m.settings}); not merged")
            else:
                merged[m.key] = Measurement(
                    key=have.key,
                    unit=have.unit,
                    samples=have.samples + m.samples,
                    settings=have.settings,
                    source=have.source,
                    higher_is_better=have.higher_is_better,
                )
    return tuple(merged.values())


def sweep_measurements(
    results: Sequence[RcclTestsResult], out: Outcome, *, prefix: str, op: str, env: Mapping[str, str]
) -> tuple[Measurement, ...]:
    """Merged measurements `<prefix>/<op>/...` of the runs."""
    per_run = []
    for result in results:
        try:
            per_run.append(to_measurements(result, prefix=prefix, op=op, env=env))
        except ParseError as exc:
            out.error(f"{op}: {exc}")
    return merge_samples(per_run, out)


def check_sweeps(
    results: Sequence[RcclTestsResult],
    out: Outcome,
    *,
    tool: str,
    threshold: float | None,
    threshold_key: str,
    ranks: int,
    resampling: Resampling | None = None,
    tests: int = 1,
) -> float | None:
    """Fail on #wrong, a rank count other than `ranks`, or an avg bus bandwidth shown below `threshold`.

    Returns the median avg bus bandwidth over the runs (the `-measured-bw` annotation).
    """
    if not results:
        return None
    wrong = sum(r.wrong_total or 0 for r in results)
    if wrong:
        out.fail(f"{tool}: {wrong} wrong values (#wrong) in the results: data corruption")
    seen = sorted({r.ranks for r in results if r.ranks is not None})
    if seen and seen != [ranks]:
        out.fail(f"{tool}: ran with {', '.join(map(str, seen))} ranks, expected {ranks}")
    values = [r.avg_busbw_gbs for r in results if r.avg_busbw_gbs is not None]
    if not values:
        out.error(f"{tool}: no '# Avg bus bandwidth' in the output")
        return None
    avg = statistics.median(values)
    if threshold is not None:
        knobs = resampling if resampling is not None else Resampling()
        d = floor_check(values, threshold, sigma=pooled_sigma([values], knobs), tests=tests, p=knobs)
        if d.outcome == "fail":
            out.fail(
                f"bus-bw-below-threshold: {tool} Avg bus bandwidth {avg:.2f} GB/s ({floor_message(d)}) "
                f"< {threshold_key} {threshold:g} GB/s"
            )
    return avg
