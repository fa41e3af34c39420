"""The window after its PASS: `observe` (one soak round), `expand` (the next wave) and the status view.

`observe` re-captures each canary (a capture Job, or snapshots handed in by an operator off
Kubernetes), optionally re-runs phase 2's mesh test and, on the soak's workload cadence, phase 6's
reference training run (`fleet.soak_workload`), and gates the result against the same baselines
with the non-invasive view (`judge.observe`). A BLOCK moves the window to `blocked` with its causes;
a PASS is recorded and the window stays `soaking`. `expand` takes the next wave of each class under
the class-wide disruption cap (`fleet.rollout`) and starts it like the canaries (cordon, taint,
drain), so the same validate -> soak -> promote cycle runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from upgrade_gate.fleet.canary import allowed_count, ineligible_reason
from upgrade_gate.fleet.labels import WINDOW_STATE
from upgrade_gate.fleet.rollout import (
    add_observation,
    choose_wave,
    held_nodes,
    parse_time,
    soak_status,
)
from upgrade_gate.fleet.soak_workload import workload_due, workload_metrics
from upgrade_gate.fleet.window_state import State, WindowRecord, WindowStateError, event, list_windows, load_window
from upgrade_gate.fleet.window_state import save_window as _save
from upgrade_gate.model import GateReport, NodeName, Severity, Snapshot, Verdict, measurements_of, replace

if TYPE_CHECKING:
    from upgrade_gate.fleet.executor import ExecutorSettings
    from upgrade_gate.fleet.kube import KubeClient
    from upgrade_gate.fleet.window import Actor
    from upgrade_gate.judge.policy import Policy
    from upgrade_gate.store.gitstore import BaselineStore

_KEY_METRICS = ("mesh/all_reduce/avg_busbw",)


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """What one `observe` round found."""

    record: WindowRecord
    report: GateReport
    errors: dict[NodeName, list[str]]
    passed: bool


def _headlines(report: GateReport, node: NodeName, errors: Sequence[str]) -> list[str]:
    out = list(errors)
    for n in report.nodes:
        if n.node == node:
            out += [f"{f.rule}: {f.message}" for f in n.findings if f.severity is Severity.BLOCK]
    return out


def observe_window(
    store: BaselineStore,
    window_id: str,
    *,
    actor: Actor,
    policy: Policy,
    client: KubeClient | None = None,
    settings: ExecutorSettings | None = None,
    run_id: str = "obs",
    snapshots: Mapping[NodeName, Snapshot] | None = None,
) -> Observation:
    """One soak round over the canaries: capture (or take `snapshots`), judge, record."""
    from upgrade_gate.fleet.window import window_plan
    from upgrade_gate.fleet.window_validate import judge_inputs
    from upgrade_gate.judge.judge import judge
    from upgrade_gate.judge.observe import observation_policy, observation_view
    from upgrade_gate.judge.rules.evidence import read_clock

    record = load_window(store, window_id)
    record.check("observe")
    plan = window_plan(record)
    mesh = bool(record.doc["soak"]["mesh"])
    workload = workload_due(record.doc["soak"], parse_time(actor.at), record=f"windows/{window_id}.json")
    errors: dict[NodeName, list[str]] = {n: [] for n in record.canaries}
    candidates: dict[NodeName, Snapshot] = {}
    if snapshots is not None:
        for name in record.canaries:
            if name in snapshots:
                candidates[name] = snapshots[name]
            else:
                errors[name].append(f"no snapshot of canary {name} was given to this observation")
    else:
        if client is None or settings is None:
            raise WindowStateError(f"window {window_id}: observe needs the cluster or --snapshot files")
        candidates = _capture(
            client, store, record, settings, run_id=run_id, mesh=mesh, workload=workload, errors=errors
        )
    classes = {NodeName(c["node"]): str(c["class"]) for c in record.doc["canaries"]}
    candidates = {
        n: replace(s, node=replace(s.node, node_class=s.node.node_class or classes.get(n)))
        for n, s in candidates.items()
    }
    baselines, _references, denylist = judge_inputs(store, record.canaries, tuple(candidates.values()))
    report = judge(
        baselines={n: observation_view(s, mesh=mesh, workload=workload) for n, s in baselines.items()},
        candidates=tuple(observation_view(s, mesh=mesh, workload=workload) for s in candidates.values()),
        plan=plan,
        policy=observation_policy(policy, mesh=mesh, workload=workload),
        references={},
        denylist=denylist,
        now=actor.at,
        clock=read_clock(),  # the wall clock (evidence.taken_at), whatever time the report says
    )
    verdicts = {r.node: r.verdict for r in report.nodes}
    nodes: dict[str, tuple[bool, Sequence[str]]] = {
        name: (
            verdicts.get(name) is Verdict.PASS and not errors[name],
            _headlines(report, name, errors[name]),
        )
        for name in record.canaries
    }
    metrics: dict[str, dict[str, float]] = {n: key_metrics(s, workload=workload) for n, s in candidates.items()}
    doc = dict(record.doc)
    doc["soak"] = dict(doc["soak"], observations=list(doc["soak"]["observations"]))
    passed = add_observation(doc, at=actor.at, by=actor.by, nodes=nodes, metrics=metrics)
    if not passed:
        doc["state"] = str(State.BLOCKED)
    status = soak_status(doc, parse_time(actor.at))
    note = f"observation {'PASS' if passed else 'BLOCK'}" + (f"; {status.summary()}" if status else "")
    event(doc, action="observe", by=actor.by, at=actor.at, note=note)
    if client is not None and not passed:
        for name in record.canaries:
            if not any("vanished" in e for e in errors[name]):
                client.patch_node_labels(name, {WINDOW_STATE: str(State.BLOCKED)})
    saved = _save(store, doc, f"window {window_id}: observation {'PASS' if passed else 'BLOCK'}")
    return Observation(record=saved, report=report, errors=errors, passed=passed)


def key_metrics(snap: Snapshot, *, workload: bool = True) -> dict[str, float]:
    """The values a soak observation records and the window page draws: kernel events, mesh bus bandwidth,
    with a mesh observation the hottest GPU under load and its gap to the others (rules.thermal), and
    with `workload` phase 6's throughput, init time and collective timeouts (`fleet.soak_workload`)."""
    from upgrade_gate.judge.rules.thermal import key_values

    values = {"kernel_events": float(len(snap.events)), **key_values(snap)}
    if workload:
        values.update(workload_metrics(snap))
    for m in measurements_of(snap):
        if m.key in _KEY_METRICS and m.samples:
            values[m.key] = sorted(m.samples)[len(m.samples) // 2]  # the median sample, as the judge reports it
    return values


def _capture(
    client: KubeClient,
    store: BaselineStore,
    record: WindowRecord,
    settings: ExecutorSettings,
    *,
    run_id: str,
    mesh: bool,
    errors: dict[NodeName, list[str]],
    workload: bool = False,
) -> dict[NodeName, Snapshot]:
    from upgrade_gate.fleet.errors import KubeNotFoundError
    from upgrade_gate.fleet.executor import capture_nodes, load_cluster_config, run_vendor_phases
    from upgrade_gate.fleet.window_validate import canary_vendors
    from upgrade_gate.judge.observe import observed_phases
    from upgrade_gate.snapshot.build import build_snapshot
    from upgrade_gate.vendors import vendor_of

    nodes = []
    for name in record.canaries:
        try:
            nodes.append(client.get_node(name))
        except KubeNotFoundError:
            errors[name].append(f"node vanished: {name} no longer exists")
    snapshots: dict[NodeName, Snapshot] = {}
    vendors = canary_vendors(store, nodes, None, errors)  # each canary's baseline's vendor (or its GPU resource)
    nodes = [n for n in nodes if n.name in vendors]
    for name, bundle in (
        capture_nodes(client, nodes, settings, run_id=run_id, vendors=vendors) if nodes else {}
    ).items():
        if isinstance(bundle, str):
            errors[name].append(bundle)
        else:
            snapshots[name] = build_snapshot(bundle)
    if (mesh or workload) and snapshots:
        config = load_cluster_config(client, settings.jobs.namespace)
        results = run_vendor_phases(
            client,
            [n for n in nodes if n.name in snapshots],
            numbers=frozenset({0, *observed_phases(mesh=mesh, workload=workload)}),
            vendors={n: vendor_of(p.name for p in s.probes) for n, s in snapshots.items()},
            config=config,
            settings=settings,
            run_id=run_id + "m",
            snapshots=snapshots,
        )
        snapshots = {n: replace(s, phases=results.get(n, ())) for n, s in snapshots.items()}
    return snapshots


# --------------------------------------------------------------------------- expand


@dataclass(frozen=True, slots=True, kw_only=True)
class Expansion:
    """What `expand` chose."""

    record: WindowRecord
    notes: tuple[str, ...]


def expand_window(client: KubeClient, store: BaselineStore, window_id: str, *, actor: Actor) -> Expansion:
    """Take the next wave of each of the window's classes and start it (cordon, taint, drain)."""
    from upgrade_gate.fleet.window import start_window, window_plan

    record = load_window(store, window_id)
    record.check("expand")
    plan = window_plan(record)
    doc = dict(record.doc)
    rollout = dict(doc.get("rollout") or {"waves": list(plan.waves), "wave": 0, "completed": [], "done": []})
    completed = set(rollout["completed"]) | set(record.canaries)
    label = str(doc["class_label"])
    others = [w.doc for w in list_windows(store) if w.id != window_id]
    picked: list[dict[str, Any]] = []
    notes: list[str] = []
    for cls in sorted({str(c["class"]) for c in doc["canaries"]} | {str(c["class"]) for c in doc["classes"]}):
        members = client.list_nodes(f"{label}={cls}")
        names = [m.name for m in members]
        eligible = [m.name for m in members if ineligible_reason(m) is None]
        choice = choose_wave(
            node_class=cls,
            members=names,
            eligible=eligible,
            completed=completed,
            waves=tuple(rollout["waves"]),
            cap=allowed_count(len(names), plan.canaries),
            held_elsewhere=held_nodes(others, cls),
        )
        notes.append(choice.note)
        picked += [{"node": n, "class": cls, "idle": True, "busy_pods": []} for n in choice.nodes]
    if not picked:
        if all("every node changed" in n for n in notes):
            raise WindowStateError(f"window {window_id}: the rollout is complete ({'; '.join(notes)})")
        raise WindowStateError(f"window {window_id}: no node can be taken now: {'; '.join(notes)}")
    rollout["completed"] = sorted(completed)
    rollout["wave"] = int(rollout["wave"]) + 1
    rollout["notes"] = [n[:4000] for n in notes]
    for key in ("validation", "soak", "baseline"):
        doc.pop(key, None)
    doc.update(rollout=rollout, canaries=picked, state=str(State.PLANNED))
    event(doc, action="expand", by=actor.by, at=actor.at, note=f"wave {rollout['wave']}: " + "; ".join(notes))
    _save(store, doc, f"window {window_id}: expand to wave {rollout['wave']}")
    return Expansion(record=start_window(client, store, window_id, actor=actor), notes=tuple(notes))


# --------------------------------------------------------------------------- status


def rollout_lines(doc: Mapping[str, Any], now: datetime) -> list[str]:
    """What `window status` adds for the soak and the waves: elapsed soak, waves, next action."""
    lines: list[str] = []
    status = soak_status(doc, now)
    if status is not None:
        lines.append(status.summary())
        for obs in doc["soak"]["observations"][-5:]:
            blocked = [n for n, v in obs["nodes"].items() if v["verdict"] != "PASS"]
            lines.append(f"  {obs['at']} {obs['verdict']}" + (f" ({', '.join(blocked)})" if blocked else ""))
    rollout = doc.get("rollout")
    if rollout:
        waves = ", ".join(f"{w:.0%}" for w in rollout["waves"])
        lines.append(f"waves [{waves}]: wave {rollout['wave']} in progress, {len(rollout['completed'])} node(s) done")
        for done in rollout["done"]:
            count = len(done["nodes"])
            lines.append(f"  wave {done['wave']}: {count} node(s) promoted as {done['tag']} at {done['at']}")
    lines.append(f"next: {next_action(doc, now)}")
    return lines


def next_action(doc: Mapping[str, Any], now: datetime) -> str:
    """The command the window waits for."""
    state = State(doc["state"])
    wid = doc["id"]
    if state is State.PLANNED:
        return f"upgrade-gate window start --id {wid}"
    if state is State.STARTED:
        return f"change the canaries, then upgrade-gate window validate --id {wid}"
    if state is State.VALIDATED:
        return f"upgrade-gate window promote --id {wid}"
    if state is State.SOAKING:
        status = soak_status(doc, now)
        if status is not None and not status.blockers():
            return f"upgrade-gate window promote --id {wid}"
        due = status.next_due.strftime("%Y-%m-%dT%H:%M:%SZ") if status else "now"
        return f"upgrade-gate window observe --id {wid} (next due {due})"
    if state is State.BLOCKED:
        wave = int(doc.get("rollout", {}).get("wave", 0))
        where = f" in wave {wave}" if wave else ""
        return f"the gate blocked{where}: fix and `window validate --id {wid}`, or `window rollback --id {wid}`"
    if state is State.PROMOTED:
        return f"upgrade-gate window expand --id {wid} (next wave), or nothing if the rollout is complete"
    return "nothing: the window is closed"
