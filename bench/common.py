"""Shared pieces of the benchmarks: the machine, repeated timing, and result sections.

Design decisions
- Every timing is the median of repeated runs, reported with its min and max so noise is visible; the
  machine (cores, CPU model, Python, load average at the start) is recorded beside the numbers because
  the helpers that build this project share the same 2-core box and a busy neighbour shows up as load.
- A benchmark module returns a `Section` (a title, a Markdown body, a verdict per target and a dict of
  raw numbers); `bench.run_all` stitches the sections into RESULTS.md and a JSON file. Targets are
  judged here, never asserted: a missed target is a finding to explain, not a failing test.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """Wall times of repeated runs of one thing, in seconds."""

    label: str
    runs: tuple[float, ...]

    @property
    def median(self) -> float:
        """Median of the runs."""
        return statistics.median(self.runs)

    @property
    def low(self) -> float:
        """Fastest run."""
        return min(self.runs)

    @property
    def high(self) -> float:
        """Slowest run."""
        return max(self.runs)


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """One target of issue 7 with what we measured against it."""

    name: str
    goal: str
    measured: str
    met: bool | None  # None: could not be measured
    note: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Section:
    """One benchmark's contribution to RESULTS.md."""

    title: str
    body: str
    targets: tuple[Target, ...] = ()
    numbers: dict[str, object] = field(default_factory=dict)


def time_runs(fn: Callable[[], object], *, repeat: int, warmup: int = 0, label: str = "") -> Timing:
    """Call `fn` `warmup` times untimed, then `repeat` times timed."""
    for _ in range(warmup):
        fn()
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return Timing(label=label, runs=tuple(runs))


def time_runs_cpu(fn: Callable[[], object], *, repeat: int, warmup: int = 0, label: str = "") -> tuple[Timing, Timing]:
    """Like `time_runs`, also returning the CPU time (this process) of each run."""
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return Timing(label=label, runs=tuple(wall)), Timing(label=f"{label} (cpu)", runs=tuple(cpu))


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or platform's guess elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, str]:
    """What the numbers were measured on."""
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "n/a"
    return {
        "cores (nproc)": str(os.cpu_count()),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load average at start": load,
    }


def fmt_s(seconds: float) -> str:
    """Seconds with a sensible unit."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1.0:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def timing_cell(t: Timing) -> str:
    """`median (min-max, n=..)` for a table cell."""
    return f"{fmt_s(t.median)} ({fmt_s(t.low)}–{fmt_s(t.high)}, n={len(t.runs)})"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out.extend("| " + " | ".join(str(c) for c in row) + " |" for row in rows)
    return "\n".join(out)


def met_word(met: bool | None) -> str:
    """met / MISSED / not measured."""
    return {True: "met", False: "**MISSED**", None: "not measured"}[met]


def print_section(section: Section) -> None:
    """Print a section as Markdown (for running one benchmark alone)."""
    print(f"## {section.title}\n\n{section.body}\n")
    if section.targets:
        print(
            table(
                ("target", "goal", "measured", "result"),
                [(t.name, t.goal, t.measured, met_word(t.met)) for t in section.targets],
            )
        )
