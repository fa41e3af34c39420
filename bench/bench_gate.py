"""`upgrade-gate gate` end to end at 1, 64, 1,024 and 8,192 nodes: wall and peak RSS against issue 14's targets.

Design decisions
- End to end means what a user runs: a fresh `python -m upgrade_gate gate --store S --candidates LIST
  --plan P --report json:OUT` process reading the baselines from a real git baseline store (8,192
  nodes saved by `BaselineStore.save`, with the class reference saved beside them as `baseline save`
  does) and the candidates from snapshot files, judging, and writing the JSON report. Its wall time and
  the peak of its process tree's memory (PSS summed over the parent and its forked workers, sampled
  from /proc every 20 ms for 2 s, then every 200 ms) are measured; CPU time (user + sys of the tree) is
  reported beside them because the box is shared (load average in the table).
- Each size runs 3 times (with `--quick` too), the sizes interleaved; the table gives the median
  wall and CPU with the range of the walls, and the largest peak memory. The same code took 25-34 s at
  8,192 nodes within one hour on this machine (session 5): one run is not a measurement.
- The fleet is `bench.fleetgen`'s (a real-format fake 8x MI300X node with CVF phases 0-5: 23 mesh
  sizes, 8 rails, 46 multi-node metrics, 5 samples each, 3% noise, ~5% of candidates with one fault).
  It is built once into bench/out/gate-fleet/ (minutes) and reused; smaller sizes are the first N
  candidates of the same fleet against the same store.
- The package is byte-compiled before the runs (`compile_package`), as an installed wheel is.
- The peer's figures (SuperBench 0.12.0 `sb result diagnosis`) are quoted from issue 14: measured
  outside this repository, on this fleet, on this kind of machine. They are not measured here.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import cast

from bench import fleetgen
from bench.common import PYTHON, REPO, Section, Target, table

SIZES = (1, 64, 1024, 8192)
TARGET_S = {8192: 10.0, 1024: 2.0}
TARGET_RSS_MIB = 512
# Issue 14's table, measured outside this repository (same fleet, same kind of 2-core machine).
PEER = {1: (1.15, 137), 64: (1.35, 139), 1024: (4.2, 150), 8192: (32.5, 230)}
BEFORE = {1: (0.45, 60), 64: (1.5, 143), 1024: (9.5, 447), 8192: (70.0, 2929)}
NOW = "2025-06-08T12:00:00Z"


def build_fleet(workdir: Path, n: int = max(SIZES)) -> Path:
    """Store + candidate files + fleet.json (fault per node) under workdir/gate-fleet (reused when complete)."""
    from upgrade_gate import codec
    from upgrade_gate.snapshot.io import canonical_json
    from upgrade_gate.store.aggregate import ClassAccumulator, class_reference_to_document
    from upgrade_gate.store.gitstore import BaselineStore

    root = workdir / "gate-fleet"
    meta = root / "fleet.json"
    if meta.exists() and json.loads(meta.read_text())["n"] >= n:
        return root
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    (root / "candidates").mkdir(parents=True)
    from bench.bench_judge import template

    tpl = template(workdir, reuse=True)
    store = BaselineStore(root / "store")
    faults: dict[str, str | None] = {}
    batch = []
    accs: dict[str, ClassAccumulator] = {}
    for node in fleetgen.derive_fleet(tpl, n):
        faults[node.name] = node.fault
        cls = node.baseline.node.node_class or "unclassed"
        accs.setdefault(cls, ClassAccumulator(cls)).add(node.baseline)
        (root / "candidates" / f"{node.name}.json").write_text(
            canonical_json(codec.to_jsonable(node.candidate)), encoding="utf-8"
        )
        batch.append(node.baseline)
        if len(batch) == 1024:
            store.save(batch, message=f"baselines {len(faults)}")
            batch = []
    if batch:
        store.save(batch, message=f"baselines {len(faults)}")
    for cls, acc in accs.items():
        store.write_document(
            f"classes/{cls}.json", class_reference_to_document(acc.result()), f"class {cls}", schema="class-reference"
        )
    store.close()
    from bench.judge_api import PLAN_DOCUMENT

    (root / "plan.json").write_text(json.dumps(PLAN_DOCUMENT), encoding="utf-8")
    meta.write_text(json.dumps({"n": n, "faults": faults}), encoding="utf-8")
    return root


def _tree_memory_kib(pid: int) -> tuple[int, int, int]:
    """(summed PSS, summed RSS, largest single RSS) of a process tree, KiB.

    PSS splits pages shared between the parent and its forked workers among them, so the sum is the
    tree's real footprint; the RSS sum counts shared pages once per process (an upper bound).
    """
    pss = rss = largest = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status", encoding="ascii") as fh:
                mine = next((int(line.split()[1]) for line in fh if line.startswith("VmRSS:")), 0)
            rss += mine
            largest = max(largest, mine)
            with open(f"/proc/{p}/smaps_rollup", encoding="ascii") as fh:
                pss += next((int(line.split()[1]) for line in fh if line.startswith("Pss:")), mine)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children", encoding="ascii") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue
    return pss, rss, largest


def compile_package() -> None:
    """Byte-compile the package once, as an installed wheel is: the bench's checkout is an editable
    install, and with PYTHONDONTWRITEBYTECODE=1 (this machine's default) every `gate` would otherwise
    compile its ~200 modules from source again (0.15-0.3 s of each run's start-up, measured)."""
    import compileall

    compileall.compile_dir(REPO / "upgrade_gate", quiet=1)


def run_gate(root: Path, n: int, *, profile: Path | None = None, floor: bool = False) -> dict[str, object]:
    """One end-to-end `gate` over the first n candidates; wall, CPU, peak tree RSS, verdict counts. With
    `floor`, the same command with every rule removed (`bench._gate_floor`): what loading, decoding and
    reporting the documents cost before any rule runs."""
    compile_package()
    names = sorted(os.listdir(root / "candidates"))[:n]
    listing = root / f"candidates-{n}.txt"
    listing.write_text("".join(f"candidates/{x}\n" for x in names), encoding="utf-8")
    out = root / f"report-{n}{'-floor' if floor else ''}.json"
    argv = [PYTHON]
    if profile is not None:
        argv += ["-m", "cProfile", "-o", str(profile)]
    argv += ["-m", "bench._gate_floor" if floor else "upgrade_gate", "gate", "--store", str(root / "store")]
    argv += ["--candidates", str(listing), "--plan", str(root / "plan.json"), "--report", f"json:{out}", "--now", NOW]
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    machine_before = _machine_ticks()
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0, 0, 0]

    def sample() -> None:
        # Reading smaps_rollup costs ~3 ms of CPU per sample of the 8,192-node tree (measured): every 20 ms
        # the sampler took ~13% of a core from the run it measures. 20 ms for the first 2 s (short runs),
        # then 200 ms (the footprint grows slowly; under 2% of a core).
        while proc.poll() is None:
            now = _tree_memory_kib(proc.pid)
            peak[:] = [max(a, b) for a, b in zip(peak, now, strict=True)]
            time.sleep(0.02 if time.perf_counter() - start < 2.0 else 0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - start
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    ticks: list[int] = [b - a for a, b in zip(machine_before, _machine_ticks(), strict=True)]
    # the share of the machine's CPU time the hypervisor gave to other guests while this ran
    steal = 100.0 * ticks[7] / sum(ticks) if len(ticks) > 7 and sum(ticks) > 0 else 0.0
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"gate exited {proc.returncode}: {stderr[-2000:]}")
    faults = json.loads((root / "fleet.json").read_text())["faults"]
    report = json.loads(out.read_text(encoding="utf-8"))
    total: Counter[str] = Counter()
    blocked: Counter[str] = Counter()
    for node in report["nodes"]:
        kind = faults.get(node["node"]) or "healthy"
        total[kind] += 1
        blocked[kind] += node["verdict"] == "BLOCK"
    return {
        "n": n,
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mib": peak[0] / 1024,  # summed PSS of the tree: its real footprint
        "peak_rss_sum_mib": peak[1] / 1024,  # summed RSS (shared pages counted per process)
        "peak_rss_largest_mib": peak[2] / 1024,
        "exit": proc.returncode,
        "floor": floor,
        "total": dict(total),
        "blocked": dict(blocked),
        "console_bytes": len(stdout),
        "report_mib": out.stat().st_size / 2**20,
        "steal_pct": steal,
    }


def _machine_ticks() -> list[int]:
    """/proc/stat's first line: user, nice, system, idle, iowait, irq, softirq, steal, ... (all CPUs)."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            return [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return []


def worker_profile(root: Path, count: int = 200, top: int = 25) -> str:
    """cProfile of what one forked worker does per node (load, baseline read, judge), in this process."""
    import cProfile
    import io
    import pstats

    from upgrade_gate.cli import gate_stream
    from upgrade_gate.judge.plan import load_plan
    from upgrade_gate.judge.policy import load_policy
    from upgrade_gate.store.gitstore import BaselineStore
    from upgrade_gate.store.inputs import saved_references

    st = BaselineStore(root / "store")
    pin = st.pin(None)
    gate_stream._JOB = gate_stream._Job(
        store=st.path,
        pin=pin,
        stored=frozenset(st.nodes(pin)),
        plan=load_plan(root / "plan.json"),
        policy=load_policy(),
        references=saved_references(st, pin),
        denylist={},
    )
    paths = [str(root / "candidates" / x) for x in sorted(os.listdir(root / "candidates"))[: count + 10]]
    try:
        gate_stream._judge_paths(paths[:10])  # warm
        cpu = time.process_time()
        prof = cProfile.Profile()
        prof.enable()
        gate_stream._judge_paths(paths[10:])
        prof.disable()
        cpu = time.process_time() - cpu
    finally:
        gate_stream._JOB = None
        st.close()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).strip_dirs().sort_stats("cumulative").print_stats(top)
    lines = buf.getvalue().splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls")), 0)
    return (
        f"Per node in a worker (cProfile of {count} nodes in one process, {cpu / count * 1e3:.1f} ms CPU per node "
        "with the profiler on), by cumulative time:\n\n```\n" + "\n".join(lines[start:]).rstrip() + "\n```"
    )


def run(*, quick: bool = False, workdir: Path, sizes: tuple[int, ...] = SIZES, repeats: int | None = None) -> Section:
    """The end-to-end table and the targets: each size `repeats` times (3, `quick` or not), the runs of
    the sizes interleaved (this machine's speed drifts by ~15% over minutes: a size run three times in a
    row would take one minute's speed), reported as the median wall and CPU, the largest peak memory."""
    root = build_fleet(workdir, max(sizes))
    load = os.getloadavg()
    count = repeats if repeats is not None else 3  # `quick` shortens the profile, not this: one run is noise
    runs: dict[int, list[dict[str, object]]] = {n: [] for n in sizes}
    floors: dict[int, list[dict[str, object]]] = {n: [] for n in sizes if n in TARGET_S}
    for _ in range(count):
        for n in sizes:
            runs[n].append(run_gate(root, n))
            if n in floors:
                floors[n].append(run_gate(root, n, floor=True))
    return section(
        [combined(runs[n]) for n in sizes], load, root, quick=quick, floors=[combined(f) for f in floors.values()]
    )


def combined(runs: list[dict[str, object]]) -> dict[str, object]:
    """Repeated `run_gate` results of one size as one: the median-wall run, with every wall time, the
    median CPU and the largest peak memory of them all."""
    ordered = sorted(runs, key=lambda r: float(str(r["wall_s"])))
    out = dict(ordered[len(ordered) // 2])
    out["wall_runs"] = [float(str(r["wall_s"])) for r in ordered]
    out["steal_runs"] = [float(str(r.get("steal_pct", 0.0))) for r in ordered]
    out["cpu_s"] = statistics.median(float(str(r["cpu_s"])) for r in runs)
    for key in ("peak_rss_mib", "peak_rss_sum_mib", "peak_rss_largest_mib"):
        out[key] = max(float(str(r[key])) for r in runs)
    return out


def _spread(r: dict[str, object]) -> str:
    walls = cast(list[float], r.get("wall_runs", []))
    steals = cast(list[float], r.get("steal_runs", []))
    stolen = f"; CPU steal {min(steals):.0f}-{max(steals):.0f}%" if steals else ""
    return f" (median of {len(walls)}: {walls[0]:.2f}-{walls[-1]:.2f}{stolen})" if len(walls) > 1 else ""


def section(
    results: list[dict[str, object]],
    load: tuple[float, ...],
    root: Path,
    *,
    quick: bool,
    floors: list[dict[str, object]] | None = None,
) -> Section:
    """The RESULTS.md section for measured `run_gate` results (and the rule-less `floors`, if run)."""
    rows = []
    targets = []
    for r in results:
        n = int(str(r["n"]))
        wall, rss = float(str(r["wall_s"])), float(str(r["peak_rss_mib"]))
        peer, before = PEER.get(n), BEFORE.get(n)
        totals, blocks = cast(dict[str, int], r["total"]), cast(dict[str, int], r["blocked"])
        healthy, bh = totals.get("healthy", 0), blocks.get("healthy", 0)
        faulty, bf = sum(totals.values()) - healthy, sum(blocks.values()) - bh
        rows.append(
            (
                f"{n:,}",
                f"{before[0]:.2f} s / {before[1]:,} MiB" if before else "",
                f"{wall:.2f} s{_spread(r)} / {rss:,.0f} MiB (RSS sum {float(str(r['peak_rss_sum_mib'])):,.0f}, "
                f"largest process {float(str(r['peak_rss_largest_mib'])):,.0f})",
                f"{float(str(r['cpu_s'])):.1f} s",
                f"{peer[0]:.2f} s / {peer[1]} MiB" if peer else "",
                f"{wall / peer[0]:.2f}" if peer else "",
                f"{bh}/{healthy}",
                f"{bf}/{faulty}",
                f"{int(str(r['console_bytes'])):,} B",
            )
        )
        if n in TARGET_S:
            targets.append(
                Target(
                    name=f"gate end to end, {n:,} nodes",
                    goal=f"<= {TARGET_S[n]:g} s" + (f" and <= {TARGET_RSS_MIB} MiB peak RSS" if n == 8192 else ""),
                    measured=f"{wall:.2f} s, {rss:,.0f} MiB (load {load[0]:.1f})",
                    met=wall <= TARGET_S[n] and (n != 8192 or rss <= TARGET_RSS_MIB),
                )
            )
    per_node = [(int(str(r["n"])), float(str(r["wall_s"]))) for r in results if int(str(r["n"])) >= 1024]
    if len(per_node) == 2:
        (_, w1), (_, w2) = per_node
        targets.append(
            Target(
                name="gate growth 1,024 -> 8,192",
                goal="linear (wall ratio <= 8 x 1.3)",
                measured=f"{w2 / w1:.1f}x for 8x the nodes",
                met=w2 / w1 <= 8 * 1.3,
            )
        )
    body = "\n".join(
        [
            f"Load average when the run started: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores, shared).",
            "",
            "CPU steal is the share of the machine's CPU time its hypervisor gave to other guests during a run "
            "(/proc/stat): a run with high steal was slow for reasons outside this repository.",
            "",
            table(
                (
                    "nodes",
                    "before (issue 14)",
                    "now: wall / peak memory (PSS of the process tree)",
                    "CPU (tree)",
                    "SuperBench (issue 14, not measured here)",
                    "ratio now/peer",
                    "healthy blocked",
                    "faulty blocked",
                    "console",
                ),
                rows,
            ),
            "",
            "The SuperBench column is issue 14's measurement of SuperBench 0.12.0 `sb result diagnosis` on the same "
            "fleet, taken outside this repository; this bench does not run SuperBench.",
            "",
            *floor_text(results, floors or []),
            worker_profile(root, count=100 if quick else 300),
        ]
    )
    numbers = {"runs": results, "floors": floors or []}
    return Section(title="gate end to end (issue 14)", body=body, targets=tuple(targets), numbers=numbers)


def floor_text(results: list[dict[str, object]], floors: list[dict[str, object]]) -> list[str]:
    """The rule-less runs beside the full ones: how much of each target the documents alone take."""
    if not floors:
        return []
    full = {int(str(r["n"])): r for r in results}
    rows = []
    for f in floors:
        n = int(str(f["n"]))
        wall, cpu = float(str(f["wall_s"])), float(str(f["cpu_s"]))
        whole = full.get(n)
        rows.append(
            (
                f"{n:,}",
                f"{TARGET_S[n]:g} s",
                f"{wall:.2f} s{_spread(f)}",
                f"{cpu:.1f} s ({cpu / n * 1e3:.2f} ms a node)",
                f"{wall / TARGET_S[n]:.0%}",
                f"{float(str(whole['wall_s'])):.2f} s" if whole else "",
            )
        )
    return [
        "The same `gate` with every rule removed (`bench._gate_floor`: each pair gets an empty PASS report), "
        "run interleaved with the runs above: the cost of reading, decoding, releasing and reporting the two "
        "documents of each node, before any rule runs.",
        "",
        table(("nodes", "target", "no rules: wall", "no rules: CPU (tree)", "of the target", "with the rules"), rows),
        "",
    ]


def main() -> None:
    """`python -m bench.bench_gate [N ...]`: print the section for the given sizes."""
    import sys

    from bench.common import print_section

    sizes = tuple(int(a) for a in sys.argv[1:]) or SIZES
    print_section(run(workdir=REPO / "bench" / "out", sizes=sizes))


if __name__ == "__main__":
    main()
