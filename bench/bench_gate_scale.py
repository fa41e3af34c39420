"""`gate` at 1,024 and 8,192 nodes beside its floor and its peer, in one run (issue 29).

`python -m bench.bench_gate_scale [--before COMMIT] [--sizes 1024 8192] [--repeats 2] [--no-peer] [--forms v1 v2]`

Design decisions
- Three things run on the same generated fleet (`bench.bench_gate.build_fleet`: 8,192 nodes saved in a
  real git baseline store, one candidate file each, ~5% with one injected fault), interleaved, in one
  process tree per measurement: `upgrade-gate gate` of the code at `--before` (a `git archive` of that
  commit's package, run with PYTHONPATH pointing at it) and of the working tree; the floor, a plain
  `orjson.loads` of the same documents (every candidate file and every baseline document of the store's
  checkout, read and parsed in one fresh process, nothing else); and the peer, SuperBench's rule-based
  data diagnosis (`sb result diagnosis`) built from its public source into a venv under
  ~/.cache/superbench (see `SB_VENV`; never a project dependency), fed the same fleet in its own input
  form (`superbench_inputs`).
- Process CPU time (user + sys of the tree, `RUSAGE_CHILDREN`) is the primary measure, wall time beside
  it: the machine is shared with other work. Peak memory is the summed PSS of the process tree
  (`bench.bench_gate._tree_memory_kib`), sampled every 20 ms for 2 s and every 200 ms after.
- The peer's input: one results-summary line per node (`node` plus one value per bandwidth metric: the
  mean of the candidate's samples, as SuperBench's summary gives a metric's value over its runs, and a
  `<phase>/return_code` per CVF phase, 0 when it passed); the baseline file holds each metric's median
  over the fleet's baselines; the rules are SuperBench's documented ones: `failure_check` on the return
  codes and `variance` with `lambda x:x<-0.05` (a 5% drop) on every bandwidth metric whose baseline is at
  least 1 (below it, tools print two decimals and a 5% rule measures rounding). Its output is JSON.
  SuperBench compares each node with one fleet baseline; upgrade-gate compares each node with its own
  baseline and its class: the work is not the same, the question (which nodes are defective after the
  change) is.
- `--forms`: the candidate files as snapshot schema v1 (`candidates/`, as `build_fleet` writes them) and/or
  v2 (`candidates-v2/`, what `snapshot` and `validate` write since issue 29: the same snapshots, each
  re-encoded once by the `--before` tree if given, else the measured one, so that every tree measured
  reads them). Each tree runs on each form; the orjson floor reads the same files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.bench_gate import NOW, _tree_memory_kib, build_fleet, compile_package
from bench.common import PYTHON, REPO, table

OUT = REPO / "bench" / "out"
SB_VENV = Path.home() / ".cache" / "superbench" / "venv"
SB_RULE = {
    "version": "v0.12",
    "superbench": {
        "rules": {
            "failure-rule": {
                "function": "failure_check",
                "criteria": "lambda x:x>0",
                "categories": "Failed",
                "metrics": ["phase/.*return_code"],
            },
            "bandwidth-rule": {
                "function": "variance",
                "criteria": "lambda x:x<-0.05",
                "categories": "Bandwidth",
                "metrics": ["mesh/.*", "rail/.*", "cluster/.*"],
            },
        }
    },
}


def measure(argv: list[str], env: dict[str, str]) -> dict[str, float | int | str]:
    """Run argv; wall, CPU (tree), peak PSS of the tree, exit code, the end of stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], _tree_memory_kib(proc.pid)[0])
            time.sleep(0.02 if time.perf_counter() - start < 2.0 else 0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - start
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "pss_mib": peak[0] / 1024,
        "exit": proc.returncode,
        "out": stdout[-400:],
        "err": stderr[-400:],
    }


FOLDER = {"v1": "candidates", "v2": "candidates-v2"}  # the candidate files of each form


def listing(root: Path, n: int, form: str = "v1") -> Path:
    """The first n candidates as a list file (what `gate --candidates` reads)."""
    path = root / f"candidates-{n}-{form}.txt"
    names = sorted(os.listdir(root / "candidates"))[:n]
    path.write_text("".join(f"{FOLDER[form]}/{x}\n" for x in names), encoding="utf-8")
    return path


def model_digest(tree: Path) -> str:
    """A digest of the tree's `upgrade_gate/model/*.py`: what a document's fields follow from."""
    digest = hashlib.sha256()
    for path in sorted((tree / "upgrade_gate" / "model").glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def v2_candidates(root: Path, tree: Path) -> None:
    """`candidates-v2/`: every candidate re-encoded as schema v2 by the package under `tree`, again whenever
    the tree's model changed. Documents a release before wrote lack its new fields, and the strict decode
    reads such a document the slower, older-writer way (`codec._decode_unique`): on 2026-12-07 the v2
    candidates of 2026-12-06, without `gpu_links[].access`, counted +7.4% instructions a node against
    +0.5% for the same candidates written by the current model."""
    done = root / FOLDER["v2"] / ".complete"
    if done.exists() and done.read_text(encoding="utf-8") == model_digest(tree):
        return
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{REPO}"}
    subprocess.run(
        [PYTHON, "-P", "-m", "bench.bench_gate_scale", "--write-v2", str(root)], cwd=REPO, env=env, check=True
    )
    done.write_text(model_digest(tree), encoding="utf-8")


def write_v2(root: Path) -> None:
    """The `--write-v2` child: decode each v1 candidate and write it as v2 (`snapshot.io.dumps_snapshot`)."""
    from upgrade_gate.snapshot.io import decode_snapshot, dumps_snapshot

    folder = root / FOLDER["v2"]
    folder.mkdir(exist_ok=True)
    for name in sorted(os.listdir(root / "candidates")):
        snap = decode_snapshot((root / "candidates" / name).read_bytes(), source=name)
        (folder / name).write_text(dumps_snapshot(snap, version="2"), encoding="utf-8")


def gate(tree: Path, root: Path, n: int, form: str = "v1") -> dict[str, float | int | str]:
    """One `upgrade-gate gate` of the package under `tree` over the first n candidates (of `form`)."""
    out = root / f"scale-report-{n}-{tree.name}-{form}.json"
    out.unlink(missing_ok=True)  # a report left by an earlier run must never stand in for this one
    # -P: `python -m` otherwise puts the working folder (the repository) first on sys.path, and every tree
    # measured would be the working tree, whatever PYTHONPATH names (found 2026-12-06: `before` and `after`
    # runs before that date all timed the working tree as it stood; `check_tree` now proves which one runs)
    argv = [PYTHON, "-P", "-m", "upgrade_gate", "gate", "--store", str(root / "store")]
    argv += ["--candidates", str(listing(root, n, form))]
    argv += ["--plan", str(root / "plan.json"), "--report", f"json:{out}", "--now", NOW]
    got = measure(argv, {**os.environ, "PYTHONPATH": str(tree), "NO_COLOR": "1"})
    if got["exit"] not in (0, 1):
        raise RuntimeError(f"gate exited {got['exit']}: {got['err']}")
    report = json.loads(out.read_text(encoding="utf-8"))
    got["blocked"] = sum(node["verdict"] == "BLOCK" for node in report["nodes"])
    got["blocked_nodes"] = sorted(node["node"] for node in report["nodes"] if node["verdict"] == "BLOCK")  # type: ignore[assignment]
    return got


def documents(root: Path, n: int, form: str = "v1") -> list[Path]:
    """The 2 x n documents `gate` reads for the first n candidates: each candidate file and its baseline."""
    names = sorted(os.listdir(root / "candidates"))[:n]
    return [root / FOLDER[form] / x for x in names] + [root / "store" / "nodes" / x for x in names]


def orjson_floor(paths_file: Path) -> None:
    """Read and `orjson.loads` every document listed (the floor's child process); prints its own CPU."""
    import orjson

    paths = paths_file.read_text(encoding="utf-8").split("\n")
    start = time.process_time()
    kept = 0
    for p in paths:
        if p:
            with open(p, "rb") as fh:
                kept += len(orjson.loads(fh.read()))
    print(json.dumps({"loads_cpu_s": time.process_time() - start, "documents": len([p for p in paths if p])}))


def floor(root: Path, n: int, form: str = "v1") -> dict[str, float | int | str]:
    """The plain-parse floor over the same 2 x n documents, in a fresh process."""
    paths = root / f"documents-{n}-{form}.txt"
    paths.write_text("\n".join(str(p) for p in documents(root, n, form)), encoding="utf-8")
    got = measure(
        [PYTHON, "-m", "bench.bench_gate_scale", "--orjson-floor", str(paths)], {**os.environ, "PYTHONPATH": str(REPO)}
    )
    got.update(json.loads(str(got["out"]).strip().splitlines()[-1]))
    return got


def superbench_inputs(root: Path, n: int) -> Path:
    """results-summary.jsonl, baseline.json and rule.yaml for the first n nodes (see the module docstring)."""
    import orjson
    import yaml

    where = OUT / "gate-scale" / f"superbench-{n}"
    where.mkdir(parents=True, exist_ok=True)
    names = sorted(os.listdir(root / "candidates"))[:n]

    def values(doc: dict[str, object]) -> dict[str, float]:
        out: dict[str, float] = {}
        for phase in doc.get("phases", ()):  # type: ignore[attr-defined]
            out[f"phase/phase{phase['phase']}_return_code"] = 0.0 if phase["status"] == "passed" else 1.0
            found = phase.get("measurements") or ()
            if isinstance(found, dict):  # schema v2 (the store writes v2): columns
                found = [{"key": k, "samples": v} for k, v in zip(found["keys"], found["samples"], strict=True)]
            for m in found:
                bench, _, rest = m["key"].partition("/")
                if bench in ("mesh", "rail", "cluster") and m["samples"]:
                    out[f"{bench}/{rest.replace('/', '_')}"] = statistics.fmean(m["samples"])
        return out

    per_metric: dict[str, list[float]] = {}
    for x in names:
        for k, v in values(orjson.loads((root / "store" / "nodes" / x).read_bytes())).items():
            per_metric.setdefault(k, []).append(v)
    baseline = {k: statistics.median(v) for k, v in per_metric.items() if not k.startswith("phase/")}
    keep = {k for k, v in baseline.items() if v >= 1.0}
    with open(where / "results-summary.jsonl", "w", encoding="utf-8") as fh:
        for x in names:
            row = values(orjson.loads((root / "candidates" / x).read_bytes()))
            fh.write(
                json.dumps(
                    {
                        "node": x.removesuffix(".json"),
                        **{k: v for k, v in row.items() if k in keep or k.startswith("phase/")},
                    }
                )
                + "\n"
            )
    (where / "baseline.json").write_text(json.dumps({k: baseline[k] for k in sorted(keep)}), encoding="utf-8")
    (where / "rule.yaml").write_text(yaml.safe_dump(SB_RULE), encoding="utf-8")
    return where


def superbench(where: Path) -> dict[str, float | int | str]:
    """`sb result diagnosis` over the converted inputs (JSON output), in SuperBench's own venv."""
    out = where / "out"
    argv = [str(SB_VENV / "bin" / "sb"), "result", "diagnosis", "--data-file", str(where / "results-summary.jsonl")]
    argv += ["--rule-file", str(where / "rule.yaml"), "--baseline-file", str(where / "baseline.json")]
    argv += ["--output-dir", str(out), "--output-file-format", "json"]
    got = measure(argv, {k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    summary = out / "diagnosis_summary.json"
    got["blocked"] = len(json.loads(summary.read_text(encoding="utf-8"))) if summary.exists() else -1
    return got


def before_tree(commit: str) -> Path:
    """The package at `commit`, unpacked once under bench/out/gate-scale/ (a PYTHONPATH for `gate`)."""
    tree = OUT / "gate-scale" / f"tree-{commit[:12]}"
    if not (tree / "upgrade_gate").exists():
        tree.mkdir(parents=True, exist_ok=True)
        folders = ["upgrade_gate", "schemas", "checklists"]  # the package and its shipped folders (`shipped`)
        archive = subprocess.run(["git", "archive", commit, *folders], cwd=REPO, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    import compileall

    compileall.compile_dir(tree / "upgrade_gate", quiet=1)
    check_tree(tree)
    return tree


def check_tree(tree: Path) -> None:
    """Fail unless `gate`'s interpreter, as `gate()` starts it, imports the package from `tree`."""
    probe = [PYTHON, "-P", "-c", "import upgrade_gate; print(upgrade_gate.__file__)"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    where = subprocess.run(probe, cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout.strip()
    if not Path(where).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"gate of {tree} would import upgrade_gate from {where}: the measurement would lie")


def run(
    sizes: tuple[int, ...],
    repeats: int,
    before: str | None,
    peer: bool,
    after: str | None = None,
    forms: tuple[str, ...] = ("v1",),
) -> dict[str, dict[str, list[dict[str, float | int | str]]]]:
    """Every measurement, interleaved: per size, per kind (before, now, floor, superbench), one dict a run."""
    root = build_fleet(OUT, max(sizes))
    compile_package()
    trees = {"now": before_tree(after) if after is not None else REPO}  # `after`: a commit, not the working tree
    if before is not None:
        trees = {"before": before_tree(before), **trees}
    if "v2" in forms:
        v2_candidates(root, trees.get("before", trees["now"]))
    inputs = {n: superbench_inputs(root, n) for n in sizes} if peer else {}
    results: dict[str, dict[str, list[dict[str, float | int | str]]]] = {str(n): {} for n in sizes}

    def named(label: str, form: str) -> str:
        return label if forms == ("v1",) else f"{label} {form}"

    for n in sizes:  # warm the page cache and the store's decoded cache once per size, for every tree (each
        for form in forms:  # release reads and writes its own cache entries: another fingerprint, another folder)
            for tree in trees.values():
                gate(tree, root, n, form)
    for _ in range(repeats):
        for n in sizes:
            got = results[str(n)]
            for form in forms:
                for label, tree in trees.items():
                    got.setdefault(named(label, form), []).append(gate(tree, root, n, form))
                got.setdefault(named("orjson", form), []).append(floor(root, n, form))
            if peer:
                got.setdefault("superbench", []).append(superbench(inputs[n]))
            print(n, {k: [round(float(r["cpu_s"]), 1) for r in v] for k, v in got.items()}, file=sys.stderr)
    return results


def render(results: dict[str, dict[str, list[dict[str, float | int | str]]]]) -> str:
    """The Markdown table: median CPU and wall, the largest peak, and the ratios."""
    rows = []
    for n, kinds in results.items():
        med = {
            k: (statistics.median(float(r["cpu_s"]) for r in v), statistics.median(float(r["wall_s"]) for r in v))
            for k, v in kinds.items()
        }
        for k, v in kinds.items():
            form = k.rpartition(" ")[2] if " " in k else ""
            floor_of = f"orjson {form}" if form else "orjson"
            if floor_of not in kinds:  # the peer, beside several forms: the v1 floor (its input is the v1 fleet)
                floor_of = min(x for x in kinds if x.startswith("orjson"))
            loads = statistics.median(float(r["loads_cpu_s"]) for r in kinds[floor_of])
            cpu, wall = med[k]
            peer = med.get("superbench")
            rows.append(
                (
                    f"{int(n):,}",
                    k,
                    f"{cpu:.1f} s ({min(float(r['cpu_s']) for r in v):.1f}-{max(float(r['cpu_s']) for r in v):.1f})",
                    f"{wall:.1f} s",
                    f"{max(float(r['pss_mib']) for r in v):,.0f} MiB",
                    f"{cpu / med[floor_of][0]:.1f}x ({cpu / loads:.1f}x)",
                    f"{cpu / peer[0]:.2f}" if peer else "",
                    str(v[0].get("blocked", "")),
                )
            )
    return table(
        (
            "nodes",
            "what",
            "CPU (tree), median (range)",
            "wall",
            "peak PSS",
            "CPU / orjson floor (/ its loads alone)",
            "CPU / SuperBench",
            "nodes blocked",
        ),
        rows,
    )


def main() -> None:
    """Run and print the table (and the raw numbers as JSON to bench/out/gate-scale/results.json)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 8192])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--before")
    ap.add_argument("--after", help="measure this commit as `now` instead of the working tree")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--forms", nargs="+", choices=sorted(FOLDER), default=["v1"], help="candidate file forms")
    ap.add_argument("--orjson-floor", type=Path)
    ap.add_argument("--write-v2", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.orjson_floor:
        orjson_floor(args.orjson_floor)
        return
    if args.write_v2:
        write_v2(args.write_v2)
        return
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()
    results = run(tuple(args.sizes), args.repeats, args.before, not args.no_peer, args.after, tuple(args.forms))
    (OUT / "gate-scale").mkdir(parents=True, exist_ok=True)
    (OUT / "gate-scale" / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(f"Started {started}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores, shared).\n")
    print(render(results))


if __name__ == "__main__":
    main()
