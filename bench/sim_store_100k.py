"""A baseline store of 100,000 nodes, simulated on this machine (issue 29's fleet-scale plan, docs/scale.md).

Design decisions
- Real store, real git, real code paths: a `BaselineStore` and its own commit machinery (`_write` with
  blobs already in the object database, as `save_stream` commits), `nodes()` to list, `load_trusted` to
  read one node, `save` of one node on top. Only the documents are cheap: `--distinct` real v2 baselines
  of `bench.fleetgen` (serialised once with the store's writer), each node's blob one of them with its
  node name put in (so every blob is distinct, named right, and the size git sees per node is a real
  v2 document's). What the git side costs (trees, index, working tree, listing) depends on the number
  of entries and on their sizes, not on the noise inside the samples; the pack's delta compression does
  depend on it, so packed bytes per node are taken from bench/bench_store_v2.py's real fleets instead.
- Steps timed separately, CPU (this process and its git children) beside wall: writing the blobs, the
  commit of all N (tree, commit, ref), the working-tree mirror (checkout-equivalent of N files), the
  listing, one node's trusted read (cold, then from the decoded cache), a one-node save on top (what a
  single node's re-baseline costs in a 100k store: its new nodes/ tree is the size of the whole listing).
- The repository's size: loose objects, the working tree, the `nodes/` tree object.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import fleetgen
from bench.common import REPO


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@contextmanager
def step(label: str, out: dict[str, Any]) -> Iterator[None]:
    cpu, wall = _cpu(), time.perf_counter()
    yield
    out[label] = {"wall_s": round(time.perf_counter() - wall, 2), "cpu_s": round(_cpu() - cpu, 2)}
    print(f"{label}: {out[label]}", flush=True)


def templates(distinct: int, workdir: Path) -> list[tuple[str, str]]:
    """(node name, v2 text) of `distinct` real baselines."""
    from bench.bench_judge import template
    from upgrade_gate.snapshot.io import dumps_snapshot

    tpl = template(workdir, reuse=True)
    return [(str(n.name), dumps_snapshot(n.baseline, version="2")) for n in fleetgen.derive_fleet(tpl, distinct)]


def du(path: Path) -> int:
    return int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def main() -> None:
    from upgrade_gate.model import replace
    from upgrade_gate.store.documents import Stored
    from upgrade_gate.store.gitstore import BaselineStore

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--distinct", type=int, default=64)
    ap.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    ap.add_argument("--keep", action="store_true", help="keep the store (it is GBs)")
    args = ap.parse_args()
    n = args.nodes
    store = args.workdir / "sim-100k" / f"store-{n}"
    shutil.rmtree(store, ignore_errors=True)
    out: dict[str, Any] = {"nodes": n}
    docs = templates(args.distinct, args.workdir)
    names = [f"gpu-node-{i:06d}" for i in range(n)]
    blobs: dict[str, Stored] = {}
    with BaselineStore(store) as st:
        st.init()
        with step("write N blobs (serialised form given)", out):
            for i, name in enumerate(names):
                old, text = docs[i % len(docs)]
                data = text.replace(f'"name": "{old}"', f'"name": "{name}"', 1).encode()
                blobs[f"nodes/{name}.json"] = Stored(st._objs.store_unlocked(b"blob", data))
        hooks: dict[str, float] = {}
        start = time.perf_counter()

        def hook(point: str) -> None:
            hooks[point] = round(time.perf_counter() - start, 2)

        with step("commit N nodes (tree, commit, ref, working-tree mirror)", out):
            st._write(lambda: dict(blobs), f"save {n} node(s)", tag="t1", hook=hook)
        out["commit_points_s"] = hooks
        print(f"commit points (s from start): {hooks}", flush=True)
        blobs.clear()
    with BaselineStore(store) as st:
        with step("list nodes (cold process state)", out):
            listed = st.nodes()
        assert len(listed) == n
        pinned = st.pin()
        with step("load_trusted one node (cache miss: strict decode)", out):
            st.load_trusted(names[n // 2], pinned)
        with step("load_trusted one node (decoded-cache hit)", out):
            st.load_trusted(names[n // 2], pinned)
        loaded = st.load(names[7])
        snap = replace(loaded, software=replace(loaded.software, rocm_version="6.2.0"))  # a changed baseline
        before = du(store / ".git")
        with step("save one node on top (re-baseline)", out):
            st.save([snap])
        out["one_node_save_git_bytes"] = du(store / ".git") - before
    tree = subprocess.run(["git", "rev-parse", "HEAD:nodes"], cwd=store, capture_output=True, text=True).stdout
    size = subprocess.run(["git", "cat-file", "-s", tree.strip()], cwd=store, capture_output=True, text=True)
    out["nodes_tree_bytes"] = int(size.stdout)
    out["git_dir_bytes"] = du(store / ".git")
    out["index_bytes"] = (store / ".git" / "index").stat().st_size
    out["working_tree_nodes_bytes"] = du(store / "nodes")
    print(json.dumps(out, indent=2), flush=True)
    (args.workdir / "sim-100k" / f"result-{n}.json").write_text(json.dumps(out, indent=2) + "\n")
    if not args.keep:
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
