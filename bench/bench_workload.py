"""The workload phases on the CPU path (issue 25): how long phase 6 takes, the noise of real step times,
and what the throughput rule detects with that noise.

Usage, from the repository root (needs PyTorch; a few minutes on 2 cores):
    python -m bench.bench_workload [--runs 4] [--trials 2000] [--out bench/RESULTS-workload.md]

1. Time: phase 6 (the shipped reference_train.py, default settings: 30 steps, 5 of warm-up, batch 32)
   and phase 7 on a fake node (two gloo ranks on the CPUs), through the real pipeline; wall seconds.
2. Noise, measured: `--runs` runs of phase 6 on one node; per run the per-step samples/s after warm-up.
   Within-run noise: the spread of log(step / run median); run-to-run noise: the spread of the runs'
   log medians (a run is one sample of the machine's load).
3. Detection: baseline and candidate runs drawn from that noise (steps resampled from the measured
   within-run residuals, each run shifted by a run-level factor drawn from the measured run-to-run
   spread), judged as `workload.throughput` judges (`judge.curves` with the shipped `bandwidth.regression`
   parameters and the rule's own tolerance) with the phase's re-measurement
   (up to `validate.phases.workload.MAX_RUNS` runs pooled while inconclusive). Healthy nodes blocked and
   10%-slower nodes caught, at the CPU's measured noise and at an assumed GPU noise (2% per step, 1% per
   run: DDP steps on a dedicated MI300X/H100 node; an assumption, not a measurement here).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET_S = 60.0
TARGET_DETECT = 0.99
TARGET_FALSE = 0.01


def _pipeline(phases: set[int], steps: int) -> tuple[list[Any], float]:
    from upgrade_gate.collect.capture import capture
    from upgrade_gate.collect.runner import LocalRunner
    from upgrade_gate.fakenode import build_fake_node, mi300x_node
    from upgrade_gate.model import NodeName
    from upgrade_gate.snapshot.build import build_snapshot
    from upgrade_gate.validate.config import parse_cvf_config
    from upgrade_gate.validate.launcher import LocalLauncher
    from upgrade_gate.validate.phases import select_phases
    from upgrade_gate.validate.pipeline import run_pipeline

    root = Path(tempfile.mkdtemp(prefix="bench-workload-"))
    node = build_fake_node(root / "node-01", mi300x_node("node-01", seed=1, gpu_count=4, nic_count=0))
    env = node.env(os.environ)
    snap = build_snapshot(capture(LocalRunner(env=env), node="node-01", host_root=node.host_root))
    config = parse_cvf_config({"UPGRADE_GATE_WORKLOAD_STEPS": str(steps)}, source="bench")
    start = time.monotonic()
    results = run_pipeline(
        ["node-01"],
        phases=select_phases(frozenset(phases)),
        config=config,
        launcher=LocalLauncher({"node-01": env}),
        snapshots={"node-01": snap},
    )[NodeName("node-01")]
    return list(results), time.monotonic() - start


def _rates(result: Any) -> list[float]:
    return list(next(m for m in result.measurements if m.key == "workload/samples_per_s").samples)


def measure(runs: int, steps: int) -> dict[str, Any]:
    """Time phase 6 and 6+7, and collect `runs` runs' step rates."""
    (six, seven), both = _pipeline({6, 7}, steps)
    assert six.status.value == seven.status.value == "passed", (six.reasons, seven.reasons)
    runs_rates = [_rates(six)]
    times = []
    for _ in range(runs - 1):
        (one,), seconds = _pipeline({6}, steps)
        assert one.status.value == "passed", one.reasons
        runs_rates.append(_rates(one))
        times.append(seconds)
    init = next(m for m in six.measurements if m.key == "workload/init_s").samples[0]
    return {"phase67_s": both, "phase6_s": times, "rates": runs_rates, "init_s": init}


def noise(runs_rates: list[list[float]]) -> tuple[list[float], float, float]:
    """Within-run log residuals, their sd, and the sd of the runs' log medians."""
    residuals = [math.log(v / statistics.median(r)) for r in runs_rates for v in r]
    medians = [math.log(statistics.median(r)) for r in runs_rates]
    return residuals, statistics.pstdev(residuals), statistics.stdev(medians) if len(medians) > 1 else 0.0


def detect(residuals: list[float], run_sd: float, steps: int, trials: int, drop: float, seed: int) -> float:
    """Share of nodes the rule blocks (with re-measurement) when the candidate is `drop` slower."""
    from upgrade_gate.judge import curves
    from upgrade_gate.judge.policy import load_policy
    from upgrade_gate.judge.rules.measured import curve_params
    from upgrade_gate.validate.phases.workload import MAX_RUNS

    policy = load_policy()
    entry, own = policy.rule_for("bandwidth.regression", None), policy.rule_for("workload.throughput", None)
    assert entry is not None and own is not None
    params = dataclasses.replace(curve_params(entry), tolerance=own.number("tolerance"))
    rng = random.Random(seed)

    def run(level: float) -> list[float]:
        shift = rng.gauss(0.0, run_sd)
        return [level * math.exp(shift + rng.choice(residuals)) for _ in range(steps)]

    blocked = 0
    key = "workload/samples_per_s"
    for _ in range(trials):
        base = run(1000.0)
        cand = run(1000.0 * (1 - drop))
        for n in range(MAX_RUNS):
            row = curves.Row(key=key, baseline=base, candidate=cand, higher_is_better=True, group=key)
            outcome = curves.assess([row], params).worst()
            if outcome != "remeasure" or n == MAX_RUNS - 1:
                break
            cand = cand + run(1000.0 * (1 - drop))
        blocked += outcome == "block"
    return blocked / trials


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "RESULTS-workload.md")
    args = parser.parse_args(argv)
    got = measure(args.runs, args.steps)
    residuals, step_sd, run_sd = noise(got["rates"])
    measured = len(got["rates"][0])
    rows = []
    for label, res, rsd in (
        ("CPU, measured", residuals, run_sd),
        ("CPU, within-run noise only", residuals, 0.0),
        ("GPU, assumed (2% step, 1% run)", [random.Random(i).gauss(0, 0.02) for i in range(2000)], 0.01),
    ):
        healthy = detect(res, rsd, measured, args.trials, 0.0, 1)
        caught = detect(res, rsd, measured, args.trials, 0.10, 2)
        ok = healthy <= TARGET_FALSE and caught >= TARGET_DETECT
        rows.append(f"| {label} | {healthy:.2%} | {caught:.2%} | {'yes' if ok else 'no'} |")
    phase6 = statistics.median(got["phase6_s"]) if got["phase6_s"] else float("nan")
    lines = [
        "# Workload phases on the CPU path (bench/bench_workload.py)",
        "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} CPU(s); fake node with",
        "two gloo ranks, the shipped reference_train.py at its defaults (30 steps, 5 of warm-up, batch 32).",
        "",
        "| measure | value | target |",
        "|---|---|---|",
        f"| phase 6 wall time (median of {len(got['phase6_s'])} runs) | {phase6:.1f} s | <= {TARGET_S:g} s |",
        f"| phases 6 + 7 wall time (three training runs) | {got['phase67_s']:.1f} s | |",
        f"| init (process start to first step), first run | {got['init_s']:.1f} s | |",
        f"| within-run step noise (sd of log samples/s) | {step_sd:.1%} | |",
        f"| run-to-run noise (sd of log run medians, {len(got['rates'])} runs) | {run_sd:.1%} | |",
        "",
        f"Detection of a 10% throughput drop ({args.trials} simulated nodes each, {measured} measured steps a run,",
        "re-measured while inconclusive up to 3 runs):",
        "",
        "| noise | healthy blocked | 10% drop caught | meets >= 99% at <= 1% |",
        "|---|---|---|---|",
        *rows,
        "",
    ]
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
