"""The GPU denylist kept in the baseline store: serials that failed once (pure, no git).

A GPU that failed once does not quietly rejoin the fleet on another node, so the list is keyed by
serial, not by node or BDF. The document (`denylist.json`, schema `denylist`) holds its entries sorted
by serial so diffs stay small. Adding a serial that is already listed keeps the first entry: the first
failure is the evidence that matters, and re-running a deny must not rewrite history.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from upgrade_gate import codec, schemas
from upgrade_gate.errors import InputError
from upgrade_gate.model import GpuSerial, NodeName


@dataclass(frozen=True, slots=True, kw_only=True)
class DenyEntry:
    """One denied GPU: its serial, why, when (ISO 8601 UTC) and on which node it failed."""

    serial: GpuSerial
    reason: str
    added_at: str
    node: NodeName | None = None


Denylist = Mapping[GpuSerial, DenyEntry]


def denylist_from_document(data: Any, *, source: str) -> dict[GpuSerial, DenyEntry]:
    """Validate and decode a denylist document; errors name `source`."""
    schemas.validate("denylist", data, source=source)
    entries: dict[GpuSerial, DenyEntry] = {}
    for i, raw in enumerate(data["entries"]):
        entry = codec.from_jsonable(DenyEntry, raw, path=f"$.entries[{i}]")
        if entry.serial in entries:
            raise InputError(f"{source}: serial {entry.serial!r} is listed twice")
        entries[entry.serial] = entry
    return entries


def denylist_to_document(entries: Denylist) -> dict[str, Any]:
    """The schema-valid document for `entries`, sorted by serial."""
    data = {
        "schema_version": "1",
        "entries": [codec.to_jsonable(entries[s]) for s in sorted(entries)],
    }
    schemas.validate("denylist", data, source="denylist")
    return data


def with_entry(entries: Denylist, entry: DenyEntry) -> dict[GpuSerial, DenyEntry]:
    """`entries` plus `entry`, unless its serial is already denied (the first entry wins)."""
    out = dict(entries)
    out.setdefault(entry.serial, entry)
    return out
