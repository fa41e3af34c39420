"""`gate` at fleet scale: candidates streamed through forked workers; a fleet's node reports spooled.

Issue 14 measured `gate` on 8,192 nodes at 70 s and 2.9 GiB: the parent read 16,384 documents one
by one (schema walk, generic decode), resolved HEAD per node, re-aggregated the class reference, and
held every snapshot at once. Here:

- The candidates are a list of paths (`--candidate`, or `--candidates DIR|LISTFILE` without argv
  limits, read and capped by `cli.candidates`). Workers (forked, one per core) each take slices of
  the paths; per path they load the
  candidate (strict typed decode, `codec.decode_json`), read its baseline from the store at the
  commit pinned once by the parent (`BaselineStore.pin`; the trusted decode of a document the store
  validated when it saved it, its git object id checked), judge the nodes a batch at a time
  (`judge.judge_nodes`) and drop the snapshots; only the node reports go back.
- Class references come from the store's `classes/<class>.json` at the pinned commit (`baseline save`
  writes them with the baselines). A class with none is aggregated from the store's baselines of that
  class (streaming, `store.aggregate.ClassAccumulator`) and its nodes are judged again with it: the
  slow path, with a hint on stderr.
- The fleet-level part (plan canaries without a candidate, "no candidates at all", the verdict) is
  the judge's: `judge(...)` is called once more with only the absent canaries' baselines.
- Node reports come back msgpack-encoded (msgspec, typed on both sides), not pickled: the parent
  decodes 8,192 of them serially, and pickling the model's records costs ~4x more.
- The first candidate is judged in the parent before forking, so every lazily imported module
  (numpy, deepdiff, the msgspec decoders) is loaded once and shared by the workers through fork.
- Garbage collection: the pool runs inside the judge's `fleet_gc` (the parent's heap frozen before
  the fork, the young generation collected every 50,000 allocations), so a worker's collections
  neither walk the inherited heap nor write to its pages (copy-on-write). At the default thresholds
  the collector took ~1.4 ms of a ~7 ms node (measured with `gc.callbacks`).
- Node reports are decoded as they arrive (`imap`, in order) while the workers judge later slices;
  a slice is at most one judge batch (`judge.BATCH`), so no core idles long at the end.
- The workers are `judge.forkpool`'s (a pipe per worker, no shared queue): once every result is in
  they are told to stop and joined; when the parent fails or is interrupted they are SIGKILLed and
  reaped. A worker that dies (the OOM killer) is exit 4 naming the candidates it was judging. Workers
  reset SIGTERM to its default and ignore SIGINT (the parent handles it). `multiprocessing.Pool` hung
  `gate` when a worker died, when SIGTERM reached an idle worker holding its task queue's lock, and
  on an error that could not be unpickled (session 6's review).
- Two candidates for one node are bad input as soon as the second one's result arrives.
- Spooled (`gate_spooled`; the CLI's path for more than `SUMMARY_FROM_NODES` candidates whose only
  outputs are the console summary and JSON reports): a worker also turns each node report into its
  text in the JSON report (encoded, checked, indented: `report.json_report.node_body`) and sends that
  with a summary line (`NodeLine`). The parent appends the text to an unnamed temporary file (`Spool`)
  as it arrives and keeps the line: ~2 KB a node in memory instead of the node report, ~23 KB as
  objects (both from the tree's peak memory at 1,024 and 8,192 nodes). The report is then written from
  the spool in the report's order, byte for byte the one the in-memory path writes
  (tests/test_gate_stream.py). 8,192 nodes: 323 -> 104 MiB for the whole tree, with the judge's
  batches of 16 nodes. Other report formats need every node report at once and keep the in-memory path.
- With `--checklist` (which reads every candidate at once) or where fork is unavailable, `gate`
  keeps its in-memory path.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from upgrade_gate.cli.candidates import candidate_paths as candidate_paths  # its importers' old home
from upgrade_gate.errors import EnvironmentFailure, InputError
from upgrade_gate.model import replace

if TYPE_CHECKING:
    from upgrade_gate.judge.plan import ChangePlan
    from upgrade_gate.judge.policy import Policy
    from upgrade_gate.model import ClassReference, GateReport, GpuSerial, NodeReport, RuleId, Snapshot
    from upgrade_gate.parse.dmesg import PatternTable
    from upgrade_gate.store.gitstore import BaselineStore

SUMMARY_FROM_NODES = 64  # above this many nodes the console prints a summary, not every finding


def load_candidate_fast(path: Path, patterns: PatternTable | None = None) -> Snapshot:
    """A candidate snapshot file by strict typed decode, or a capture bundle through the snapshot builder
    (its kernel log classified with `patterns`, the policy's fatal-error map)."""
    if path.name.lower().endswith(".json"):
        from upgrade_gate.snapshot.io import load_snapshot_fast

        return load_snapshot_fast(path)
    from upgrade_gate.cli.judge_cmds import load_candidate

    return load_candidate(path, patterns)


# --------------------------------------------------------------------------- workers


@dataclass(frozen=True, slots=True, kw_only=True)
class _Job:
    """What every worker needs; inherited through fork (nothing pickled on the way in)."""

    store: Path
    pin: str
    stored: frozenset[str]
    plan: ChangePlan | None
    policy: Policy
    references: Mapping[str, ClassReference]
    denylist: Mapping[GpuSerial, str]
    patterns: PatternTable | None = None
    clock: str | None = None  # the wall clock, read once in the parent before the workers start (evidence.taken_at)
    spooled: bool = False  # workers send back each node's JSON report text and its summary line


_JOB: _Job | None = None
_WORKER_STORE: BaselineStore | None = None

Judged = tuple["NodeReport", "frozenset[RuleId]", str, "str | None", bool]  # report, rules, path, class, had ref


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeLine:
    """What the console summary says of a node: all a spooled gate keeps of a node report in memory."""

    node: str
    warned: bool  # a WARN finding
    blocks: int  # BLOCK findings
    block_rules: tuple[str, ...]  # the rules of those, each once
    first_block: str  # "rule: message" of the first (the report's order), "" when none


def node_line(report: NodeReport) -> NodeLine:
    """The summary line of a node report (`console_summary`)."""
    from upgrade_gate.model import Severity

    blocking = [f for f in report.findings if f.severity is Severity.BLOCK]
    return NodeLine(
        node=report.node,
        warned=any(f.severity is Severity.WARN for f in report.findings),
        blocks=len(blocking),
        block_rules=tuple(dict.fromkeys(f.rule for f in blocking)),
        first_block=f"{blocking[0].rule}: {blocking[0].message[:140]}" if blocking else "",
    )


# a spooled node: line, rules, path, class, had ref, and its JSON text (then its place in the spool)
Spooled = tuple[NodeLine, "frozenset[RuleId]", str, "str | None", bool, bytes]


class Spool:
    """An unnamed temporary file holding the nodes' JSON texts until the report is written (bounded
    memory at any fleet size; ~12 KB a node on disk). Removed when closed, or when the process ends."""

    def __init__(self) -> None:
        import tempfile

        self._where = tempfile.gettempdir()
        try:
            self._file = tempfile.TemporaryFile(prefix="upgrade-gate-spool-")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise self._failure("create", exc) from exc
        self._end = 0

    def put(self, text: bytes) -> tuple[int, int]:
        """Append `text`; its (offset, length)."""
        try:
            self._file.seek(self._end)
            self._file.write(text)
        except OSError as exc:  # a full disk: the report is not written, and gate says where it ran out
            raise self._failure("write", exc) from exc
        where = (self._end, len(text))
        self._end += len(text)
        return where

    def texts(self, places: Iterable[tuple[int, int]]) -> Iterator[bytes]:
        """The texts at `places`, in that order, one at a time."""
        for offset, length in places:
            try:
                self._file.seek(offset)
                text = self._file.read(length)
            except OSError as exc:
                raise self._failure("read", exc) from exc
            if len(text) != length:
                raise self._failure("read", OSError(f"{length} bytes at {offset}: only {len(text)} came back"))
            yield text

    def _failure(self, what: str, exc: OSError) -> EnvironmentFailure:
        return EnvironmentFailure(
            f"gate: cannot {what} the temporary file that holds the nodes' report texts in {self._where} "
            f"(~12 KB a node): {exc}; set TMPDIR to a folder with room"
        )

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True, kw_only=True)
class SpooledReport:
    """A fleet's gate report without its nodes (`report.nodes` is empty), the nodes' summary lines in
    the report's order with the places of their JSON texts in `spool`."""

    report: GateReport
    lines: tuple[tuple[NodeLine, tuple[int, int]], ...]
    spool: Spool

    def texts(self) -> Iterator[bytes]:
        return self.spool.texts(where for _, where in self.lines)


def _store() -> BaselineStore:
    global _WORKER_STORE
    if _WORKER_STORE is None:  # one per process: gitpython's cat-file pipes are not shared across fork
        from upgrade_gate.store.gitstore import BaselineStore

        assert _JOB is not None
        _WORKER_STORE = BaselineStore(_JOB.store)
    return _WORKER_STORE


def _judge_paths(paths: Sequence[str]) -> list[Judged]:
    """Judge the candidates at `paths`, `judge.BATCH` at a time (their bandwidth statistics computed
    together, `judge.judge_nodes`); a batch's snapshots are released before the next is loaded."""
    from upgrade_gate.judge.causes import node_causes
    from upgrade_gate.judge.judge import BATCH, judge_nodes

    job = _JOB
    assert job is not None, "worker started without its job"
    out: list[Judged] = []
    for start in range(0, len(paths), BATCH):
        batch = paths[start : start + BATCH]
        pairs = []
        for raw in batch:
            cand = load_candidate_fast(Path(raw), job.patterns)
            name = cand.node.name
            pairs.append((cand, _store().load_trusted(name, job.pin) if name in job.stored else None))
        judged = judge_nodes(
            pairs,
            plan=job.plan,
            policy=job.policy,
            references=job.references,
            denylist=job.denylist,
            clock=job.clock,
        )
        for raw, (cand, base), (report, ran) in zip(batch, pairs, judged, strict=True):
            cls = cand.node.node_class or (base.node.node_class if base is not None else None)
            report = replace(report, causes=node_causes(report, base, cand))  # while both snapshots are here
            out.append((report, ran, raw, cls, cls is None or cls in job.references))
        del pairs, judged
    return out


def _judge_encoded(paths: Sequence[str]) -> bytes:
    """`_judge_paths` in a worker, its results as msgpack (the model's types; ~4x cheaper than pickle);
    for a spooled gate, each node as its summary line and its JSON report text (`_spooled`)."""
    import msgspec

    judged = _judge_paths(paths)
    assert _JOB is not None
    return msgspec.msgpack.encode(_spooled(judged) if _JOB.spooled else judged)


def _spooled(judged: Sequence[Judged]) -> list[Spooled]:
    """Each node report as its console line, rules, path, class, reference flag and its text in the JSON
    report (encoded, checked and indented here, in the worker: `report.json_report.node_body`)."""
    from upgrade_gate.report.json_report import node_body

    return [(node_line(report), ran, path, cls, had, node_body(report)) for report, ran, path, cls, had in judged]


def _described(paths: Sequence[str]) -> str:
    return f"{len(paths)} candidate(s) from {paths[0]}" if len(paths) > 1 else f"candidate {paths[0]}"


def _same(item: Any) -> Any:
    return item


def _decoder(spooled: bool) -> Any:
    import msgspec

    from upgrade_gate.model import NodeReport, RuleId

    if spooled:
        return msgspec.msgpack.Decoder(list[tuple[NodeLine, frozenset[RuleId], str, str | None, bool, bytes]])
    return msgspec.msgpack.Decoder(list[tuple[NodeReport, frozenset[RuleId], str, str | None, bool]])


def _run(job: _Job, paths: Sequence[str], workers: int, keep: Callable[[Any], Any] = _same) -> list[Any]:
    """Judge `paths`, forked workers where worth it: `Judged` items, or for a spooled job `Spooled` ones,
    each passed through `keep` as it arrives (the spooled gate writes its text out there)."""
    global _JOB, _WORKER_STORE
    _JOB, _WORKER_STORE = job, None

    def here(some: Sequence[str]) -> list[Any]:  # judged in this process
        judged = _judge_paths(some)
        return [keep(item) for item in (_spooled(judged) if job.spooled else judged)]

    try:
        first = here(paths[:1])  # warms every lazy import and decoder before the fork
        rest = paths[1:]
        if not rest:
            return first
        from upgrade_gate.judge.judge import BATCH, fleet_gc

        if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
            with fleet_gc():  # as in the workers (one CPU, 1,024 nodes: 2.72 -> 2.65 s of CPU)
                return first + here(rest)
        if _WORKER_STORE is not None:
            _WORKER_STORE.close()  # the children open their own
            _WORKER_STORE = None
        from upgrade_gate.judge.forkpool import forked_pool

        chunk = max(8, min(BATCH, len(rest) // (workers * 8)))  # a judge batch, or less: no core idles long
        slices = [rest[i : i + chunk] for i in range(0, len(rest), chunk)]
        decoder = _decoder(job.spooled)
        shared: dict[frozenset[RuleId], frozenset[RuleId]] = {}  # nodes mostly ran the same rules: one set
        with fleet_gc(), forked_pool(workers) as pool:  # the workers inherit the frozen heap
            parts = pool.imap(_judge_encoded, slices, describe=_described)  # decoded as they arrive, in order
            return (
                first
                + [  # ... for them all, not ~5 KB of set and strings per node
                    keep((item[0], shared.setdefault(item[1], item[1]), *item[2:]))
                    for part in parts
                    for item in decoder.decode(part)
                ]
            )
    finally:
        if _WORKER_STORE is not None:
            _WORKER_STORE.close()
        _JOB, _WORKER_STORE = None, None


# --------------------------------------------------------------------------- the command's core


def gate_streaming(
    st: BaselineStore,
    ref: str | None,
    paths: Sequence[Path],
    *,
    plan: ChangePlan | None,
    policy: Policy,
    now: str,
    workers: int | None = None,
    patterns: PatternTable | None = None,
) -> GateReport:
    """Judge every candidate path against the store at `ref` (see the module docstring).

    The store is read by the rules of `store.inputs` (the in-memory path's `load_judge_inputs`): one
    pinned commit, saved class references else aggregated ones, the denylist at HEAD.
    """
    judged, rest = _judge_fleet(st, ref, paths, plan=plan, policy=policy, now=now, workers=workers, patterns=patterns)
    by_node = {node: (item[0], item[1]) for node, item in _by_node(judged).items()}
    return _assemble(rest, by_node, have_candidates=bool(by_node))


def _by_node(judged: Sequence[Any]) -> dict[str, Any]:
    """Judged (or spooled) items by node name (`_judge_fleet` refused a node judged twice)."""
    return {item[0].node: item for item in judged}


def gate_spooled(
    st: BaselineStore,
    ref: str | None,
    paths: Sequence[Path],
    spool: Spool,
    *,
    plan: ChangePlan | None,
    policy: Policy,
    now: str,
    workers: int | None = None,
    patterns: PatternTable | None = None,
) -> SpooledReport:
    """`gate_streaming` for a fleet whose only outputs are the JSON report and the console summary: the
    workers return each node's text in the JSON report, which goes to `spool` (a temporary file) as it
    arrives; the parent keeps a summary line per node, so its memory does not grow with the fleet's
    findings. The report written from it is the one `gate_streaming`'s report gives, byte for byte."""
    judged, rest = _judge_fleet(
        st, ref, paths, plan=plan, policy=policy, now=now, workers=workers, patterns=patterns, spool=spool
    )
    by_node = {node: (item[0], item[1], item[5]) for node, item in _by_node(judged).items()}
    from upgrade_gate.model import Verdict
    from upgrade_gate.report.json_report import node_body

    absent = [(node_line(n), spool.put(node_body(n))) for n in rest.nodes]  # the canaries that sent nothing
    report = _assemble(rest, {}, have_candidates=bool(by_node), ran_elsewhere=(ran for _, ran, _ in by_node.values()))
    lines = [(by_node[n][0], by_node[n][2]) for n in sorted(by_node)] + absent
    blocked = report.verdict is Verdict.BLOCK or any(line.blocks for line, _ in lines)
    return SpooledReport(
        report=replace(report, verdict=Verdict.BLOCK if blocked else Verdict.PASS, nodes=()),
        lines=tuple(lines),
        spool=spool,
    )


def _judge_fleet(
    st: BaselineStore,
    ref: str | None,
    paths: Sequence[Path],
    *,
    plan: ChangePlan | None,
    policy: Policy,
    now: str,
    workers: int | None,
    patterns: PatternTable | None,
    spool: Spool | None = None,
) -> tuple[list[Any], GateReport]:
    """Every candidate judged (`Judged` items, or `Spooled` ones with their text in `spool` and its
    place instead), and the judge's report on the plan's canaries that sent no candidate."""
    from upgrade_gate.judge.judge import judge
    from upgrade_gate.judge.rules.evidence import read_clock
    from upgrade_gate.store.inputs import aggregate_references, current_denylist, saved_references

    pin = st.pin(ref)
    stored = frozenset(st.nodes(pin))
    references = saved_references(st, pin)
    denylist = current_denylist(st)
    job = _Job(
        store=st.path,
        pin=pin,
        stored=stored,
        plan=plan,
        policy=policy,
        references=references,
        denylist=denylist,
        patterns=patterns,
        clock=read_clock(),
        spooled=spool is not None,
    )
    keep: Callable[[Any], Any] = _same if spool is None else (lambda item: (*item[:5], spool.put(item[5])))
    from upgrade_gate.cpus import usable_cpus

    count = workers if workers is not None else usable_cpus()
    raw = [str(p) for p in paths]
    seen: set[str] = set()

    def once(item: Any) -> Any:  # two candidates for one node: bad input as soon as the second arrives
        node = item[0].node
        if node in seen:
            raise InputError(f"two candidate snapshots for node {node} (the second: {item[2]})")
        seen.add(node)
        return keep(item)

    judged = _run(job, raw, count, once)
    unreferenced = sorted({item[3] for item in judged if not item[4] and item[3] is not None})
    if unreferenced:
        print(
            f"gate: no saved class reference for {', '.join(unreferenced)} at {pin[:12]}: aggregating the "
            "store's baselines (save one with `upgrade-gate baseline aggregate --class C --save`)",
            file=sys.stderr,
        )
        extra = aggregate_references(st, pin, unreferenced)
        if extra:
            again = [item[2] for item in judged if not item[4] and item[3] in extra]
            job = replace(job, references={**references, **extra})
            redone = {r[2]: r for r in _run(job, again, count, keep)}
            judged = [redone.get(item[2], item) for item in judged]
    judged_nodes = {item[0].node for item in judged}
    canaries = set(plan.canaries.nodes) if plan is not None else set()
    absent = sorted(canaries - judged_nodes)
    # the judge reports every plan canary without a candidate as missing: give it only the absent ones
    # (with the whole list, each canary judged above was reported missing as well, and blocked)
    only_absent = replace(plan, canaries=replace(plan.canaries, nodes=tuple(absent))) if plan is not None else None
    rest = judge(
        baselines={n: st.load_trusted(n, pin) for n in absent if n in stored},
        candidates=[],
        plan=only_absent,
        policy=policy,
        references=references,
        denylist=denylist,
        now=now,
    )
    return judged, rest


def _assemble(
    rest: GateReport,
    judged: Mapping[str, tuple[NodeReport, frozenset[RuleId]]],
    *,
    have_candidates: bool,
    ran_elsewhere: Iterable[frozenset[RuleId]] = (),  # the rules of nodes not in `judged` (spooled ones)
) -> GateReport:
    from upgrade_gate.judge.causes import fleet_causes
    from upgrade_gate.model import Severity, Verdict

    nodes = [judged[n][0] for n in sorted(judged)] + list(rest.nodes)
    fleet = tuple(
        f for f in rest.fleet_findings if not (have_candidates and f.message.startswith("no candidate snapshots"))
    )
    ran: set[RuleId] = {rule for _, rules in judged.values() for rule in rules}
    ran.update(rule for rules in ran_elsewhere for rule in rules)
    ran |= set(rest.rules_evaluated) if (rest.nodes or fleet) else set()
    blocked = any(f.severity is Severity.BLOCK for n in nodes for f in n.findings) or any(
        f.severity is Severity.BLOCK for f in fleet
    )
    return replace(
        rest,
        verdict=Verdict.BLOCK if blocked else Verdict.PASS,
        nodes=tuple(nodes),
        fleet_findings=fleet,
        fleet_causes=fleet_causes(fleet, rest.checklist),
        rules_evaluated=tuple(sorted(ran)),
    )


def console_summary(report: GateReport, *, reports: Sequence[str], limit: int = 20) -> str:
    """A fleet-sized console report: verdict, counts, blocking rules by node count, the first blocked nodes."""
    return summary_text(report, [node_line(n) for n in report.nodes], reports=reports, limit=limit)


def summary_text(report: GateReport, nodes: Sequence[NodeLine], *, reports: Sequence[str], limit: int = 20) -> str:
    """`console_summary` from the nodes' summary lines (a spooled gate's report holds no nodes)."""
    from collections import Counter

    blocked = [n for n in nodes if n.blocks]
    rules: Counter[str] = Counter()
    warned = 0
    for n in nodes:
        rules.update(n.block_rules)
        warned += n.warned
    lines = [
        f"{report.verdict.value}: {len(nodes)} node(s), {len(blocked)} blocked, {warned} with warnings"
        + (f", plan {report.plan_id}" if report.plan_id else ""),
    ]
    for f in report.fleet_findings:
        lines.append(f"  fleet {f.severity.value.upper()} {f.rule}: {f.message}")
    if rules:
        lines.append("blocking rules (nodes):")
        lines.extend(f"  {rule}: {count}" for rule, count in sorted(rules.items(), key=lambda kv: (-kv[1], kv[0])))
    for n in blocked[:limit]:
        more = n.blocks - 1
        lines.append(f"  {n.node}: {n.first_block}" + (f" (+{more} more)" if more else ""))
    if len(blocked) > limit:
        lines.append(f"  ... and {len(blocked) - limit} more blocked node(s)")
    where = ", ".join(reports) if reports else "add --report json:PATH for every finding"
    lines.append(f"(a summary: {len(nodes)} nodes is more than {SUMMARY_FROM_NODES}; {where})")
    from upgrade_gate.report.printable import printable

    return printable("\n".join(lines) + "\n")  # node names and tool messages: no terminal escapes pass
