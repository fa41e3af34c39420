"""The gate's own overhead per CVF phase: `PhaseResult.duration_s - tool_duration_s` on fake nodes.

Two healthy fake MI300X nodes (8 GPUs, 8 Pollara NICs each) run phases 0-5 through the local launcher,
repeatedly; for every phase the median wall time, the median time inside the tools, and the median
difference (what upgrade-gate itself costs: spawning, parsing, threads, result building) are reported,
with the number of commands the phase ran so the overhead per command is visible.

Design decisions
- The fake tools answer in tens of milliseconds (a Python stub started with -I -S), so tool time here is
  mostly process start-up, and the overhead column is the part that would remain on a real node where
  the tools run for minutes. Snapshots are captured once, before timing (phase 0 and 3 read them).
- `UPGRADE_GATE_PHASE4_SERVER_START_S` is 0: the deliberate head start of the ib_write_bw server would
  otherwise count as tool time (the server is alive) and hide nothing, but it is not overhead either.
- Phases 4 and 5 run once per group, so their numbers are per pair/per job, not per node.
- No asserts: this measures and reports (`python -m bench.bench_phase_overhead [--quick]`).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # `python bench/bench_phase_overhead.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Section, Target, fmt_s, print_section, table
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.fakenode import build_fake_node, mi300x_node
from upgrade_gate.model import NodeName, PhaseStatus
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import CvfConfig, parse_cvf_config
from upgrade_gate.validate.launcher import LocalLauncher
from upgrade_gate.validate.phases import default_phases
from upgrade_gate.validate.pipeline import run_pipeline

NODES = ("node-01", "node-02")
SAMPLES = 3


def _commands(config: CvfConfig, phase: int) -> int:
    """Commands one node's phase runs (phases 4/5: per pair / per job)."""
    return {
        0: 0,
        1: sum(s.iterations for s in config.stages if not s.skip),
        2: config.samples,
        3: 0,
        4: 2 * config.phase4_rail_count,
        5: 2 * config.samples,
    }[phase]


def measure(repeat: int) -> tuple[CvfConfig, dict[int, list[tuple[float, float]]]]:
    """(config, phase -> [(duration, tool duration), ...]) over `repeat` pipeline runs."""
    config = parse_cvf_config(
        {"UPGRADE_GATE_PHASE4_SERVER_START_S": "0", "UPGRADE_GATE_SAMPLES": str(SAMPLES)}, source="bench"
    )
    per_phase: dict[int, list[tuple[float, float]]] = {n: [] for n in cvf.PHASE_NAMES}
    with tempfile.TemporaryDirectory(prefix="ug-bench-phases-") as tmp:
        fakes = {n: build_fake_node(Path(tmp) / n, mi300x_node(n, seed=1)) for n in NODES}
        envs = {n: f.env(os.environ) for n, f in fakes.items()}
        snapshots = {
            n: build_snapshot(capture(LocalRunner(env=envs[n]), node=n, host_root=f.host_root))
            for n, f in fakes.items()
        }
        launcher = LocalLauncher(envs)
        for _ in range(repeat):
            results = run_pipeline(
                list(NODES), phases=default_phases(), config=config, launcher=launcher, snapshots=snapshots
            )
            for node, phase_results in results.items():
                for r in phase_results:
                    if r.status is not PhaseStatus.PASSED:
                        raise RuntimeError(f"{node} phase {r.phase} {r.status}: {r.reason}")
                    if r.phase in (4, 5) and node != NodeName(NODES[0]):
                        continue  # one group run, reported once
                    per_phase[r.phase].append((r.duration_s or 0.0, r.tool_duration_s or 0.0))
    return config, per_phase


def run(quick: bool = False) -> Section:
    """Measure and return the section for bench/RESULTS.md."""
    repeat = 3 if quick else 9
    config, per_phase = measure(repeat)
    rows = []
    numbers: dict[str, object] = {"repeat": repeat, "samples": SAMPLES, "rails": config.phase4_rail_count}
    worst = 0.0
    for phase, runs in per_phase.items():
        wall = statistics.median(d for d, _ in runs)
        tool = statistics.median(t for _, t in runs)
        overhead = statistics.median(d - t for d, t in runs)
        worst = max(worst, overhead)
        commands = _commands(config, phase)
        per_command = fmt_s(overhead / commands) if commands else "-"
        share = f"{100 * overhead / wall:.1f} %" if wall > 0 else "-"
        rows.append(
            (
                f"{phase} {cvf.PHASE_NAMES[phase]}",
                fmt_s(wall),
                fmt_s(tool),
                fmt_s(overhead),
                share,
                commands,
                per_command,
            )
        )
        numbers[f"phase{phase}"] = {"wall_s": wall, "tool_s": tool, "overhead_s": overhead, "commands": commands}
    body = (
        f"Two fake MI300X nodes, phases 0-5 through `LocalLauncher`, {repeat} runs, median per phase "
        f"({SAMPLES} samples for phases 2/5, {config.phase4_rail_count} rails, "
        f"{len(config.stages)} phase-1 recipes). Overhead = duration_s - tool_duration_s.\n\n"
        + table(("phase", "wall", "in tools", "overhead", "overhead share", "commands", "overhead/command"), rows)
    )
    target = Target(
        name="per-phase overhead of the gate",
        goal="reported (time outside the tools)",
        measured=f"worst phase {fmt_s(worst)}",
        met=True,
    )
    return Section(title="Per-phase overhead of the gate", body=body, targets=(target,), numbers=numbers)


def main() -> int:
    """Print the section."""
    print_section(run(quick="--quick" in sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
