"""Canary selection for the demo: at most a capped share of a node class changes at once.

docs/architecture.md's rule, with the plan's `canaries` settings (`judge.plan.CanarySettings`): a class of N
nodes gets floor(max_fraction x N) canaries, at least `min`, at most `cap`, never more than the class;
a plan that names `nodes` explicitly gets exactly those. The Kubernetes change window (`window plan`)
applies the same rule with live node state (idle nodes first, never a node someone else cordoned);
the demo's nodes are all idle and schedulable, so the choice here is by name order.

Design decision (2026-11): with 8 nodes the default 10% gives max(1, floor(0.8)) = 1 canary. The demo
plan raises the share to 25% (2 canaries) so one run can show two different failures, and the demo
says so; nothing else about the rule changes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from upgrade_gate.judge.plan import CanarySettings
from upgrade_gate.model import NodeName


def canary_count(settings: CanarySettings, class_size: int) -> int:
    """How many canaries a class of `class_size` nodes gets under `settings`."""
    if class_size <= 0:
        return 0
    n = max(settings.min_nodes, math.floor(settings.max_fraction * class_size + 1e-9))
    if settings.cap is not None:
        n = min(n, settings.cap)
    return min(n, class_size)


def describe_rule(settings: CanarySettings, class_size: int) -> str:
    """e.g. "25% of 8 nodes, at least 1 => 2 canaries"."""
    cap = f", at most {settings.cap}" if settings.cap is not None else ""
    n = canary_count(settings, class_size)
    return (
        f"{settings.max_fraction * 100:g}% of {class_size} nodes, at least {settings.min_nodes}{cap}"
        f" => {n} {'canary' if n == 1 else 'canaries'}"
    )


def select_canaries(nodes: Sequence[NodeName], settings: CanarySettings) -> tuple[NodeName, ...]:
    """The plan's named canaries (those in the class), else the first `canary_count` nodes by name."""
    ordered = sorted(dict.fromkeys(nodes))
    if settings.nodes:
        return tuple(n for n in settings.nodes if n in ordered)
    return tuple(ordered[: canary_count(settings, len(ordered))])
