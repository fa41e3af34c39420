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
- The bandwidth compared with a threshold is the median `# Avg bus bandwidth` over the runs (robust to
  one noisy run); `#wrong` > 0 in any run fails.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Measurement
from upgrade_gate.parse.rccl_tests import RcclTestsResult, parse_rccl_tests, to_measurements
from upgrade_gate.validate.phase import Outcome, TimedRunner


def run_sweeps(
    runner: TimedRunner, argv: Sequence[str], *, samples: int, timeout: float, out: Outcome, tool: str
) -> list[RcclTestsResult]:
    """Run `argv` up to `samples` times; parsed results of the runs that succeeded."""
    results: list[RcclTestsResult] = []
    for _ in range(samples):
        run = runner.run(argv, timeout=timeout)
        if out.tool_failure(run):
            break
        try:
            results.append(parse_rccl_tests(run.stdout))
        except ParseError as exc:
            out.error(f"{tool}: unreadable output: {exc}")
            break
    return results


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
) -> float | None:
    """Fail on #wrong, a rank count other than `ranks`, or a median avg bus bandwidth below `threshold`."""
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
    if threshold is not None and avg < threshold:
        out.fail(
            f"bus-bw-below-threshold: {tool} Avg bus bandwidth {avg:.2f} GB/s < {threshold_key} {threshold:g} GB/s"
        )
    return avg
