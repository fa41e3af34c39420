"""Draining a canary before its change: its GPU pods leave through the Eviction API.

Design decisions
- A real change window changes the driver under the canaries, so whatever holds their GPUs must go
  first (issue 11, defect 3). `window start` cordons and taints first (nothing new lands), then calls
  `drain_node` per canary, unless `--no-drain`.
- Only pods that hold GPUs (`amd.com/gpu`, not owned by a DaemonSet, not finished) are evicted: the
  device plugin, exporters and the node's other system pods stay, as `kubectl drain
  --ignore-daemonsets --pod-selector` would leave them.
- Evictions go through the Eviction API (`pods/eviction`), never a plain delete, so the workloads'
  PodDisruptionBudgets are respected: a 429 means "not now"; the pod is tried again every poll until
  `timeout_s`, then `DrainError` (exit 4) names each pod still there and the budget's refusal. The
  nodes stay cordoned and tainted and the window stays `planned`: `window start` again continues.
- An evicted pod counts as gone only once its kubelet confirmed the deletion (it no longer lists).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from upgrade_gate.errors import EnvironmentFailure

if TYPE_CHECKING:
    from upgrade_gate.fleet.kube import KubeClient


class DrainError(EnvironmentFailure):
    """A canary's GPU pods could not all be evicted in time (a PodDisruptionBudget, a stuck pod)."""


def drain_node(
    client: KubeClient,
    node: str,
    *,
    timeout_s: float = 300.0,
    poll_s: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[str, ...]:
    """Evict the GPU pods of `node` and wait until they are gone; the evicted `namespace/name`s."""
    pods = client.gpu_pods_on_node(node)
    waiting: dict[str, str | None] = dict.fromkeys(pods)  # pod -> the last refusal (None: not refused)
    asked: set[str] = set()
    deadline = clock() + timeout_s
    while True:
        for pod in list(waiting):
            namespace, name = pod.split("/", 1)
            if not client.pod_exists(name, namespace):
                del waiting[pod]
            elif waiting[pod] is not None or pod not in asked:  # not asked yet, or refused: ask (again)
                asked.add(pod)
                waiting[pod] = client.evict_pod(name, namespace)
        if not waiting:
            return pods
        if clock() >= deadline:
            detail = "; ".join(f"{p}: {why or 'evicted, still terminating'}" for p, why in sorted(waiting.items()))
            raise DrainError(
                f"node {node}: {len(waiting)} GPU pod(s) not evicted within {timeout_s:g}s ({detail}); "
                "the canaries stay cordoned and tainted: run `window start` again, or --no-drain"
            )
        sleep(poll_s)
