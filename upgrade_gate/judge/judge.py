"""The judge: candidates against their baselines (or class references) under a plan and a policy.

`judge(...)` is pure: snapshots, plan, policy, references, denylist and attestations in, a
`GateReport` out; no I/O, no clock (the caller passes `now` and the wall `clock`). The verdict is BLOCK
iff any finding, anywhere, is BLOCK.

Design decisions:
- Every enabled rule that applies to a node's class runs on that node (rules that need a baseline
  are skipped without one: the class reference, `evidence.missing` and the checklist then speak).
  The ids that ran are recorded per node and in `rules_evaluated` (one JUnit case each).
- A rule that raises is not a pass: its exception becomes a BLOCK finding of that rule.
- A finding whose path a plan `accept` entry covers (path glob, optional from/to) is downgraded to
  info and says which entry accepted it, for rules that allow it (`RuleSpec.plan_can_accept`;
  device order, evidence, dmesg, denylist and checklists cannot be accepted away). A measured value
  (a path under `measurements[...]`) is never accepted by a path entry: only a `metric` entry, with its
  shift and tolerance, declares a measured cost.
- A baseline or a plan canary with no candidate (a node meant to be judged that did not report) blocks with
  `evidence.missing`; so does a gate with no candidates at all (both block even when the policy
  switched `evidence.missing` off: nothing judged is never a pass).
- Changes (the structural diff, marked expected/unexpected by the plan, minus the policy's
  `ignore_paths`) are attached to each node report for the reporters. After every other rule,
  `field.unplanned` (`rules.fields`) blocks on each unexpected change at a field the coverage table
  (`judge.coverage`) marks compared that no finding speaks for: the same table and the same diff
  `upgrade-gate diff` counts, so `diff` calling a change UNEXPECTED means `gate` blocks on it.
- Nodes are independent, so a large fleet is judged by `workers` forked processes (`judge.forkpool`;
  default: one per usable CPU, `upgrade_gate.cpus`, from `PARALLEL_MIN_NODES` candidates on). Each
  child inherits the inputs through fork (nothing is pickled on the way in) and returns its node
  reports; the result is identical to a serial run. Where fork is unavailable the judge runs serially.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from upgrade_gate import __version__
from upgrade_gate.cpus import usable_cpus
from upgrade_gate.errors import InputError
from upgrade_gate.judge.causes import group_causes
from upgrade_gate.judge.checklist import FLEET, Checklist, ChecklistInputs, evaluate_checklists
from upgrade_gate.judge.coverage import coverage_of
from upgrade_gate.judge.forkpool import forked_pool
from upgrade_gate.judge.idcache import IdCache
from upgrade_gate.judge.identity import forget as forget_identities
from upgrade_gate.judge.identity import match_gpus
from upgrade_gate.judge.plan import ChangePlan, accepted, glob_match, mark_expected, measured_path
from upgrade_gate.judge.policy import Policy, RuleEntry
from upgrade_gate.judge.rules import REGISTRY
from upgrade_gate.judge.rules.bandwidth import prime_regression
from upgrade_gate.judge.rules.base import Check, NodeContext, RuleSpec
from upgrade_gate.judge.rules.facts import forget as forget_facts
from upgrade_gate.judge.rules.fields import unplanned_findings
from upgrade_gate.judge.rules.measured import forget as forget_measurements
from upgrade_gate.judge.rules.measured import prime_tables
from upgrade_gate.model import (
    Change,
    ClassReference,
    Finding,
    GateReport,
    GpuSerial,
    NodeName,
    NodeReport,
    RuleId,
    Severity,
    Snapshot,
    Verdict,
    replace,
)
from upgrade_gate.model.columnar import forget_layouts

_SEVERITY_ORDER = {Severity.BLOCK: 0, Severity.WARN: 1, Severity.INFO: 2}
_EVIDENCE = RuleId("evidence.missing")
_UNPLANNED = RuleId("field.unplanned")
_Run = tuple[RuleId, Check, RuleEntry, bool]  # a rule that runs: id, check, its policy entry, plan_can_accept
PARALLEL_MIN_NODES = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class _Work:
    """What every node's judgement needs; handed to forked workers by inheritance."""

    names: tuple[NodeName, ...]
    candidates: Mapping[NodeName, Snapshot]
    baselines: Mapping[NodeName, Snapshot]
    plan: ChangePlan | None
    policy: Policy
    references: Mapping[str, ClassReference]
    denylist: Mapping[GpuSerial, str]
    include_changes: bool
    clock: str | None = None


_INHERITED: _Work | None = None  # set in the parent just before forking; read by the children


BATCH = 16  # nodes whose bandwidth statistics are computed together (judge.curve_batch)


@contextlib.contextmanager
def fleet_gc() -> Iterator[None]:
    """Fewer cyclic garbage collections while a fleet is judged. Judging allocates ~10^5 short-lived
    objects per node while a batch of snapshots (~10^5 long-lived objects each) is alive, so the default
    thresholds run full collections that walk every live snapshot again and again (measured: ~20% of
    the judge's time). The objects that exist on entry (modules, policy, plan, class references) are
    frozen out of the collector, the young generation collects every 50,000 allocations instead of 700;
    reference counting still frees everything acyclic at once. Restored on exit."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def _judge_slice(bounds: tuple[int, int]) -> list[tuple[NodeReport, frozenset[RuleId]]]:
    work = _INHERITED
    assert work is not None, "worker started without inherited work"
    with fleet_gc():
        return _judge_names(work, work.names[bounds[0] : bounds[1]])


def _judge_names(work: _Work, names: Sequence[NodeName]) -> list[tuple[NodeReport, frozenset[RuleId]]]:
    out: list[tuple[NodeReport, frozenset[RuleId]]] = []
    for i in range(0, len(names), BATCH):
        out += judge_nodes(
            [(work.candidates[n], work.baselines.get(n)) for n in names[i : i + BATCH]],
            plan=work.plan,
            policy=work.policy,
            references=work.references,
            denylist=work.denylist,
            include_changes=work.include_changes,
            clock=work.clock,
        )
    return out


def _described(names: Sequence[NodeName]) -> str:
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"node(s) {shown}"


def _judge_all(work: _Work, workers: int) -> list[tuple[NodeReport, frozenset[RuleId]]]:
    global _INHERITED
    count = len(work.names)
    if workers <= 1 or count < PARALLEL_MIN_NODES or "fork" not in multiprocessing.get_all_start_methods():
        with fleet_gc():
            return _judge_names(work, work.names)
    chunk = max(1, -(-count // (workers * 4)))  # a few slices per worker evens out slow nodes
    slices = [(i, min(i + chunk, count)) for i in range(0, count, chunk)]
    _INHERITED = work
    try:
        with forked_pool(workers) as pool:
            parts = pool.map(_judge_slice, slices, describe=lambda b: _described(work.names[b[0] : b[1]]))
    finally:
        _INHERITED = None
    return [item for part in parts for item in part]


def judge(
    *,
    baselines: Mapping[NodeName, Snapshot],
    candidates: Sequence[Snapshot],
    plan: ChangePlan | None,
    policy: Policy,
    references: Mapping[str, ClassReference] | None = None,
    denylist: Mapping[GpuSerial, str] | None = None,
    attestations: Mapping[str, str] | None = None,
    checklists: Sequence[Checklist] = (),
    now: str,
    clock: str | None = None,
    tool_version: str = __version__,
    include_changes: bool = True,
    workers: int | None = None,
) -> GateReport:
    """Judge every candidate; BLOCK iff any BLOCK finding (see the module docstring). `now` is the report's
    time (`--now` may set it); `clock` the wall clock read by the caller just before (`evidence.taken_at`:
    a candidate after it is from the future; None: only the before-its-baseline half is judged)."""
    references = references or {}
    denylist = denylist or {}
    by_name: dict[NodeName, Snapshot] = {}
    for snap in candidates:
        if snap.node.name in by_name:
            raise InputError(f"two candidate snapshots for node {snap.node.name}")
        by_name[snap.node.name] = snap
    reports: list[NodeReport] = []
    evaluated: dict[NodeName, frozenset[RuleId]] = {}
    work = _Work(
        names=tuple(sorted(by_name)),
        candidates=by_name,
        baselines=baselines,
        plan=plan,
        policy=policy,
        references=references,
        denylist=denylist,
        include_changes=include_changes,
        clock=clock,
    )
    for report, ran in _judge_all(work, workers if workers is not None else usable_cpus()):
        reports.append(report)
        evaluated[report.node] = ran
    expected = set(baselines) | set(plan.canaries.nodes if plan is not None else ())
    for name in sorted(expected - set(by_name)):
        reports.append(_absent(name, baselines.get(name), plan, policy))
    fleet: list[Finding] = []
    if not by_name:  # fail closed even if evidence.missing is switched off: nothing judged is no pass
        entry = policy.rule_for(_EVIDENCE, None)
        fleet.append(
            Finding(
                rule=_EVIDENCE,
                severity=entry.severity if entry is not None and entry.enabled else Severity.BLOCK,
                node=FLEET,
                message="no candidate snapshots: nothing was judged",
                expected="at least one candidate",
                actual=0,
            )
        )
    rows, checklist_findings = evaluate_checklists(
        checklists,
        ChecklistInputs(
            node_reports=reports,
            candidates=by_name,
            baselines=baselines,
            evaluated=evaluated,
            plan=plan,
            policy=policy,
        ),
        attestations or {},
    )
    fleet.extend(checklist_findings)
    ran_anywhere = {rule for ran in evaluated.values() for rule in ran}
    if checklists:
        ran_anywhere |= {RuleId("checklist.unattested"), RuleId("checklist.unverified")}
    all_findings = [f for r in reports for f in r.findings] + fleet
    if any(f.rule == _EVIDENCE for f in all_findings):
        ran_anywhere.add(_EVIDENCE)  # absent candidates are judged outside the per-node loop
    verdict = Verdict.BLOCK if any(f.severity is Severity.BLOCK for f in all_findings) else Verdict.PASS
    gate_report = GateReport(
        verdict=verdict,
        generated_at=now,
        tool_version=tool_version,
        plan_id=plan.id if plan is not None else None,
        policy_name=policy.name,
        nodes=tuple(reports),
        fleet_findings=tuple(_sorted(fleet)),
        checklist=rows,
        rules_evaluated=tuple(sorted(ran_anywhere)),
    )
    return group_causes(gate_report, baselines=baselines, candidates=by_name)  # shown grouped; decides nothing


def judge_node(
    *,
    candidate: Snapshot,
    baseline: Snapshot | None,
    plan: ChangePlan | None,
    policy: Policy,
    references: Mapping[str, ClassReference],
    denylist: Mapping[GpuSerial, str],
    include_changes: bool = True,
    clock: str | None = None,
) -> tuple[NodeReport, frozenset[RuleId]]:
    """One candidate's report and the rules that ran on it."""
    (result,) = judge_nodes(
        [(candidate, baseline)],
        plan=plan,
        policy=policy,
        references=references,
        denylist=denylist,
        include_changes=include_changes,
        clock=clock,
    )
    return result


def judge_nodes(
    nodes: Sequence[tuple[Snapshot, Snapshot | None]],
    *,
    plan: ChangePlan | None,
    policy: Policy,
    references: Mapping[str, ClassReference],
    denylist: Mapping[GpuSerial, str],
    include_changes: bool = True,
    clock: str | None = None,
) -> list[tuple[NodeReport, frozenset[RuleId]]]:
    """`judge_node` of each (candidate, baseline) pair: the same reports, with the bandwidth statistics of
    the whole batch computed at once (`rules.bandwidth.prime_regression`, `judge.curve_batch`). `clock` is
    the wall clock (`evidence.taken_at`; None: a candidate's time is judged against its baseline only)."""
    try:
        contexts = [_context(cand, base, plan, policy, references, denylist, clock) for cand, base in nodes]
        prime_tables([s for pair in nodes for s in pair if s is not None])  # every sample of the batch, at once
        with prime_regression(contexts):
            return [_judge_context(ctx, include_changes) for ctx in contexts]
    finally:  # the per-snapshot caches hold the batch's snapshots: release them with the batch
        forget_identities()
        forget_measurements()
        forget_facts()
        forget_layouts()


def _context(
    candidate: Snapshot,
    baseline: Snapshot | None,
    plan: ChangePlan | None,
    policy: Policy,
    references: Mapping[str, ClassReference],
    denylist: Mapping[GpuSerial, str],
    clock: str | None = None,
) -> NodeContext:
    name = candidate.node.name
    cls = candidate.node.node_class or (baseline.node.node_class if baseline is not None else None)
    return NodeContext(
        node=name,
        node_class=cls,
        candidate=candidate,
        baseline=baseline,
        reference=references.get(cls) if cls is not None else None,
        plan=plan,
        policy=policy,
        pairs=match_gpus(baseline.gpus, candidate.gpus) if baseline is not None else (),
        denylist=denylist,
        clock=clock,
    )


_RunTable = dict[tuple[str | None, bool], tuple[tuple[_Run, ...], frozenset[RuleId], list[RuleSpec]]]
_RUNS: IdCache[Policy, _RunTable] = IdCache(8)  # a run judges under one policy; tests make many


def _run_table(_: Policy) -> _RunTable:
    return {}


def _to_run(policy: Policy, cls: str | None, has_baseline: bool) -> tuple[tuple[_Run, ...], frozenset[RuleId]]:
    """The rules that run on a node of `cls` (with or without a baseline), in registry order, each with its
    policy entry, and their ids: a pure function of the policy's rules and the registry, worked out once
    per class (each node used to ask the policy ~50 times). Worked out again when the registry is not
    the one it was made from (a rule replaced, added or removed: the tests' stand-in rules)."""
    table = _RUNS.get(policy, _run_table)
    found = table.get((cls, has_baseline))
    specs = list(REGISTRY.values())  # compared by identity first: ~0.3 us, where a test per rule took ~5
    if found is not None and found[2] == specs:
        return found[0], found[1]
    runs: list[_Run] = []
    for rule_id, rule in REGISTRY.items():
        entry = policy.rule_for(rule_id, cls)
        if rule.check is None or entry is None or not entry.enabled:
            continue
        if rule.needs_baseline and not has_baseline:
            continue
        runs.append((rule_id, rule.check, entry, rule.plan_can_accept))
    table[(cls, has_baseline)] = made = (tuple(runs), frozenset(r[0] for r in runs), specs)
    return made[0], made[1]


def _judge_context(ctx: NodeContext, include_changes: bool) -> tuple[NodeReport, frozenset[RuleId]]:
    name, cls, plan, policy = ctx.node, ctx.node_class, ctx.plan, ctx.policy
    candidate, baseline = ctx.candidate, ctx.baseline
    findings: list[Finding] = []
    runs, ran = _to_run(policy, cls, baseline is not None)
    for rule_id, check, entry, plan_can_accept in runs:
        try:
            produced = list(check(ctx, entry))
        except Exception as exc:  # fail closed: a rule that crashes must not pass the node
            produced = [
                Finding(
                    rule=rule_id,
                    severity=Severity.BLOCK,
                    node=name,
                    message=f"rule {rule_id} could not be evaluated: {type(exc).__name__}: {exc}",
                )
            ]
        if produced:
            findings.extend([_accept(plan, f) for f in produced] if plan_can_accept else produced)
    changes: tuple[Change, ...] = ()
    unplanned = policy.rule_for(_UNPLANNED, cls)
    wants_backstop = baseline is not None and unplanned is not None and unplanned.enabled
    if baseline is not None and (include_changes or wants_backstop):
        from upgrade_gate.judge.diff import diff_snapshots

        changes = tuple(
            c
            for c in plan_marked(diff_snapshots(baseline, candidate, pairs=ctx.pairs), plan)
            if not any(glob_match(g, c.path) for g in policy.ignore_paths)
        )
    if wants_backstop and unplanned is not None:
        ran |= {_UNPLANNED}
        findings.extend(_accept(plan, f) for f in unplanned_findings(ctx, unplanned, changes, tuple(findings)))
    if not include_changes:
        changes = ()
    ordered = _sorted(findings)
    verdict = Verdict.BLOCK if any(f.severity is Severity.BLOCK for f in ordered) else Verdict.PASS
    return NodeReport(node=name, verdict=verdict, findings=tuple(ordered), changes=changes), ran


def plan_marked(changes: tuple[Change, ...], plan: ChangePlan | None) -> tuple[Change, ...]:
    """`mark_expected`, less what a plan's path entry cannot accept, as `_accept` does for findings: a
    measured value, or a field whose rule a plan cannot accept (`RuleSpec.plan_can_accept`). `accept:
    [{path: "**"}]` marked a reversed GPU order "expected" in `diff` and in the reports' change lists (break
    test 2026-12-07). The plan's `change` entries (`change.rocm`...) stand. `diff` and the judge share it."""
    out = []
    for c in mark_expected(changes, plan):
        if c.expected_by is not None and c.expected_by.startswith("accept[") and not _path_acceptable(c.path):
            c = replace(c, expected=False, expected_by=None)
        out.append(c)
    return tuple(out)


def _path_acceptable(path: str) -> bool:
    if measured_path(path):
        return False
    found = coverage_of(path)
    spec = REGISTRY.get(RuleId(found[1].rule)) if found is not None and found[1].rule is not None else None
    return spec is None or spec.plan_can_accept


def _accept(plan: ChangePlan | None, f: Finding) -> Finding:
    if plan is None or f.path is None or f.severity is Severity.INFO:
        return f
    why = accepted(plan, f.path, f.expected, f.actual)
    if why is None or measured_path(f.path):
        return f
    index = int(why.removeprefix("accept[").removesuffix("]"))
    reason = plan.accept_paths[index].reason
    note = f" (accepted by plan {plan.id} {why}{': ' + reason if reason else ''})"
    return replace(f, severity=Severity.INFO, message=f.message + note)


def _absent(name: NodeName, baseline: Snapshot | None, plan: ChangePlan | None, policy: Policy) -> NodeReport:
    entry = policy.rule_for(_EVIDENCE, baseline.node.node_class if baseline is not None else None)
    severity = entry.severity if entry is not None and entry.enabled else Severity.BLOCK
    why = "has a baseline" if baseline is not None else f"is a canary of plan {plan.id if plan else '?'}"
    f = Finding(
        rule=_EVIDENCE,
        severity=severity,
        node=name,
        message=f"node {name} {why} but no candidate snapshot: it was not judged",
        path="candidate",
        expected="a candidate snapshot",
        actual=None,
        evidence="baseline store" if baseline is not None else "change plan",
    )
    verdict = Verdict.BLOCK if severity is Severity.BLOCK else Verdict.PASS
    return NodeReport(node=name, verdict=verdict, findings=(f,))


def _sorted(findings: Sequence[Finding]) -> list[Finding]:
    return sorted(
        findings,
        key=lambda f: (_SEVERITY_ORDER[f.severity], f.rule, f.device or "", f.path or "", f.message),
    )
