"""`window validate`: capture and CVF phases on the canaries, the judge against their baselines.

Split out of `fleet.window` (issue 17: rooms of at most ~400 lines): the plan/start/promote/rollback
steps act on node metadata only; this one runs the executor and the judge, and `judge_inputs` is the
loader `fleet.watch` and `fleet.window_rollout` share. What it does to the canaries and the record:
see the `fleet.window` docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from upgrade_gate.fleet.cronjobs import check_store_claim, cron_schedule, soak_cronjob
from upgrade_gate.fleet.executor import (
    ExecutorSettings,
    capture_nodes,
    load_cluster_config,
    node_vendor,
    run_vendor_phases,
    stop_leftovers,
    write_cvf_labels,
)
from upgrade_gate.fleet.jobs import NodeRunResult
from upgrade_gate.fleet.labels import WINDOW_STATE
from upgrade_gate.fleet.peer import PeerHold
from upgrade_gate.fleet.rollout import begin_soak, soak_enabled
from upgrade_gate.fleet.window import Actor, canary_nodes, change_label, window_plan
from upgrade_gate.fleet.window_state import State, WindowRecord, event, load_window, save_candidate, save_window
from upgrade_gate.judge.plan import format_duration
from upgrade_gate.judge.policy import Policy
from upgrade_gate.model import (
    ClassReference,
    GateReport,
    GpuSerial,
    NodeName,
    PhaseResult,
    Severity,
    Snapshot,
    Verdict,
    replace,
)
from upgrade_gate.validate.pipeline import Progress
from upgrade_gate.validate.remeasure import Resampling
from upgrade_gate.vendors import Vendor, vendor_of

if TYPE_CHECKING:
    from upgrade_gate.fleet.kube import KubeClient
    from upgrade_gate.fleet.objects import KubeNode
    from upgrade_gate.judge.checklist import Checklist
    from upgrade_gate.store.gitstore import BaselineStore


@dataclass(frozen=True, slots=True, kw_only=True)
class Validation:
    """What `validate_window` found."""

    record: WindowRecord
    report: GateReport
    results: dict[NodeName, tuple[PhaseResult, ...]]
    errors: dict[NodeName, list[str]]
    candidates: dict[NodeName, Snapshot]
    baselines: dict[NodeName, Snapshot]


def validate_window(
    client: KubeClient,
    store: BaselineStore,
    window_id: str,
    *,
    actor: Actor,
    settings: ExecutorSettings,
    run_id: str,
    policy: Policy,
    samples: int | None = None,
    on_capture: Callable[[NodeRunResult], None] | None = None,
    progress: Progress | None = None,
    checklists: Sequence[Checklist] = (),
    attestations: Mapping[str, str] | None = None,
    soak_cronjob_enabled: bool = True,
    phases: frozenset[int] | None = None,
    vendor: Vendor | None = None,
) -> Validation:
    """Capture and run the phases on the canaries, judge them (and `checklists`), record `validated` or `blocked`.

    `phases`: the phase numbers to run (`window validate --phases`, 0-7: CVF's 0-5 and the workload phases
    6-7, which run as Jobs holding every GPU of the canary, `fleet.workload_jobs`); None: CVF's 0-5.

    A PASS under a plan with a soak records `soaking` and (unless `soak_cronjob_enabled` is off) creates the
    CronJob that observes the canaries (`fleet.cronjobs`).

    `vendor` (`--vendor`): the canaries' GPU vendor; None: each canary's baseline's, else the one whose GPU
    resource it advertises (`canary_vendors`). Each canary is captured with its vendor's probes and runs
    its snapshot's vendor's phases (`run_vendor_phases`); a canary whose vendor is in doubt is not captured
    and blocks with the reason."""
    from upgrade_gate.judge.judge import judge
    from upgrade_gate.judge.rules.evidence import read_clock
    from upgrade_gate.snapshot.build import build_snapshot

    record = load_window(store, window_id)
    record.check("validate")
    plan = window_plan(record)
    if soak_enabled(plan) and soak_cronjob_enabled:  # before the phases: a soak that cannot run is refused now
        cron_schedule(plan.soak.every_s)
        check_store_claim(client, settings.jobs.namespace)
    classes = {NodeName(c["node"]): str(c["class"]) for c in record.doc["canaries"]}
    found = canary_nodes(client, record.canaries)
    errors: dict[NodeName, list[str]] = {n: [] for n in record.canaries}
    for name, node in found.items():
        if node is None:
            errors[name].append(f"node vanished: {name} no longer exists")
    nodes = [n for n in found.values() if n is not None]
    config = load_cluster_config(client, settings.jobs.namespace)
    # a validate that died (API outage, killed operator) may have left Jobs holding the canaries' GPUs
    stop_leftovers(client, settings.jobs.namespace, [n.name for n in nodes], poll_s=settings.poll_s)
    vendors = canary_vendors(store, nodes, vendor, errors)
    nodes = [n for n in nodes if n.name in vendors]
    bundles = (
        capture_nodes(client, nodes, settings, run_id=run_id, on_result=on_capture, vendors=vendors) if nodes else {}
    )
    snapshots: dict[NodeName, Snapshot] = {}
    for name, bundle in bundles.items():
        if isinstance(bundle, str):
            errors[name].append(bundle)
        else:
            snapshots[name] = build_snapshot(bundle, node_class=classes.get(name))
    # the inputs depend on the canaries' names and classes only: loaded now, the phases re-measure
    # against the baselines what is inconclusive, as `validate --policy --baseline` does on one node
    baselines, references, denylist = judge_inputs(store, record.canaries, tuple(snapshots.values()))
    peer = record.doc.get("peer")  # the plan's; a later wave (`expand`) with partners of its own needs none
    if peer is not None and (len(record.canaries) != 1 or peer["node"] in record.canaries):
        peer = None
    hold = PeerHold(client, window_id, NodeName(peer["node"]), change_label(record.doc["change_id"])) if peer else None
    peers = [n for n in canary_nodes(client, [NodeName(peer["node"])]).values() if n is not None] if peer else []
    try:
        results = run_vendor_phases(
            client,
            [n for n in nodes if n.name in snapshots],
            numbers=phases,
            vendors={n: vendor_of(p.name for p in s.probes) for n, s in snapshots.items()},
            config=config,
            settings=settings,
            run_id=run_id + "p",
            snapshots=snapshots,
            samples=samples,
            progress=hold.wrap(progress) if hold is not None else progress,
            resampling=phase_resampling(policy, snapshots, baselines),
            peers=peers,
        )
    finally:
        if hold is not None:
            hold.close()
    for name, problem in write_cvf_labels(client, results).items():
        if problem is not None:
            errors[name].append(problem)
    candidates = {n: replace(s, phases=results.get(n, ())) for n, s in snapshots.items()}
    report = judge(
        baselines=baselines,
        candidates=tuple(candidates.values()),
        plan=plan,
        policy=policy,
        references=references,
        denylist=denylist,
        attestations=attestations,
        checklists=checklists,
        now=actor.at,
        clock=read_clock(),  # the wall clock (evidence.taken_at), whatever time the report says
    )
    for snap in candidates.values():
        save_candidate(store, window_id, snap)
    passed = report.verdict is Verdict.PASS and not any(errors.values())
    soak = passed and soak_enabled(plan)
    state = (State.SOAKING if soak else State.VALIDATED) if passed else State.BLOCKED
    per_node = {r.node: r.verdict for r in report.nodes}
    doc = dict(record.doc, state=str(state))
    doc.pop("soak", None)
    if soak:
        begin_soak(doc, plan.soak, at=actor.at)
        if soak_cronjob_enabled:
            client.apply_cronjob(
                soak_cronjob(
                    window_id,
                    plan.soak.every_s,
                    settings.jobs,
                    command=settings.upgrade_gate_argv,
                    workload_image=settings.workload_image,
                ),
                settings.jobs.namespace,
            )
    doc["validation"] = {
        "verdict": "PASS" if passed else "BLOCK",
        "at": actor.at,
        "by": actor.by,
        "config_source": config.source,
        "nodes": {
            name: {
                "verdict": "PASS" if per_node.get(name) is Verdict.PASS and not errors[name] else "BLOCK",
                "phases": {str(r.phase): str(r.status) for r in results.get(name, ())},
                "errors": errors[name],
            }
            for name in record.canaries
        },
        "findings": [
            f"{f.node}: {f.severity} {f.rule}: {f.message}" for f in report.findings if f.severity is not Severity.INFO
        ][:200],
    }
    for name, node in found.items():
        if node is not None and not any("vanished" in e for e in errors[name]):
            client.patch_node_labels(name, {WINDOW_STATE: str(state)})
    wave = int(doc.get("rollout", {}).get("wave", 0))
    note = f"verdict {doc['validation']['verdict']}" + (f" (wave {wave})" if wave else "")
    if soak:
        every = format_duration(plan.soak.every_s)
        note += f"; soaking {format_duration(plan.soak.duration_s)}, observed every {every}"
    for action, at, what in hold.events if hold is not None else ():
        event(doc, action=action, by=actor.by, at=at, note=what)
    event(doc, action="validate", by=actor.by, at=actor.at, note=note)
    saved = save_window(store, doc, f"window {window_id}: {state}")
    return Validation(
        record=saved, report=report, results=results, errors=errors, candidates=candidates,
        baselines=baselines,
    )  # fmt: skip


def phase_resampling(
    policy: Policy, snapshots: Mapping[NodeName, Snapshot], baselines: Mapping[NodeName, Snapshot]
) -> Resampling:
    """The phases' re-measuring (`judge.remeasure.resampling`): the policy's `bandwidth.regression` limits
    and each canary's comparison with its own baseline (canaries without one keep the fixed count).

    One pipeline runs every canary, so one set of limits applies: with canaries of several classes whose
    policy entries differ, the entry allowing the most samples (ties: the first class by name); each
    comparison still judges a node by its own class's entry, and the judge decides with it afterwards."""
    from upgrade_gate.judge.remeasure import resampling

    classes = sorted({s.node.node_class for s in snapshots.values() if s.node.node_class is not None})
    limits = [(resampling(policy, c).max_samples, c) for c in classes]
    chosen = max(limits, key=lambda lc: lc[0])[1] if limits else None  # max keeps the first of equal limits
    mine: dict[str, Snapshot] = {n: b for n, b in baselines.items() if n in snapshots}
    return resampling(policy, chosen, baselines=mine or None)


def canary_vendors(
    store: BaselineStore, nodes: Sequence[KubeNode], explicit: Vendor | None, errors: dict[NodeName, list[str]]
) -> dict[NodeName, Vendor]:
    """Each node's GPU vendor (`fleet.executor.node_vendor`: `explicit`, else its baseline's at HEAD, else
    the device-plugin resource it advertises); a node whose vendor is in doubt gets the reason in `errors`
    and is left out (fail closed: it is neither captured nor run)."""
    stored = set(store.nodes())
    out: dict[NodeName, Vendor] = {}
    for node in nodes:
        baseline = store.load(node.name) if node.name in stored else None
        found = node_vendor(node, baseline=baseline, explicit=explicit)
        if isinstance(found, str):
            errors.setdefault(node.name, []).append(found)
        else:
            out[node.name] = found
    return out


def judge_inputs(
    store: BaselineStore, names: Sequence[NodeName], candidates: Sequence[Snapshot]
) -> tuple[dict[NodeName, Snapshot], dict[str, ClassReference], dict[GpuSerial, str]]:
    """Baselines of `names`, class references, denylist at HEAD: `store.inputs.load_judge_inputs`."""
    from upgrade_gate.store.inputs import load_judge_inputs

    inputs = load_judge_inputs(store, None, candidates, nodes=names)
    return dict(inputs.baselines), dict(inputs.references), dict(inputs.denylist)
