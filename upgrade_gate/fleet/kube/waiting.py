"""Waiting for an object to finish: a read, then a watch until something worth a re-read happens.

Design decisions
- (issue 14) Waits watch instead of polling: polling every 2 s cost 1-2 s per Job (half an interval on
  average, plus the Job controller's own 1 s batching of pod updates). The loop is list-then-watch,
  as an informer does: a read gives the state and the resourceVersion of the list; if the state is
  final the wait ends; else one watch request (`timeoutSeconds` = at most `watch_chunk_s`, never past
  the deadline) runs from that resourceVersion until an event the caller marks as worth a re-read
  (`wake`: a pod that ended, an object deleted, ...). Whatever ends the watch - such an event, its
  timeout, the server closing it, 410 Gone (the resourceVersion expired), a dropped connection - the
  loop reads again, and only a read decides. A missed or garbled event can therefore delay a wait by
  at most one watch chunk; it can neither end it early nor make it pass.
- Fail closed: when the deadline passes (or `stop` says so) without a final state, the wait raises
  `KubeWaitTimeoutError`; it never returns a state that is not final.
- `stop` is asked after every read and between events (a fleet run aborting, the Job controller
  refusing the pod); with no events it is asked at the end of each watch chunk.
- A server that refuses to watch a resource (RBAC without the `watch` verb, a server without watch) is
  remembered on the client (`watch_refused`, per resource) and the waits on it poll at `poll_s`; so
  does a state the caller marks as not worth watching (`watchable`: e.g. the pod ended and only the
  Job's condition is missing, which no pod event announces). A watch that ends at once without an
  event (a server error on the watch request) also waits `poll_s` before the next read, so nothing
  spins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from upgrade_gate.fleet.errors import KubeWaitTimeoutError, describe
from upgrade_gate.fleet.kube.api import ApiBase
from upgrade_gate.fleet.kube.shapes import WatchEvent, WatchExpired, WatchRefused

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class Watched:
    """What to watch while waiting: a collection path, its selectors, which events are worth a re-read."""

    path: str
    query: Mapping[str, str | None]
    wake: Callable[[WatchEvent], bool]


def await_final(
    api: ApiBase,
    *,
    resource: str,
    name: str,
    namespace: str,
    read: Callable[[], tuple[T, str]],
    final: Callable[[T], bool],
    watched: Watched,
    timeout_s: float,
    poll_s: float,
    stop: Callable[[], bool] | None = None,
    watchable: Callable[[T], bool] | None = None,
) -> T:
    """Read (state, resourceVersion) until `final(state)`; between reads, watch (see the module docstring)."""
    deadline = api._clock() + timeout_s
    while True:
        state, version = read()
        if final(state):
            return state
        remaining = deadline - api._clock()
        if remaining <= 0 or (stop is not None and stop()):
            why = "cancelled" if remaining > 0 else f"not finished after {timeout_s:g}s"
            raise KubeWaitTimeoutError(
                f"{describe('wait', resource, name, namespace)}: {why}",
                verb="wait", resource=resource, name=name, namespace=namespace,
            )  # fmt: skip
        kind = watched.path.rsplit("/", 1)[-1]
        if kind not in api.watch_refused and version and (watchable is None or watchable(state)):
            began = api._clock()
            try:
                if _watch_once(api, watched, version, min(remaining, api.watch_chunk_s), stop):
                    continue  # an event worth a re-read, or `stop`: read now
            except WatchExpired:
                continue  # 410 Gone: list again
            except WatchRefused as exc:
                api.watch_refused[kind] = str(exc)
            else:
                if api._clock() - began >= min(0.5, remaining):
                    continue  # the watch ran its course: read again (nothing missed can pass unseen)
        api._sleep(max(0.0, min(poll_s, deadline - api._clock())))


def _watch_once(api: ApiBase, watched: Watched, version: str, seconds: float, stop: Callable[[], bool] | None) -> bool:
    """One watch request; True when it ended on an event worth a re-read (or on `stop`)."""
    for event in api._watch(watched.path, watched.query, resource_version=version, timeout_s=seconds):
        if event.type == "BOOKMARK":
            continue
        if watched.wake(event) or (stop is not None and stop()):
            return True
    return False
