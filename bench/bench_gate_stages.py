"""One `gate` worker's CPU per stage, per node (issue 29): where a node's time goes, end to end.

`python -P -m bench.bench_gate_stages [--nodes 2048] [--form v2] [--repeats 2]`
(another tree: `PYTHONPATH=<tree>:<repo> python -P -m bench.bench_gate_stages ...`; the first line printed
names the package measured)

Design decisions
- The stages are what `cli.gate_stream._judge_paths` does for each `judge.BATCH` of candidates, called
  through the same functions in the same order: the candidate's strict decode (`load_candidate_fast`), its
  baseline from the store (`BaselineStore.load_trusted`: the decoded cache, or git on a miss), the judge
  (`judge.judge_nodes`), the node's causes (`judge.causes.node_causes`), the report text a spooled gate
  sends back (`_spooled`), its msgpack encoding, and the parent's decode of it. `gate` itself adds its
  start-up (~0.4 s), the fork and the report file, which `bench_gate_scale` measures end to end.
- One process, no workers: process CPU time (`time.process_time`) of each stage, summed over the nodes,
  with `judge.fleet_gc` on as in a worker. A first pass fills the decoded cache and the page cache; each
  stage's least total over `--repeats` later passes is kept (the shared box's neighbours only add).
- The fleet is `bench_gate.build_fleet`'s (the one `bench_gate_scale` measures), its candidates in the
  form asked (`v2`: re-encoded once by this tree, as `bench_gate_scale` does), judged with the shipped
  policy and the fleet's plan, the store's saved class references and its denylist: `gate`'s inputs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from bench.bench_gate import build_fleet
from bench.bench_gate_scale import FOLDER, OUT, v2_candidates

STAGES = (
    "candidate decode",
    "baseline read",
    "judge",
    "causes",
    "report text",
    "msgpack encode",
    "parent decode",
)


def measure(root: Path, n: int, form: str) -> dict[str, float]:
    """Seconds of CPU per stage for one pass over the first n candidates of `form`."""
    import msgspec

    from upgrade_gate.cli import gate_stream
    from upgrade_gate.judge.causes import node_causes
    from upgrade_gate.judge.judge import BATCH, judge_nodes
    from upgrade_gate.judge.plan import load_plan
    from upgrade_gate.judge.policy import load_policy
    from upgrade_gate.judge.rules.evidence import read_clock
    from upgrade_gate.model import replace
    from upgrade_gate.store.gitstore import BaselineStore
    from upgrade_gate.store.inputs import current_denylist, saved_references

    names = sorted(os.listdir(root / "candidates"))[:n]
    paths = [root / FOLDER[form] / name for name in names]
    store = BaselineStore(root / "store")
    pin = store.pin(None)
    stored = frozenset(store.nodes(pin))
    references, denylist = saved_references(store, pin), current_denylist(store)
    plan, policy, clock = load_plan(root / "plan.json"), load_policy(None), read_clock()
    decoder = gate_stream._decoder(True)
    spent = dict.fromkeys(STAGES, 0.0)

    @contextlib.contextmanager
    def stage(name: str) -> Iterator[None]:
        begun = time.process_time()
        yield
        spent[name] += time.process_time() - begun

    try:
        for first in range(0, len(paths), BATCH):
            pairs = []
            for path in paths[first : first + BATCH]:
                with stage("candidate decode"):
                    cand = gate_stream.load_candidate_fast(path)
                with stage("baseline read"):
                    name = cand.node.name
                    base = store.load_trusted(name, pin) if name in stored else None
                pairs.append((cand, base))
            with stage("judge"):
                judged = judge_nodes(
                    pairs, plan=plan, policy=policy, references=references, denylist=denylist, clock=clock
                )
            with stage("causes"):
                items = [
                    (replace(report, causes=node_causes(report, b, c)), ran, str(c.node.name), None, True)
                    for (c, b), (report, ran) in zip(pairs, judged, strict=True)
                ]
            with stage("report text"):
                spooled = gate_stream._spooled(items)
            with stage("msgpack encode"):
                encoded = msgspec.msgpack.encode(spooled)
            with stage("parent decode"):
                decoder.decode(encoded)
            del pairs, judged, items, spooled, encoded
    finally:
        store.close()
    return spent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--form", choices=sorted(FOLDER), default="v2")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    import upgrade_gate
    from upgrade_gate.judge.judge import fleet_gc

    print(f"package measured: {Path(upgrade_gate.__file__).parent}")
    root = build_fleet(OUT, args.nodes)
    if args.form == "v2":
        v2_candidates(root, Path(upgrade_gate.__file__).parent.parent)  # the tree measured writes them, if absent
    with fleet_gc():
        measure(root, args.nodes, args.form)  # fills the decoded cache and the page cache
        runs = [measure(root, args.nodes, args.form) for _ in range(args.repeats)]
    least = {stage: min(run[stage] for run in runs) for stage in STAGES}
    print(f"{args.nodes} {args.form} candidates, least of {args.repeats} pass(es), process CPU:")
    for stage in STAGES:
        print(f"  {1e6 * least[stage] / args.nodes:8.1f} us/node  {least[stage]:7.3f} s  {stage}")
    total = sum(least.values())
    print(f"  {1e6 * total / args.nodes:8.1f} us/node  {total:7.3f} s  all")


if __name__ == "__main__":
    main()
