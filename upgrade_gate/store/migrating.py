"""`baseline migrate`: rewrite a store's v1 baselines as schema v2 (the columnar form) in one commit.

Design decisions:
- Streamed like `save_stream`: the baselines at HEAD are read one at a time (their git object checked
  against its id, then decoded strictly: a baseline committed by hand is read as a gate would read it),
  re-encoded as v2, written as a loose blob and put in the decoded cache, then dropped; only the blob
  ids stay. Memory does not grow with the fleet. This happens before the store lock is taken, as in a
  streamed save; then, under the lock, one commit replaces the files.
- A save that lands meanwhile wins: under the lock, a node whose blob at the new HEAD is no longer the
  one that was migrated is left as that save wrote it (a save writes v2 anyway). Nothing a concurrent
  writer committed is ever overwritten by an older baseline.
- Only the branch moves. Tags keep naming their commits, whose v1 documents stay readable forever; the
  history is not rewritten (a store's history is its audit trail).
- A store whose baselines are all v2 gets no commit (migrating twice is a no-op, exit 0). A baseline
  that does not decode (hand-edited, wrong node name) stops the migration before anything is
  committed: InputError/SchemaError naming the file at its commit (exit 3).
- Class references and other documents are not snapshots and are left as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from upgrade_gate.errors import InputError
from upgrade_gate.model.columnar import SNAPSHOT_V2
from upgrade_gate.snapshot.io import decode_snapshot, dumps_snapshot, schema_version
from upgrade_gate.store import layout
from upgrade_gate.store.documents import Hook, Stored
from upgrade_gate.store.gitobjects import is_file, regular
from upgrade_gate.store.saving import StoreSaving

Progress = Callable[[int, int], None]  # (baselines read, of how many)


@dataclass(frozen=True, slots=True, kw_only=True)
class Migration:
    """What `migrate` did: the commit (None: nothing to do), nodes rewritten, already v2, and left
    because a save changed them while the migration read the store."""

    commit: str | None
    migrated: tuple[str, ...]
    already: int
    raced: tuple[str, ...]


def migrate_message(count: int) -> str:
    """The commit message of a migration (`count`: the v1 baselines read; a raced one is not in it)."""
    return f"migrate baselines to snapshot schema v2 (columnar measurements): {count} read as v1"


class StoreMigrating(StoreSaving):
    """`migrate`; `gitstore.BaselineStore` supplies the reads, the commit machinery and `pin`."""

    def pin(self, ref: str | None = None) -> str:
        raise NotImplementedError

    def migrate(self, *, progress: Progress | None = None, _hook: Hook | None = None) -> Migration:
        """Rewrite every v1 baseline at HEAD as v2 in one commit (see the module docstring)."""
        pinned = self.pin(None)
        with self._mapped("migrate"):
            commit = self._objs.commit(pinned, store=self.path)
            names = self._objs.file_names(commit, layout.NODES_DIR, suffix=".json")
            done: dict[str, tuple[bytes, bytes]] = {}  # path -> (v1 blob, v2 blob)
            already = 0
            problems: list[str] = []  # the decoded cache's, said once (as a streamed save does)
            for count, name in enumerate(names, 1):
                path = f"{layout.NODES_DIR}/{name}"
                where = f"{self.path}/{path}@{pinned[:12]}"
                found = self._objs.lookup(commit, path)
                assert found is not None  # listed just now, at this very commit
                old = regular(found, where)[0]
                data = self._objs.verified_blob(old, source=where)
                if schema_version(data) == SNAPSHOT_V2:
                    already += 1
                else:
                    snap = decode_snapshot(data, source=where)
                    node = name.removesuffix(".json")
                    if snap.node.name != node:
                        raise InputError(f"{where}: holds node {snap.node.name!r}, expected {node!r}")
                    new = dumps_snapshot(snap, version=SNAPSHOT_V2).encode("utf-8")
                    del snap, data
                    done[path] = (old, self._objs.store_unlocked(b"blob", new))
                    if not problems:
                        self._cache_one(new, problems, prune=len(done) == 1)
                if progress is not None:
                    progress(count, len(names))
        self.warnings.extend(problems)
        if _hook is not None:
            _hook("streamed")
        if not done:  # under the lock, the working tree a killed save or migrate left behind is caught up
            self._write(lambda: None, migrate_message(0), hook=_hook)
            return Migration(commit=None, migrated=(), already=already, raced=())
        raced: list[str] = []

        def build() -> dict[str, bytes | Stored] | None:
            head = self._objs.commit(self.pin(None), store=self.path)  # under the lock: the commit built on
            files: dict[str, bytes | Stored] = {}
            for path, (old, new) in done.items():
                found = self._objs.lookup(head, path)
                if found is not None and found[0] == old and is_file(found):
                    files[path] = Stored(new)
                else:
                    raced.append(path)
            return files or None

        sha = self._write(build, migrate_message(len(done)), hook=_hook)
        migrated = tuple(sorted(_node(p) for p in done if p not in raced))
        return Migration(commit=sha, migrated=migrated, already=already, raced=tuple(sorted(map(_node, raced))))


def _node(path: str) -> str:
    return path.removeprefix(f"{layout.NODES_DIR}/").removesuffix(".json")
