"""Read and write snapshot documents: canonical JSON, schema-checked on every write and read.

Canonical means sorted keys, two-space indent and a trailing newline, so the same snapshot always
serialises to the same bytes and the baseline store's git diffs stay small and meaningful.

Two document forms decode to the one model (issue 29): schema v1 (`schemas/snapshot.schema.json`, what
captures, bundles and older stores hold, readable forever) and v2, the columnar form
(`model.columnar`, `schemas/snapshot-v2.schema.json`), which the baseline store writes. Every reader here
takes either, told apart by the document's `schema_version`; writers write v1 unless asked for v2 (the
store, and `snapshot` and `validate` for the candidates they write: `CAPTURE_VERSION`). v2's
canonical text writes a list or object that holds no other on one line (a metric's samples, a sweep's
settings, a GPU link), the rest as v1: about a third of v1's bytes, and diffs still line by line.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import msgspec

from upgrade_gate import codec, docio, schemas
from upgrade_gate.docio import write_text_atomic
from upgrade_gate.errors import GateError, InputError, SchemaError
from upgrade_gate.model import Snapshot
from upgrade_gate.model.columnar import SNAPSHOT_V2, SnapshotV2, from_wire, to_wire, without_samples

# A snapshot file read at all: the bench fleet's 8-GPU node with 5 samples a metric is 132 KB as written;
# a 64-GPU node re-measured to 20 samples stays under ~5 MB. Larger is refused before it is parsed.
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024


SCHEMA_OF = {"1": "snapshot", SNAPSHOT_V2: "snapshot-v2"}
"""A snapshot document's `schema_version` -> the name of its schema."""

CAPTURE_VERSION = SNAPSHOT_V2
"""The schema `snapshot` and `validate` write a node's snapshot in (files and stdout): what `gate` reads
as a candidate, 8,192 at a time. v2's strict decode costs ~60-65% of v1's CPU and its file ~40% of v1's bytes
(bench/RESULTS-gate-scale.md, issue 29); every reader takes both."""


def snapshot_to_dict(snapshot: Snapshot, *, version: str = "1") -> dict[str, Any]:
    """Plain-JSON form of a snapshot (schema `version`, "1" or "2"), validated against its schema."""
    data: dict[str, Any] = codec.to_jsonable(to_wire(snapshot) if version == SNAPSHOT_V2 else snapshot)
    schemas.validate(SCHEMA_OF[version], data, source=f"snapshot of {snapshot.node.name}")
    return data


def canonical_json(data: Any) -> str:
    """The one serialisation every file upgrade-gate writes uses."""
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def canonical_rows(data: Any) -> str:
    """v2's canonical text: `canonical_json`, except that a list or object holding no list or object is
    written on one line (`, ` and `: ` between its members)."""
    parts: list[str] = []
    _rows(data, 0, parts)
    parts.append("\n")
    return "".join(parts)


def _flat(value: Any) -> bool:
    members = value.values() if isinstance(value, dict) else value
    return not any(isinstance(v, dict | list) for v in members)


def _rows(value: Any, indent: int, out: list[str]) -> None:
    if not isinstance(value, dict | list) or not value or _flat(value):
        out.append(json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": ")))
        return
    pad = "\n" + " " * (indent + 2)
    if isinstance(value, list):
        out.append("[")
        for i, item in enumerate(value):
            out.append(pad if i == 0 else "," + pad)
            _rows(item, indent + 2, out)
    else:
        out.append("{")
        for i, key in enumerate(sorted(value)):
            out.append(pad if i == 0 else "," + pad)
            out.append(json.dumps(key, ensure_ascii=False) + ": ")
            _rows(value[key], indent + 2, out)
    out.append("\n" + " " * indent + ("]" if isinstance(value, list) else "}"))


def dumps_snapshot(snapshot: Snapshot, *, version: str = "1") -> str:
    """Canonical JSON text of a snapshot in schema `version` ("1" or "2"; schema-checked)."""
    data = snapshot_to_dict(snapshot, version=version)
    return canonical_rows(data) if version == SNAPSHOT_V2 else canonical_json(data)


def _known(version: Any, source: str) -> None:
    """SchemaError unless `version` is one this release reads (absent: the v1 schema says so)."""
    if version is not None and version not in SCHEMA_OF:
        raise SchemaError(f"{source}: schema_version {version!r}: this upgrade-gate reads snapshot schema 1 and 2")


def snapshot_from_dict(data: Any, *, source: str) -> Snapshot:
    """Validate and decode a snapshot document (v1 or v2); errors name `source`."""
    _known(data.get("schema_version") if isinstance(data, dict) else None, source)
    v2 = isinstance(data, dict) and data.get("schema_version") == SNAPSHOT_V2
    schemas.validate(SCHEMA_OF[SNAPSHOT_V2 if v2 else "1"], data, source=source)
    try:
        decoded = codec.from_jsonable(SnapshotV2 if v2 else Snapshot, data)
    except InputError as exc:
        raise type(exc)(f"{source}: {exc}") from exc
    return from_wire(decoded, where=source) if v2 else decoded


class _Version(msgspec.Struct):
    schema_version: Any = None


_PEEK = msgspec.json.Decoder(_Version)


def schema_version(data: bytes | str) -> Any:
    """The top-level `schema_version` of a JSON document (None when absent or not JSON: the decoder
    that follows says what is wrong). Skims the document without building it (~5% of a strict decode)."""
    try:
        return _PEEK.decode(data).schema_version
    except (msgspec.DecodeError, RecursionError):  # too deep to skim: the decoder that follows says so
        return None


_V2_HINTS = (b'"schema_version": "2"', b'"schema_version":"2"')  # as `dumps_snapshot` and compact writers write it


def decode_snapshot(data: bytes | str, *, source: str, trusted: bool = False) -> Snapshot:
    """A snapshot document (v1 or v2) by `codec.decode_json` (strict unless `trusted`; see there).

    A document that spells `"schema_version": "2"` somewhere is decoded as v2 at once, without the peek at
    its version (~35 us of ~440 on a bench-fleet candidate): the spelling only picks the decoder tried
    first, since a v2 decode succeeds only for a document whose top-level `schema_version` is "2" (a
    `const` in the decoder). When that decode fails, the document is read as below, and the error is the
    one it would have had without the shortcut."""
    if isinstance(data, bytes) and any(data.rfind(hint) >= 0 for hint in _V2_HINTS):  # from the end: sorted
        # keys put `schema_version` near it (0.2 us where `in` took 17 us on a bench-fleet candidate)
        with contextlib.suppress(GateError):  # said again below, by the decoder its version names
            return _decode_v2(data, source=source, trusted=trusted)
    version = schema_version(data)
    _known(version, source)
    if version == SNAPSHOT_V2:
        return _decode_v2(data, source=source, trusted=trusted)
    return codec.decode_json(Snapshot, data, trusted=trusted, source=source)


def _decode_v2(data: bytes | str, *, source: str, trusted: bool) -> Snapshot:
    wire = codec.decode_json(SnapshotV2, data, trusted=trusted, source=source, colon_free=without_samples)
    if wire.schema_version != SNAPSHOT_V2:  # a trusted decode does not check the const
        raise SchemaError(f"{source}: schema_version {wire.schema_version!r}, not {SNAPSHOT_V2!r}")
    return from_wire(wire, where=source)


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
    edit that `load_snapshot` refuses is refused here too (tests/test_docio.py). v1 or v2."""
    return decode_snapshot(docio.read_bytes(path, limit=MAX_SNAPSHOT_BYTES), source=str(path))


def write_snapshot(snapshot: Snapshot, path: Path, *, version: str = "1") -> None:
    """Write a snapshot atomically in canonical form (schema `version`)."""
    write_text_atomic(path, dumps_snapshot(snapshot, version=version))
