"""Small JSON documents kept in the baseline store beside the snapshots: denylist, class references,
change-window state (no git here).

`StoreDocuments` holds the document logic; `gitstore.BaselineStore` supplies the three storage
primitives it needs (read a committed JSON file at a ref, list a folder at a ref, and commit a set of
files under the store lock), so this module stays free of gitpython and the git module stays small.
A write's `build` callback runs while the store lock is held, so read-modify-write (adding to the
denylist) cannot lose a concurrent writer's entry.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from upgrade_gate import docio, schemas
from upgrade_gate.errors import InputError, NotFoundError
from upgrade_gate.model import GpuSerial
from upgrade_gate.snapshot.io import canonical_json
from upgrade_gate.store import layout
from upgrade_gate.store.denylist import DenyEntry, denylist_from_document, denylist_to_document, with_entry


@dataclass(frozen=True, slots=True)
class Stored:
    """A file's content already written to the object database (its blob's binary sha): a streamed save
    writes each baseline as it comes instead of holding the fleet's bytes."""

    sha: bytes


Files = Mapping[str, "bytes | Stored"]
Build = Callable[[], "Files | None"]  # files to commit (path -> bytes or Stored), or None: no commit
Hook = Callable[[str], None]


def iso_utc(ts: float) -> str:
    """ISO 8601 UTC to the second, as every date in the store is written."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class StoreDocuments:
    """Denylist and generic JSON documents on top of the store's read/list/write primitives."""

    path: Path

    def _read_bytes(self, path: str, ref: str | None) -> bytes | None:
        raise NotImplementedError

    def _json_names(self, folder: str, ref: str | None) -> tuple[str, ...]:
        raise NotImplementedError

    def _write(self, build: Build, message: str, *, tag: str | None = None, hook: Hook | None = None) -> str | None:
        raise NotImplementedError

    def _read_json(self, path: str, ref: str | None) -> Any:
        data = self._read_bytes(path, ref)
        if data is None:
            return None
        return docio.parse_json(data, source=f"{self.path}/{path}")

    def denylist(self, ref: str | None = None) -> dict[GpuSerial, DenyEntry]:
        """Denied GPU serials at `ref` (default HEAD); empty when none was ever denied."""
        data = self._read_json(layout.DENYLIST_PATH, ref)
        if data is None:
            return {}
        return denylist_from_document(data, source=f"{self.path}/{layout.DENYLIST_PATH}")

    def deny(self, serial: str, reason: str, node: str | None = None, *, now: str | None = None) -> DenyEntry:
        """Add a GPU serial to the denylist (one commit); an already denied serial keeps its entry."""
        entry = DenyEntry(
            serial=GpuSerial(serial.strip()),
            reason=reason.strip(),
            added_at=now or iso_utc(time.time()),
            node=layout.check_node_name(node) if node is not None else None,
        )
        denylist_to_document({entry.serial: entry})  # validate before anything is written
        kept: list[DenyEntry] = []

        def build() -> dict[str, bytes] | None:
            current = self.denylist()
            if entry.serial in current:
                kept.append(current[entry.serial])
                return None
            document = denylist_to_document(with_entry(current, entry))
            return {layout.DENYLIST_PATH: canonical_json(document).encode("utf-8")}

        self._write(build, f"deny GPU {entry.serial}: {entry.reason.splitlines()[0]}")
        return kept[0] if kept else entry

    def read_document(self, name: str, ref: str | None = None, *, schema: str | None = None) -> Any:
        """A JSON document kept in the store (e.g. `windows/w1.json`); NotFoundError if absent."""
        layout.check_document_name(name)
        data = self._read_json(name, ref)
        if data is None:
            raise NotFoundError(f"{self.path}: no document {name!r} at {ref or 'HEAD'}")
        if schema is not None:
            schemas.validate(schema, data, source=f"{self.path}/{name}")
        return data

    def write_document(self, name: str, data: Any, message: str, *, schema: str | None = None) -> str:
        """Write one JSON document in canonical form as one commit; returns the commit sha."""
        layout.check_document_name(name)
        if schema is not None:
            schemas.validate(schema, data, source=name)
        try:
            blob = canonical_json(data).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise InputError(f"{name}: not a JSON document: {exc}") from exc
        sha = self._write(lambda: {name: blob}, message)
        assert sha is not None
        return sha

    def documents(self, folder: str, ref: str | None = None) -> tuple[str, ...]:
        """Names (`folder/x.json`) of the JSON documents in one folder of the store, sorted."""
        folder = layout.check_folder_name(folder)
        return tuple(f"{folder}/{name}" for name in self._json_names(folder, ref))
