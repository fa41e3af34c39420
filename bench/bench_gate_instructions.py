"""`gate`'s instructions per node, before and after a change, counted by valgrind (issue 29, round 8).

`python -m bench.bench_gate_instructions --before COMMIT [--nodes 1024] [--forms v1 v2]`

Why: on the shared 2-core box the same `gate` varies by 10-20% in CPU from one run to the next (in one
`bench_gate_scale` run of round 8, SuperBench took 45.4, 53.0 and 54.5 s of CPU on the same input), so
paired CPU times cannot resolve a change of a few percent. The number of instructions a process
executes does not depend on its neighbours: it is the same from run to run to within ~0.03%.

Design decisions
- Each tree (`--before`'s `git archive`, and the working tree) runs `upgrade-gate gate` in-process on one
  CPU (`taskset`: one usable CPU, so `gate` forks no workers) under `valgrind --tool=callgrind`, once
  over the first candidate and once over the first `--nodes` candidates of the bench fleet
  (`bench.bench_gate.build_fleet`, the fleet `bench_gate_scale` uses). Instructions per node are the
  difference divided by `nodes - 1`: start-up, the store's pin and the class references cancel out.
- A plain `gate` of each tree runs first, so that every baseline is in that tree's decoded-baseline
  cache: a change to `upgrade_gate/model/` changes the cache's fingerprint, and a cold cache would count
  the strict decode of every baseline from git.
- Instructions are not time: memory stalls and cache misses are not counted. Read them beside
  `bench_gate_scale`'s CPU and wall times, not instead of them.
- The warming `gate` must exit 0 or 1, and the tree's model source must be the same after the count as
  before the warming (an edit in between names other cache entries: the count would be cold).
- Needs valgrind (Debian's `valgrind`; never a project dependency) and `taskset` (util-linux).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from bench.bench_gate import NOW, build_fleet
from bench.bench_gate_scale import FOLDER, OUT, before_tree, check_tree, listing, model_digest
from bench.common import PYTHON, REPO, table

_COLLECTED = re.compile(r"Collected : (\d+)")


def own_listing(tree: Path, root: Path, n: int, form: str) -> Path:
    """The first n candidates as the package under `tree` writes them (`form` v2), or the fleet's (v1).

    Each tree reads v2 documents its own model wrote: a document written before a field existed is read
    the slower, older-writer way (`codec._decode_unique`), and a tree may refuse a field it does not know.
    On 2026-12-07 candidates written by the day before's model counted +7.4% instructions a node for
    the tree that added `gpu_links[].access`, against +0.5% on its own documents."""
    if form != "v2":
        return listing(root, n, form)
    names = sorted(os.listdir(root / "candidates"))[:n]
    folder = root / f"candidates-v2-{model_digest(tree)[:16]}"
    missing = [x for x in names if not (folder / x).exists()]
    if missing:
        folder.mkdir(exist_ok=True)
        code = (
            "import sys\nfrom pathlib import Path\n"
            "from upgrade_gate.snapshot.io import decode_snapshot, dumps_snapshot\n"
            "src, dst = Path(sys.argv[1]), Path(sys.argv[2])\n"
            "for name in sys.argv[3:]:\n"
            "    snap = decode_snapshot((src / name).read_bytes(), source=name)\n"
            "    (dst / name).write_text(dumps_snapshot(snap, version='2'), encoding='utf-8')\n"
        )
        argv = [PYTHON, "-P", "-c", code, str(root / "candidates"), str(folder), *missing]
        subprocess.run(argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(tree)}, check=True)
    path = root / f"candidates-{n}-{folder.name}.txt"
    path.write_text("".join(f"{folder.name}/{x}\n" for x in names), encoding="utf-8")
    return path


def instructions(tree: Path, root: Path, n: int, form: str) -> int:
    """The instructions `gate` of the package under `tree` executes over the first n candidates."""
    argv = ["taskset", "-c", "0", "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    argv += [PYTHON, "-P", "-m", "upgrade_gate", "gate", "--store", str(root / "store")]
    argv += ["--candidates", str(own_listing(tree, root, n, form)), "--plan", str(root / "plan.json")]
    argv += ["--report", f"json:{root / f'instructions-{tree.name}-{form}-{n}.json'}", "--now", NOW]
    done = subprocess.run(argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"gate under valgrind exited {done.returncode}: {done.stderr[-400:]}")
    found = _COLLECTED.search(done.stderr)
    if found is None:
        raise RuntimeError(f"valgrind printed no instruction count: {done.stderr[-400:]}")
    return int(found.group(1))


def warm(tree: Path, root: Path, n: int, form: str) -> None:
    """One plain `gate` over the same candidates: the tree's decoded-baseline cache holds them afterwards."""
    argv = [PYTHON, "-P", "-m", "upgrade_gate", "gate", "--store", str(root / "store")]
    argv += ["--candidates", str(own_listing(tree, root, n, form)), "--plan", str(root / "plan.json"), "--now", NOW]
    done = subprocess.run(argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, check=False)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"the warming gate exited {done.returncode}: {done.stderr[-400:]!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--before", required=True, help="the commit to compare the working tree with")
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--forms", nargs="+", choices=sorted(FOLDER), default=["v2"])
    args = ap.parse_args()
    for tool in ("valgrind", "taskset"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench_gate_instructions: {tool} is not on PATH (Debian: apt-get install {tool})")
    root = build_fleet(OUT, max(args.nodes, 2))
    check_tree(REPO)
    trees = {"before": before_tree(args.before), "now": REPO}
    rows, results = [], {}
    for form in args.forms:
        per_node = {}
        for label, tree in trees.items():
            source = model_digest(tree)
            warm(tree, root, args.nodes, form)
            one, many = instructions(tree, root, 1, form), instructions(tree, root, args.nodes, form)
            if model_digest(tree) != source:
                raise SystemExit(f"bench_gate_instructions: {tree}/upgrade_gate/model changed while counting")
            per_node[label] = (many - one) / (args.nodes - 1)
            results[f"{label} {form}"] = {"one": one, "many": many, "per_node": per_node[label]}
            rows.append(
                [f"{label} {form}", f"{one / 1e9:.3f} G", f"{many / 1e9:.3f} G", f"{per_node[label] / 1e6:.2f} M"]
            )
        change = per_node["now"] / per_node["before"] - 1
        rows.append([f"now / before, {form}", "", "", f"{change:+.1%}"])
    print(f"`gate` in one process, {args.nodes} bench-fleet nodes; before is {args.before}")
    print(table(["what", "1 node", f"{args.nodes} nodes", "per node"], rows))
    (OUT / "gate-scale").mkdir(parents=True, exist_ok=True)
    (OUT / "gate-scale" / "instructions.json").write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
