"""The baseline store: snapshots in a git repository, one file per node, one commit per save.

This is the only module of the package that imports gitpython (`git`); only commands that need the
store import it. Layout and name rules live in `store.layout`, writer locking in `store.locking`, the
denylist and generic documents in `store.documents` (on top of this module's read/list/write).

Design decisions:
- Readers read from the committed tree (git objects at a ref), never from the working tree, so a
  half-written working tree can never be read back as a baseline. Everything read is schema-checked.
- A write validates and serialises everything in memory first (nothing touches the disk for a
  schema-invalid snapshot), then, holding the store's flock: writes blobs, trees and the commit
  object into the object database (gitdb's LooseObjectDB, in-process: a temp file, then rename),
  moves the branch with one `git update-ref --stdin` transaction that compare-and-swaps the branch
  from the commit it was built on and creates the tag (if the tag exists, nothing moves), and last
  mirrors the new commit into the working tree (temp file + rename per file) and the index
  (`git reset -q`) so people browsing the repository see it. The ref move is the commit point: a save
  killed before it leaves the previous baseline as HEAD (at most unreferenced objects, which `git
  fsck` accepts as dangling); killed after it, the save has landed and only the mirror lags. The
  next write catches the mirror up: `git diff-index --cached` against the new commit lists every path
  the index (the mirror's last completed state) does not have yet.
- Stale git lock files from a killed writer: see `store.locking` (removed when older than
  STALE_AFTER_S while we hold the flock; a younger one is reported by name).
- Reads parse each tree once per store object (trees are immutable by sha): gitpython's `tree / path`
  re-parses a whole folder per lookup, which made listing and loading a fleet quadratic.
- Loose objects accumulate; `git gc` is left to the operator (it is safe to run between saves).
- A tag that already exists is bad input (exit 3, `TagExistsError`): tags are immutable names of a
  baseline, and retrying cannot help. A save that loses a compare-and-swap race is a
  `StoreConflictError` (exit 4): retrying can.
- Commits are written with the store's local user.name/user.email (set by `init`), falling back to
  "upgrade-gate <upgrade-gate@localhost>" in a clone without them; no global git config is needed.
- Creating a store is as safe as saving into one: `init` holds a flock on the store folder itself
  (`locking.init_lock`), so concurrent first saves all land.
- A save reports exactly what happened. Once the ref has moved the save has landed: a failure while
  mirroring the working tree (disk full) is a warning in `warnings`, not an error, and the next write
  catches the mirror up. Retrying a save whose tag already holds exactly the same baselines returns
  that commit (with a note in `warnings`) instead of "tag exists".
- Tags are immutable names of a baseline: a tagged save writes the trailer `Upgrade-Gate-Tag: TAG`
  into its commit message. Reading at a tag whose commit lacks the trailer for that tag (the tag was
  moved with `git tag -f`, or made by hand) is refused (`MovedTagError`, exit 3) unless the store was
  opened with `allow_moved_tag` (CLI: `--allow-moved-tag`, or UPGRADE_GATE_ALLOW_MOVED_TAG=1). A store
  whose history has no trailer at all was written before the check existed: its tags are read as they
  are (nothing can tell a moved one there); its first tagged save adopts them where they stand
  (`Upgrade-Gate-Legacy-Tag: NAME SHA` lines), so from then on a moved old tag is refused too.
- Without a git binary on PATH, gitpython would refuse to import with a 15-line message; its refresh
  is set to quiet here, and any store operation fails with one line (exit 4) instead.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import git  # store/__init__.py sets GIT_PYTHON_REFRESH=quiet first (no 15-line ImportError without git)
from git.objects.fun import tree_entries_from_data, tree_to_stream
from gitdb import IStream, LooseObjectDB
from gitdb.exc import ODBError

from upgrade_gate import schemas
from upgrade_gate.errors import (
    GateError,
    InputError,
    NotFoundError,
    SchemaError,
    StoreConflictError,
    StoreError,
    UsageError,
)
from upgrade_gate.model import NodeName, Snapshot
from upgrade_gate.snapshot.io import canonical_json, dumps_snapshot, loads_snapshot
from upgrade_gate.store import layout, locking
from upgrade_gate.store.documents import Build, Hook, StoreDocuments, iso_utc

_BLOB_MODE = 0o100644
_TREE_MODE = 0o040000
_ZERO = "0" * 40
_DEFAULT_IDENTITY = ("upgrade-gate", "upgrade-gate@localhost")


@dataclass(frozen=True, slots=True, kw_only=True)
class LogEntry:
    """One commit that changed a node's baseline: sha, ISO 8601 UTC date, message, tags on it."""

    sha: str
    date: str
    message: str
    tags: tuple[str, ...] = ()


class TagExistsError(InputError):
    """The tag asked for already names another baseline (tags are immutable)."""


class MovedTagError(InputError):
    """A tag points at a commit upgrade-gate did not save under that tag (moved or made by hand)."""


TAG_TRAILER = "Upgrade-Gate-Tag"
LEGACY_TRAILER = "Upgrade-Gate-Legacy-Tag"  # a tag made before trailers existed, adopted as it stood
ALLOW_MOVED_TAG_ENV = "UPGRADE_GATE_ALLOW_MOVED_TAG"


def _fire(hook: Hook | None, point: str) -> None:
    if hook is not None:
        hook(point)


def _first_line(text: object) -> str:
    lines = [ln.strip() for ln in str(text or "").splitlines() if ln.strip()]
    return lines[0].removeprefix("stderr: ").strip("'") if lines else "no message"


def _without_trailer(message: str) -> str:
    lines = [
        ln for ln in message.strip().splitlines() if not ln.startswith((f"{TAG_TRAILER}: ", f"{LEGACY_TRAILER}: "))
    ]
    return "\n".join(lines).strip()


def _write_bytes_atomic(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; a mirrored file reads like any checkout
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class BaselineStore(StoreDocuments):
    """A git repository of node snapshots (see the module docstring for the guarantees)."""

    def __init__(self, path: Path, *, lock_timeout_s: float = 60.0, allow_moved_tag: bool | None = None) -> None:
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s
        if allow_moved_tag is None:
            allow_moved_tag = os.environ.get(ALLOW_MOVED_TAG_ENV, "") not in ("", "0")
        self.allow_moved_tag = allow_moved_tag
        self._trailers: bool | None = None
        self.warnings: list[str] = []  # what a write could not do although it landed (see the docstring)
        self._repo: git.Repo | None = None
        self._trees: dict[bytes, dict[str, tuple[bytes, int]]] = {}
        self._pinned: dict[str, git.Commit] = {}

    def __enter__(self) -> BaselineStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop gitpython's helper processes; the store can be used again afterwards."""
        if self._repo is not None:
            self._repo.close()
            self._repo = None

    # ------------------------------------------------------------------ opening

    @contextmanager
    def _mapped(self, action: str) -> Iterator[None]:
        try:
            yield
        except GateError:
            raise
        except git.GitCommandNotFound as exc:
            raise StoreError(f"{self.path}: {action}: the git binary is not on PATH (the store needs git)") from exc
        except git.GitCommandError as exc:
            verb = exc.command[1] if isinstance(exc.command, list | tuple) and len(exc.command) > 1 else ""
            raise StoreError(f"{self.path}: {action}: git {verb}: {_first_line(exc.stderr)}") from exc
        except (git.GitError, ODBError, OSError, ValueError) as exc:
            raise StoreError(f"{self.path}: {action}: {_first_line(exc)}") from exc

    def _open(self) -> git.Repo:
        if self._repo is not None:
            return self._repo
        path = self.path
        if not path.exists():
            raise StoreError(f"{path}: no baseline store here (`baseline save` creates one)")
        if not path.is_dir():
            raise StoreError(f"{path}: exists and is not a baseline store (not a directory)")
        try:
            repo = git.Repo(path)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise StoreError(f"{path}: exists and is not a baseline store (not a git repository)") from exc
        if repo.bare or repo.working_tree_dir is None:
            repo.close()
            raise StoreError(f"{path}: is a bare git repository, not a baseline store")
        head = self._head(repo)
        if head is not None:  # an unborn branch is a store whose init was cut short: init finishes it
            marker = self._read_blob(repo, head, layout.MARKER_PATH)
            try:
                schemas.validate("store", json.loads(marker or b"null"), source=f"{path}/{layout.MARKER_PATH}")
            except (ValueError, SchemaError) as exc:
                repo.close()
                what = "no store.json" if marker is None else str(exc)
                raise StoreError(
                    f"{path}: is a git repository but not an upgrade-gate baseline store ({what})"
                ) from exc
        self._repo = repo
        return repo

    @staticmethod
    def _head(repo: git.Repo) -> git.Commit | None:
        try:
            return repo.head.commit
        except ValueError:  # unborn branch: a store whose init was interrupted
            return None

    def _commit_of(self, repo: git.Repo, ref: str | None) -> git.Commit | None:
        if ref is None:
            return self._head(repo)
        pinned = self._pinned.get(ref)  # a full sha (from `pin`): immutable, resolved once per store object
        if pinned is not None:
            return pinned
        if len(ref) == 40 and all(c in "0123456789abcdef" for c in ref):
            try:
                self._pinned[ref] = commit = repo.commit(ref)
                commit.tree  # noqa: B018 - resolve the tree now, once
                return commit
            except (ODBError, ValueError) as exc:
                raise NotFoundError(f"{self.path}: no commit {ref} in the baseline store") from exc
        try:
            obj = repo.rev_parse(f"{ref}^{{commit}}")
        except (ODBError, ValueError, IndexError) as exc:
            raise NotFoundError(f"{self.path}: no ref {ref!r} in the baseline store") from exc
        assert isinstance(obj, git.Commit)
        self._check_tag(repo, ref, obj)
        return obj

    def _writes_trailers(self, repo: git.Repo) -> bool:
        """True once any commit of the store carries a tag trailer (stores older than the check have none)."""
        if self._trailers is None:
            found = repo.git.log("--all", "-1", "--format=%H", f"--grep=^{TAG_TRAILER}: ")
            self._trailers = bool(found.strip())
        return self._trailers

    def _legacy(self, repo: git.Repo) -> dict[str, str]:
        """Tags adopted by the first trailer-writing save (name -> commit sha)."""
        out: dict[str, str] = {}
        text = repo.git.log("--all", "--format=%B", f"--grep=^{LEGACY_TRAILER}: ")
        for line in text.splitlines():
            if line.startswith(f"{LEGACY_TRAILER}: "):
                name, _, sha = line.removeprefix(f"{LEGACY_TRAILER}: ").partition(" ")
                out.setdefault(name, sha)
        return out

    def _check_tag(self, repo: git.Repo, ref: str, commit: git.Commit) -> None:
        """Refuse a tag whose commit was not saved under it (see the module docstring)."""
        name = ref.removeprefix("refs/tags/")
        if self.allow_moved_tag or f"refs/tags/{name}" not in {t.path for t in repo.tags}:
            return  # a branch or a commit sha: nothing was promised about it (a tag wins in rev-parse's order)
        if f"{TAG_TRAILER}: {name}" in str(commit.message).splitlines():
            return
        if not self._writes_trailers(repo):
            return  # a store saved before tags carried the trailer: its tags cannot be checked (README)
        if self._legacy(repo).get(name) == commit.hexsha:
            return  # adopted where it stood by the first save that wrote trailers
        raise MovedTagError(
            f"{self.path}: tag {name!r} points at {commit.hexsha[:12]}, which upgrade-gate did not save under "
            f"that tag (moved with `git tag -f`, or made by hand); baselines are immutable. Restore the tag, or "
            f"pass --allow-moved-tag ({ALLOW_MOVED_TAG_ENV}=1) to read it anyway"
        )

    def _entries(self, repo: git.Repo, tree: bytes) -> dict[str, tuple[bytes, int]]:
        # Trees are immutable by sha, so parsed ones are cached: gitpython's `tree / path` re-parses
        # (and re-validates) the whole nodes/ folder on every lookup, which is quadratic over a fleet.
        entries = self._trees.get(tree)
        if entries is None:
            raw = repo.odb.stream(tree).read()
            entries = {name: (sha, mode) for sha, mode, name in tree_entries_from_data(raw)}
            if len(self._trees) >= 64:
                self._trees.clear()
            self._trees[tree] = entries
        return entries

    def _lookup(self, repo: git.Repo, commit: git.Commit, path: str) -> tuple[bytes, int] | None:
        found: tuple[bytes, int] | None = (commit.tree.binsha, _TREE_MODE)
        for part in path.split("/"):
            if found is None or found[1] != _TREE_MODE:
                return None
            found = self._entries(repo, found[0]).get(part)
        return found

    def _read_blob(self, repo: git.Repo, commit: git.Commit, path: str) -> bytes | None:
        found = self._lookup(repo, commit, path)
        if found is None or found[1] >> 12 != 0o10:  # regular files only: no trees, links, submodules
            return None
        data: bytes = repo.odb.stream(found[0]).read()
        return data

    # ------------------------------------------------------------------ writing

    def init(self) -> None:
        """Create the store if absent (idempotent, safe under concurrency); StoreError if it is something else."""
        path = self.path
        with self._mapped("init"):
            if path.exists() and not path.is_dir():
                raise StoreError(f"{path}: exists and is not a baseline store (not a directory)")
            if self._repo is not None and self._head(self._repo) is not None:
                return
            path.mkdir(parents=True, exist_ok=True)
            with locking.init_lock(path, timeout_s=self.lock_timeout_s):
                # A folder holding only a README (the repository's `baselines/`, DEFAULT_STORE) may become one.
                if not (path / ".git").exists() and any(p.name != layout.README_PATH for p in path.iterdir()):
                    raise StoreError(f"{path}: exists, is not empty and is not a baseline store")
                readme = path / layout.README_PATH
                if not (path / ".git" / "HEAD").exists():  # absent, or a `git init` that was cut short
                    git.Repo.init(path).close()
                repo = self._open()
                if self._head(repo) is not None:
                    return
                with locking.store_lock(Path(repo.git_dir), timeout_s=self.lock_timeout_s, store=path):
                    if self._head(repo) is not None:
                        return  # a concurrent init finished first
                    repo.git.symbolic_ref("HEAD", "refs/heads/main")
                    with repo.config_writer("repository") as cfg:
                        cfg.set_value("user", "name", _DEFAULT_IDENTITY[0])
                        cfg.set_value("user", "email", _DEFAULT_IDENTITY[1])
                    files = {
                        layout.README_PATH: readme.read_bytes() if readme.is_file() else layout.README_TEXT.encode(),
                        layout.MARKER_PATH: canonical_json(layout.marker_document()).encode(),
                        layout.KEEP_PATH: b"",
                    }
                    self._commit_locked(repo, lambda: files, "initialise upgrade-gate baseline store")

    def save(
        self,
        snapshots: Sequence[Snapshot],
        *,
        tag: str | None = None,
        message: str | None = None,
        documents: Mapping[str, tuple[str, object]] | None = None,
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
            files[path] = dumps_snapshot(snap).encode("utf-8")
        for name, (schema, document) in (documents or {}).items():
            layout.check_document_name(name)
            schemas.validate(schema, document, source=name)
            files[name] = canonical_json(document).encode("utf-8")
        if tag is not None:
            layout.check_tag(tag)
        names = sorted(s.node.name for s in snapshots)
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        text = message or f"save {len(names)} node(s): {shown}"
        _fire(_hook, "validated")
        sha = self._write(lambda: files, text, tag=tag, hook=_hook)
        assert sha is not None
        return sha

    def _write(self, build: Build, message: str, *, tag: str | None = None, hook: Hook | None = None) -> str | None:
        self.init()
        with self._mapped("save"):
            repo = self._open()
            with locking.store_lock(Path(repo.git_dir), timeout_s=self.lock_timeout_s, store=self.path):
                _fire(hook, "locked")
                return self._commit_locked(repo, build, message, tag=tag, hook=hook)

    def _commit_locked(
        self, repo: git.Repo, build: Build, message: str, *, tag: str | None = None, hook: Hook | None = None
    ) -> str | None:
        locking.clear_leftovers(Path(repo.git_dir), Path(str(repo.working_tree_dir)), store=self.path)
        message = message.strip() or "upgrade-gate update"
        if repo.head.is_detached:
            raise StoreError(f"{self.path}: HEAD is detached; check out the store's branch first")
        branch = repo.head.reference.path
        head = self._head(repo)
        if tag is not None and f"refs/tags/{tag}" in {t.path for t in repo.tags}:
            existing = repo.tags[tag].commit
            files = build()
            if files is not None and self._holds(repo, existing, files, tag):
                # A retry of a save that landed (its mirror may have failed): the same answer again.
                self.warnings.append(f"tag {tag!r} already holds exactly these baselines (at {existing.hexsha[:12]})")
                if head is not None and head.hexsha == existing.hexsha:
                    self._mirror(repo, existing.hexsha, None)
                return existing.hexsha
            sha = existing.hexsha
            raise TagExistsError(f"{self.path}: tag {tag!r} already exists (at {sha[:12]}); choose another")
        files = build()
        if files is None:
            return None
        if tag is not None:
            message = f"{message}\n\n{TAG_TRAILER}: {tag}"
            if not self._writes_trailers(repo):  # the first: adopt the tags an older upgrade-gate made
                adopted = sorted(f"{LEGACY_TRAILER}: {t.name} {t.commit.hexsha}" for t in repo.tags)
                message = "\n".join([message, *adopted])
        blobs = {path: self._store_object(repo, b"blob", data) for path, data in files.items()}
        _fire(hook, "blobs")
        root = self._store_tree(repo, head.tree.binsha if head is not None else None, blobs)
        _fire(hook, "tree")
        new = self._store_commit(repo, root, head, message)
        _fire(hook, "commit")
        script = f"update {branch} {new} {head.hexsha if head is not None else _ZERO}\n"
        if tag is not None:
            script += f"create refs/tags/{tag} {new}\n"
        with tempfile.TemporaryFile() as fh:
            fh.write(script.encode())
            fh.seek(0)
            try:
                repo.git.update_ref("-m", f"upgrade-gate: {message.splitlines()[0]}", "--stdin", istream=fh)
            except git.GitCommandError as exc:
                line = _first_line(exc.stderr)
                if "already exists" in line and tag is not None:
                    raise TagExistsError(f"{self.path}: tag {tag!r} already exists; choose another") from exc
                raise StoreConflictError(f"{self.path}: another writer moved {branch} first: {line}") from exc
        _fire(hook, "ref")
        self._mirror(repo, new, hook)
        return new

    def _holds(self, repo: git.Repo, commit: git.Commit, files: Mapping[str, bytes], tag: str) -> bool:
        if f"{TAG_TRAILER}: {tag}" not in str(commit.message).splitlines():
            return False
        return all(self._read_blob(repo, commit, path) == data for path, data in files.items())

    def _mirror(self, repo: git.Repo, new: str, hook: Hook | None) -> None:
        """Mirror `new` into the working tree; the save has landed, so a failure is a warning."""
        try:
            self._sync_worktree(repo, new, hook)
        except (OSError, git.GitError, ODBError, StoreError) as exc:
            detail = _first_line(exc.stderr) if isinstance(exc, git.GitCommandError) else _first_line(exc)
            self.warnings.append(
                f"saved {new[:12]}, but mirroring it into the working tree failed ({detail}); the baselines are "
                "committed and tagged, and the next save catches the working tree up"
            )

    @staticmethod
    def _store_object(repo: git.Repo, kind: bytes, data: bytes) -> bytes:
        # gitdb's LooseObjectDB writes in-process (temp file `objects/obj*`, then rename), unlike
        # repo.odb.store, which starts one `git hash-object` per object.
        loose = LooseObjectDB(os.path.join(repo.git_dir, "objects"))
        binsha: bytes = loose.store(IStream(kind, len(data), io.BytesIO(data))).binsha
        return binsha

    def _store_tree(self, repo: git.Repo, base: bytes | None, changes: Mapping[str, bytes]) -> bytes:
        entries = dict(self._entries(repo, base)) if base is not None else {}
        below: dict[str, dict[str, bytes]] = {}
        for path, sha in changes.items():
            first, sep, rest = path.partition("/")
            if sep:
                below.setdefault(first, {})[rest] = sha
            else:
                entries[first] = (sha, _BLOB_MODE)
        for name, sub in below.items():
            old = entries.get(name)
            old_tree = old[0] if old is not None and old[1] == _TREE_MODE else None
            entries[name] = (self._store_tree(repo, old_tree, sub), _TREE_MODE)

        # git orders tree entries by name bytes, a subtree's name compared as if it ended in "/".
        def order(item: tuple[str, tuple[bytes, int]]) -> bytes:
            return item[0].encode() + (b"/" if item[1][1] == _TREE_MODE else b"")

        buf = io.BytesIO()
        tree_to_stream([(sha, mode, name) for name, (sha, mode) in sorted(entries.items(), key=order)], buf.write)
        return self._store_object(repo, b"tree", buf.getvalue())

    def _store_commit(self, repo: git.Repo, root: bytes, parent: git.Commit | None, message: str) -> str:
        reader = repo.config_reader("repository")
        name = str(reader.get_value("user", "name", _DEFAULT_IDENTITY[0]))
        email = str(reader.get_value("user", "email", _DEFAULT_IDENTITY[1]))
        who = f"{name} <{email}> {int(time.time())} +0000"
        head = [f"tree {root.hex()}"]
        if parent is not None:
            head.append(f"parent {parent.hexsha}")
        head += [f"author {who}", f"committer {who}"]
        body = "\n".join(head) + "\n\n" + message + "\n"
        return self._store_object(repo, b"commit", body.encode("utf-8")).hex()

    def _sync_worktree(self, repo: git.Repo, new: str, hook: Hook | None) -> None:
        work_tree = Path(str(repo.working_tree_dir))
        # -R: the index is the old side, the new commit the new one; raw records carry the blob shas.
        raw = repo.git.diff_index("--cached", "-R", "--raw", "-z", "--no-renames", new, stdout_as_string=False)
        fields = raw.split(b"\0")
        for i, (meta, rel) in enumerate(zip(fields[0:-1:2], fields[1::2], strict=True)):
            new_sha = meta.split()[3].decode()
            parts = rel.decode("utf-8", "replace").split("/")
            if any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):  # a hostile clone
                raise StoreError(f"{self.path}: refusing to mirror unsafe path {rel!r} from {new[:12]}")
            target = work_tree.joinpath(*parts)
            if new_sha == _ZERO:
                target.unlink(missing_ok=True)
            else:
                _write_bytes_atomic(target, repo.odb.stream(bytes.fromhex(new_sha)).read())
            if i == 0:
                _fire(hook, "worktree-partial")
        _fire(hook, "worktree")
        repo.git.reset("-q")
        _fire(hook, "index")

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
            data = self._read_blob(repo, commit, path) if commit is not None else None
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

        The store validated the document against the schema when it saved it; git names the blob
        by the hash of its content, and that hash is checked here, so the bytes are the ones saved.
        Decoding is still typed and strict about types (codec.decode_json, trusted).
        """
        from upgrade_gate import codec

        path = layout.node_path(node)
        with self._mapped("load"):
            repo = self._open()
            commit = self._commit_of(repo, pinned)
            found = self._lookup(repo, commit, path) if commit is not None else None
            if found is None or found[1] >> 12 != 0o10:
                raise NotFoundError(f"{self.path}: no baseline for node {node!r} at {pinned[:12]}")
            data = self._loose_blob(repo, found[0])
            source = f"{self.path}/{path}@{pinned[:12]}"
            if hashlib.sha1(b"blob %d\x00" % len(data) + data).digest() != found[0]:
                raise InputError(f"{source}: content does not match its git object id (corrupt store)")
            snap = codec.decode_json(Snapshot, data, trusted=True, source=source)
            if snap.node.name != node:
                raise InputError(f"{source}: holds node {snap.node.name!r}, expected {node!r}")
            return snap

    @staticmethod
    def _loose_blob(repo: git.Repo, sha: bytes) -> bytes:
        """A blob's content: straight from its loose object file (as saves write them), else via git."""
        hexsha = sha.hex()
        path = Path(repo.git_dir) / "objects" / hexsha[:2] / hexsha[2:]
        try:
            raw = zlib.decompress(path.read_bytes())
        except (FileNotFoundError, zlib.error):  # packed by `git gc`, or unreadable: git knows
            data: bytes = repo.odb.stream(sha).read()
            return data
        header, _, body = raw.partition(b"\x00")
        if header != b"blob %d" % len(body):
            raise InputError(f"{path}: not a blob object")
        return body

    def log(self, node: str) -> tuple[LogEntry, ...]:
        """Every commit that changed `node`'s baseline, newest first, with the tags on each."""
        path = layout.node_path(node)
        with self._mapped("log"):
            repo = self._open()
            head = self._head(repo)
            commits = list(repo.iter_commits(head, paths=path)) if head is not None else []
            if not commits:
                raise NotFoundError(f"{self.path}: no baseline for node {node!r}")
            tags: dict[str, list[str]] = {}
            for tag in repo.tags:
                try:
                    tags.setdefault(tag.commit.hexsha, []).append(tag.name)
                except ValueError:  # a tag on a tree or blob names no baseline
                    continue
            return tuple(
                LogEntry(
                    sha=c.hexsha,
                    date=iso_utc(c.committed_date),
                    message=_without_trailer(str(c.message)),
                    tags=tuple(sorted(tags.get(c.hexsha, ()))),
                )
                for c in commits
            )

    def diff_refs(self, node: str, ref1: str, ref2: str) -> tuple[Snapshot, Snapshot]:
        """The baselines of `node` at two refs, for the judge's diff."""
        return self.load(node, ref1), self.load(node, ref2)

    def _read_bytes(self, path: str, ref: str | None) -> bytes | None:
        with self._mapped("read"):
            repo = self._open()
            commit = self._commit_of(repo, ref)
            return self._read_blob(repo, commit, path) if commit is not None else None

    def _json_names(self, folder: str, ref: str | None) -> tuple[str, ...]:
        with self._mapped("list"):
            repo = self._open()
            commit = self._commit_of(repo, ref)
            found = self._lookup(repo, commit, folder) if commit is not None else None
            if found is None or found[1] != _TREE_MODE:
                return ()
            entries = self._entries(repo, found[0])
            return tuple(sorted(n for n, (_, mode) in entries.items() if n.endswith(".json") and mode >> 12 == 0o10))
