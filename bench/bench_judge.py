"""Judge scale: `judge(...)` over 1, 64, 1,024 and 8,192 nodes derived from one real-format snapshot.

Design decisions
- The fleet comes from `bench.fleetgen`: the real template node (fake MI300X, real capture, real
  builder, real CVF phases 0-5), each derived node with its own identity and fresh noise, ~5% of the
  candidates with one unplanned fault (order, VF, link, firmware, 15% large-message drop), every
  candidate with the planned ROCm upgrade, and a change plan saying so. The largest fleet is derived
  once and the smaller ones are its prefixes, so the sizes differ only in N.
- What is timed is the call the `gate` command makes after loading its documents: `judge(...)` with
  the shipped default policy. Loading documents is measured separately (per snapshot, schema check
  included) so the end-to-end cost can be compared with SuperBench's `sb result diagnosis` (which
  includes reading its files and ~2 s of start-up).
- Memory: the peak of Python allocations during the judge call (tracemalloc, a separate call since
  tracing slows it down) and the process's peak RSS after the 8,192-node run (inputs included).
- The verdicts are checked too: every faulty candidate must be blocked and every healthy one passed,
  or the timing would be of a judge that does not do its job.
"""

from __future__ import annotations

import cProfile
import gc
import io
import pstats
import resource
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from bench import fleetgen
from bench.common import Section, Target, Timing, fmt_s, print_section, table, timing_cell
from bench.judge_api import Inputs, JudgeCall, judge_call
from upgrade_gate.model import replace

SIZES = (1, 64, 1024, 8192)
TARGET_8192_S = 10.0
# The peer's end-to-end figures as issue 14 quotes them (SuperBench 0.12.0 `sb result diagnosis`, measured
# outside this repository on this fleet and this kind of machine; not measured by this bench). The 21 s /
# 174 s once written here were never measured on this data and are gone.
SUPERBENCH_S = {1024: 4.2, 8192: 32.5}
SUPERBENCH_MIB_8192 = 230


def template(workdir: Path, *, reuse: bool) -> fleetgen.Template:
    """The real-format template node (built once per run; reused from bench/out with --quick)."""
    path = workdir / "template.json"
    if reuse and path.exists():
        try:
            return fleetgen.load_template(path)
        except Exception:  # a stale cache from an older model: rebuild
            pass
    tpl = fleetgen.build_template(workdir / "template-nodes")
    fleetgen.save_template(tpl, path)
    return tpl


def _repeat_for(n: int, quick: bool) -> int:
    if quick:
        return 1 if n >= 1024 else 3
    return 1 if n >= 8192 else 3 if n >= 1024 else 7 if n >= 64 else 15


def _cpu() -> float:
    """CPU seconds of this process and its reaped children (the judge forks workers on big fleets)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _time(call: JudgeCall, inputs: Inputs, repeat: int) -> tuple[Timing, Timing, object]:
    """Wall and CPU (with forked workers) times of `repeat` judge calls, and the last report."""
    wall, cpu = [], []
    report: object = None
    for _ in range(repeat):
        gc.collect()
        start, start_cpu = time.perf_counter(), _cpu()
        report = call.run(inputs)
        wall.append(time.perf_counter() - start)
        cpu.append(_cpu() - start_cpu)
    n = len(inputs.candidates)
    return Timing(label=f"judge {n}", runs=tuple(wall)), Timing(label=f"judge {n} cpu", runs=tuple(cpu)), report


def _verdicts(report: object, nodes: Sequence[fleetgen.FleetNode]) -> tuple[Counter[str], Counter[str], Counter[str]]:
    """(nodes per kind, blocked nodes per kind, blocking rules per kind); kind = injected fault or healthy."""
    from upgrade_gate.model import GateReport, Severity, Verdict

    assert isinstance(report, GateReport)
    by_name = {n.name: n for n in nodes}
    total: Counter[str] = Counter()
    blocked: Counter[str] = Counter()
    rules: Counter[str] = Counter()
    for node_report in report.nodes:
        kind = by_name[node_report.node].fault or "healthy"
        total[kind] += 1
        blocked[kind] += node_report.verdict is Verdict.BLOCK
        for rule in sorted({f.rule for f in node_report.findings if f.severity is Severity.BLOCK}):
            rules[f"{kind}: {rule}"] += 1
    return total, blocked, rules


def profile(call: JudgeCall, inputs: Inputs, *, top: int = 20) -> str:
    """cProfile of one judge call: top functions by own time, then by cumulative time."""
    prof = cProfile.Profile()
    prof.enable()
    call.run(inputs)
    prof.disable()
    parts = []
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(key).print_stats(top)
        lines = buf.getvalue().splitlines()
        start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls")), 0)
        parts.append(f"By {key}:\n\n```\n" + "\n".join(lines[start:]).rstrip() + "\n```")
    return "\n\n".join(parts)


def _parallel_min() -> str:
    try:
        from upgrade_gate.judge import judge as judge_mod

        return f"{judge_mod.PARALLEL_MIN_NODES:,}"
    except (ImportError, AttributeError):
        return "?"


def load_cost(nodes: Sequence[fleetgen.FleetNode], *, count: int = 30) -> Timing:
    """Per-document cost of reading a snapshot back as `gate` does (JSON + schema + decode)."""
    from upgrade_gate.snapshot.io import dumps_snapshot, loads_snapshot

    texts = [dumps_snapshot(n.candidate) for n in nodes[:count]]
    runs = []
    for text in texts:
        start = time.perf_counter()
        loads_snapshot(text, source="bench")
        runs.append(time.perf_counter() - start)
    return Timing(label="load snapshot", runs=tuple(runs))


def run(*, quick: bool = False, workdir: Path, sizes: Sequence[int] = SIZES) -> Section:
    """Time the judge at each size; return the RESULTS.md section."""
    call = judge_call()
    tpl = template(workdir, reuse=quick)
    start = time.perf_counter()
    fleet = list(fleetgen.derive_fleet(tpl, max(sizes)))
    derive_s = time.perf_counter() - start
    start = time.perf_counter()
    call(fleet[:1])  # the first call imports what the judge imports lazily (scipy); `gate` pays it once
    first_s = time.perf_counter() - start
    rows = []
    numbers: dict[str, object] = {"derive_s": derive_s, "first_call_s": first_s}
    walls: dict[int, Timing] = {}
    verdicts: dict[int, tuple[Counter[str], Counter[str], Counter[str]]] = {}
    prepared: dict[int, Inputs] = {}
    for n in sizes:
        nodes = fleet[:n]
        t0 = time.perf_counter()
        prepared[n] = call.prepare(nodes)
        aggregate_s = time.perf_counter() - t0
        wall, cpu, report = _time(call, prepared[n], _repeat_for(n, quick))
        walls[n] = wall
        verdicts[n] = _verdicts(report, nodes)
        sb = SUPERBENCH_S.get(n)
        total, blocked, _ = verdicts[n]
        rows.append(
            (
                f"{n:,}",
                timing_cell(wall),
                timing_cell(cpu),
                f"{wall.median / n * 1e3:.2f} ms",
                f"{blocked['healthy']}/{total['healthy']}",
                f"{sum(blocked.values()) - blocked['healthy']}/{sum(total.values()) - total['healthy']}",
                fmt_s(aggregate_s),
                f"{sb:.0f} s" if sb else "",
            )
        )
        numbers[f"judge_{n}_s"] = wall.median
        numbers[f"judge_{n}_cpu_s"] = cpu.median
    big, mid = max(sizes), (1024 if 1024 in sizes else sorted(sizes)[-2] if len(sizes) > 1 else max(sizes))
    maxrss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child_rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    serial = replace(call, workers=1)
    serial_wall, serial_cpu, _ = _time(serial, prepared[mid], 1)
    gc.collect()
    tracemalloc.start()
    serial.run(prepared[mid])
    _, traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    load = load_cost(fleet)
    growth = (walls[big].median / big) / (walls[mid].median / mid)
    estimate_mib = traced / 2**20 * big / mid
    numbers.update(
        {
            f"judge_{big}_estimated_peak_mib": estimate_mib,
            "process_peak_rss_mib": maxrss_mib,
            "worker_peak_rss_mib": child_rss_mib,
            f"judge_{mid}_serial_s": serial_wall.median,
            f"judge_{mid}_tracemalloc_peak_mib": traced / 2**20,
            "load_per_document_s": load.median,
            "growth": growth,
        }
    )
    total, blocked, rules = verdicts[big]
    kinds = sorted(total, key=lambda k: (k != "healthy", k))
    body = [
        f"Fleet: {len(fleet):,} nodes derived in {derive_s:.1f} s from one real-format node (fake 8x MI300X, "
        "real capture, builder and CVF phases 0-5 through the local executor): per node and side 8 GPUs, "
        f"8 NICs and {fleetgen.describe(tpl)}, 3% run-to-run noise; plan ROCm {fleetgen.FROM_ROCM} → "
        f"{fleetgen.TO_ROCM}; candidates: "
        + ", ".join(f"{k} {total[k]}" for k in kinds)
        + ". Timed: `judge(...)` with the shipped default policy, as `gate` calls it (`include_changes` on, "
        f"class references aggregated beforehand). The first call in a process took {fmt_s(first_s)} (it imports "
        "scipy); the timings below are of warm calls.\n",
        table(
            (
                "nodes",
                "judge(...) wall, median (min–max)",
                "CPU (with forked workers)",
                "wall per node",
                "healthy blocked",
                "faulty blocked",
                "class reference (aggregate_class)",
                "SuperBench end to end (issue 14, not measured here)",
            ),
            rows,
        ),
        "",
        f"Growth: wall time per node at {big:,} is {growth:.2f}x that at {mid:,} (1.00 = linear). The judge forks "
        f"one worker per core from {_parallel_min()} candidates on; the same {mid:,}-node call serially "
        f"(`workers=1`): {fmt_s(serial_wall.median)} wall, {fmt_s(serial_cpu.median)} CPU.",
        f"Memory: the Python allocation peak of one serial {mid:,}-node judge call is {traced / 2**20:.1f} MiB "
        f"(tracemalloc, inputs excluded; the report with its changes is most of it), so ~{estimate_mib:.0f} MiB at "
        f"{big:,} nodes (per-node results, linear; tracing a {big:,}-node call would take minutes). Peak RSS: "
        f"this process {maxrss_mib:.0f} MiB with the {2 * big:,} input snapshots in memory, the largest forked "
        f"worker {child_rss_mib:.0f} MiB (it shares the inputs' pages with the parent until it touches them) "
        f"(SuperBench end to end: {SUPERBENCH_MIB_8192} MiB for 8,192 nodes, quoted from issue 14).",
        f"Reading one snapshot document back (JSON + schema check + decode, as `gate` does): {timing_cell(load)}; "
        f"for 2 x {big:,} documents ~{fmt_s(load.median * 2 * big)} on top of the judge call (SuperBench's "
        "figure includes its file reading and ~2 s of start-up).",
        f"\nVerdicts at {big:,} nodes, per injected fault (blocked/total): "
        + ", ".join(f"{k} {blocked[k]}/{total[k]}" for k in kinds)
        + ".\n\nBlocking rules (nodes): "
        + ", ".join(f"`{k}` {v}" for k, v in sorted(rules.items())),
    ]
    met_time = walls[big].median <= TARGET_8192_S * big / 8192
    if not met_time or growth > 1.3:
        n_prof = min(256, big)
        inputs = prepared.get(n_prof) or call.prepare(fleet[:n_prof])
        body.append(
            f"\nProfile of one serial (`workers=1`, so the profiler sees the work) {n_prof}-node judge call "
            "(warm):\n\n" + profile(serial, inputs)
        )
    faulty_total = sum(total.values()) - total["healthy"]
    faulty_blocked = sum(blocked.values()) - blocked["healthy"]
    targets = (
        Target(
            name=f"judge {big:,} nodes",
            goal=f"≤ {TARGET_8192_S:.0f} s on 2 cores",
            measured=f"{fmt_s(walls[big].median)} wall",
            met=met_time,
        ),
        Target(
            name=f"judge growth {mid:,} → {big:,}",
            goal="linear (per-node time ratio ≤ 1.3)",
            measured=f"{growth:.2f}x",
            met=growth <= 1.3,
        ),
        Target(
            name=f"judge memory at {big:,} nodes",
            goal=f"reported (SuperBench {SUPERBENCH_MIB_8192} MiB, issue 14)",
            measured=f"~{estimate_mib:.0f} MiB judge allocations; peak RSS {maxrss_mib:.0f} MiB (parent, with inputs), "
            f"{child_rss_mib:.0f} MiB (largest worker)",
            met=True,
        ),
        Target(
            name="judge verdicts on the derived fleet (3% noise)",
            goal="every fault blocked, no healthy node blocked",
            measured=f"{blocked['healthy']}/{total['healthy']} healthy blocked, "
            f"{faulty_blocked}/{faulty_total} faulty blocked",
            met=blocked["healthy"] == 0 and faulty_blocked == faulty_total,
        ),
    )
    return Section(title="Judge scale", body="\n".join(body), targets=targets, numbers=numbers)


def main() -> None:
    """Run alone: `python -m bench.bench_judge [--quick] [SIZES...]`."""
    from bench.common import REPO

    workdir = REPO / "bench" / "out"
    workdir.mkdir(exist_ok=True)
    sizes = tuple(int(a) for a in sys.argv[1:] if a.isdigit()) or SIZES
    print_section(run(quick="--quick" in sys.argv, workdir=workdir, sizes=sizes))


if __name__ == "__main__":
    main()
