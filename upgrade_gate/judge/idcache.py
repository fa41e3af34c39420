"""One cache for values derived from an object the judge reads many times (a snapshot, its GPU tuple,
a class reference), keyed by the object's identity: snapshots hold dicts and are not hashable. The
object is kept alive in its entry, so its id is never reused while cached; the cache is bounded
(cleared when full) and the judge clears the per-snapshot ones after each batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class IdCache(Generic[K, V]):
    """`get(obj, compute)`: `compute(obj)` once per object while it stays cached."""

    def __init__(self, limit: int) -> None:
        self._entries: dict[int, tuple[K, V]] = {}
        self._limit = limit

    def get(self, obj: K, compute: Callable[[K], V]) -> V:
        hit = self._entries.get(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        value = compute(obj)
        if len(self._entries) >= self._limit:
            self._entries.clear()
        self._entries[id(obj)] = (obj, value)
        return value

    def peek(self, obj: K) -> V | None:
        """The cached value for `obj`, None when there is none."""
        hit = self._entries.get(id(obj))
        return hit[1] if hit is not None and hit[0] is obj else None

    def put(self, obj: K, value: V) -> None:
        """Remember `value` for `obj` (computed alongside something else)."""
        if len(self._entries) >= self._limit:
            self._entries.clear()
        self._entries[id(obj)] = (obj, value)

    def clear(self) -> None:
        self._entries.clear()
