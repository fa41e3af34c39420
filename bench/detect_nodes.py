"""Node-level detection of the bandwidth statistics (judge.curves), per fault kind and noise level.

Noise model (stated, as issue 14 asks): every sample of a metric is `mean * (1 + cv * N(0, 1))`,
independent across samples, metrics and sides, rounded to 2 decimals as rccl-tests and perftest print
them; `mean` is the template node's median of that metric (bench.fleetgen's real-format fake MI300X:
23 mesh sizes + average, 8 rails at ~383 Gb/s, 2 x 23 multi-node sizes + averages = 77 metrics); cv is
1%, 3% or 5%. The baseline has 5 samples per metric. Independence across sizes is the hard case for
the per-size tests (a real sweep's sizes move together, which the curve estimate absorbs).

The procedure is the one the phases and the judge run together: the candidate starts with 5 samples
per metric; every metric (or group) judged "re-measure" gets 5 more, up to `max_samples` (20), and the
node is judged again; a node is blocked when any metric or group blocks, or a rail's CVF floor
(380 Gb/s) fails on evidence. Fault kinds: one mesh size (a large one) -10%; the whole mesh sweep -5%
(within the 7% tolerance: must pass) and -10%; the large mesh sizes (>= 64 MiB) -10%; one rail -10%.
Beside it: the same judge without re-measurement (the first 5 samples only; "re-measure" warns), and
CVF's own single-sample floor decision on the rails (first run < 380 Gb/s fails the node).
"""

from __future__ import annotations

import statistics
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import fleetgen
from bench.common import Section, Target, table
from upgrade_gate.judge import curves
from upgrade_gate.model import measurements_of

NOISES = (0.01, 0.03, 0.05)
FLOOR = 380.0
KINDS = ("healthy", "one size -10%", "sweep -5%", "sweep -10%", "large sizes -10%", "one rail -10%")


@dataclass(frozen=True, slots=True)
class Node:
    """One simulated node's outcome."""

    blocked: bool
    blocked_first: bool  # the first 5 samples only, no re-measure
    cvf_rail_failed: bool
    mean_samples: float


def _metrics(workdir: Path) -> list[tuple[str, float]]:
    from bench.bench_judge import template

    tpl = template(workdir, reuse=True)
    return [(m.key, float(statistics.median(m.samples))) for m in measurements_of(tpl.snapshot)]


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


def simulate(
    keys: list[str], means: np.ndarray, kind: str, cv: float, rng: np.random.Generator, p: curves.Params
) -> Node:
    """One node through the sequential procedure (see the module docstring)."""
    m = len(keys)
    base = np.round(means[:, None] * (1 + cv * rng.standard_normal((m, 5))), 2)
    cand_all = np.round((means * _factors(keys, kind))[:, None] * (1 + cv * rng.standard_normal((m, p.max_samples))), 2)
    rails = [i for i, k in enumerate(keys) if k.startswith("rail/")]
    n = np.full(m, 5)
    first: bool | None = None
    while True:
        rows = [
            curves.Row(key=keys[i], baseline=tuple(base[i]), candidate=tuple(cand_all[i, : n[i]])) for i in range(m)
        ]
        a = curves.assess(rows, p)
        again = {d.key for d in (*a.metrics, *a.groups) if d.outcome == "remeasure"}
        blocked = any(d.outcome == "block" for d in (*a.metrics, *a.groups))
        sigma = curves.pooled_sigma([tuple(cand_all[i, : n[i]]) for i in rails], p)
        floor_fail = False
        for i in rails:
            fd = curves.floor_check(tuple(cand_all[i, : n[i]]), FLOOR, sigma=sigma, tests=len(rails) + 1, p=p)
            floor_fail |= fd.outcome == "fail"
            if fd.outcome == "remeasure":
                again.add(keys[i])
        blocked |= floor_fail
        if first is None:
            first = blocked
        grow = [i for i in range(m) if (keys[i] in again or curves.group_of(keys[i]) in again) and n[i] < p.max_samples]
        if blocked or not grow:
            break
        n[grow] += 5
    return Node(
        blocked=blocked,
        blocked_first=bool(first),
        cvf_rail_failed=bool(np.any(cand_all[rails, 0] < FLOOR)),
        mean_samples=float(n.mean()),
    )


def node_table(
    workdir: Path, *, quick: bool, trials_healthy: int = 0, trials_fault: int = 0
) -> tuple[str, list[Target], dict[str, object]]:
    """The node-level table, its targets and raw numbers."""
    pairs = _metrics(workdir)
    keys = [k for k, _ in pairs]
    means = np.array([v for _, v in pairs])
    p = curves.Params()
    counts = {"healthy": trials_healthy or (1000 if quick else 3000)}
    rows = []
    numbers: dict[str, object] = {}
    started = time.perf_counter()
    for cv in NOISES:
        for kind in KINDS:
            trials = counts.get(kind, trials_fault or (200 if quick else 500))
            rng = np.random.default_rng(zlib.crc32(f"{kind}@{cv}".encode()))
            nodes = [simulate(keys, means, kind, cv, rng, p) for _ in range(trials)]
            rate = sum(x.blocked for x in nodes) / trials
            rate_first = sum(x.blocked_first for x in nodes) / trials
            cvf = sum(x.cvf_rail_failed for x in nodes) / trials
            samples = statistics.fmean(x.mean_samples for x in nodes)
            numbers[f"{kind} @ {cv:.0%}"] = {"blocked": rate, "first": rate_first, "cvf": cvf, "samples": samples}
            rows.append((f"{cv:.0%}", kind, trials, f"{rate:.2%}", f"{rate_first:.2%}", f"{samples:.2f}", f"{cvf:.1%}"))
    seconds = time.perf_counter() - started
    h3 = numbers["healthy @ 3%"]
    one3 = numbers["one size -10% @ 3%"]
    assert isinstance(h3, dict) and isinstance(one3, dict)
    worst_samples = max(float(v["samples"]) for k, v in numbers.items() if k.endswith("3%") and isinstance(v, dict))
    targets = [
        Target(
            name="node level: 10% drop at one size caught (3% noise)",
            goal=">= 99%",
            measured=f"{one3['blocked']:.2%} (without re-measure {one3['first']:.2%})",
            met=float(one3["blocked"]) >= 0.99,
        ),
        Target(
            name="node level: healthy nodes blocked (3% noise)",
            goal="<= 1%",
            measured=f"{h3['blocked']:.2%} (CVF's single-sample rail floor: {h3['cvf']:.1%})",
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
                    "blocked (with re-measure)",
                    "blocked on the first 5 samples",
                    "candidate samples / metric",
                    "CVF single-sample rail floor fails",
                ),
                rows,
            ),
            "",
            f"A whole sweep 5% lower (inside the 7% tolerance) is blocked {sweep5['blocked']:.2%} of the time at 3% "
            f"noise (issue 14 measured 97.7% with the per-size rule). {seconds:.0f} s for the table.",
        ]
    )
    return text, targets, numbers


def run(*, quick: bool = False, workdir: Path) -> Section:
    """The RESULTS.md section."""
    text, targets, numbers = node_table(workdir, quick=quick)
    return Section(title="Node-level detection (issue 14)", body=text, targets=tuple(targets), numbers=numbers)


def main() -> None:
    """`python -m bench.detect_nodes [--quick]`."""
    import sys

    from bench.common import REPO, print_section

    print_section(run(quick="--quick" in sys.argv, workdir=REPO / "bench" / "out"))


if __name__ == "__main__":
    main()
