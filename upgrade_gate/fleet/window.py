"""The canary change window on Kubernetes: plan -> start -> validate -> promote, or rollback.

Each step re-reads the window's record from the baseline store (`fleet.window_state`), acts on the
cluster, and writes the record back, so any operator can continue a window another one started.

What each step does to the canary nodes (by merge patch; taints read-modify-write, see `fleet.kube`):
- start: annotation `upgrade-gate/cordoned-by=<window id>` first (so a crash after the cordon still
  tells whose cordon it is), cordon, taint `upgrade-gate/canary=<change>:NoSchedule`, labels
  `upgrade-gate/canary=<change>` and `upgrade-gate/window-state=started`, then the canaries' GPU pods
  are evicted through the Eviction API (`fleet.drain`; `--no-drain` skips it). Idempotent: repeating
  it after a crash or a drain that timed out finishes the job.
- validate (`fleet.window_validate`): capture and CVF phases through the executor (Jobs tolerate the
  canary taint and are pinned with nodeName, so they run on the cordoned node), CVF labels/annotations
  written as CVF does, then the judge against each canary's baseline and its class reference from the
  store. PASS ->
  `validated`, anything else (a finding, a failed capture, a vanished node) -> `blocked`.
- promote (PASS only): the judged candidate snapshots become the new baselines, tagged with the plan's
  target (`rocm-6.2.0`; `<target>+<window id>` when another window already took the tag); the taint
  goes, the cordon goes only if the annotation says it was ours; `upgrade-gate/canary` is removed and
  `upgrade-gate/change-id=<change>` set.
- rollback: the canaries stay cordoned and tainted (nothing new lands on a node whose change failed),
  `upgrade-gate/window-state=rolled-back` and the reason as annotation; the reason is recorded.
A canary that no longer exists is skipped by start/promote/rollback and blocks validate.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from upgrade_gate import docio
from upgrade_gate.errors import InputError, NotFoundError
from upgrade_gate.fleet.canary import CanarySelection, select_canaries, select_peer
from upgrade_gate.fleet.cronjobs import soak_cronjob_name
from upgrade_gate.fleet.drain import drain_node
from upgrade_gate.fleet.errors import KubeNotFoundError
from upgrade_gate.fleet.labels import (
    CANARY,
    CHANGE_ID,
    CORDONED_BY,
    NODE_CLASS,
    PREFIX,
    WINDOW_STATE,
)
from upgrade_gate.fleet.manifests import JobSettings, Toleration
from upgrade_gate.fleet.node_vendor import describe_selector, gpu_nodes
from upgrade_gate.fleet.objects import KubeNode, Taint
from upgrade_gate.fleet.peer import release_leftover
from upgrade_gate.fleet.rollout import (
    held_nodes,
    parse_time,
    record_wave_done,
    skip_soak,
    soak_status,
)
from upgrade_gate.fleet.window_state import (
    State,
    WindowRecord,
    WindowStateError,
    event,
    find_window,
    list_windows,
    load_candidate,
    load_window,
    save_window,
)
from upgrade_gate.judge.plan import ChangePlan, plan_from_dict
from upgrade_gate.model import (
    NodeName,
)
from upgrade_gate.validate.cvf import label_value

if TYPE_CHECKING:
    from upgrade_gate.fleet.kube import KubeClient
    from upgrade_gate.store.gitstore import BaselineStore

ROLLBACK_REASON = PREFIX + "rollback-reason"


@dataclass(frozen=True, slots=True, kw_only=True)
class Actor:
    """Who acts and when (recorded in the window's history)."""

    by: str
    at: str


def _peer_of(doc: Mapping[str, Any]) -> NodeName | None:
    peer = doc.get("peer")
    return NodeName(peer["node"]) if isinstance(peer, Mapping) else None


def change_label(change_id: str) -> str:
    """The change id as a label / taint value."""
    return label_value(change_id)


def load_plan_document(path: Path) -> tuple[ChangePlan, dict[str, Any], str]:
    """(plan, its raw document, sha256 of the file) for recording in the window.

    The file is read once, to docio's YAML cap, and the digest is of the bytes that were parsed (a
    second read was unbounded, and could see another file than the one judged)."""
    raw_bytes = docio.read_bytes(path, limit=docio.MAX_YAML_BYTES)
    try:
        text = raw_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: unreadable: {exc}") from exc
    data = docio.parse_yaml(text, source=str(path))
    plan = plan_from_dict(data, source=str(path))
    return plan, json.loads(json.dumps(data)), hashlib.sha256(raw_bytes).hexdigest()


def window_plan(record: WindowRecord) -> ChangePlan:
    """The plan as recorded in the window."""
    plan = record.doc["plan"]
    return plan_from_dict(plan["document"], source=f"window {record.id} (plan {plan['source']})")


def target_tag(plan: ChangePlan) -> str:
    """The tag of the baselines a promote saves: the plan's target version, else its id."""
    change = plan.change
    for what, moved in (("rocm", change.rocm), ("driver", change.driver), ("kernel", change.kernel),
                        ("vbios", change.vbios), ("nic-fw", change.nic_firmware)):  # fmt: skip
        if moved is not None:
            return f"{what}-{moved.to_version}"
    return plan.id


# --------------------------------------------------------------------------- plan


def plan_window(
    client: KubeClient,
    store: BaselineStore,
    plan_path: Path,
    *,
    window_id: str | None,
    actor: Actor,
    namespace: str,
    class_label: str = NODE_CLASS,
    selector: str | None = None,
    tolerations: Sequence[Toleration] = JobSettings().tolerations,
) -> tuple[WindowRecord, CanarySelection]:
    """Choose the canaries per class and record the window as `planned`."""
    plan, raw, digest = load_plan_document(plan_path)
    wid = window_id or change_label(plan.id).lower()
    existing = find_window(store, wid)
    if existing is not None:
        existing.check("plan")
    nodes = gpu_nodes(client, selector)
    busy: dict[str, tuple[str, ...]] = {}
    if plan.canaries.prefer_idle:
        for node in nodes:
            if not node.unschedulable and node.labels.get(class_label):
                busy[node.name] = client.gpu_pods_on_node(node.name)
    held = held_nodes([w.doc for w in list_windows(store)], None, exclude=wid)
    selection = select_canaries(
        nodes, plan.canaries, class_label=class_label, busy=busy, tolerations=tolerations, held=held
    )
    if not selection.canaries:
        why = "".join(f"\n  {node}: {reason}" for node, reason in selection.excluded)
        raise InputError(
            f"plan {plan_path}: no canary could be chosen among {len(nodes)} node(s) matching "
            f"{describe_selector(selector)} "
            f"(node class label {class_label})" + (f"; passed over:{why}" if why else "")
        )
    peer: dict[str, Any] | None = None
    if len(selection.canaries) == 1:  # phases 4-5 pair nodes: one canary needs a known-good partner
        (canary,) = selection.canaries
        for node in nodes:
            if node.name not in busy and node.labels.get(class_label) == canary.node_class and not node.unschedulable:
                busy[node.name] = client.gpu_pods_on_node(node.name)
        name, passed = select_peer(nodes, canary, change=change_label(plan.id), class_label=class_label, busy=busy,
                                   held=held, tolerations=tolerations)  # fmt: skip
        if name is None:
            why = "".join(f"; {node}: {reason}" for node, reason in passed) or "; it is the only node of its class"
            raise InputError(
                f"plan {plan_path}: one canary ({canary.node}, class {canary.node_class}) and no peer for phases 4-5: "
                f"a peer is a node of the same class, idle, Ready, not cordoned, not a canary, still on the old "
                f"version{why} (free one, or choose two canaries with canaries.min: 2)"
            )
        peer = {"node": name, "class": canary.node_class, "phases": [4, 5]}
    doc: dict[str, Any] = {
        "schema_version": "1",
        "id": wid,
        "change_id": plan.id,
        "state": str(State.PLANNED),
        "plan": {"id": plan.id, "source": str(plan_path), "sha256": digest, "document": raw},
        "class_label": class_label,
        "namespace": namespace,
        "canaries": [
            {"node": c.node, "class": c.node_class, "idle": c.idle, "busy_pods": list(c.busy_pods)}
            for c in selection.canaries
        ],
        "classes": [
            {"class": s.node_class, "size": s.size, "eligible": s.eligible, "allowed": s.allowed, "chosen": s.chosen}
            for s in selection.classes
        ],
        "excluded": [{"node": n, "reason": why} for n, why in selection.excluded],
        "history": list(existing.doc["history"]) if existing is not None else [],
    }
    note = f"{len(selection.canaries)} canaries"
    if peer is not None:
        doc["peer"] = peer
        note += f"; peer {peer['node']} held (cordon + taint) only while phases 4-5 run"
    event(doc, action="plan", by=actor.by, at=actor.at, note=note)
    return save_window(store, doc, f"window {wid}: planned ({plan.id})"), selection


# --------------------------------------------------------------------------- start


def canary_nodes(client: KubeClient, names: Sequence[NodeName]) -> dict[NodeName, KubeNode | None]:
    """The canaries' Node objects; None for one that no longer exists."""
    out: dict[NodeName, KubeNode | None] = {}
    for name in names:
        try:
            out[name] = client.get_node(name)
        except KubeNotFoundError:
            out[name] = None
    return out


def start_window(
    client: KubeClient,
    store: BaselineStore,
    window_id: str,
    *,
    actor: Actor,
    drain: bool = True,
    drain_timeout_s: float = 300.0,
    poll_s: float = 2.0,
) -> WindowRecord:
    """Cordon, taint and label the canaries, then evict their GPU pods (unless `drain` is off); record `started`."""
    record = load_window(store, window_id)
    record.check("start")
    value = change_label(record.doc["change_id"])
    nodes = canary_nodes(client, record.canaries)
    gone = [n for n, node in nodes.items() if node is None]
    if gone:
        raise WindowStateError(f"window {window_id}: canary node(s) {', '.join(gone)} no longer exist; plan again")
    for name, node in nodes.items():
        assert node is not None
        ours = node.annotations.get(CORDONED_BY) == window_id
        if node.unschedulable and not ours:
            raise WindowStateError(
                f"window {window_id}: canary {name} was cordoned by someone else since the plan; plan again"
            )
    for name in nodes:
        client.patch_node_metadata(
            name, labels={CANARY: value, WINDOW_STATE: str(State.STARTED)}, annotations={CORDONED_BY: window_id}
        )
        client.cordon(name)
        client.add_taint(name, Taint(key=CANARY, value=value, effect="NoSchedule"))
    evicted: list[str] = []
    if drain:  # after the cordon and taint, so that nothing new lands while the GPU pods leave
        for name in nodes:
            evicted += drain_node(client, name, timeout_s=drain_timeout_s, poll_s=poll_s)
    note = "cordoned and tainted " + ", ".join(nodes)
    note += (f"; evicted {', '.join(evicted)}" if evicted else "; no GPU pods to evict") if drain else "; --no-drain"
    doc = dict(record.doc, state=str(State.STARTED))
    event(doc, action="start", by=actor.by, at=actor.at, note=note)
    return save_window(store, doc, f"window {window_id}: started")


# --------------------------------------------------------------------------- promote / rollback


def promote_window(
    client: KubeClient,
    store: BaselineStore,
    window_id: str,
    *,
    actor: Actor,
    skip_soak_reason: str | None = None,
) -> WindowRecord:
    """Save the judged snapshots as baselines (tagged), untaint and uncordon; record `promoted`.

    From `soaking`, only once the soak is complete (see `fleet.rollout`), or with `skip_soak_reason`.
    """
    from upgrade_gate.store.gitstore import TagExistsError

    record = load_window(store, window_id)
    record.check("promote")
    plan = window_plan(record)
    doc = dict(record.doc)
    if record.state is State.SOAKING:
        status = soak_status(doc, parse_time(actor.at))
        assert status is not None, "a soaking window records its soak"
        if skip_soak_reason is not None and not status.failed:
            if not skip_soak_reason.strip():
                raise InputError("--reason: say why the soak is cut short")
            skip_soak(doc, by=actor.by, at=actor.at, reason=skip_soak_reason)
            event(doc, action="skip-soak", by=actor.by, at=actor.at, note=f"{status.summary()}; {skip_soak_reason}")
            record = save_window(store, doc, f"window {window_id}: soak skipped")
            doc = dict(record.doc)
        elif status.blockers():
            raise WindowStateError(
                f"window {window_id} is soaking: {'; '.join(status.blockers())}; promote when the soak is complete "
                "(`window observe` records observations), or `promote --skip-soak --reason TEXT`"
            )
    if "baseline" not in doc:
        try:
            snaps = [load_candidate(store, window_id, n) for n in record.canaries]
        except NotFoundError as exc:
            raise WindowStateError(f"window {window_id}: a judged snapshot is missing ({exc}); validate again") from exc
        tag = target_tag(plan)
        wave = int(doc.get("rollout", {}).get("wave", 0))
        if wave:
            tag = f"{tag}+{window_id}.wave{wave}"
        message = f"window {window_id}: promote {plan.id} on {', '.join(record.canaries)}"
        try:
            sha = store.save(snaps, tag=tag, message=message)
        except TagExistsError:
            tag = f"{tag}+{window_id}"
            sha = store.save(snaps, tag=tag, message=message)
        doc["baseline"] = {"commit": sha, "tag": tag}
        record = save_window(store, doc, f"window {window_id}: baselines saved as {tag}")  # crash-safe point
        doc = dict(record.doc)
    value = change_label(doc["change_id"])
    for name, node in canary_nodes(client, record.canaries).items():
        if node is None:
            continue
        client.remove_taint(name, CANARY)
        if node.annotations.get(CORDONED_BY) == window_id:
            client.uncordon(name)
        client.patch_node_metadata(
            name,
            labels={CANARY: None, CHANGE_ID: value, WINDOW_STATE: str(State.PROMOTED)},
            annotations={CORDONED_BY: None},
        )
    client.delete_cronjob(soak_cronjob_name(window_id), str(doc["namespace"]))
    release_leftover(client, window_id, _peer_of(doc), lambda note: event(doc, action="release-peer", by=actor.by,
                                                                          at=actor.at, note=note))  # fmt: skip
    doc["state"] = str(State.PROMOTED)
    record_wave_done(doc, plan, at=actor.at)
    event(doc, action="promote", by=actor.by, at=actor.at, note=f"baselines tagged {doc['baseline']['tag']}")
    return save_window(store, doc, f"window {window_id}: promoted")


def rollback_window(
    client: KubeClient, store: BaselineStore, window_id: str, *, reason: str, actor: Actor
) -> WindowRecord:
    """Keep the canaries cordoned and tainted, record the reason; record `rolled-back`."""
    from upgrade_gate.fleet.executor import cvf_metadata

    record = load_window(store, window_id)
    record.check("rollback")
    if not reason.strip():
        raise InputError("--reason: say why the change is rolled back")
    for name, node in canary_nodes(client, record.canaries).items():
        if node is not None:  # the CVF labels validate wrote describe the change that is rolled back (issue 28)
            labels, annotations = cvf_metadata(node, ())
            client.patch_node_metadata(
                name,
                labels={**labels, WINDOW_STATE: str(State.ROLLED_BACK)},
                annotations={**annotations, ROLLBACK_REASON: reason},
            )
    client.delete_cronjob(soak_cronjob_name(window_id), str(record.doc["namespace"]))
    doc = dict(record.doc, state=str(State.ROLLED_BACK), rollback_reason=reason)
    release_leftover(client, window_id, _peer_of(doc), lambda note: event(doc, action="release-peer", by=actor.by,
                                                                          at=actor.at, note=note))  # fmt: skip
    event(doc, action="rollback", by=actor.by, at=actor.at, note=reason)
    return save_window(store, doc, f"window {window_id}: rolled back")
