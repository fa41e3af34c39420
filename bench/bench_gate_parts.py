"""`gate`'s path at fleet scale split into its parts, the judge's rules aside (issue 29).

`python -m bench.bench_gate_parts --nodes 1024 [--start-runs 3] [--json OUT]` times, in one process
and node by node, each step a `gate` worker and its parent take for a node (`cli.gate_stream`), on the
first N candidates of the bench fleet (`bench.bench_gate.build_fleet`, bench/out/gate-fleet):

- read (`docio.read_bytes` of the candidate file), decode (strict typed decode, `snapshot.io.
  decode_snapshot`), store (`BaselineStore.load_trusted`: tree lookup and the decoded-baseline cache),
  judge (`judge.judge_nodes`, the rules: P2's part, here to weigh the rest against), causes
  (`judge.causes.node_causes`), report (the node's summary line and its JSON text: `node_line`,
  `report.json_report.node_body`), transfer (msgpack of the results, encoded as a worker does and
  decoded as the parent does), spool (the parent's `Spool.put`), release (the batch's snapshots
  dropped), and at the end write (`write_json_texts` from the spool).
- Once per gate: start (a fresh `python -c 'import upgrade_gate.cli.main'`, and a whole `gate` of one
  candidate: imports, store, policy, one node, report; the least of a few runs),
  listing (`cli.candidates.candidate_paths` of the list file), pin/references (`pin`, `nodes`,
  `saved_references`, `current_denylist`).

The measure is process CPU (`time.process_time`) around each step; the total is beside the sum of
the steps. `--form v2` reads the candidates from `candidates-v2/` (`bench.bench_gate_scale --forms v2`
writes it: the same snapshots as schema v2) instead of the v1 files of `candidates/`. Nothing is forked, so
the fork, the pipes and the workers' waits are not here (`bench.bench_gate` measures the whole).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import time
from collections import defaultdict
from pathlib import Path

from bench.bench_gate import NOW, build_fleet
from bench.common import PYTHON, REPO

OUT = REPO / "bench" / "out"


def start_cpu(runs: int) -> float:
    """The least CPU of a fresh interpreter importing the CLI (children's rusage)."""
    import resource

    best = float("inf")
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([PYTHON, "-P", "-c", "import upgrade_gate.cli.main"], cwd=REPO, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return best


def one_node_gate_cpu(runs: int) -> float:
    """The least CPU of a whole `gate` over the fleet's first candidate, with this process's PYTHONPATH
    (so a `git archive` tree given there is the one measured)."""
    import resource

    root = build_fleet(OUT, 1)
    first = sorted(os.listdir(root / "candidates"))[0]
    argv = [PYTHON, "-P", "-m", "upgrade_gate", "gate", "--store", str(root / "store"), "--candidate"]
    argv += [str(root / "candidates" / first), "--plan", str(root / "plan.json"), "--now", NOW]
    argv += ["--report", f"json:{OUT / 'parts-1.json'}"]
    best = float("inf")
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(argv, cwd=REPO, capture_output=True, env={**os.environ, "NO_COLOR": "1"})
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode not in (0, 1):
            raise RuntimeError(f"gate exited {done.returncode}: {done.stderr[-400:]!r}")
        best = min(best, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return best


def parts(n: int, *, form: str) -> dict[str, float]:
    """CPU seconds per part over the first n candidates (module docstring)."""
    import msgspec

    from upgrade_gate import docio
    from upgrade_gate.cli import gate_stream as gs
    from upgrade_gate.cli.candidates import candidate_paths
    from upgrade_gate.judge.causes import node_causes
    from upgrade_gate.judge.judge import BATCH, judge_nodes
    from upgrade_gate.judge.plan import load_plan
    from upgrade_gate.judge.policy import load_policy
    from upgrade_gate.judge.rules.evidence import read_clock
    from upgrade_gate.model import replace
    from upgrade_gate.report.json_report import node_body, write_json_texts
    from upgrade_gate.snapshot.io import MAX_SNAPSHOT_BYTES, decode_snapshot
    from upgrade_gate.store.gitstore import BaselineStore
    from upgrade_gate.store.inputs import current_denylist, saved_references

    root = build_fleet(OUT, n)
    names = sorted(os.listdir(root / "candidates"))[:n]
    listing = root / f"parts-{n}.txt"
    folder = {"v1": "candidates", "v2": "candidates-v2"}[form]
    listing.write_text("".join(f"{root}/{folder}/{x}\n" for x in names), encoding="utf-8")
    cost: dict[str, float] = defaultdict(float)
    clock = time.process_time

    def timed(part: str, t0: float) -> float:
        now = clock()
        cost[part] += now - t0
        return now

    t_all = t = clock()
    paths = candidate_paths([], [listing])
    t = timed("listing", t)
    plan = load_plan(root / "plan.json")
    policy = load_policy(None, None, cvf_source="")
    t = timed("plan, policy", t)
    st = BaselineStore(root / "store")
    pin = st.pin(None)
    stored = frozenset(st.nodes(pin))
    references = saved_references(st, pin)
    denylist = current_denylist(st)
    t = timed("pin, nodes, references, denylist", t)
    encoder = msgspec.msgpack.Encoder()
    decoder = gs._decoder(True)
    from upgrade_gate.judge.judge import fleet_gc

    with gs.Spool() as spool, fleet_gc():  # the workers' collector settings (`gate_stream._run`)
        lines = []
        t_loop = t = clock()
        for start in range(0, len(paths), BATCH):
            pairs = []
            for p in paths[start : start + BATCH]:
                t = clock()
                data = docio.read_bytes(p, limit=MAX_SNAPSHOT_BYTES)
                t = timed("read candidate", t)
                cand = decode_snapshot(data, source=str(p))
                t = timed("decode candidate", t)
                base = st.load_trusted(cand.node.name, pin) if cand.node.name in stored else None
                t = timed("store read (decoded cache)", t)
                pairs.append((cand, base))
            judged = judge_nodes(
                pairs, plan=plan, policy=policy, references=references, denylist=denylist, clock=read_clock()
            )
            t = timed("judge (rules; P2)", t)
            items = []
            for (cand, base), (report, ran) in zip(pairs, judged, strict=True):
                t = clock()
                report = replace(report, causes=node_causes(report, base, cand))
                t = timed("causes", t)
                cls = cand.node.node_class
                items.append((gs.node_line(report), ran, "p", cls, True, node_body(report)))
                t = timed("report: line and JSON text", t)
            wire = encoder.encode(items)
            back = decoder.decode(wire)
            t = timed("transfer (msgpack both ways)", t)
            for item in back:
                lines.append((item[0], spool.put(item[5])))
            t = timed("spool", t)
            del pairs, judged, items
            t = timed("release snapshots", t)
        loop = clock() - t_loop
        t = clock()
        from upgrade_gate.model import GateReport, Verdict

        skeleton = GateReport(verdict=Verdict.BLOCK, generated_at=NOW, tool_version="bench")
        write_json_texts(skeleton, spool.texts(w for _, w in lines), OUT / f"parts-{n}.json")
        timed("report write", t)
    cost["(loop, sum of its parts)"] = sum(v for k, v in cost.items() if k not in ("listing", "plan, policy"))
    cost["(loop, measured)"] = loop
    cost["(all, measured)"] = clock() - t_all
    st.close()
    return dict(cost)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--form", choices=("v1", "v2"), default="v1", help="the candidate files: v1 or v2")
    ap.add_argument("--start-runs", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    gc.collect()
    result: dict[str, float] = {}
    if args.start_runs:
        result["start (fresh import of the CLI)"] = start_cpu(args.start_runs)
        result["a whole 1-node gate (start, setup, 1 node)"] = one_node_gate_cpu(args.start_runs)
    result.update(parts(args.nodes, form=args.form))
    for part, cpu in result.items():
        print(f"{part:40s} {cpu:8.3f} s  {1e6 * cpu / args.nodes:8.1f} us/node")
    print("load average", os.getloadavg())
    if args.json:
        args.json.write_text(json.dumps({"nodes": args.nodes, "form": args.form, "cpu_s": result}, indent=1))


if __name__ == "__main__":
    main()
