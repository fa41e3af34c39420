"""Canary selection for a change window (pure): a capped share of each node class, idle nodes first.

Rules (docs/architecture.md "Fail closed": canary selection never disrupts more than a capped share of a class):
- Nodes are grouped by their node-class label (default `upgrade-gate/node-class`, configurable). A node
  without the label is not a candidate (its class is unknown, so its share cannot be capped).
- Per class: `max(min, floor(max_fraction * class size))` canaries, then at most `cap` (plan
  `canaries: {max_fraction: 0.10, min: 1, cap: N}`), never more than the class has eligible nodes.
  With the defaults a class of 8 gets one canary (10% of 8 rounds down to 0, and at least one).
- Eligible: schedulable (a node someone already cordoned is never taken: it is being drained or repaired
  by someone else, and uncordoning it at promote would undo their work), not already a canary of
  another window, not NotReady, and every NoSchedule/NoExecute taint tolerated by the tolerations the
  Jobs carry (`JobSettings.tolerations`, plus `--tolerate`): fleets keep permanent taints (a dedicated
  GPU pool) that their Jobs tolerate, while `node.kubernetes.io/not-ready` on a new node is not.
- Every node passed over is listed with its reason (the window records them; `window plan` prints
  them when no canary could be chosen).
- `prefer_idle`: nodes with no non-DaemonSet pod asking for GPUs come first (the caller finds those pods
  with `KubeClient.gpu_pods_on_node`); within a group, by name, so a plan is reproducible.
- Explicit `canaries.nodes` in the plan replace the choice, but each must exist, have a class and be
  eligible, and the per-class cap still holds: a plan cannot talk the gate into draining a class.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from upgrade_gate.errors import ConfigError
from upgrade_gate.fleet.labels import CANARY, CHANGE_ID, NODE_CLASS
from upgrade_gate.fleet.manifests import JobSettings, Toleration
from upgrade_gate.fleet.objects import KubeNode
from upgrade_gate.judge.plan import CanarySettings
from upgrade_gate.model import NodeName

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True, kw_only=True)
class Canary:
    """One chosen canary."""

    node: NodeName
    node_class: str
    idle: bool
    busy_pods: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassShare:
    """How many canaries one class gets, and from how many nodes."""

    node_class: str
    size: int
    eligible: int
    allowed: int
    chosen: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CanarySelection:
    """The chosen canaries, the share per class and why the other nodes were passed over."""

    canaries: tuple[Canary, ...]
    classes: tuple[ClassShare, ...]
    excluded: tuple[tuple[NodeName, str], ...]


def ineligible_reason(node: KubeNode, tolerations: Sequence[Toleration] = JobSettings().tolerations) -> str | None:
    """Why a node cannot be a canary, or None."""
    if node.unschedulable:
        return "already cordoned (someone else's maintenance)"
    if CANARY in node.labels:
        return f"already a canary of change {node.labels[CANARY]}"
    if node.ready is False:
        return "NotReady"
    for taint in node.taints:
        if taint.effect in _BLOCKING_EFFECTS and not any(
            t.tolerates(taint.key, taint.value, taint.effect) for t in tolerations
        ):
            return f"tainted {taint}, which the Jobs do not tolerate (--tolerate to add a toleration)"
    return None


def select_peer(
    nodes: Sequence[KubeNode],
    canary: Canary,
    *,
    change: str,
    class_label: str = NODE_CLASS,
    busy: Mapping[str, Sequence[str]] | None = None,
    held: Mapping[str, str] | None = None,
    tolerations: Sequence[Toleration] = JobSettings().tolerations,
) -> tuple[NodeName | None, tuple[tuple[NodeName, str], ...]]:
    """A partner for phases 4-5 of a window with one canary (issue 28), and why each other node of its class
    is not one: same class, not a canary, eligible as a canary would be (Ready, not cordoned by anyone, its
    taints tolerated), not held by an open window, idle, and still on the old version (no
    `upgrade-gate/change-id` of this `change`): it is the known-good side of the pair. First by name."""
    busy = busy or {}
    held = held or {}
    passed: list[tuple[NodeName, str]] = []
    for node in sorted(nodes, key=lambda n: n.name):
        if node.name == canary.node or node.labels.get(class_label) != canary.node_class:
            continue
        why = f"held by open window {held[node.name]}" if node.name in held else ineligible_reason(node, tolerations)
        if why is None and busy.get(node.name):
            why = f"busy: {', '.join(busy[node.name])}"
        if why is None and node.labels.get(CHANGE_ID) == change:
            why = f"already runs change {change} (a peer is on the old version)"
        if why is None:
            return node.name, tuple(passed)
        passed.append((node.name, why))
    return None, tuple(passed)


def allowed_count(size: int, settings: CanarySettings) -> int:
    """Canaries a class of `size` nodes may have: max(min, floor(fraction * size)), capped."""
    count = max(settings.min_nodes, math.floor(settings.max_fraction * size + 1e-9))
    if settings.cap is not None:
        count = min(count, settings.cap)
    return min(count, size)


def select_canaries(
    nodes: Sequence[KubeNode],
    settings: CanarySettings,
    *,
    class_label: str = NODE_CLASS,
    busy: Mapping[str, Sequence[str]] | None = None,
    held: Mapping[str, str] | None = None,
    tolerations: Sequence[Toleration] = JobSettings().tolerations,
) -> CanarySelection:
    """Pick canaries per class (see the module docstring); ConfigError for an impossible explicit list.

    `held` (node -> window id) are nodes other open windows hold: they are not candidates, and they
    count against their class's share, so all windows of a class together stay within its cap.
    """
    busy = busy or {}
    held = held or {}
    by_class: dict[str, list[KubeNode]] = {}
    excluded: list[tuple[NodeName, str]] = []
    for node in sorted(nodes, key=lambda n: n.name):
        cls = node.labels.get(class_label)
        if not cls:
            excluded.append((node.name, f"no {class_label} label"))
            continue
        by_class.setdefault(cls, []).append(node)
    explicit = set(settings.nodes)
    known = {n.name for n in nodes}
    if explicit - known:
        raise ConfigError(f"plan canaries.nodes: no such node: {', '.join(sorted(explicit - known))}")
    canaries: list[Canary] = []
    shares: list[ClassShare] = []
    for cls, members in sorted(by_class.items()):
        eligible: list[KubeNode] = []
        taken = sorted({held[n.name] for n in members if n.name in held})
        for node in members:
            why = (
                f"held by open window {held[node.name]}" if node.name in held else ineligible_reason(node, tolerations)
            )
            if why is None:
                eligible.append(node)
            else:
                excluded.append((node.name, why))
                if node.name in explicit:
                    raise ConfigError(f"plan canaries.nodes: {node.name} cannot be a canary: {why}")
        cap = allowed_count(len(members), settings)
        in_use = sum(1 for n in members if n.name in held)
        allowed = max(0, cap - in_use)
        if explicit:
            picked = [n for n in eligible if n.name in explicit]
            if len(picked) > allowed:
                raise ConfigError(
                    f"plan canaries.nodes: {len(picked)} nodes of class {cls} exceed its share of {allowed} "
                    f"({settings.max_fraction:.0%} of {len(members)}, min {settings.min_nodes}"
                    + (f", cap {settings.cap})" if settings.cap is not None else ")")
                )
        else:
            ordered = sorted(eligible, key=lambda n: (bool(busy.get(n.name)) and settings.prefer_idle, n.name))
            picked = ordered[:allowed]
        for node in picked:
            pods = tuple(busy.get(node.name, ()))
            canaries.append(Canary(node=node.name, node_class=cls, idle=not pods, busy_pods=pods))
        for node in eligible:
            if node not in picked and in_use:
                excluded.append((node.name, f"class {cls} disruption cap {cap}: {in_use} node(s) held by open "
                                            f"window(s) {', '.join(taken)}"))  # fmt: skip
            elif node not in picked:
                excluded.append((node.name, f"not needed: class {cls} share is {allowed}"))
        shares.append(
            ClassShare(node_class=cls, size=len(members), eligible=len(eligible), allowed=allowed, chosen=len(picked))
        )
    return CanarySelection(
        canaries=tuple(canaries), classes=tuple(shares), excluded=tuple(sorted(excluded, key=lambda e: e[0]))
    )
