"""`upgrade-gate baseline save` of a whole fleet into a new store: wall time and peak memory (issue 26).

Design decisions
- End to end, as an operator runs it: a fresh `python -m upgrade_gate baseline save --store S
  --snapshots DIR --tag T` process over N snapshot files (one per node, `bench.fleetgen`'s real-format
  8x MI300X baselines, written once under bench/out/save-fleet/ and reused). Its peak RSS is the
  kernel's high-water mark of the save process (`resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`, read
  by a small wrapper process per save, so each number is one save's own), its wall time by the clock.
- A fresh store per run (the first save of a fleet is the largest: every file is new), plus a second
  save of the same fleet into the same store under another tag (no blob changes, one tree, the class
  reference aggregated over the stored baselines): both are what `baseline save` does in production.
- Issue 26's target: 8,192 nodes at no more than 256 MiB peak (before: 655 MiB, growing linearly).
  Not a timed test: the numbers go in bench/RESULTS-store-save.md, the suite only checks correctness.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from pathlib import Path

from bench import fleetgen
from bench.common import PYTHON, REPO

SIZES = (1024, 8192)
# Runs one command and prints its peak RSS (KiB): a wrapper per save, so each save's high-water mark is
# its own (RUSAGE_CHILDREN is a running maximum over every child a process has reaped).
_PEAK = (
    "import resource, subprocess, sys\n"
    "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.exit(rc)\n"
)
TARGET_RSS_MIB = 256


def build_files(workdir: Path, n: int) -> Path:
    """N baseline snapshot files under workdir/save-fleet/nodes (reused when complete)."""
    from upgrade_gate import codec
    from upgrade_gate.snapshot.io import canonical_json

    root = workdir / "save-fleet" / "nodes"
    if root.is_dir() and len(list(root.iterdir())) >= n:
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    from bench.bench_judge import template

    tpl = template(workdir, reuse=True)
    for node in fleetgen.derive_fleet(tpl, n):
        (root / f"{node.name}.json").write_text(canonical_json(codec.to_jsonable(node.baseline)), encoding="utf-8")
    return root


def run_save(files: Path, n: int, store: Path, tag: str) -> dict[str, float]:
    """One `baseline save` of the first n files; wall seconds, peak RSS (MiB), exit code."""
    listing = files.parent / f"list-{n}.txt"
    names = sorted(p.name for p in files.iterdir())[:n]
    listing.write_text("".join(f"{files / x}\n" for x in names), encoding="utf-8")
    argv = [PYTHON, "-m", "upgrade_gate", "baseline", "save", "--store", str(store), "--snapshots", str(listing)]
    start = time.monotonic()
    done = subprocess.run(
        [PYTHON, "-c", _PEAK, *argv, "--tag", tag], cwd=REPO, capture_output=True, text=True, check=False
    )
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"baseline save of {n} nodes exited {done.returncode}: {done.stderr.strip()[-400:]}")
    peak_kib = int(done.stdout.strip().splitlines()[-1])
    return {"wall_s": wall, "peak_mib": peak_kib / 1024, "rc": done.returncode}


def main() -> None:
    """Print one line per size: first save into a new store, then a second save of the same fleet."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    ap.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    files = build_files(args.workdir, max(sizes))
    for n in sizes:
        store = args.workdir / "save-fleet" / f"store-{n}"
        shutil.rmtree(store, ignore_errors=True)
        first = run_save(files, n, store, "t1")
        second = run_save(files, n, store, "t2")
        for label, r in (("new store", first), ("same fleet again", second)):
            met = "met" if r["peak_mib"] <= TARGET_RSS_MIB else "NOT met"
            print(
                f"{n:>5} nodes, {label:<16}: {r['wall_s']:6.1f} s, peak RSS <= {r['peak_mib']:5.0f} MiB "
                f"(target {TARGET_RSS_MIB} MiB: {met})",
                flush=True,
            )


if __name__ == "__main__":
    main()
