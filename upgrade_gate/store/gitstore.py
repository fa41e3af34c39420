"""The baseline store: snapshots in a git repository, one file per node, one commit per save.

This module holds the store's API and guarantees; `store.gitobjects` the git object plumbing under it
(reading trees and blobs, writing objects, mirroring the working tree) and `store.gittags` the
immutable-tag check. These three are the only modules of the package that import gitpython (`git`);
only commands that need the store import them. Layout and name rules live in `store.layout`, writer
locking in `store.locking`, the denylist and generic documents in `store.documents` (on top of this
module's read/list/write).

Design decisions:
- Readers read from the committed tree (git objects at a ref), never from the working tree, so a
  half-written working tree can never be read back as a baseline. Everything read is schema-checked.
- `save` validates and serialises everything in memory first (nothing touches the disk for a
  schema-invalid snapshot); `save_stream` (a fleet, `store.saving`) writes each baseline's blob as it
  reads it, before the lock. Then, holding the store's flock: writes blobs, trees and the commit
  object into the object database, moves the branch with one `git update-ref --stdin` transaction
  that compare-and-swaps the branch from the commit it was built on and creates the tag (if the tag
  exists, nothing moves), and last mirrors the new commit into the working tree and the index so
  people browsing the repository see it. The ref move is the commit point: a save killed before it
  leaves the previous baseline as HEAD (at most unreferenced objects, which `git fsck` accepts as
  dangling); killed after it, the save has landed and only the mirror lags. The next write catches
  the mirror up, one with nothing to commit too (`baseline migrate` of a store already migrated): `git
  diff-index --cached` against the new commit lists every path the index (the mirror's last completed
  state) does not have yet.
- Stale git lock files from a killed writer: `store.locking`. Loose objects accumulate; `git gc` is
  left to the operator (it is safe to run between saves).
- A tag that already exists is bad input (exit 3, `TagExistsError`): tags are immutable names of a
  baseline, and retrying cannot help. A save that loses a compare-and-swap race is a
  `StoreConflictError` (exit 4): retrying can. A tag moved by hand is refused on read (`store.gittags`).
- Commits carry the store's local user.name/user.email (set by `init`; no global git config needed).
  `init` holds a flock on the store folder itself, so concurrent first saves all land.
- A save reports exactly what happened. Once the ref has moved the save has landed: a failure while
  mirroring the working tree (disk full) is a warning in `warnings`, not an error, and the next write
  catches the mirror up. Retrying a save whose tag already holds exactly the same baselines returns
  that commit (with a note in `warnings`) instead of "tag exists".
- Without a git binary on PATH, gitpython would refuse to import with a 15-line message; its refresh
  is set to quiet here, and any store operation fails with one line (exit 4) instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import typing
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TypeVar

import git  # store/__init__.py sets GIT_PYTHON_REFRESH=quiet first (no 15-line ImportError without git)
from gitdb.exc import ODBError

from upgrade_gate import docio, schemas
from upgrade_gate.errors import (
    InputError,
    NotFoundError,
    SchemaError,
    StoreConflictError,
    StoreError,
)
from upgrade_gate.model import NodeName, Snapshot
from upgrade_gate.snapshot.io import canonical_json, decode_snapshot, loads_snapshot
from upgrade_gate.store import gitdir, gitsafe, gittags, layout, locking
from upgrade_gate.store.decoded import DecodedCache, blob_id
from upgrade_gate.store.documents import Build, Files, Hook, Stored
from upgrade_gate.store.gitdir import UnsafeStoreError
from upgrade_gate.store.gitobjects import (
    DEFAULT_IDENTITY,
    GitObjects,
    first_line,
    head_commit,
    is_file,
    mapped_errors,
    regular,
)
from upgrade_gate.store.gittags import ALLOW_MOVED_TAG_ENV, LogEntry, MovedTagError, TagExistsError
from upgrade_gate.store.migrating import StoreMigrating

T = TypeVar("T")


def _fire(hook: Hook | None, point: str) -> None:
    if hook is not None:
        hook(point)


__all__ = ["ALLOW_MOVED_TAG_ENV", "BaselineStore", "LogEntry", "MovedTagError", "TagExistsError", "UnsafeStoreError"]


MAX_README_BYTES = 1024 * 1024  # issue 26: the folder's own README, kept when a folder becomes a store


def _readme(path: Path) -> bytes:
    """The README a folder held before it became a store (at most MAX_README_BYTES, never through a
    link: exit 3 naming it), or the store's own."""
    if not os.path.lexists(path):
        return layout.README_TEXT.encode()
    return docio.read_bytes(path, limit=MAX_README_BYTES, follow=False)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held back while the block runs, then delivered to the handlers they had (the CLI's
    turn them into exit 130 / 143). A save interrupted between its commit point and the end of its
    working-tree mirror left the commit and tag landed, the working tree and index half written, and said
    it had failed (2026-12-07); now the mirror finishes first (seconds at most), then the signal ends the
    command as before. Off the main thread (where no handler runs) the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous: dict[signal.Signals, typing.Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if handler is signal.SIG_IGN or handler is None:  # ignored stays ignored; None: not Python's to defer
            continue
        previous[sig] = handler
        signal.signal(sig, lambda number, _frame: caught.append(number))
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for received in dict.fromkeys(caught):
            signal.raise_signal(received)


class BaselineStore(StoreMigrating):
    """A git repository of node snapshots (see the module docstring for the guarantees)."""

    def __init__(self, path: Path, *, lock_timeout_s: float = 60.0, allow_moved_tag: bool | None = None) -> None:
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s
        if allow_moved_tag is None:
            allow_moved_tag = gittags.moved_tag_allowed(os.environ.get(ALLOW_MOVED_TAG_ENV))
        self.allow_moved_tag = allow_moved_tag
        self._trailers: bool | None = None
        self.warnings: list[str] = []  # what a write could not do although it landed (see the docstring)
        self._repo: git.Repo | None = None
        self._objects: GitObjects | None = None
        self._pinned: dict[str, git.Commit] = {}
        self._decoded: DecodedCache | None = None
        self._refs: gitdir.Refs | None = None
        self._tags_checked: set[tuple[str, str, str]] = set()  # (tag, its commit, branch head) found sound

    def __enter__(self) -> BaselineStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop gitpython's helper processes; the store can be used again afterwards."""
        if self._repo is not None:
            self._repo.close()
            self._repo = None
            self._objects = None
            self._decoded = None
            self._refs = None

    # ------------------------------------------------------------------ opening

    def _mapped(self, action: str) -> AbstractContextManager[None]:
        return mapped_errors(self.path, action)

    def _open(self) -> git.Repo:
        if self._repo is not None:
            return self._repo
        path = self.path
        if not path.exists():
            raise StoreError(f"{path}: no baseline store here (`baseline save` creates one)")
        if not path.is_dir():
            raise StoreError(f"{path}: exists and is not a baseline store (not a directory)")
        if shutil.which(str(git.Git.GIT_PYTHON_GIT_EXECUTABLE or "git")) is None:
            # Reads of loose objects start no git process, but a packed store and every write need one:
            # without git, every store operation fails alike (one line, exit 4), not only some.
            raise git.GitCommandNotFound("git", "not on PATH")
        dot = gitdir.git_dir(path)  # before git or gitpython opens anything in it (brk14)
        try:
            repo = git.Repo(path, search_parent_directories=False)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise StoreError(f"{path}: exists and is not a baseline store (not a git repository)") from exc
        if repo.bare or repo.working_tree_dir is None:
            repo.close()
            raise StoreError(f"{path}: is a bare git repository, not a baseline store")
        common = Path(repo.common_dir)
        problem = gitsafe.refusal(common, path)
        if problem is None and Path(repo.working_tree_dir).resolve() != path.resolve():
            problem = f"{path}: its git config moves the working tree elsewhere (core.worktree); refusing to use it"
        if problem is not None:
            repo.close()
            raise StoreError(problem)
        gitsafe.harden(repo.git, Path(repo.git_dir), path.resolve(), common / "objects")  # inert data (issue 26)
        head = head_commit(repo)
        if head is not None:  # an unborn branch is a store whose init was cut short: init finishes it
            marker = GitObjects(repo).read_blob(head, layout.MARKER_PATH)
            try:
                schemas.validate("store", json.loads(marker or b"null"), source=f"{path}/{layout.MARKER_PATH}")
            except (ValueError, SchemaError) as exc:
                repo.close()
                what = "no store.json" if marker is None else str(exc)
                raise StoreError(
                    f"{path}: is a git repository but not an upgrade-gate baseline store ({what})"
                ) from exc
        self._repo = repo
        self._objects = GitObjects(repo)
        self._refs = gitdir.Refs(dot or Path(repo.git_dir), store=path)
        return repo

    @property
    def _objs(self) -> GitObjects:
        """The object plumbing of the open repository (`_open` first)."""
        if self._objects is None:
            self._objects = GitObjects(self._open())
        return self._objects

    @property
    def _ref_reader(self) -> gitdir.Refs:
        """The exact ref reader of the open repository (`_open` first)."""
        if self._refs is None:
            self._open()
        assert self._refs is not None
        return self._refs

    @property
    def _cache(self) -> DecodedCache:
        """The decoded-baseline cache in the repository's git folder (`store.decoded`)."""
        if self._decoded is None:
            self._decoded = DecodedCache(Path(self._open().git_dir))
        return self._decoded

    def _commit_of(self, repo: git.Repo, ref: str | None) -> git.Commit | None:
        if ref is None:
            return head_commit(repo)
        pinned = self._pinned.get(ref)  # a full sha (from `pin`): immutable, resolved once per store object
        if pinned is not None:
            return pinned
        if len(ref) == 40 and all(c in "0123456789abcdef" for c in ref):
            obj = self._objs.commit(ref, store=self.path)
            if obj.hexsha == ref:
                self._pinned[ref] = obj
            return obj
        # A name is resolved exactly (`store.gitdir`), never through gitpython's search order (brk14).
        base, rest = gitdir.split_rev(ref)
        found = self._ref_reader.lookup(base) if base else None
        if found is None:  # no ref by that name anywhere: a short sha (or nothing: the read says so)
            return self._objs.commit(ref, store=self.path)
        if found.name.startswith("refs/tags/") and not self.allow_moved_tag:
            self._check_tag(repo, found)
        return self._objs.commit(found.sha + rest, store=self.path, shown=ref)

    def _check_tag(self, repo: git.Repo, tag: gitdir.Ref) -> None:
        branch, head = self._ref_reader.head()
        key = (tag.name, tag.sha, head or "")
        if key in self._tags_checked:
            return
        head_obj = git.Commit(repo, bytes.fromhex(head)) if head is not None else None
        gittags.check_tag(
            repo,
            tag.name.removeprefix("refs/tags/"),
            self._objs.peel(tag.sha),
            branch=(branch, head_obj),
            store=self.path,
            trailers_written=self._writes_trailers(repo),
        )
        self._tags_checked.add(key)

    def _writes_trailers(self, repo: git.Repo) -> bool:
        if self._trailers is None:
            self._trailers = gittags.any_trailer(repo, head_commit(repo))
        return self._trailers

    # ------------------------------------------------------------------ writing

    def init(self) -> None:
        """Create the store if absent (idempotent, safe under concurrency); StoreError if it is something else."""
        path = self.path
        with self._mapped("init"):
            if path.exists() and not path.is_dir():
                raise StoreError(f"{path}: exists and is not a baseline store (not a directory)")
            if self._repo is not None and head_commit(self._repo) is not None:
                return
            path.mkdir(parents=True, exist_ok=True)
            gitdir.git_dir(path)  # a .git that is a link or a `gitdir:` file: refused before `git init` (brk14)
            with locking.init_lock(path, timeout_s=self.lock_timeout_s):
                # A folder holding only a README (the repository's `baselines/`, DEFAULT_STORE) may become one.
                if not (path / ".git").exists() and any(p.name != layout.README_PATH for p in path.iterdir()):
                    raise StoreError(f"{path}: exists, is not empty and is not a baseline store")
                readme = path / layout.README_PATH
                if not (path / ".git" / "HEAD").exists():  # absent, or a `git init` that was cut short
                    self._git_init(path)
                repo = self._open()
                if head_commit(repo) is not None:
                    return
                with locking.store_lock(Path(repo.git_dir), timeout_s=self.lock_timeout_s, store=path):
                    if head_commit(repo) is not None:
                        return  # a concurrent init finished first
                    repo.git.symbolic_ref("HEAD", "refs/heads/main")
                    with repo.config_writer("repository") as cfg:
                        cfg.set_value("user", "name", DEFAULT_IDENTITY[0])
                        cfg.set_value("user", "email", DEFAULT_IDENTITY[1])
                    files = {
                        layout.README_PATH: _readme(readme),
                        layout.MARKER_PATH: canonical_json(layout.marker_document()).encode(),
                        layout.KEEP_PATH: b"",
                    }
                    self._commit_locked(repo, lambda: files, "initialise upgrade-gate baseline store")

    @staticmethod
    def _git_init(path: Path) -> None:
        argv, env = gitsafe.init_command(str(git.Git.GIT_PYTHON_GIT_EXECUTABLE or "git"), path)
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise StoreError(f"{path}: init: git init: {first_line(done.stderr)}")

    def _write(self, build: Build, message: str, *, tag: str | None = None, hook: Hook | None = None) -> str | None:
        self.init()
        with self._mapped("save"):
            repo = self._open()
            with locking.store_lock(Path(repo.git_dir), timeout_s=self.lock_timeout_s, store=self.path):
                _fire(hook, "locked")
                return self._commit_locked(repo, build, message, tag=tag, hook=hook)

    def _commit_locked(
        self,
        repo: git.Repo,
        build: Build,
        message: str,
        *,
        tag: str | None = None,
        hook: Hook | None = None,
    ) -> str | None:
        gitdir.check_writable(Path(repo.git_dir))  # no ref or reflog is written through a link (brk14)
        locking.clear_leftovers(Path(repo.git_dir), Path(str(repo.working_tree_dir)), store=self.path)
        branch, _ = self._ref_reader.head()
        if branch is None:
            raise StoreError(f"{self.path}: HEAD is detached; check out the store's branch first")
        head = head_commit(repo)
        existing_sha = self._ref_reader.read(f"refs/tags/{tag}") if tag is not None else None
        if tag is not None and existing_sha is not None:
            existing = self._objs.peel(existing_sha)
            files = build()
            if existing is not None and files is not None and self._holds(repo, existing, files, tag):
                # A retry of a save that landed (its mirror may have failed): the same answer again.
                self.warnings.append(f"tag {tag!r} already holds exactly these baselines (at {existing.hexsha[:12]})")
                if head is not None and head.hexsha == existing.hexsha:
                    self._mirror(repo, existing.hexsha, None)
                return existing.hexsha
            raise TagExistsError(f"{self.path}: tag {tag!r} already exists (at {existing_sha[:12]}); choose another")
        files = build()
        if files is None:
            if head is not None:  # nothing to write: still catch up a mirror a killed writer left behind
                self._mirror(repo, head.hexsha, None)
            return None
        message = message.strip() or "upgrade-gate update"
        if tag is not None:
            adopted = None if self._writes_trailers(repo) else self._tag_commits()
            message = gittags.tagged_message(message, tag, adopted=adopted)
        blobs = {path: self._blob(data) for path, data in files.items()}
        _fire(hook, "blobs")
        root = self._objs.store_tree(head.tree.binsha if head is not None else None, blobs)
        _fire(hook, "tree")
        new = self._objs.store_commit(root, head, message)
        _fire(hook, "commit")
        with signals_deferred():  # from the commit point to a mirrored working tree: never half of it
            try:
                self._objs.move_branch(branch, new, head, tag=tag, reason=f"upgrade-gate: {message.splitlines()[0]}")
            except git.GitCommandError as exc:
                line = first_line(exc.stderr)
                if "already exists" in line and tag is not None:
                    raise TagExistsError(f"{self.path}: tag {tag!r} already exists; choose another") from exc
                if any(w in line for w in ("but expected", "reference already exists", "unable to resolve", ".lock")):
                    raise StoreConflictError(f"{self.path}: another writer moved {branch} first: {line}") from exc
                raise StoreError(f"{self.path}: save: git update-ref refused the new commit: {line}") from exc
            _fire(hook, "ref")
            self._mirror(repo, new, hook)
        return new

    def _blob(self, data: bytes | Stored) -> bytes:
        return data.sha if isinstance(data, Stored) else self._objs.store(b"blob", data)

    def _holds(self, repo: git.Repo, commit: git.Commit, files: Files, tag: str) -> bool:
        if not gittags.saved_under(commit, tag):
            return False
        for path, data in files.items():
            found = self._objs.lookup(commit, path)
            sha = data.sha if isinstance(data, Stored) else blob_id(data)
            if found is None or found[0] != sha or not is_file(found):
                return False
        return True

    def _mirror(self, repo: git.Repo, new: str, hook: Hook | None) -> None:
        """Mirror `new` into the working tree; the save has landed, so a failure is a warning."""
        try:
            skipped = self._objs.sync_worktree(
                new, lambda point: _fire(hook, point), work_tree=self.path.resolve(), store=self.path
            )
            for rel in skipped:
                self.warnings.append(
                    f"saved {new[:12]}; {rel} is committed but not mirrored into the working tree (a name "
                    "this file system cannot hold, or not a regular file): marked skip-worktree"
                )
        except (OSError, git.GitError, ODBError, StoreError, InputError) as exc:
            detail = first_line(exc.stderr) if isinstance(exc, git.GitCommandError) else first_line(exc)
            self.warnings.append(
                f"saved {new[:12]}, but mirroring it into the working tree failed ({detail}); the baselines are "
                "committed and tagged, and the next save catches the working tree up"
            )

    # ------------------------------------------------------------------ reading

    def nodes(self, ref: str | None = None) -> tuple[NodeName, ...]:
        """Nodes that have a baseline at `ref` (default HEAD), sorted."""
        return tuple(NodeName(name.removesuffix(".json")) for name in self._json_names(layout.NODES_DIR, ref))

    def load(self, node: str, ref: str | None = None) -> Snapshot:
        """The baseline of `node` at `ref` (commit, tag or branch; default HEAD), schema-checked."""
        path = layout.node_path(node)
        with self._mapped("load"):
            repo = self._open()
            commit = self._commit_of(repo, ref)
            data = self._objs.read_blob(commit, path) if commit is not None else None
            where = ref or "HEAD"
            if data is None:
                raise NotFoundError(f"{self.path}: no baseline for node {node!r} at {where}")
            source = f"{self.path}/{path}@{where}"
            try:
                snap = loads_snapshot(data.decode("utf-8"), source=source)
            except UnicodeDecodeError as exc:
                raise InputError(f"{source}: not UTF-8") from exc
            if snap.node.name != node:
                raise InputError(f"{source}: holds node {snap.node.name!r}, expected {node!r}")
            return snap

    def pin(self, ref: str | None = None) -> str:
        """The commit sha `ref` (default HEAD) names now; reads given that sha resolve nothing again.

        A `gate` over a fleet resolves its ref once (issue 14: resolving HEAD per node cost 3.4 s at
        8,192 nodes) and reads one consistent commit even if a save lands meanwhile.
        """
        with self._mapped("pin"):
            repo = self._open()
            commit = self._commit_of(repo, ref)
            if commit is None:
                raise NotFoundError(f"{self.path}: the baseline store has no commit yet")
            self._pinned[commit.hexsha] = commit
            return commit.hexsha

    def load_trusted(self, node: str, pinned: str) -> Snapshot:
        """The baseline of `node` at a `pin`ned commit, decoded without a schema walk.

        The decoded copy named by the blob's hash (`store.decoded`, written at save from the bytes
        committed) is read when it is whole. Otherwise the blob is read from git, its hash checked, and
        decoded strictly (`codec.decode_json`, the candidates' reader: whatever the schema refuses is
        refused), because a commit need not come from `save`: a baseline edited and committed by hand,
        or pulled from a shared remote, was never validated. Only then is it cached.
        """
        path = layout.node_path(node)
        snap = self._trusted(Snapshot, path, pinned, what=f"baseline for node {node!r}")
        if snap.node.name != node:
            raise InputError(f"{self.path}/{path}@{pinned[:12]}: holds node {snap.node.name!r}, expected {node!r}")
        return snap

    def load_trusted_document(self, cls: type[T], name: str, pinned: str) -> T:
        """A document the store validated when it wrote it (`classes/<class>.json`), at a `pin`ned
        commit, as `cls`: checked by git object id and decoded like `load_trusted`."""
        return self._trusted(cls, layout.check_document_name(name), pinned, what=f"document {name!r}")

    def _trusted(self, cls: type[T], path: str, pinned: str, *, what: str) -> T:
        from upgrade_gate import codec

        with self._mapped("load"):
            repo = self._open()
            commit = self._commit_of(repo, pinned)
            found = self._objs.lookup(commit, path) if commit is not None else None
            if found is None:
                raise NotFoundError(f"{self.path}: no {what} at {pinned[:12]}")
            regular(found, f"{self.path}/{path}@{pinned[:12]}")
            hit = self._cache.get(cls, found[0])
            if hit is not None:
                return hit
            source = f"{self.path}/{path}@{pinned[:12]}"
            data = self._objs.verified_blob(found[0], source=source)
            # strict: the commit may not be save's; a baseline may be v1 or v2
            value: T = (
                typing.cast(T, decode_snapshot(data, source=source))
                if cls is Snapshot
                else codec.decode_json(cls, data, source=source)
            )
            self._cache.put(cls, found[0], value)
            return value

    def log(self, node: str) -> tuple[LogEntry, ...]:
        """Every commit that changed `node`'s baseline, newest first, with the tags on each."""
        path = layout.node_path(node)
        with self._mapped("log"):
            repo = self._open()
            head = head_commit(repo)
            commits = list(repo.iter_commits(head, paths=path)) if head is not None else []
            if not commits:
                raise NotFoundError(f"{self.path}: no baseline for node {node!r}")
            by_commit: dict[str, list[str]] = {}
            for name, sha in self._tag_commits().items():
                by_commit.setdefault(sha, []).append(name)
            return gittags.history(commits, by_commit)

    def _tag_commits(self) -> dict[str, str]:
        """Tag name -> the commit it names (a tag on a tree or blob names no baseline: left out)."""
        found = {name: self._objs.peel(sha) for name, sha in self._ref_reader.tags().items()}
        return {name: commit.hexsha for name, commit in found.items() if commit is not None}

    def diff_refs(self, node: str, ref1: str, ref2: str) -> tuple[Snapshot, Snapshot]:
        """The baselines of `node` at two refs, for the judge's diff."""
        return self.load(node, ref1), self.load(node, ref2)

    def _read_bytes(self, path: str, ref: str | None) -> bytes | None:
        with self._mapped("read"):
            repo = self._open()
            commit = self._commit_of(repo, ref)
            return self._objs.read_blob(commit, path) if commit is not None else None

    def _json_names(self, folder: str, ref: str | None) -> tuple[str, ...]:
        with self._mapped("list"):
            repo = self._open()
            commit = self._commit_of(repo, ref)
            return self._objs.file_names(commit, folder, suffix=".json") if commit is not None else ()
