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
- The unit of re-measurement is what is in doubt (`validate.remeasure.plan_sweep`): when only some
  sizes are inconclusive against the baseline, rccl-tests re-runs those sizes alone, as ranges of
  consecutive sizes (`-b FIRST -e LAST` with the sweep's `-f`, at most `MAX_RANGES` per look; rccl-tests'
  README: `-b,--minbytes` / `-e,--maxbytes` are the sizes to scan, so `-b X -e X` measures the one size
  X), and the sizes already decided keep their samples; a curve, the average or the floor in doubt
  re-run the whole sweep. Extra runs go through the same runner, parser and checks as the first runs; a
  failing one stops them and is recorded (fail closed).
- A run of some sizes alone is checked against what it was asked (its own -b/-e), its #wrong and rank
  count count like any run's, its sizes' samples join the sweep's (labelled with the whole sweep's
  min/max bytes: the same size, iterations, warmup, ranks, datatype, op and environment), and its
  `# Avg bus bandwidth` (an average over those sizes only) is never a sample of the sweep's average.
- The `-samples` annotation says how many samples each re-measured unit took: `<tool>: N` for whole
  sweeps and `<tool> <bytes> B: N` for each size re-run alone.
- The sweep a run printed (its `# nThread ... minBytes ... maxBytes ... step: ... iters:` header) must
  be the sweep the phase asked for (`check_requested`): an output of another sweep (8B..8G when 1K..2G
  was asked, a replayed or swapped file, a tool that ignored a flag, maxBytes reduced for memory) says
  nothing about the requested one. That is missing evidence (error), never a pass; so is a run that
  printed no header at all; so is `validation: 0`, since no `-c` is passed and the tool's default is 1.
  (`nGpus` is not compared with phase 2's `-g`: a CVF-style `mpirun -np 8 ... -g 1` run is the same
  measurement; the rank lines are checked against the header's nThread x nGpus by the parser.)
- The tool's own verdicts are read, never only parsed (black-box findings brk15 01-06, 2026-12): any
  `#wrong` > 0, an old-layout `error` value flagged `*` (over the threshold), `# Out of bounds values :
  N FAILED`, or `# Avg bus bandwidth : X FAILED` (its NCCL_TESTS_MIN_BW check) fails the phase; a result
  the tool did not check (`#wrong` N/A with validation on), a run without its `# Out of bounds values`
  line or its `#  Rank` device lines, is missing evidence (error); two ranks on one GPU (host and PCI
  address) fail, like a rank count other than the node's GPUs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Measurement, NodeName, replace
from upgrade_gate.parse.rccl_tests import RcclTestsResult, SweepSettings, parse_rccl_tests, to_measurements
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.phase import Outcome, PhaseContext, TimedRunner
from upgrade_gate.validate.remeasure import (
    Resampling,
    SweepPlan,
    floor_check,
    floor_message,
    floor_tests,
    in_between,
    plan_sweep,
    pooled_sigma,
    sweep_sizes,
)

Span = tuple[int, int] | None  # (first, last) bytes of a run of some sizes alone; None: the whole sweep


@dataclass(frozen=True, slots=True)
class SweepRun:
    """One parsed rccl-tests run and what it was asked to measure."""

    result: RcclTestsResult
    span: Span = None


def wholes(runs: Sequence[SweepRun]) -> list[RcclTestsResult]:
    """The runs of the whole sweep (the only ones whose `# Avg bus bandwidth` is the sweep's)."""
    return [r.result for r in runs if r.span is None]


def size_counts(runs: Sequence[SweepRun], sizes: Sequence[int]) -> dict[int, int]:
    """Samples per size so far: every whole run, and the runs of a range that holds the size."""
    return {s: sum(1 for r in runs if r.span is None or r.span[0] <= s <= r.span[1]) for s in sizes}


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

    def look(
        self, runs: Sequence[SweepRun], *, sizes: Sequence[int], samples: int
    ) -> tuple[tuple[SweepPlan, ...], str] | None:
        """What to re-run and why (None: every comparison is decided, or nothing in doubt is below the limit)."""
        why: list[str] = []
        whole = False
        values = [r.avg_busbw_gbs for r in wholes(runs) if r.avg_busbw_gbs is not None]
        if self.threshold is not None and values:
            d = floor_check(values, self.threshold, sigma=pooled_sigma([values], self.resampling), tests=self.tests,
                            p=self.resampling)  # fmt: skip
            if in_between(d):
                whole = True
                why.append(f"Avg bus bandwidth {d.estimate:.2f} not shown above or below {self.threshold_key}")
        keys: set[str] = set()
        compare = self.resampling.compare
        if compare is not None:
            measured = sweep_measurements(runs, Outcome(), prefix=self.prefix, op=self.op, env=self.env)
            for node in self.nodes:
                found = sorted(compare(node, measured))
                if found:
                    keys.update(found)
                    shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
                    why.append(f"{len(found)} comparison(s) with {node}'s baseline inconclusive ({shown})")
        if not why:
            return None
        plans = plan_sweep(
            keys,
            whole=whole or not sizes,
            sizes=sizes,
            counts=size_counts(runs, sizes),
            full=len(wholes(runs)),
            samples=samples,
            p=self.resampling,
        )
        return (plans, "; ".join(why)) if plans else None


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
    argv: Callable[[Span], Sequence[str]],
    *,
    samples: int,
    timeout: float,
    out: Outcome,
    tool: str,
    asked: RequestedSweep,
    look: SweepLook | None = None,
) -> list[SweepRun]:
    """Run the whole sweep `samples` times, then what `look` finds inconclusive (up to its limit).

    `argv(None)` is the whole sweep's command line, `argv((first, last))` the one of a range of its
    sizes. Parsed runs that succeeded; the first failing run stops the runs and is recorded.
    """
    runs: list[SweepRun] = []
    sizes = sweep_sizes(asked.min_bytes, asked.max_bytes, asked.factor)
    plans: tuple[SweepPlan, ...] = (SweepPlan(span=None, runs=samples, sizes=sizes),)
    whys: dict[int | None, str] = {}  # why the whole sweep (None) or a size was re-run, at its first re-run
    while plans:
        if not _run_plans(runner, argv, plans, runs, timeout=timeout, out=out, tool=tool) or look is None:
            break
        found = look.look(runs, sizes=sizes, samples=samples)
        if found is None:
            break
        plans, why = found
        counts = size_counts(runs, sizes)
        for plan in plans:
            if plan.span is None:
                whys.setdefault(None, f"{why} after {len(wholes(runs))} run(s)")
            for size in plan.sizes if plan.span is not None else ():
                whys.setdefault(size, f"{why} after {counts[size]} run(s)")
    _took(out, tool, runs, sizes, whys)
    return runs


def _run_plans(
    runner: TimedRunner,
    argv: Callable[[Span], Sequence[str]],
    plans: Sequence[SweepPlan],
    runs: list[SweepRun],
    *,
    timeout: float,
    out: Outcome,
    tool: str,
) -> bool:
    """Every run of `plans`, parsed into `runs`; False after recording the first failing run (which stops)."""
    for plan in plans:
        for _ in range(plan.runs):
            run = runner.run(argv(plan.span), timeout=timeout)
            if out.tool_failure(run):
                return False
            try:
                runs.append(SweepRun(parse_rccl_tests(run.stdout), plan.span))
            except ParseError as exc:
                out.error(f"{tool}: unreadable output: {exc}")
                return False
    return True


def _took(
    out: Outcome, tool: str, runs: Sequence[SweepRun], sizes: Sequence[int], whys: Mapping[int | None, str]
) -> None:
    """The `-samples` annotation: whole sweeps, and every size re-run alone with its sample count."""
    out.took(tool, len(wholes(runs)), whys.get(None))
    counts = size_counts(runs, sizes)
    for size in sizes:
        if size in whys:
            out.took(f"{tool} {size} B", counts[size], whys[size])


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestedSweep:
    """What the phase asked rccl-tests to sweep (-b, -e, -f, -n, -w)."""

    min_bytes: int
    max_bytes: int
    factor: int
    iters: int
    warmup_iters: int


def sweep_options(config: CvfConfig, gpus_per_process: int | str, span: Span = None) -> tuple[str, ...]:
    """rccl-tests' sweep options as CVF's phase 2 and 5 pass them (`-b -e -f -g -n -w`); `span` (first, last)
    bytes: the same options for a range of the sweep's sizes alone (re-measurement)."""
    return (
        "-b",
        config.phase2_start_msg_size if span is None else str(span[0]),
        "-e",
        config.phase2_end_msg_size if span is None else str(span[1]),
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


def check_requested(runs: Sequence[SweepRun], out: Outcome, *, tool: str, asked: RequestedSweep) -> None:
    """Error for every run whose printed sweep is not the one asked for (see the module docstring)."""
    whole = asked
    for i, run in enumerate(runs, 1):
        result = run.result
        asked = whole if run.span is None else replace(whole, min_bytes=run.span[0], max_bytes=run.span[1])
        s = result.settings
        if s is None:
            out.error(f"{tool}: run {i} printed no sweep header (# nThread ... minBytes ...): cannot tell what it ran")
            continue
        printed: dict[str, object] = {
            "minBytes": s.min_bytes,
            "maxBytes": s.max_bytes_reduced_to if s.max_bytes_reduced_to is not None else s.max_bytes,
            "step": f"{s.step}({s.step_kind})",
            "iters": s.iters,
            "warmup iters": s.warmup_iters,
        }
        wanted: dict[str, object] = {
            "minBytes": asked.min_bytes,
            "maxBytes": asked.max_bytes,
            "step": f"{asked.factor}(factor)",
            "iters": asked.iters,
            "warmup iters": asked.warmup_iters,
        }
        if s.validation is not None:  # no -c is passed: the tool's default data check is on
            printed["validation"], wanted["validation"] = s.validation, 1
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
    runs: Sequence[SweepRun], out: Outcome, *, prefix: str, op: str, env: Mapping[str, str]
) -> tuple[Measurement, ...]:
    """Merged measurements `<prefix>/<op>/...` of the runs (see the module docstring for runs of some sizes)."""
    whole = next((r.result.settings for r in runs if r.span is None and r.result.settings is not None), None)
    per_run = []
    for run in runs:
        try:
            measured = to_measurements(run.result, prefix=prefix, op=op, env=env)
        except ParseError as exc:
            out.error(f"{op}: {exc}")
            continue
        if run.span is not None:
            measured = tuple(_as_whole(m, whole) for m in measured if not m.key.endswith("/avg_busbw"))
        per_run.append(measured)
    return merge_samples(per_run, out)


def _as_whole(m: Measurement, whole: SweepSettings | None) -> Measurement:
    """A size's measurement from a run of some sizes alone, labelled with the whole sweep's byte range."""
    if whole is None:
        return m
    top = whole.max_bytes_reduced_to if whole.max_bytes_reduced_to is not None else whole.max_bytes
    return replace(m, settings={**m.settings, "min_bytes": str(whole.min_bytes), "max_bytes": str(top)})


def check_sweeps(
    runs: Sequence[SweepRun],
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

    Returns the median avg bus bandwidth over the whole sweeps (the `-measured-bw` annotation); #wrong
    and the rank count are checked on every run, a range's runs included.
    """
    if not runs:
        return None
    results = [r.result for r in runs]
    wrong = sum(r.wrong_total or 0 for r in results)
    if wrong:
        out.fail(f"{tool}: {wrong} wrong values (#wrong) in the results: data corruption")
    _check_verdicts(results, out, tool=tool)
    seen = sorted({r.ranks for r in results if r.ranks is not None})
    if seen and seen != [ranks]:
        out.fail(f"{tool}: ran with {', '.join(map(str, seen))} ranks, expected {ranks}")
    values = [r.avg_busbw_gbs for r in wholes(runs) if r.avg_busbw_gbs is not None]
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


Verdict = tuple[str, bool, str]  # (what, failed: True / missing evidence: False, message)


def _verdicts(result: RcclTestsResult) -> list[Verdict]:
    """The run's own data-check and bandwidth verdicts, and its device lines (see the module docstring)."""
    found: list[Verdict] = []
    halves = [
        (row, name, half)
        for row in result.rows
        for name, half in (("out-of-place", row.out_of_place), ("in-place", row.in_place))
        if half is not None
    ]
    flagged = [(row, name, half) for row, name, half in halves if half.flagged]
    if flagged:
        row, name, half = flagged[0]
        found.append(("flagged", True, (
            f"{len(flagged)} result(s) with an error over the tool's threshold (error column marked '*', first "
            f"{row.size} B {name}: {half.max_error:.0e}*, line {row.line_no}): data corruption"
        )))  # fmt: skip
    if result.out_of_bounds is not None and (result.out_of_bounds or result.out_of_bounds_ok is False):
        found.append(("oob", True, (
            f"'# Out of bounds values : {result.out_of_bounds} FAILED': the tool's own data check found wrong "
            "results: data corruption"
        )))  # fmt: skip
    elif result.out_of_bounds is None and result.source_format != "json":
        found.append(("oob", False, "no '# Out of bounds values' line: the tool's data-check verdict is missing"))
    if result.avg_busbw_verdict == "FAILED":
        found.append(("avg", True, (
            f"'# Avg bus bandwidth : {result.avg_busbw_gbs:g} FAILED': below 0.9 x the NCCL_TESTS_MIN_BW set in "
            "the tool's environment (its own bandwidth check)"
        )))  # fmt: skip
    validation = result.settings.validation if result.settings is not None else None
    unchecked = [
        (row, name)
        for row, name, half in halves
        if half.wrong is None
        and half.max_error is None
        and not (name == "in-place" and result.skips_in_place_check)  # the tool never checks those
    ]
    if validation and unchecked:
        row, name = unchecked[0]
        found.append(("unchecked", False, (
            f"#wrong N/A for {len(unchecked)} result(s) (first {row.size} B {name}, line {row.line_no}) although "
            f"the header says validation: {validation}: those results were not checked, no evidence that the "
            "collective returns correct data"
        )))  # fmt: skip
    if result.source_format != "json" and not result.devices:
        found.append(("devices", False, "no '#  Rank ... device' lines: cannot tell which GPUs ran"))
    on: dict[tuple[str, str], list[int]] = {}
    for d in result.devices:
        if d.bdf is not None:
            on.setdefault((d.host, str(d.bdf)), []).append(d.rank)
    shared = [(k, v) for k, v in on.items() if len(v) > 1]
    if shared:
        (host, bdf), ranks = shared[0]
        more = f" (and {len(shared) - 1} more shared GPU(s))" if len(shared) > 1 else ""
        found.append(("shared", True, (
            f"ranks {', '.join(map(str, ranks))} all ran on GPU {bdf} of {host}{more}: each rank must have its "
            "own GPU, so the node's GPUs were not all tested"
        )))  # fmt: skip
    return found


def _check_verdicts(results: Sequence[RcclTestsResult], out: Outcome, *, tool: str) -> None:
    """Fail (or error) on each kind of `_verdicts` once, naming the first run and how many more had it."""
    seen: dict[str, tuple[bool, str, list[int]]] = {}
    for i, result in enumerate(results, 1):
        for what, failed, message in _verdicts(result):
            seen.setdefault(what, (failed, message, []))[2].append(i)
    for failed, message, runs in seen.values():
        more = f" (and {len(runs) - 1} more run(s))" if len(runs) > 1 else ""
        (out.fail if failed else out.error)(f"{tool}: run {runs[0]}{more}: {message}")
