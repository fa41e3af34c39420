"""Snapshot schema v1 against v2 (issue 29): bytes per node, raw and compressed, and decode cost.

Design decisions
- The documents are `bench.fleetgen`'s real-format 8x MI300X baselines (CVF phases 0-5, 5 samples a
  metric at 3% noise, as the detection benches use), written by the real writers:
  `dumps_snapshot(s)` (v1) and `dumps_snapshot(s, version="2")` (v2).
- Compressed as git stores an object: zlib level 1 (what the store's own blob writer uses, a loose
  object) and level 6 (git's default `core.compression`, what `git gc` packs before deltas).
- The samples' other candidate form, base64 of little-endian float64 per metric, is measured on the same
  documents by replacing each `samples` column in the v2 document before serialising (not a reader:
  the decision in model/columnar.py rests on these numbers).
- Decode per document, CPU (`time.process_time`) beside wall (`time.perf_counter`), best of `--repeat`
  passes over the same `--nodes` documents held in memory (the page cache is not what is measured):
  strict (`decode_snapshot`, the gate's candidates and a store's cache misses), trusted (a document the
  store itself just wrote), the schema-checked reader (`loads_snapshot`: `baseline show`/`diff`, window
  state), and the floor: `orjson.loads` of the same bytes into untyped objects.
- Encode per document (`dumps_snapshot`, with its schema check): what `baseline save` and `migrate` pay.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import struct
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import fleetgen
from bench.common import REPO

FORMS = ("v1", "v2", "v2+base64")


def documents(n: int, workdir: Path) -> tuple[list[Any], dict[str, list[bytes]]]:
    """n baselines and their documents in each form."""
    from bench.bench_judge import template
    from upgrade_gate.snapshot.io import canonical_rows, dumps_snapshot

    tpl = template(workdir, reuse=True)
    snaps = [node.baseline for node in fleetgen.derive_fleet(tpl, n)]
    out: dict[str, list[bytes]] = {form: [] for form in FORMS}
    for snap in snaps:
        out["v1"].append(dumps_snapshot(snap).encode())
        v2 = dumps_snapshot(snap, version="2")
        out["v2"].append(v2.encode())
        out["v2+base64"].append(canonical_rows(_base64(json.loads(v2))).encode())
    return snaps, out


def _base64(document: dict[str, Any]) -> dict[str, Any]:
    def packed(cols: dict[str, Any]) -> None:
        cols["samples"] = [base64.b64encode(struct.pack(f"<{len(s)}d", *s)).decode() for s in cols["samples"]]

    packed(document["measurements"])
    for phase in document["phases"]:
        packed(phase["measurements"])
    return document


def best(fn: Callable[[], None], repeat: int) -> tuple[float, float]:
    """(CPU s, wall s) of the fastest of `repeat` runs of fn."""
    runs = []
    for _ in range(repeat):
        cpu, wall = time.process_time(), time.perf_counter()
        fn()
        runs.append((time.process_time() - cpu, time.perf_counter() - wall))
    return min(runs, key=lambda r: r[0])


def main() -> None:
    """Print the size table and the decode/encode table (markdown) for --nodes documents."""
    import orjson

    from upgrade_gate.snapshot.io import decode_snapshot, dumps_snapshot, loads_snapshot

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workdir", type=Path, default=REPO / "bench" / "out")
    args = ap.parse_args()
    snaps, docs = documents(args.nodes, args.workdir)
    n = len(snaps)
    print(f"{n} bench-fleet baselines (8x MI300X, phases 0-5, 5 samples a metric)\n")
    print("| form | raw bytes/node | zlib 1 (loose object) | zlib 6 (git default) |")
    print("|---|---|---|---|")
    for form in FORMS:
        raw = statistics.mean(len(d) for d in docs[form])
        z1 = statistics.mean(len(zlib.compress(d, 1)) for d in docs[form])
        z6 = statistics.mean(len(zlib.compress(d, 6)) for d in docs[form])
        print(f"| {form} | {raw / 1024:.1f} KiB | {z1 / 1024:.2f} KiB | {z6 / 1024:.2f} KiB |")
    assert all(decode_snapshot(d, source="b") == s for d, s in zip(docs["v2"], snaps, strict=True))
    print(f"\n| per document (best of {args.repeat}) | v1 CPU | v1 wall | v2 CPU | v2 wall | v2/v1 CPU |")
    print("|---|---|---|---|---|---|")
    cases: dict[str, Callable[[bytes], object]] = {
        "strict decode (decode_snapshot)": lambda d: decode_snapshot(d, source="b"),
        "trusted decode (the store's own bytes)": lambda d: decode_snapshot(d, source="b", trusted=True),
        "schema-checked read (loads_snapshot)": lambda d: loads_snapshot(d, source="b"),
        "floor: orjson.loads (untyped)": orjson.loads,
    }
    for label, fn in cases.items():
        row = []
        for form in ("v1", "v2"):
            batch = docs[form]
            cpu, wall = best(lambda batch=batch, fn=fn: [fn(d) for d in batch] and None, args.repeat)
            row.append((cpu / n * 1e6, wall / n * 1e6))
        ratio = row[1][0] / row[0][0]
        print(
            f"| {label} | {row[0][0]:.0f} us | {row[0][1]:.0f} us | {row[1][0]:.0f} us | {row[1][1]:.0f} us | "
            f"{ratio:.2f} |"
        )
    row = []
    for version in ("1", "2"):
        cpu, wall = best(lambda v=version: [dumps_snapshot(s, version=v) for s in snaps] and None, args.repeat)
        row.append((cpu / n * 1e6, wall / n * 1e6))
    print(
        f"| encode with schema check (dumps_snapshot) | {row[0][0]:.0f} us | {row[0][1]:.0f} us | "
        f"{row[1][0]:.0f} us | {row[1][1]:.0f} us | {row[1][0] / row[0][0]:.2f} |"
    )


if __name__ == "__main__":
    main()
