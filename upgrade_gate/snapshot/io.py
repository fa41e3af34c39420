"""Read and write snapshot documents: canonical JSON, schema-checked on every write and read.

Canonical means sorted keys, two-space indent and a trailing newline, so the same snapshot always
serialises to the same bytes and the baseline store's git diffs stay small and meaningful.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from upgrade_gate import codec, docio, schemas
from upgrade_gate.docio import write_text_atomic
from upgrade_gate.errors import InputError
from upgrade_gate.model import Snapshot

# A snapshot file read at all: the bench fleet's 8-GPU node with 5 samples a metric is 132 KB as written;
# a 64-GPU node re-measured to 20 samples stays under ~5 MB. Larger is refused before it is parsed.
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024


def snapshot_to_dict(snapshot: Snapshot) -> dict[str, Any]:
    """Plain-JSON form of a snapshot, validated against the snapshot schema."""
    data: dict[str, Any] = codec.to_jsonable(snapshot)
    schemas.validate("snapshot", data, source=f"snapshot of {snapshot.node.name}")
    return data


def canonical_json(data: Any) -> str:
    """The one serialisation every file upgrade-gate writes uses."""
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def dumps_snapshot(snapshot: Snapshot) -> str:
    """Canonical JSON text of a snapshot (schema-checked)."""
    return canonical_json(snapshot_to_dict(snapshot))


def snapshot_from_dict(data: Any, *, source: str) -> Snapshot:
    """Validate and decode a snapshot document; errors name `source`."""
    schemas.validate("snapshot", data, source=source)
    try:
        return codec.from_jsonable(Snapshot, data)
    except InputError as exc:
        raise type(exc)(f"{source}: {exc}") from exc


def loads_snapshot(text: str | bytes, *, source: str) -> Snapshot:
    """Parse JSON text into a Snapshot (schema-checked); one-line error naming `source` on failure."""
    return snapshot_from_dict(docio.parse_json(text, source=source), source=source)


def load_snapshot(path: Path) -> Snapshot:
    """Read a snapshot file: the one reader of snapshot documents (parse, schema, decode)."""
    return loads_snapshot(docio.read_bytes(path, limit=MAX_SNAPSHOT_BYTES), source=str(path))


def load_snapshot_fast(path: Path) -> Snapshot:
    """A snapshot file by strict typed decode (msgspec, C) instead of a JSON Schema walk: `gate`'s
    candidates at fleet scale. Unknown keys, wrong types and the model's value constraints are
    refused (`codec.decode_json`), as are what only the schema says (enums, const, date-time): a one-field
    edit that `load_snapshot` refuses is refused here too (tests/test_docio.py)."""
    return codec.decode_json(Snapshot, docio.read_bytes(path, limit=MAX_SNAPSHOT_BYTES), source=str(path))


def write_snapshot(snapshot: Snapshot, path: Path) -> None:
    """Write a snapshot atomically in canonical form."""
    write_text_atomic(path, dumps_snapshot(snapshot))
