"""Bundle -> snapshot for one 8-GPU node, in process and through `upgrade-gate snapshot BUNDLE`.

Design decisions
- The bundle is captured once from a fake 8x MI300X node (`upgrade_gate.fakenode`, real-format
  outputs) with the same capture code as a real node, written as a directory bundle, then read back
  many times: the measured path is exactly `snapshot_from_bundle(path)` (read + parse + join), plus
  `build_snapshot(bundle)` alone (parse + join, no file reads) to split the cost.
- When the in-process median is over the 50 ms target, a cProfile of repeated builds is included
  (top functions by own time and by cumulative time) so the owner of the slow part sees it.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import REPO, Section, Target, fmt_s, print_section, table, time_runs, time_runs_cpu, timing_cell

TARGET_S = 0.050
NODE = "gpu-node-01"


def capture_fake_bundle(workdir: Path) -> Path:
    """Capture a fake healthy 8-GPU node into a directory bundle under `workdir`; return its path."""
    from upgrade_gate.cli.collect_cmds import parser_check
    from upgrade_gate.collect.bundle import write_bundle
    from upgrade_gate.collect.capture import capture
    from upgrade_gate.collect.runner import LocalRunner
    from upgrade_gate.fakenode import build_fake_node, mi300x_node

    node = build_fake_node(workdir / "node", mi300x_node(NODE, seed=1))
    bundle = capture(
        LocalRunner(env=node.env(os.environ)), node=NODE, host_root=node.host_root, output_check=parser_check()
    )
    return write_bundle(bundle, workdir / "bundle")


def profile_text(fn: object, *, calls: int, top: int = 15) -> str:
    """cProfile of `calls` calls of `fn`: top functions by own time and by cumulative time."""
    assert callable(fn)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    out = []
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(key).print_stats(top)
        lines = buf.getvalue().splitlines()
        start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls")), 0)
        out.append(f"By {key} ({calls} calls):\n\n```\n" + "\n".join(lines[start:]).rstrip() + "\n```")
    return "\n\n".join(out)


def run(*, repeat: int = 30, cli_repeat: int = 5, workdir: Path | None = None) -> Section:
    """Measure bundle -> snapshot; return the RESULTS.md section."""
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="ug-bench-snap-") as tmp:
            return run(repeat=repeat, cli_repeat=cli_repeat, workdir=Path(tmp))
    from upgrade_gate.collect.bundle import load_bundle
    from upgrade_gate.snapshot.build import build_snapshot, snapshot_from_bundle

    path = capture_fake_bundle(workdir)
    bundle = load_bundle(path)
    snap = snapshot_from_bundle(path)
    full, full_cpu = time_runs_cpu(
        lambda: snapshot_from_bundle(path), repeat=repeat, warmup=2, label="snapshot_from_bundle"
    )
    build, build_cpu = time_runs_cpu(lambda: build_snapshot(bundle), repeat=repeat, warmup=2, label="build_snapshot")
    load, load_cpu = time_runs_cpu(lambda: load_bundle(path), repeat=repeat, warmup=2, label="load_bundle")
    cli = Path(sys.executable).parent / "upgrade-gate"
    out_file = workdir / "snap.json"
    cli_argv = [str(cli), "snapshot", str(path), "--out", str(out_file)]
    cli_t = time_runs(
        lambda: subprocess.run(cli_argv, cwd=REPO, capture_output=True, check=True),
        repeat=cli_repeat,
        warmup=1,
        label="cli",
    )
    rows = [
        ("`snapshot_from_bundle(path)` in process (read + parse + join)", timing_cell(full), timing_cell(full_cpu)),
        ("`load_bundle(path)` alone (read the directory)", timing_cell(load), timing_cell(load_cpu)),
        ("`build_snapshot(bundle)` alone (parse + join)", timing_cell(build), timing_cell(build_cpu)),
        ("`upgrade-gate snapshot BUNDLE --out FILE` (fresh process, includes start-up)", timing_cell(cli_t), ""),
    ]
    body = [
        f"Bundle: fake healthy 8x MI300X node with 8 NICs, {len(bundle.records)} probe records, "
        f"{sum(len(r.result.stdout) for r in bundle.records) // 1024} KiB of tool output; snapshot: "
        f"{len(snap.gpus)} GPUs, {len(snap.nics)} NICs, {len(snap.gpu_links)} GPU links, "
        f"{len(snap.pcie)} PCIe links.\n",
        table(("what", "wall, median (min–max)", "CPU"), rows),
    ]
    met = full.median <= TARGET_S
    if not met:
        body.append("\nOver target, so profiled (`snapshot_from_bundle`, repeated):\n")
        body.append(profile_text(lambda: snapshot_from_bundle(path), calls=10))
    target = Target(
        name="bundle → snapshot, one 8-GPU node (in process)",
        goal=f"≤ {fmt_s(TARGET_S)}",
        measured=f"{fmt_s(full.median)} wall ({fmt_s(full_cpu.median)} CPU)",
        met=met,
    )
    numbers: dict[str, object] = {
        "snapshot_from_bundle_s": full.median,
        "snapshot_from_bundle_cpu_s": full_cpu.median,
        "load_bundle_s": load.median,
        "build_snapshot_s": build.median,
        "cli_snapshot_s": cli_t.median,
    }
    return Section(title="Bundle → snapshot (8-GPU node)", body="\n".join(body), targets=(target,), numbers=numbers)


def main() -> None:
    """Run alone: `python -m bench.bench_snapshot [REPEAT]`."""
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    print_section(run(repeat=repeat))


if __name__ == "__main__":
    main()
