"""Saving baselines: the in-memory `save` and the fleet's streamed `save_stream` (issue 26), on top of
the store's commit machinery (`store.gitstore`: `_write` commits a set of files under the store lock,
the ref move being the commit point).

Design decisions:
- `save` validates and serialises everything in memory before anything touches the disk (a
  schema-invalid snapshot writes no object and creates no store). It suits the callers that hold their
  snapshots anyway (a fleet snapshot, a change window, the demo).
- `save_stream` keeps memory flat whatever the fleet's size (before: 8,192 nodes of ~130 KB each took
  3.0 GiB here, 655 MiB on the issue's smaller fleet): each snapshot is serialised, written as a loose
  blob and put in the decoded cache as it comes, then dropped; only the blob ids stay. The stream is
  read before the store lock is taken (reading and checking a fleet takes minutes; a `deny` or a
  change window must not time out waiting for it): blobs are content-addressed, so writing them
  unlocked cannot disturb another writer (their temp files have their own name, `store.locking`). Then,
  under the lock, the documents are built against the HEAD the commit is made on, and the commit is
  made and the branch moved as for `save`. A failure anywhere before the ref move leaves the branch and
  tags where they were, with at most unreferenced blobs (as after a killed save; `git gc` drops them).
  The first snapshot is read before the store is created, so a bad first file creates nothing.
- Both write schema v2, the columnar form (issue 29: `model.columnar`; a store's v1 baselines stay
  readable, and `migrate` rewrites them). A save of a v1 store converts the nodes it saves.
- Retrying a tagged save that landed returns the same commit for both (`gitstore`'s tag check
  compares blob ids, which a streamed save has without holding the bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager

from upgrade_gate import schemas
from upgrade_gate.errors import InputError, UsageError
from upgrade_gate.model import Snapshot
from upgrade_gate.model.columnar import SNAPSHOT_V2
from upgrade_gate.snapshot.io import canonical_json, decode_snapshot, dumps_snapshot
from upgrade_gate.store import layout
from upgrade_gate.store.decoded import DecodedCache, blob_id
from upgrade_gate.store.documents import Hook, Stored, StoreDocuments
from upgrade_gate.store.gitobjects import GitObjects, first_line

Documents = Mapping[str, tuple[str, object]]  # name -> (schema, document)


def save_message(names: Sequence[str]) -> str:
    """The commit message of a save without one: how many nodes, the first eight by name."""
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return f"save {len(names)} node(s): {shown}"


def checked_documents(documents: Documents) -> dict[str, bytes]:
    """name -> canonical bytes of each document, its name and schema checked."""
    files: dict[str, bytes] = {}
    for name, (schema, document) in documents.items():
        layout.check_document_name(name)
        schemas.validate(schema, document, source=name)
        files[name] = canonical_json(document).encode("utf-8")
    return files


def _fire(hook: Hook | None, point: str) -> None:
    if hook is not None:
        hook(point)


class StoreSaving(StoreDocuments):
    """`save` and `save_stream`; `gitstore.BaselineStore` supplies the commit machinery."""

    warnings: list[str]

    def init(self) -> None:
        raise NotImplementedError

    def _mapped(self, action: str) -> AbstractContextManager[None]:
        raise NotImplementedError

    @property
    def _objs(self) -> GitObjects:
        raise NotImplementedError

    @property
    def _cache(self) -> DecodedCache:
        raise NotImplementedError

    def save(
        self,
        snapshots: Sequence[Snapshot],
        *,
        tag: str | None = None,
        message: str | None = None,
        documents: Documents | None = None,
        _hook: Hook | None = None,
    ) -> str:
        """Store each snapshot as nodes/<node>.json in one commit (sha returned), optionally tagged.

        `documents` (name -> (schema, document)), e.g. the class references of the classes saved, are
        validated and committed in the same commit, so a tag names baselines and references together.

        `_hook` is for tests only: it is called with the name of each step reached ("validated",
        "locked", "blobs", "tree", "commit", "ref", "worktree-partial", "worktree", "index").
        """
        if not snapshots:
            raise UsageError("nothing to save: no snapshots given")
        files: dict[str, bytes] = {}
        for snap in snapshots:
            path = layout.node_path(snap.node.name)
            if path in files:
                raise InputError(f"node {snap.node.name} is given twice in one save")
            files[path] = dumps_snapshot(snap, version=SNAPSHOT_V2).encode("utf-8")
        files.update(checked_documents(documents or {}))
        if tag is not None:
            layout.check_tag(tag)
        text = message or save_message(sorted(s.node.name for s in snapshots))
        _fire(_hook, "validated")
        sha = self._write(lambda: files, text, tag=tag, hook=_hook)
        assert sha is not None
        self._remember([files[layout.node_path(snap.node.name)] for snap in snapshots])
        return sha

    def save_stream(
        self,
        snapshots: Iterable[Snapshot],
        *,
        tag: str | None = None,
        message: str | None = None,
        documents: Callable[[], Documents] | None = None,
        _hook: Hook | None = None,
    ) -> str:
        """`save` for a fleet, in memory that does not grow with it (see the module docstring).

        `documents()` is called under the store lock once every snapshot is written, so it can read the
        store's other baselines at the HEAD the commit is built on (`pin(None)`). `_hook` as for `save`,
        with "streamed" once every blob is written.
        """
        if tag is not None:
            layout.check_tag(tag)
        rest = iter(snapshots)
        first = next(rest, None)  # before the store is created: a first file that fails creates nothing
        if first is None:
            raise UsageError("nothing to save: no snapshots given")
        held = [first]
        del first
        self.init()
        blobs: dict[str, bytes] = {}
        cache_problem: list[str] = []

        def each() -> Iterator[Snapshot]:
            yield held.pop()
            yield from rest

        with self._mapped("save"):
            for snap in each():
                path = layout.node_path(snap.node.name)
                if path in blobs:
                    raise InputError(f"node {snap.node.name} is given twice in one save")
                data = dumps_snapshot(snap, version=SNAPSHOT_V2).encode("utf-8")
                del snap  # only the blob id is kept
                blobs[path] = self._objs.store_unlocked(b"blob", data)
                if not cache_problem:
                    self._cache_one(data, cache_problem, prune=len(blobs) == 1)
        _fire(_hook, "streamed")
        names = sorted(p.removeprefix(f"{layout.NODES_DIR}/").removesuffix(".json") for p in blobs)

        def build() -> dict[str, bytes | Stored]:
            files: dict[str, bytes | Stored] = {path: Stored(sha) for path, sha in blobs.items()}
            files.update(checked_documents(documents() if documents is not None else {}))
            return files

        sha = self._write(build, message or save_message(names), tag=tag, hook=_hook)
        assert sha is not None
        self.warnings.extend(cache_problem)
        return sha

    def _cache_one(self, data: bytes, problems: list[str], *, prune: bool) -> None:
        """`_remember` for one baseline of a streamed save (a problem is noted once, as a warning).

        The entry is written before the commit lands: it is named by the blob's id and decoded from the
        very bytes of that blob, so an entry of a save that then fails is right, merely unused."""
        from upgrade_gate.model import ClassReference

        try:
            if prune:
                self._cache.prune((Snapshot, ClassReference))
            decoded = decode_snapshot(data, trusted=True, source="saved baseline")
            self._cache.put(Snapshot, blob_id(data), decoded)
        except Exception as exc:  # a cache problem never fails a save
            problems.append(f"saved, but the decoded-baseline cache was not written: {first_line(exc)}")

    def _remember(self, documents: Sequence[bytes]) -> None:
        """Put the baselines just committed into the decoded cache (decoded from the very bytes committed,
        as a gate's miss would), so the first gate after a save reads them fast too; drop another
        release's entries. The save has landed: nothing here may fail it. An entry that cannot be written
        is a later miss; anything else is a warning."""
        from upgrade_gate.model import ClassReference

        try:
            cache = self._cache
            cache.prune((Snapshot, ClassReference))
            for data in documents:
                decoded = decode_snapshot(data, trusted=True, source="saved baseline")
                cache.put(Snapshot, blob_id(data), decoded)
        except Exception as exc:  # after the commit point a cache problem is a warning, never a failed save
            self.warnings.append(f"saved, but the decoded-baseline cache was not written: {first_line(exc)}")
