"""The judge's CPU per rule, and the 506-node oracle (issue 29: a judge vectorised across a batch).

`python -m bench.bench_gate_scale_rules [--nodes N] [--oracle-save FILE | --oracle-check FILE]`
(another tree: `PYTHONPATH=<tree>:<repo> python -P -m bench.bench_gate_scale_rules ...`; without `-P`,
`python -m` puts the working folder first on sys.path and measures the checkout whatever PYTHONPATH says;
the first line printed names the package measured)

Design decisions
- Per rule means what `judge.judge_nodes` spends inside each registered rule's `check` over a batch of
  nodes, plus the judge's own parts (the node contexts with their GPU matching, the batch's bandwidth
  statistics `prime_regression`, the diff, `field.unplanned`, the sort). The rules are timed by wrapping
  each registry entry in this process only (bench-only, as `bench._gate_floor` does); process CPU time
  (`time.process_time`) is summed per rule, because the box is shared and wall time would measure the
  neighbours. The nodes are judged in `judge.BATCH`-sized batches, serially, as one `gate` worker does;
  the fleet is generated and judged 1,024 nodes at a time (bounded memory at 8,192), each chunk
  `--repeat` times, and each part's least CPU over the repeats is kept (the run least disturbed).
- The fleet is `bench.fleetgen.derive_fleet(template, N)` (seed 7, every injected fault kind), judged
  with the shipped default policy, the bench's change plan and class references aggregated over the
  fleet's baselines (`bench.judge_api`): the inputs `gate` hands the judge.
- The oracle is the full reports of the 506-node fleet (every finding's rule, severity, device, path,
  message, expected and actual, and each node's changes), as canonical JSON: `--oracle-save` writes it
  from the code before a change, `--oracle-check` compares the code after it, node by node.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from bench import fleetgen
from bench.bench_judge import template
from bench.common import REPO

ORACLE_NODES = 506
CHUNK = 1024


def _fleet(n: int) -> list[fleetgen.FleetNode]:
    return list(fleetgen.derive_fleet(template(REPO / "bench" / "out", reuse=True), n))


def _inputs(nodes: Sequence[fleetgen.FleetNode]) -> tuple[object, object]:
    from bench.judge_api import judge_call

    call = judge_call(workers=1)
    return call, call.prepare(nodes)


def per_rule(n: int, *, repeat: int = 1) -> tuple[dict[str, float], float]:
    """CPU seconds per rule (and per judge part) over `n` nodes judged in batches; the total CPU."""
    import upgrade_gate.judge.judge as judge_mod
    from upgrade_gate.judge.rules.base import RuleSpec
    from upgrade_gate.model import replace

    tpl = template(REPO / "bench" / "out", reuse=True)
    stream = fleetgen.derive_fleet(tpl, n)  # judged CHUNK nodes at a time: 8,192 nodes in bounded memory
    first = [node for _, node in zip(range(min(n, CHUNK)), stream, strict=False)]
    call, inputs = _inputs(first)  # the class references of the first chunk serve every chunk
    spent: dict[str, float] = {}

    def timed(label: str, fn):  # type: ignore[no-untyped-def]
        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            t = time.process_time()
            try:
                out = fn(*args, **kwargs)
                if label.startswith("rule ") and not isinstance(out, list):
                    out = list(out)
                return out
            finally:
                spent[label] = spent.get(label, 0.0) + time.process_time() - t

        return wrapper

    real_registry = judge_mod.REGISTRY
    wrapped: dict[object, RuleSpec] = {}
    for rid, spec in real_registry.items():
        wrapped[rid] = spec if spec.check is None else replace(spec, check=timed(f"rule {rid}", spec.check))
    patches = {
        "REGISTRY": wrapped,
        "_context": timed("judge: contexts (GPU matching)", judge_mod._context),
        "prime_regression": timed("judge: prime_regression (batch statistics)", judge_mod.prime_regression),
        "unplanned_findings": timed("judge: field.unplanned", judge_mod.unplanned_findings),
        "_sorted": timed("judge: sort", judge_mod._sorted),
        "mark_expected": timed("judge: mark_expected", judge_mod.mark_expected),
    }
    if hasattr(judge_mod, "prime_tables"):  # round 4 (issue 29): the batch's sample tables, built once
        patches["prime_tables"] = timed("judge: sample tables (merge, arrays)", judge_mod.prime_tables)
    import contextlib

    import upgrade_gate.judge.diff as diff_mod

    real_prime = judge_mod.prime_regression

    @contextlib.contextmanager
    def primed(contexts):  # type: ignore[no-untyped-def]
        t = time.process_time()
        cm = real_prime(contexts)
        cm.__enter__()
        spent["judge: prime_regression (batch statistics)"] = (
            spent.get("judge: prime_regression (batch statistics)", 0.0) + time.process_time() - t
        )
        try:
            yield
        finally:
            cm.__exit__(None, None, None)

    patches["prime_regression"] = primed
    real_diff = diff_mod.diff_snapshots
    real = {k: getattr(judge_mod, k) for k in patches}
    plan, policy = call.plan, call.policy  # type: ignore[attr-defined]
    references = inputs.references  # type: ignore[attr-defined]
    chunk = [(x.candidate, x.baseline) for x in first]
    judge_mod.judge_nodes(chunk[:16], plan=plan, policy=policy, references=references, denylist={})  # warm
    for k, v in patches.items():
        setattr(judge_mod, k, v)
    diff_mod.diff_snapshots = timed("judge: diff", real_diff)
    best: dict[str, float] = {}
    total = 0.0
    try:
        while chunk:
            per_chunk = float("inf")
            for _ in range(repeat):  # the least CPU of `repeat` runs, per part: the run least disturbed
                spent.clear()
                t = time.process_time()
                with judge_mod.fleet_gc():
                    for i in range(0, len(chunk), judge_mod.BATCH):
                        batch = chunk[i : i + judge_mod.BATCH]
                        judge_mod.judge_nodes(batch, plan=plan, policy=policy, references=references, denylist={})
                per_chunk = min(per_chunk, time.process_time() - t)
                for k, v in spent.items():
                    best[k + "@"] = min(best.get(k + "@", float("inf")), v)
            total += per_chunk
            for k in [k for k in best if k.endswith("@")]:
                best[k[:-1]] = best.get(k[:-1], 0.0) + best.pop(k)
            chunk = [(x.candidate, x.baseline) for _, x in zip(range(CHUNK), stream, strict=False)]
    finally:
        for k, v in real.items():
            setattr(judge_mod, k, v)
        diff_mod.diff_snapshots = real_diff
    return best, total


def oracle(n: int = ORACLE_NODES) -> dict[str, str]:
    """Each node's report as canonical JSON (the verdict, every finding, the changes), by node."""
    from upgrade_gate import codec

    nodes = _fleet(n)
    call, inputs = _inputs(nodes)
    report = call.run(inputs)  # type: ignore[attr-defined]
    out = {}
    for node in report.nodes:
        out[str(node.node)] = json.dumps(codec.to_jsonable(node), sort_keys=True, default=str)
    out["<fleet>"] = json.dumps(
        [codec.to_jsonable(f) for f in report.fleet_findings] + [list(report.rules_evaluated)],
        sort_keys=True,
        default=str,
    )
    return out


def compare(saved: dict[str, str], now: dict[str, str]) -> list[str]:
    """The nodes whose report differs (verdict, findings or changes), with what changed first."""
    diffs = []
    for name in sorted(set(saved) | set(now)):
        if saved.get(name) != now.get(name):
            a, b = json.loads(saved.get(name) or "null"), json.loads(now.get(name) or "null")
            diffs.append(f"{name}: before {str(a)[:300]} / after {str(b)[:300]}")
    return diffs


def _digest(texts: Iterable[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode())
    return h.hexdigest()[:16]


def main() -> None:
    """Print the per-rule table, or save / check the oracle."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--oracle-save", type=Path)
    ap.add_argument("--oracle-check", type=Path)
    ap.add_argument("--json", type=Path, help="also write the per-rule CPU here")
    args = ap.parse_args()
    if args.oracle_save or args.oracle_check:
        now = oracle()
        verdicts = [json.loads(v).get("verdict") for k, v in now.items() if k != "<fleet>"]
        digest = _digest(now[k] for k in sorted(now))
        print(f"{len(verdicts)} nodes: {verdicts.count('PASS')} PASS / {verdicts.count('BLOCK')} BLOCK, {digest}")
        if args.oracle_save:
            args.oracle_save.write_text(json.dumps(now), encoding="utf-8")
        else:
            diffs = compare(json.loads(args.oracle_check.read_text(encoding="utf-8")), now)
            print(f"{len(diffs)} node reports differ")
            for d in diffs[:10]:
                print(d)
            raise SystemExit(1 if diffs else 0)
        return
    spent, total = per_rule(args.nodes, repeat=args.repeat)
    if args.json:
        import upgrade_gate

        args.json.write_text(
            json.dumps({"package": upgrade_gate.__file__, "n": args.nodes, "total": total, "spent": spent})
        )
    import upgrade_gate

    print(f"package measured: {Path(upgrade_gate.__file__).parent}")  # `python -m` puts the cwd first: use -P
    print(f"{args.nodes} nodes, {total:.2f} s CPU in all, {total / args.nodes * 1e3:.3f} ms a node")
    for label, s in sorted(spent.items(), key=lambda kv: -kv[1])[:40]:
        print(f"{s / args.nodes * 1e6:9.1f} us/node  {s:7.3f} s  {label}")


if __name__ == "__main__":
    main()
