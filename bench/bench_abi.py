"""`upgrade-gate abi`: Debian's real ROCm libraries against themselves, and a large tree cold vs cached.

Design decisions
- Part 1 is the issue's acceptance run: the real ROCm libraries Debian ships (libamdhip64-5,
  libhsa-runtime64-1, librocm-smi64-1, and libamd-comgr2 / libhsakmt1 where installed) compared with
  themselves through the console script, `libamdhip64` also checked as a consumer of the others.
  Verdict and wall time, cold (empty cache) and warm (cache filled by the cold run).
- Part 2 scales the tree: N copies of the same libraries, each made distinct by one appended byte (a
  new file hash, the same symbol tables), so the cache cannot share entries between copies and every
  copy is hashed and parsed. Cold with one reader process vs one per core, then warm. ROCm's real
  lib folder holds a few hundred shared objects (its thousands of files are mostly rocBLAS/Tensile
  code objects and data, which the scan skips by name without reading).
- Targets are reported, never asserted (bench/common.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO, Section, Target, fmt_s, machine, print_section, table

DEBIAN = (
    "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5",
    "/usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1",
    "/usr/lib/librocm_smi64.so.1",
    "/usr/lib/x86_64-linux-gnu/libamd_comgr.so.2",
    "/usr/lib/x86_64-linux-gnu/libhsakmt.so.1",
)
TARGET_REAL_S = 10.0  # cold, Debian's libraries against themselves, on the shared 2-core box
TARGET_WARM_S = 2.0


def _debian_tree(root: Path) -> list[Path]:
    root.mkdir(parents=True)
    found = [Path(p) for p in DEBIAN if Path(p).exists()]
    for path in found:
        (root / path.name).symlink_to(path.resolve())
    return found


def _cli(args: list[str], cache: Path) -> tuple[float, int, str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "NO_COLOR": "1"}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "upgrade_gate", *args], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    return time.perf_counter() - start, proc.returncode, proc.stdout + proc.stderr


def _big_tree(root: Path, libs: list[Path], copies: int) -> tuple[int, int]:
    root.mkdir(parents=True)
    files = size = 0
    for i in range(copies):
        for lib in libs:
            data = lib.read_bytes() + bytes([i % 251])  # a distinct hash, the same symbol tables
            stem = lib.name.split(".so")[0]
            (root / f"{stem}_{i:04d}.so.1").write_bytes(data)
            files += 1
            size += len(data)
    return files, size


def run(*, quick: bool = False, workdir: Path | None = None) -> Section:
    """Measure and return the section (also printed by `python -m bench.bench_abi`)."""
    own = workdir is None
    base = Path(tempfile.mkdtemp(prefix="bench-abi-")) if workdir is None else workdir / "abi"
    try:
        return _measure(base, quick=quick)
    finally:
        if own:
            shutil.rmtree(base, ignore_errors=True)


def _measure(base: Path, *, quick: bool) -> Section:
    tree = base / "debian"
    libs = _debian_tree(tree)
    if len(libs) < 3:
        return Section(title="abi (bench/bench_abi.py)", body="Debian's ROCm libraries are not installed.")
    hip = str(Path(DEBIAN[0]).resolve())
    args = ["abi", "--running", str(tree), "--candidate", str(tree), "--consumer", hip]
    cold_s, cold_rc, cold_out = _cli(args, base / "cache-real")
    warm_s, warm_rc, _ = _cli(args, base / "cache-real")
    verdict = "PASS" if cold_rc == 0 and "PASS" in cold_out else f"exit {cold_rc}"
    rows = [
        ["Debian ROCm libs vs themselves, cold cache", len(libs), verdict, fmt_s(cold_s)],
        ["the same, warm cache", len(libs), "PASS" if warm_rc == 0 else f"exit {warm_rc}", fmt_s(warm_s)],
    ]
    numbers: dict[str, object] = {"real_cold_s": cold_s, "real_warm_s": warm_s, "real_verdict": verdict}
    small = [p for p in libs if "comgr" not in p.name]  # comgr is 63 MB of LLVM: keep the big tree on disk budget
    copies = 4 if quick else 25
    big = base / "big"
    files, size = _big_tree(big, [p.resolve() for p in small], copies)
    big_args = ["abi", "--running", str(big), "--candidate", str(big)]
    for label, extra, cache in (
        ("large tree, cold, 1 reader process", ["--workers", "1"], "cache-big-1"),
        (f"large tree, cold, {os.cpu_count()} reader processes", [], "cache-big-n"),
        (f"large tree, warm cache, {os.cpu_count()} processes", [], "cache-big-n"),
    ):
        seconds, rc, _out = _cli([*big_args, *extra], base / cache)
        rows.append([label, files, "PASS" if rc == 0 else f"exit {rc}", fmt_s(seconds)])
        numbers[label] = seconds
    shutil.rmtree(big, ignore_errors=True)
    body = "\n\n".join(
        [
            table(["run", "shared objects", "verdict", "wall time"], rows),
            f"Large tree: {files} files, {size / 1e6:.0f} MB ({copies} distinct copies of "
            f"{', '.join(p.name for p in small)}). Machine: " + ", ".join(f"{k} {v}" for k, v in machine().items()),
        ]
    )
    targets = (
        Target(
            name="abi, Debian ROCm libraries vs themselves (cold)",
            goal=f"PASS in < {TARGET_REAL_S:.0f} s",
            measured=f"{verdict} in {fmt_s(cold_s)}",
            met=verdict == "PASS" and cold_s < TARGET_REAL_S,
        ),
        Target(
            name="abi, same run from the cache",
            goal=f"< {TARGET_WARM_S:.0f} s",
            measured=fmt_s(warm_s),
            met=warm_rc == 0 and warm_s < TARGET_WARM_S,
        ),
    )
    return Section(title="abi (bench/bench_abi.py)", body=body, targets=targets, numbers=numbers)


if __name__ == "__main__":
    print_section(run(quick="--quick" in sys.argv))
