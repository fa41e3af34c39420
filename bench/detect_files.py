"""Detection through the CLI on files (issue 29): `upgrade-gate gate --store --candidates` on derived nodes,
no re-measurement, and the per-node CPU cost of the curve statistics at 1,024 nodes.

Nodes: `bench.fleetgen.derive_fleet` (the template node's real-format phases, 5 samples a metric, noise
`mean * (1 + cv * N(0, 1))` rounded to 2 decimals, no injected faults, the planned ROCm upgrade). A case
scales the candidate's samples of one key set: one mesh size (128 MiB) -10%, the whole out-of-place mesh
all_reduce sweep (22 sizes) -5% or -3%. Baselines go into a real git store, candidates to files; the gate
runs as a subprocess; a node counts as blocked when `bandwidth.regression` blocks it (the rule under test;
the node's verdict is counted beside it).

Run: `PYTHONPATH=. python3 -m bench.detect_files [--quick]`; `--policy FILE` runs the same with a policy
(e.g. `curve_tolerance: 0.07`, the behaviour before issue 29; `class_min_nodes: 1000000`, the per-size test
without the class's curve shape); `--tau SD` gives each node a curve shape of its own (log sd per size).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench import fleetgen

REPO = Path(__file__).resolve().parent.parent
NOW = "2025-06-08T12:00:00Z"
BANDWIDTH = ("mesh", "rail", "cluster")
CASES: dict[str, tuple[str, float]] = {
    "healthy": ("", 1.0),
    "one size (128 MiB) -10%": ("mesh/all_reduce/busbw/134217728", 0.90),
    "whole sweep -5%": ("mesh/all_reduce/busbw/", 0.95),
    "whole sweep -3%": ("mesh/all_reduce/busbw/", 0.97),
}


def _scaled(snap: fleetgen.Snapshot, prefix: str, factor: float) -> fleetgen.Snapshot:
    from upgrade_gate.model import replace

    if not prefix:
        return snap
    phases = tuple(
        replace(
            p,
            measurements=tuple(
                replace(m, samples=tuple(round(s * factor, 2) for s in m.samples)) if m.key.startswith(prefix) else m
                for m in p.measurements
            ),
        )
        for p in snap.phases
    )
    return replace(snap, phases=phases)


def _shaped(snap: fleetgen.Snapshot, factors: dict[str, float]) -> fleetgen.Snapshot:
    """Every bandwidth sample of a key times the node's own factor for it (its shape off the class's)."""
    from upgrade_gate.model import replace

    phases = tuple(
        replace(
            p,
            measurements=tuple(
                replace(m, samples=tuple(round(s * factors[m.key], 2) for s in m.samples)) if m.key in factors else m
                for m in p.measurements
            ),
        )
        for p in snap.phases
    )
    return replace(snap, phases=phases)


def build(root: Path, n: int, prefix: str, factor: float, *, seed: int, cv: float = 0.03, tau: float = 0.0) -> None:
    """A store of `n` baselines and `n` candidate files (one case) under `root`. `tau` > 0: each node's true
    bandwidth at each size is off the template's by its own factor exp(tau N(0, 1)), in baseline and candidate
    alike (nodes of one class whose curves differ in shape, not only the template's noise)."""
    from bench.bench_judge import template
    from bench.judge_api import PLAN_DOCUMENT
    from upgrade_gate import codec
    from upgrade_gate.snapshot.io import canonical_json
    from upgrade_gate.store.gitstore import BaselineStore

    tpl = template(root.parent, reuse=True)
    (root / "candidates").mkdir(parents=True)
    store = BaselineStore(root / "store")
    batch = []
    rng = np.random.default_rng(seed)
    for node in fleetgen.derive_fleet(tpl, n, seed=seed, cv=cv, fault_rate=0.0):
        base, cand = node.baseline, node.candidate
        if tau > 0:
            keys = sorted({m.key for p in base.phases for m in p.measurements if m.key.split("/")[0] in BANDWIDTH})
            factors = dict(zip(keys, np.exp(tau * rng.standard_normal(len(keys))).tolist(), strict=True))
            base, cand = _shaped(base, factors), _shaped(cand, factors)
        cand = _scaled(cand, prefix, factor)
        (root / "candidates" / f"{node.name}.json").write_text(canonical_json(codec.to_jsonable(cand)), "utf-8")
        batch.append(base)
    store.save(batch, message="baselines")
    store.close()
    (root / "plan.json").write_text(json.dumps(PLAN_DOCUMENT), encoding="utf-8")


def gate(root: Path, policy: Path | None) -> tuple[int, float, float, int]:
    """(exit code, share of nodes blocked by bandwidth.regression, share blocked, nodes) of one gate run."""
    out = root / "report.json"
    argv = [sys.executable, "-m", "upgrade_gate", "gate", "--store", str(root / "store"), "--candidates"]
    argv += [str(root / "candidates"), "--plan", str(root / "plan.json"), "--report", f"json:{out}", "--now", NOW]
    if policy is not None:
        argv += ["--policy", str(policy)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    code = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False).returncode
    report = json.loads(out.read_text(encoding="utf-8"))
    nodes = report["nodes"]
    by_rule = sum(
        any(f["rule"] == "bandwidth.regression" and f["severity"] == "block" for f in nr["findings"]) for nr in nodes
    )
    blocked = sum(str(nr["verdict"]).lower() == "block" for nr in nodes)
    return code, by_rule / len(nodes), blocked / len(nodes), len(nodes)


def cpu_per_node(n: int = 1024, repeat: int = 3) -> dict[str, float]:
    """CPU microseconds per node of `curves.assess_many` on `n` template nodes (5 samples, 3% noise), with
    the curve-level test (default) and with it made inert (curve_tolerance = tolerance)."""
    import statistics

    from bench.bench_judge import template
    from upgrade_gate.judge import curves

    tpl = template(REPO / "bench" / "out", reuse=True)
    ms = [m for p in tpl.snapshot.phases for m in p.measurements if m.key.split("/")[0] in ("mesh", "rail", "cluster")]
    means = np.array([statistics.median(m.samples) for m in ms])
    rng = np.random.default_rng(1)
    nodes = []
    for _ in range(n):
        b = np.round(means[:, None] * (1 + 0.03 * rng.standard_normal((len(ms), 5))), 2).tolist()
        c = np.round(means[:, None] * (1 + 0.03 * rng.standard_normal((len(ms), 5))), 2).tolist()
        nodes.append([curves.Row(m.key, tuple(b[i]), tuple(c[i])) for i, m in enumerate(ms)])
    out = {}
    runs: dict[str, Callable[[], object]] = {
        "warm-up": lambda: curves.assess_many(nodes),
        "curve test inert": lambda: curves.assess_many(nodes, curves.Params(curve_tolerance=0.07)),
        "curve test on (default)": lambda: curves.assess_many(nodes),
    }
    for name, call in runs.items():
        best = float("inf")
        for _ in range(repeat):
            t0 = time.process_time()
            call()
            best = min(best, time.process_time() - t0)
        out[name] = best / n * 1e6
    return out


def main() -> None:
    """Print the detection table (Markdown) and the CPU cost."""
    import tempfile

    quick = "--quick" in sys.argv
    policy = Path(sys.argv[sys.argv.index("--policy") + 1]) if "--policy" in sys.argv else None
    tau = float(sys.argv[sys.argv.index("--tau") + 1]) if "--tau" in sys.argv else 0.0
    healthy_n, degraded_n = (300, 100) if quick else (1000, 300)
    print("| case | nodes | blocked by bandwidth.regression | nodes blocked (any rule) | gate exit code |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="ug-detect-files-") as tmp:
        for i, (case, (prefix, factor)) in enumerate(CASES.items()):
            root = Path(tmp) / f"case{i}"
            build(root, healthy_n if case == "healthy" else degraded_n, prefix, factor, seed=2029 + i, tau=tau)
            code, by_rule, blocked, n = gate(root, policy)
            print(f"| {case} | {n} | {by_rule:.1%} | {blocked:.1%} | {code} |", flush=True)
    for name, us in cpu_per_node().items():
        print(f"curves.assess_many, 1,024 nodes, {name}: {us:.0f} µs CPU per node")


if __name__ == "__main__":
    main()
