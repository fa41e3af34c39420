"""The baseline store after schema v2 (issue 29): `baseline save` and `baseline migrate` of a fleet, the
bytes per node in the repository, loose and packed.

Design decisions
- The fleet is `bench.bench_store_save`'s: N real-format v1 snapshot files (as captures are written),
  reused under bench/out/save-fleet/. Both commands run end to end as an operator runs them, each in its
  own wrapper process that reports its peak RSS and CPU (`getrusage(RUSAGE_CHILDREN)`), beside wall.
- `save`: `baseline save --snapshots LIST --tag t1` into a new store, which converts each v1 file to v2
  as it saves it (the store's form).
- `migrate`: a v1 store of the same fleet, built as a release before v2 saved it (the same files
  committed as they are, one commit, through the store's own commit machinery: no new code path), then
  `baseline migrate`. Its commit is checked: every node v2, each decoding to what the v1 one does.
- Bytes per node: the nodes' loose objects as the store wrote them (zlib 1), then after `git gc` (zlib 6
  and deltas; the pack's size over N) for the v1 store, the migrated store (v1 and v2 both in history),
  and the saved v2 store.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from pathlib import Path

from bench.bench_store_save import build_files
from bench.common import PYTHON, REPO

_RUN = (
    "import resource, subprocess, sys\n"
    "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
    "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(u.ru_maxrss, u.ru_utime + u.ru_stime)\n"
    "sys.exit(rc)\n"
)


def command(argv: list[str]) -> dict[str, float]:
    """Run `upgrade-gate argv` in a wrapper: wall s, CPU s, peak RSS MiB (exit non-zero: stop)."""
    start = time.monotonic()
    done = subprocess.run(
        [PYTHON, "-c", _RUN, PYTHON, "-m", "upgrade_gate", *argv], cwd=REPO, capture_output=True, text=True
    )
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:2])} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    peak, cpu = done.stdout.split()[-2:]
    return {"wall_s": wall, "cpu_s": float(cpu), "peak_mib": int(peak) / 1024}


def v1_store(files: Path, names: list[str], store: Path) -> None:
    """The fleet committed as it is (v1), one commit, as a save before schema v2 did."""
    from upgrade_gate.store.documents import Stored
    from upgrade_gate.store.gitstore import BaselineStore

    with BaselineStore(store) as st:
        st.init()
        blobs = {f"nodes/{n}": Stored(st._objs.store_unlocked(b"blob", (files / n).read_bytes())) for n in names}
        st._write(lambda: dict(blobs), f"save {len(names)} node(s) (schema v1)", tag="v1")


def node_bytes(store: Path) -> tuple[float, float]:
    """(loose KiB per node of nodes/ at HEAD, and after `git gc` the pack's KiB per node)."""
    names = subprocess.run(
        ["git", "ls-tree", "HEAD", "nodes/"], cwd=store, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    total = 0
    for line in names:
        sha = line.split()[2]
        total += (store / ".git" / "objects" / sha[:2] / sha[2:]).stat().st_size
    subprocess.run(["git", "gc", "-q"], cwd=store, check=True)
    pack = sum(p.stat().st_size for p in (store / ".git" / "objects" / "pack").glob("*.pack"))
    return total / len(names) / 1024, pack / len(names) / 1024


def main() -> None:
    """One line per measurement for --nodes N."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    args = ap.parse_args()
    n = args.nodes
    files = build_files(args.workdir, n)
    names = sorted(p.name for p in files.iterdir())[:n]
    work = args.workdir / "store-v2" / str(n)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    listing = work / "list.txt"
    listing.write_text("".join(f"{files / x}\n" for x in names), encoding="utf-8")

    saved = command(["baseline", "save", "--store", str(work / "saved"), "--snapshots", str(listing), "--tag", "t1"])
    print(f"{n} nodes: baseline save (v1 files -> v2 store): {saved}", flush=True)
    v1_store(files, names, work / "v1")
    shutil.copytree(work / "v1", work / "migrated", symlinks=True)
    migrated = command(["baseline", "migrate", "--store", str(work / "migrated")])
    print(f"{n} nodes: baseline migrate (v1 store -> v2): {migrated}", flush=True)
    check(work / "v1", work / "migrated", names)
    for label in ("v1", "migrated", "saved"):
        loose, packed = node_bytes(work / label)
        print(f"{n} nodes: {label} store: {loose:.2f} KiB/node loose at HEAD, {packed:.2f} KiB/node packed", flush=True)


def check(v1: Path, migrated: Path, names: list[str]) -> None:
    """Every migrated node is v2 and decodes to what its v1 document does (a sample of 64 nodes)."""
    from upgrade_gate.snapshot.io import decode_snapshot, schema_version

    for name in names[:: max(1, len(names) // 64)]:
        old = subprocess.run(["git", "show", f"HEAD:nodes/{name}"], cwd=v1, capture_output=True, check=True).stdout
        new = subprocess.run(["git", "show", f"HEAD:nodes/{name}"], cwd=migrated, capture_output=True, check=True)
        assert schema_version(new.stdout) == "2" and schema_version(old) == "1", name
        assert decode_snapshot(new.stdout, source=name) == decode_snapshot(old, source=name), name


if __name__ == "__main__":
    main()
