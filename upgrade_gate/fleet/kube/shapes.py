"""The small values the request loop (`fleet.kube.api`) and the verb modules share; no `kubernetes` import.

Retry bounds, watch events and the two watch outcomes that are not events (410 Gone, a refusal),
path quoting and the accessors of list answers (untrusted JSON: a missing or mistyped field yields
the empty value).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Bounds of the retry loop; tests use tiny delays."""

    max_attempts: int = 6
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    max_total_s: float = 60.0
    jitter: float = 0.2  # +-20 % of each back-off delay
    request_timeout_s: float = 30.0
    conflict_attempts: int = 5

    def backoff(self, attempt: int, rand: float) -> float:
        """Delay before retry number `attempt` (1-based), with jitter from `rand` in [0, 1)."""
        delay = min(self.max_delay_s, self.base_delay_s * (2.0 ** (attempt - 1)))
        return max(0.0, delay * (1.0 + self.jitter * (2.0 * rand - 1.0)))


class WatchRefused(Exception):
    """The server refused a watch request (status `status`): poll instead."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"watch refused ({status}): {reason}")
        self.status = status


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One watch event: ADDED / MODIFIED / DELETED / BOOKMARK and the object's JSON (untrusted)."""

    type: str
    object: Json

    @property
    def resource_version(self) -> str:
        """The event object's resourceVersion (a bookmark carries only that)."""
        return object_version(self.object)


class WatchExpired(Exception):
    """410 Gone: the resourceVersion the watch started from is too old; list again."""


def q(segment: str) -> str:
    """One path segment, percent-encoded (names are validated, this is belt and braces)."""
    return urllib.parse.quote(segment, safe="")


def items(page: Mapping[str, Any]) -> list[Json]:
    """The object items of a list answer (untrusted: non-objects dropped)."""
    raw = page.get("items")
    return [i for i in raw if isinstance(i, dict)] if isinstance(raw, list) else []


def object_version(obj: Mapping[str, Any]) -> str:
    """An object's resourceVersion ("" when it has none)."""
    meta = obj.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""


def list_version(page: Mapping[str, Any]) -> str:
    """The resourceVersion of a list answer (where a watch continues from)."""
    meta = page.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
