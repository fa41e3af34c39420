"""Node-level detection of the bandwidth statistics (judge.curves), per fault kind and noise level.

Noise model (stated, as issue 14 asks): every sample of a metric is `mean * (1 + cv * N(0, 1))`,
independent across samples, metrics and sides, rounded to 2 decimals as rccl-tests and perftest print
them; `mean` is the template node's median of that metric (bench.fleetgen's real-format fake MI300X:
22 mesh sizes out of place and in place + the average, 8 rails at ~383 Gb/s, the same 45 for each of
2 multi-node collectives = 143 metrics; earlier tables said 77, counting one column per sweep); cv is
1%, 3% or 5%. The baseline has 5 samples per metric. Independence across sizes is the hard case for
the per-size tests (a real sweep's sizes move together, which the curve estimate absorbs).

What is real and what is simulated. Simulated: the tool runs (samples drawn from the noise model
instead of running rccl-tests / ib_write_bw on a fake node, which would take hours for these counts).
Real: every decision. The phases' re-measure hook decides when to measure more, with the code the
phases call: `judge.remeasure.BaselineComparison` (the comparison a phase runs against the node's
baseline) on the phase's own metrics, `validate.remeasure.rail_floors` for phase 4's floor (CVF's
380 Gb/s, pooled over the rails) and `Resampling.next_count` for how many runs a look adds (5, up to the
policy's `max_samples`, 20). The unit of re-measurement is what the phases re-run, decided by the phases'
own `validate.remeasure.plan_sweep`: for a sweep (phase 2's mesh, each of phase 5's collectives), the
sizes in doubt alone, as ranges of consecutive sizes (`-b FIRST -e LAST`: both halves of every size in
it, not the average; at most 3 ranges per look, the closest merged), or the whole sweep when its curve
or its average is in doubt; each rail (phase 4).
Phase 2's PHASE2_BW_THRESHOLD (100 GB/s against a ~280 GB/s average) never enters the band and is left
out. The verdict is the gate's: `judge.curves.assess` over all 143 metrics with every sample the phases
took (bandwidth.regression blocks) plus the rails' floor failing on evidence (phase 4 fails).
Fault kinds: one mesh size (a large one) -10%; the whole mesh sweep -5% (beyond the 2% whole-curve
tolerance since issue 29: must block) and -10%; the large mesh sizes (>= 64 MiB) -10%; one rail -10%.
Beside it: the same decisions
without re-measurement (the first 5 samples only), and CVF's own single-sample floor decision on the
rails (first run < 380 Gb/s fails the node).
"""

from __future__ import annotations

import math
import statistics
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import fleetgen
from bench.common import Section, Target, table
from upgrade_gate.judge import curves
from upgrade_gate.judge.policy import Policy, load_policy
from upgrade_gate.judge.remeasure import BaselineComparison, policy_params, resampling
from upgrade_gate.model import Measurement, NodeInfo, NodeName, Snapshot, Software, measurements_of, replace
from upgrade_gate.validate.remeasure import FloorDecision, Resampling, in_between, plan_sweep, rail_floors, size_of

NOISES = (0.01, 0.03, 0.05)
FLOOR = 380.0
NODE = NodeName("sim-node")
KINDS = ("healthy", "one size -10%", "sweep -5%", "sweep -10%", "large sizes -10%", "one rail -10%")


@dataclass(frozen=True, slots=True)
class Node:
    """One simulated node's outcome."""

    blocked: bool
    blocked_first: bool  # the first 5 samples only, no re-measure
    cvf_rail_failed: bool
    mean_samples: float


def _metrics(workdir: Path) -> list[Measurement]:
    from bench.bench_judge import template

    tpl = template(workdir, reuse=True)
    return list(measurements_of(tpl.snapshot))


def _factors(keys: list[str], kind: str) -> np.ndarray:
    f = np.ones(len(keys))
    mesh = [i for i, k in enumerate(keys) if k.startswith("mesh/all_reduce/busbw/")]
    large = [i for i in mesh if int(keys[i].rsplit("/", 1)[1]) >= fleetgen.LARGE_BYTES]
    rails = [i for i, k in enumerate(keys) if k.startswith("rail/")]
    if kind == "one size -10%":
        f[large[1]] = 0.90
    elif kind == "sweep -5%":
        f[mesh] = 0.95
    elif kind == "sweep -10%":
        f[mesh] = 0.90
    elif kind == "large sizes -10%":
        f[large] = 0.90
    elif kind == "one rail -10%":
        f[rails[0]] = 0.90
    return f


def _units(keys: list[str]) -> list[tuple[int, str, list[int]]]:
    """(phase, unit, metric indices): what a phase re-runs together (a sweep, a rail)."""
    units: dict[tuple[int, str], list[int]] = {}
    for i, k in enumerate(keys):
        head = k.split("/")
        phase = {"mesh": 2, "rail": 4, "cluster": 5}.get(head[0], 0)
        unit = "/".join(head[:2])  # mesh/all_reduce, rail/<device>, cluster/<op>
        units.setdefault((phase, unit), []).append(i)
    return [(phase, unit, idx) for (phase, unit), idx in sorted(units.items())]


@dataclass(slots=True)
class _Sim:
    """One simulated node: its templates, samples and the hook's pieces."""

    tpl: list[Measurement]
    cand: np.ndarray  # metrics x max_samples
    compare: BaselineComparison
    resample: Resampling

    def measured(self, idx: list[int], n: np.ndarray) -> list[Measurement]:
        return [replace(self.tpl[i], samples=tuple(self.cand[i, : n[i]].tolist())) for i in idx]

    def rail_floor(self, rails: list[int], n: np.ndarray) -> dict[int, FloorDecision]:
        values = {i: tuple(self.cand[i, : n[i]].tolist()) for i in rails}
        return rail_floors(values, FLOOR, rail_count=len(rails), p=self.resample)


def simulate(
    tpl: list[Measurement], means: np.ndarray, kind: str, cv: float, rng: np.random.Generator, policy: Policy
) -> Node:
    """One node through the phases' re-measure hook and the gate's decision (see the module docstring)."""
    keys = [m.key for m in tpl]
    m = len(keys)
    p = policy_params(policy, "mi300x-8gpu")
    base = np.round(means[:, None] * (1 + cv * rng.standard_normal((m, 5))), 2)
    cand = np.round((means * _factors(keys, kind))[:, None] * (1 + cv * rng.standard_normal((m, p.max_samples))), 2)
    baseline = Snapshot(
        node=NodeInfo(name=NODE, node_class="mi300x-8gpu"),
        taken_at="2026-12-01T00:00:00Z",
        tool_version="bench",
        software=Software(),
        measurements=tuple(replace(t, samples=tuple(base[i].tolist())) for i, t in enumerate(tpl)),
    )
    compare = BaselineComparison({NODE: baseline}, policy)
    sim = _Sim(tpl=tpl, cand=cand, compare=compare, resample=resampling(policy, "mi300x-8gpu"))
    rails = [i for i, k in enumerate(keys) if k.startswith("rail/")]
    n = np.full(m, 5)
    first = _blocked(sim, keys, base, n, rails, p)
    for phase in (2, 4, 5):
        units = [(unit, idx) for ph, unit, idx in _units(keys) if ph == phase]
        if phase == 4:
            _rails(sim, units, rails, n)
        else:
            for _unit, idx in units:
                _sweep(sim, keys, idx, n)
    return Node(
        blocked=_blocked(sim, keys, base, n, rails, p),
        blocked_first=first,
        cvf_rail_failed=bool(np.any(cand[rails, 0] < FLOOR)),
        mean_samples=float(n.mean()),
    )


def _rails(sim: _Sim, units: list[tuple[str, list[int]]], rails: list[int], n: np.ndarray) -> None:
    """Phase 4's loop: every rail whose floor or baseline comparison is in between runs `next_count` more."""
    while True:
        grow = []
        floors = sim.rail_floor(rails, n)
        for _unit, idx in units:
            if n[idx[0]] >= sim.resample.limit(5):
                continue
            if sim.compare(NODE, sim.measured(idx, n)) or any(in_between(floors[i]) for i in idx):
                grow.append(idx)
        if not grow:
            return
        for idx in grow:
            n[idx] = sim.resample.next_count(int(n[idx[0]]), 5)


def _sweep(sim: _Sim, keys: list[str], idx: list[int], n: np.ndarray) -> None:
    """Phase 2's / 5's loop for one sweep: `sweeps.plan_sweep` decides what re-runs (a range of sizes, or all)."""
    size = {i: size_of(keys[i]) for i in idx}
    per_size: dict[int, list[int]] = {}
    for i, s in size.items():
        if s is not None:
            per_size.setdefault(s, []).append(i)
    sizes = sorted(per_size)
    average = [i for i, s in size.items() if s is None]  # the sweep's `avg_busbw`: whole runs only
    while True:
        plans = plan_sweep(
            sim.compare(NODE, sim.measured(idx, n)),
            whole=False,  # PHASE2_BW_THRESHOLD / TESTS_JSON never enter the band here (module docstring)
            sizes=sizes,
            counts={s: int(n[ms[0]]) for s, ms in per_size.items()},
            full=int(n[average[0]]) if average else min(int(n[i]) for i in idx),
            samples=5,
            p=sim.resample,
        )
        if not plans:
            return
        for plan in plans:
            grown = idx if plan.span is None else [i for s in plan.sizes for i in per_size[s]]
            n[grown] += plan.runs


def _blocked(sim: _Sim, keys: list[str], base: np.ndarray, n: np.ndarray, rails: list[int], p: curves.Params) -> bool:
    """The gate's decision on these samples: a curve or metric blocks, or a rail is below its floor."""
    rows = [
        curves.Row(key=keys[i], baseline=tuple(base[i].tolist()), candidate=tuple(sim.cand[i, : n[i]].tolist()))
        for i in range(len(keys))
    ]
    a = curves.assess(rows, p)
    if any(d.outcome == "block" for d in (*a.metrics, *a.groups)):
        return True
    return any(d.outcome == "fail" for d in sim.rail_floor(rails, n).values())


def node_table(
    workdir: Path,
    *,
    quick: bool,
    trials_healthy: int = 0,
    trials_fault: int = 0,
    noises: tuple[float, ...] = NOISES,
) -> tuple[str, list[Target], dict[str, object]]:
    """The node-level table, its targets and raw numbers."""
    tpl = _metrics(workdir)
    means = np.array([float(statistics.median(t.samples)) for t in tpl])
    policy = load_policy()
    # the two kinds the targets read are measured on more nodes (a rate near 99% or 1% needs ~1,000 for +-0.6%)
    counts = {
        "healthy": trials_healthy or (1000 if quick else 3000),
        "one size -10%": trials_fault or (1000 if quick else 3000),
    }
    rows = []
    numbers: dict[str, object] = {}
    started = time.perf_counter()
    for cv in noises:
        for kind in KINDS:
            trials = counts.get(kind, trials_fault or (200 if quick else 500))
            rng = np.random.default_rng(zlib.crc32(f"{kind}@{cv}".encode()))
            nodes = [simulate(tpl, means, kind, cv, rng, policy) for _ in range(trials)]
            rate = sum(x.blocked for x in nodes) / trials
            rate_first = sum(x.blocked_first for x in nodes) / trials
            cvf = sum(x.cvf_rail_failed for x in nodes) / trials
            samples = statistics.fmean(x.mean_samples for x in nodes)
            low, high = wilson(rate, trials)
            numbers[f"{kind} @ {cv:.0%}"] = {
                "blocked": rate,
                "interval": (low, high),
                "first": rate_first,
                "cvf": cvf,
                "samples": samples,
            }
            rows.append(
                (
                    f"{cv:.0%}",
                    kind,
                    trials,
                    f"{rate:.2%} ({low:.1%}-{high:.1%})",
                    f"{rate_first:.2%}",
                    f"{samples:.2f}",
                    f"{cvf:.1%}",
                )
            )
    seconds = time.perf_counter() - started
    h3 = numbers["healthy @ 3%"]
    one3 = numbers["one size -10% @ 3%"]
    assert isinstance(h3, dict) and isinstance(one3, dict)
    worst_samples = max(float(v["samples"]) for k, v in numbers.items() if k.endswith("3%") and isinstance(v, dict))
    targets = [
        Target(
            name="node level: 10% drop at one size caught (3% noise)",
            goal=">= 99%",
            measured=f"{one3['blocked']:.2%} (95% interval {_interval(one3)}; without re-measure {one3['first']:.2%})",
            met=float(one3["blocked"]) >= 0.99,
        ),
        Target(
            name="node level: healthy nodes blocked (3% noise)",
            goal="<= 1%",
            measured=f"{h3['blocked']:.2%} (95% interval {_interval(h3)}; CVF's single-sample rail floor: "
            f"{h3['cvf']:.1%})",
            met=float(h3["blocked"]) <= 0.01,
        ),
        Target(
            name="samples per metric (3% noise, mean)",
            goal="<= 7",
            measured=f"{h3['samples']:.2f} healthy, worst kind {worst_samples:.2f}",
            met=worst_samples <= 7,
        ),
    ]
    sweep5 = numbers["sweep -5% @ 3%"]
    assert isinstance(sweep5, dict)
    text = "\n".join(
        [
            __doc__.split("\n\n", 1)[1].strip(),
            "",
            table(
                (
                    "noise",
                    "node",
                    "nodes",
                    "blocked with re-measure (95% interval)",
                    "blocked on the first 5 samples",
                    "candidate samples / metric",
                    "CVF single-sample rail floor fails",
                ),
                rows,
            ),
            "",
            f"A whole sweep 5% lower (beyond the 2% whole-curve tolerance, issue 29) is blocked "
            f"{sweep5['blocked']:.2%} of the time at 3% "
            f"noise (issue 14 measured 97.7% with the per-size rule). {seconds:.0f} s for the table.",
        ]
    )
    return text, targets, numbers


def wilson(rate: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a rate measured on `n` nodes."""
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _interval(row: dict[str, object]) -> str:
    interval = row["interval"]
    assert isinstance(interval, tuple)
    return f"{interval[0]:.1%}-{interval[1]:.1%}"


def run(
    *, quick: bool = False, workdir: Path, noises: tuple[float, ...] = NOISES, healthy: int = 0, fault: int = 0
) -> Section:
    """The RESULTS.md section."""
    text, targets, numbers = node_table(workdir, quick=quick, noises=noises, trials_healthy=healthy, trials_fault=fault)
    return Section(title="Node-level detection (issue 14)", body=text, targets=tuple(targets), numbers=numbers)


def main() -> None:
    """`python -m bench.detect_nodes [--quick] [--noise 0.03 ...] [--healthy N] [--fault N]` (default: 1%, 3%, 5%;
    nodes per kind: healthy and one size 1,000, the other kinds 200 with --quick; 3,000 and 500 without)."""
    import sys

    from bench.common import REPO, print_section

    args = sys.argv[1:]

    def value(flag: str) -> int:
        return next((int(args[i + 1]) for i, a in enumerate(args) if a == flag), 0)

    noises = tuple(float(args[i + 1]) for i, a in enumerate(args) if a == "--noise") or NOISES
    section = run(
        quick="--quick" in args,
        workdir=REPO / "bench" / "out",
        noises=noises,
        healthy=value("--healthy"),
        fault=value("--fault"),
    )
    print_section(section)


if __name__ == "__main__":
    main()
