"""Git object plumbing under the baseline store: trees, blobs and commits read and written directly.

`store.gitstore` holds the store's API and guarantees (what a save promises, how tags are checked);
this module holds how those map onto git's object database. Together with `gitstore` it is the only
code of the package that imports gitpython / gitdb (import-linter checks it).

Design decisions:
- Objects are written in-process through gitdb's LooseObjectDB (a temp file `objects/obj*`, then
  rename) rather than `repo.odb.store`, which starts one `git hash-object` per object.
- Trees are parsed once per process (they are immutable by sha; the cache is module-level, so the
  workers `gate` forks inherit the parent's parsed `nodes/` folder): gitpython's `tree / path`
  re-parses a whole folder per lookup, which made listing and loading a fleet quadratic.
- Trees are parsed by one regular expression (`parse_tree`, ~6 ms for an 8,192-node folder) where
  every entry has one of git's modes and a plain name, `[A-Za-z0-9._-]+`: such a name cannot hold a
  `/` or alias `.git` through NTFS (`git~1`, `:` streams) or HFS (ignorable code points), so only the
  ones starting with `.` (`.`, `..`, `.git`) need gitpython's checkout-safety check, and get it. Any
  other tree goes through gitpython's `tree_entries_from_data`, which checks every entry (~60 ms for
  the same folder, and every process of a `gate` paid it).
- A trusted read takes a blob straight from its loose object file (as saves write them), and falls
  back to git for a packed one (after an operator's `git gc`).
- The working-tree mirror writes each changed file through `store.worktree` (temp file + rename, no
  symbolic link followed), then gives the index the new entries with `git update-index --index-info`
  (not `git reset`, which re-reads files and so would run a filter driver the store configures); a
  path that could escape the work tree (a hostile clone) is refused.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import git  # store/__init__.py sets GIT_PYTHON_REFRESH=quiet first (no 15-line ImportError without git)
from git.objects.fun import tree_entries_from_data, tree_to_stream
from gitdb import IStream, LooseObjectDB
from gitdb.exc import ODBError

from upgrade_gate.errors import GateError, InputError, NotFoundError, StoreError
from upgrade_gate.store import gitdir, worktree

BLOB_MODE = 0o100644
TREE_MODE = 0o040000
ZERO_SHA = "0" * 40
DEFAULT_IDENTITY = ("upgrade-gate", "upgrade-gate@localhost")
STREAM_TMP_PREFIX = "ug-"  # objects/ug-*.tmp: a streamed save's object being written (store.locking)

Entry = tuple[bytes, int]  # (binary sha, mode)

_MODES = {b"40000": 0o040000, b"100644": 0o100644, b"100755": 0o100755, b"120000": 0o120000, b"160000": 0o160000}
_PLAIN_ENTRY = re.compile(rb"(40000|100644|100755|120000|160000) ([A-Za-z0-9._-]+)\0(.{20})", re.DOTALL)
_TREES: dict[bytes, dict[str, Entry]] = {}  # parsed trees by sha, shared by the process (and its forks)
_TREES_KEPT = 64
_COMMIT_TREES: dict[bytes, bytes] = {}  # commit sha -> root tree sha (immutable too)


def first_line(text: object) -> str:
    """The first non-empty line of an error's text (git's stderr), without gitpython's decoration."""
    lines = [ln.strip() for ln in str(text or "").splitlines() if ln.strip()]
    return lines[0].removeprefix("stderr: ").strip("'") if lines else "no message"


def parse_tree(data: bytes) -> dict[str, Entry]:
    """name -> (sha, mode) of a raw tree object; ValueError for a malformed entry or an unsafe name.

    The same answers as gitpython's `tree_entries_from_data`: one regular expression reads a tree whose
    entries all have one of git's modes and a plain name (see the module docstring); the matches must
    tile the data exactly, else the tree goes through gitpython's parser and its per-name checks. A
    plain name starting with `.` (`.`, `..`, `.git`, `.gitkeep`) gets gitpython's check on its own.
    """
    found = _PLAIN_ENTRY.findall(data)
    if sum(len(mode) + len(name) for mode, name, _ in found) + 22 * len(found) == len(data):
        for mode, name, sha in found:
            if name[:1] == b".":
                tree_entries_from_data(b"%s %s\0%s" % (mode, name, sha))  # ValueError for an unsafe name
        return {name.decode("ascii"): (sha, _MODES[mode]) for mode, name, sha in found}
    return {name: (sha, mode) for sha, mode, name in tree_entries_from_data(data)}


MAX_OBJECT_BYTES = 64 * 1024 * 1024
"""Largest object read from a store, as a snapshot file's cap (`snapshot.io.MAX_SNAPSHOT_BYTES`): a
blob committed by hand is refused at it (issue 26), not inflated whole (10 GB of zeros is ~10 MB)."""
_HEADER_ROOM = 64  # b"<kind> <size>\0" before an object's content
_STATED_SIZE = re.compile(rb"[a-z]+ (\d{1,20})\x00")


def _loose(path: Path) -> bytes | None:
    """A loose object file's inflated bytes; None when there is none or it does not inflate; InputError
    for one over MAX_OBJECT_BYTES (neither the file nor its content is read past the cap)."""
    from upgrade_gate.docio import read_bytes

    try:
        packed = read_bytes(path, limit=MAX_OBJECT_BYTES + MAX_OBJECT_BYTES // 64)  # zlib adds < 0.1%
        inflater = zlib.decompressobj()
        raw = inflater.decompress(packed, _HEADER_ROOM)  # the header first: a stated size over the cap
        stated = _STATED_SIZE.match(raw)  # is refused before the content is inflated
        if stated is not None and int(stated.group(1)) > MAX_OBJECT_BYTES:
            raise _too_big(path)
        raw += inflater.decompress(inflater.unconsumed_tail, MAX_OBJECT_BYTES + _HEADER_ROOM - len(raw))
    except (NotFoundError, zlib.error):
        return None
    if inflater.unconsumed_tail:
        raise _too_big(path)
    return raw


def _too_big(where: object) -> InputError:
    return InputError(f"{where}: a git object over the {MAX_OBJECT_BYTES >> 20} MiB a store object may have; refused")


def is_file(entry: Entry | None) -> bool:
    """True for a regular file's entry: no tree, link or submodule."""
    return entry is not None and entry[1] >> 12 == 0o10


_KINDS = {0o04: "a folder", 0o12: "a symbolic link", 0o16: "a submodule"}


def regular(entry: Entry, where: str) -> Entry:
    """`entry` if it is a regular file; else InputError naming `where` and what is there instead."""
    if not is_file(entry):
        what = _KINDS.get(entry[1] >> 12, f"mode {entry[1]:o}")
        raise InputError(f"{where}: is {what} in the committed tree, not a file (a commit made by hand?)")
    return entry


@contextmanager
def mapped_errors(store: Path, action: str) -> Iterator[None]:
    """Turn git's, gitdb's and the file system's errors into one-line `StoreError`s (exit 4)."""
    try:
        yield
    except GateError:
        raise
    except git.GitCommandNotFound as exc:
        raise StoreError(f"{store}: {action}: the git binary is not on PATH (the store needs git)") from exc
    except git.GitCommandError as exc:
        verb = exc.command[1] if isinstance(exc.command, list | tuple) and len(exc.command) > 1 else ""
        raise StoreError(f"{store}: {action}: git {verb}: {first_line(exc.stderr)}") from exc
    except (git.GitError, ODBError, OSError, ValueError) as exc:
        raise StoreError(f"{store}: {action}: {first_line(exc)}") from exc


def head_commit(repo: git.Repo) -> git.Commit | None:
    """The commit HEAD names; None on an unborn branch (a store whose init was interrupted).

    The ref files are read exactly (`store.gitdir`: no link followed, no FIFO opened), the commit object
    is not: gitpython's `repo.head.commit` asks `git cat-file --batch-check` for its type, a process per
    store opened. `GitObjects.tree_of` reads it, and refuses it if it is not a commit.
    """
    hexsha = gitdir.Refs(Path(repo.git_dir), store=Path(repo.git_dir).parent).head()[1]
    return None if hexsha is None else git.Commit(repo, bytes.fromhex(hexsha))


class GitObjects:
    """Reads and writes the objects of one repository, with a cache of parsed trees."""

    def __init__(self, repo: git.Repo) -> None:
        self.repo = repo

    # ------------------------------------------------------------------ reading

    def read_object(self, sha: bytes, kind: bytes, *, source: str = "") -> bytes:
        """The content of object `sha`, which must be a `kind` (b"blob", b"tree", b"commit").

        Read straight from its loose object file (as saves write them), checked against its object id
        (git names an object by the hash of its header and content), else through git (packed by
        `git gc`). No git process is started while every object read is loose.
        """
        hexsha = sha.hex()
        path = Path(self.repo.git_dir) / "objects" / hexsha[:2] / hexsha[2:]
        raw = _loose(path)  # the object as git hashes it: b"<kind> <size>\0" + content
        if raw is None:  # packed, or unreadable: git knows
            stream = self.repo.odb.stream(sha)
            if stream.size > MAX_OBJECT_BYTES:
                raise _too_big(source or hexsha)
            if stream.type != kind:
                raise InputError(f"{source or path}: a {stream.type.decode()}, not a {kind.decode()} object")
            data: bytes = stream.read()
            raw = b"%s %d\x00" % (kind, len(data)) + data
        else:
            cut = raw.find(b"\x00")
            if cut < 0 or raw[:cut] != b"%s %d" % (kind, len(raw) - cut - 1):
                raise InputError(f"{path}: not a {kind.decode()} object")
            data = raw[cut + 1 :]
        if hashlib.sha1(raw).digest() != sha:
            raise InputError(f"{source or path}: content does not match its git object id (corrupt store)")
        return data

    def verified_blob(self, sha: bytes, *, source: str) -> bytes:
        """A blob's content, checked against its object id (`read_object`)."""
        return self.read_object(sha, b"blob", source=source)

    def tree_of(self, commit: git.Commit) -> bytes:
        """The root tree of a commit (its object read once, by `read_object`)."""
        tree = _COMMIT_TREES.get(commit.binsha)
        if tree is None:
            body = self.read_object(commit.binsha, b"commit")
            if not body.startswith(b"tree ") or body[45:46] != b"\n":
                raise InputError(f"commit {commit.hexsha}: no tree line")
            tree = _COMMIT_TREES[commit.binsha] = bytes.fromhex(body[5:45].decode("ascii"))
        return tree

    def entries(self, tree: bytes) -> dict[str, Entry]:
        """name -> (sha, mode) of a tree object."""
        entries = _TREES.get(tree)
        if entries is None:
            entries = parse_tree(self.read_object(tree, b"tree"))
            if len(_TREES) >= _TREES_KEPT:
                _TREES.clear()
            _TREES[tree] = entries
        return entries

    def lookup(self, commit: git.Commit, path: str) -> Entry | None:
        """The entry at `path` (slash-separated) in the commit's tree, None when absent."""
        found: Entry | None = (self.tree_of(commit), TREE_MODE)
        for part in path.split("/"):
            if found is None or found[1] != TREE_MODE:
                return None
            found = self.entries(found[0]).get(part)
        return found

    def read_blob(self, commit: git.Commit, path: str) -> bytes | None:
        """The content of the regular file at `path`, None when absent; InputError when something else
        is there (a link, folder or submodule committed by hand must not read as "no baseline")."""
        found = self.lookup(commit, path)
        if found is None:
            return None
        return self.read_object(regular(found, f"{path}@{commit.hexsha[:12]}")[0], b"blob")

    def commit(self, ref: str, *, store: Path, shown: str | None = None) -> git.Commit:
        """The commit a rev names: a full sha, or a sha with operators (`<sha>~1`; the store resolves ref
        names itself, `store.gitdir`); NotFoundError naming `shown` (default `ref`) when none."""
        if len(ref) == 40 and all(c in "0123456789abcdef" for c in ref):
            commit = git.Commit(self.repo, bytes.fromhex(ref))
            try:
                self.tree_of(commit)  # read now, once: the object exists and is a commit
                return commit
            except (ODBError, ValueError, InputError) as exc:
                if self.peel(ref) is None:
                    raise NotFoundError(f"{store}: no commit {shown or ref} in the baseline store") from exc
                ref += "^0"  # an annotated tag's object: the commit it names
        try:
            obj = self.repo.rev_parse(f"{ref}^{{commit}}")
        except (ODBError, ValueError, IndexError, KeyError) as exc:  # KeyError: `REV:path` names no blob or tree
            raise NotFoundError(f"{store}: no ref {shown or ref!r} in the baseline store") from exc
        assert isinstance(obj, git.Commit)
        return obj

    def peel(self, hexsha: str) -> git.Commit | None:
        """The commit object `hexsha` is, or that the annotated tag `hexsha` names; None for a tree, a
        blob or no object at all."""
        commit = git.Commit(self.repo, bytes.fromhex(hexsha))
        try:
            self.tree_of(commit)
            return commit
        except (ODBError, ValueError, InputError):
            pass
        try:
            obj = self.repo.rev_parse(f"{hexsha}^{{commit}}")
        except (ODBError, ValueError, IndexError, KeyError):
            return None
        return obj if isinstance(obj, git.Commit) else None

    def file_names(self, commit: git.Commit, folder: str, *, suffix: str) -> tuple[str, ...]:
        """The regular files directly in `folder` whose names end in `suffix`, sorted."""
        found = self.lookup(commit, folder)
        if found is None or found[1] != TREE_MODE:
            return ()
        entries = self.entries(found[0])
        names = sorted(n for n in entries if n.endswith(suffix))
        for name in names:
            regular(entries[name], f"{folder}/{name}@{commit.hexsha[:12]}")
        return tuple(names)

    # ------------------------------------------------------------------ writing

    def move_branch(self, branch: str, new: str, old: git.Commit | None, *, tag: str | None, reason: str) -> None:
        """One `git update-ref --stdin` transaction: compare-and-swap `branch` from `old` to `new` and
        create `tag` on `new`; either both move or nothing does (git.GitCommandError)."""
        script = f"update {branch} {new} {old.hexsha if old is not None else ZERO_SHA}\n"
        if tag is not None:
            script += f"create refs/tags/{tag} {new}\n"
        with tempfile.TemporaryFile() as fh:
            fh.write(script.encode())
            fh.seek(0)
            self.repo.git.update_ref("-m", reason, "--stdin", istream=fh)

    def store(self, kind: bytes, data: bytes) -> bytes:
        """Write one object (b"blob", b"tree", b"commit"); its binary sha."""
        loose = LooseObjectDB(os.path.join(self.repo.git_dir, "objects"))
        binsha: bytes = loose.store(IStream(kind, len(data), io.BytesIO(data))).binsha
        return binsha

    def store_unlocked(self, kind: bytes, data: bytes) -> bytes:
        """Write one object without the store lock (a streamed save's blobs); its binary sha.

        gitdb's temp files (`objects/obj*`) are cleared by any writer holding the lock, so they may only
        be made under it; these are `objects/ug-<random>.tmp`, cleared only once stale
        (`store.locking`). An object that is already there is left as it is (same id, same content).
        """
        raw = b"%s %d\x00" % (kind, len(data)) + data
        sha = hashlib.sha1(raw).digest()
        objects = Path(self.repo.git_dir) / "objects"
        target = objects / sha.hex()[:2] / sha.hex()[2:]
        if target.exists():
            return sha
        target.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=STREAM_TMP_PREFIX, suffix=".tmp", dir=objects)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(zlib.compress(raw, 1))
            os.chmod(tmp, 0o444)  # as git leaves loose objects
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return sha

    def store_tree(self, base: bytes | None, changes: Mapping[str, bytes]) -> bytes:
        """The tree `base` (or an empty one) with the blobs in `changes` (path -> blob sha) put in."""
        entries = dict(self.entries(base)) if base is not None else {}
        below: dict[str, dict[str, bytes]] = {}
        for path, sha in changes.items():
            first, sep, rest = path.partition("/")
            if sep:
                below.setdefault(first, {})[rest] = sha
            else:
                entries[first] = (sha, BLOB_MODE)
        for name, sub in below.items():
            old = entries.get(name)
            old_tree = old[0] if old is not None and old[1] == TREE_MODE else None
            entries[name] = (self.store_tree(old_tree, sub), TREE_MODE)

        # git orders tree entries by name bytes, a subtree's name compared as if it ended in "/".
        def order(item: tuple[str, Entry]) -> bytes:
            return item[0].encode() + (b"/" if item[1][1] == TREE_MODE else b"")

        buf = io.BytesIO()
        tree_to_stream([(sha, mode, name) for name, (sha, mode) in sorted(entries.items(), key=order)], buf.write)
        return self.store(b"tree", buf.getvalue())

    def store_commit(self, root: bytes, parent: git.Commit | None, message: str) -> str:
        """A commit of `root` on `parent` by the repository's user (or the default identity); its hex sha."""
        reader = self.repo.config_reader("repository")
        name = str(reader.get_value("user", "name", DEFAULT_IDENTITY[0]))
        email = str(reader.get_value("user", "email", DEFAULT_IDENTITY[1]))
        who = f"{name} <{email}> {int(time.time())} +0000"
        head = [f"tree {root.hex()}"]
        if parent is not None:
            head.append(f"parent {parent.hexsha}")
        head += [f"author {who}", f"committer {who}"]
        body = "\n".join(head) + "\n\n" + message + "\n"
        return self.store(b"commit", body.encode("utf-8")).hex()

    def sync_worktree(self, new: str, fire: Callable[[str], None], *, work_tree: Path, store: Path) -> list[str]:
        """Make the working tree and index show commit `new` (the index is the mirror's last state);
        the paths the file system cannot hold (marked skip-worktree in the index) are returned."""
        repo = self.repo
        # -R: the index is the old side, the new commit the new one; raw records carry modes and blob shas.
        raw = repo.git.diff_index(
            "--cached",
            "-R",
            "--raw",
            "-z",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            new,
            stdout_as_string=False,
        )
        fields = raw.split(b"\0")
        entries: list[bytes] = []
        skipped: list[bytes] = []
        with worktree.opened(work_tree) as root:
            for i, (meta, rel) in enumerate(zip(fields[0:-1:2], fields[1::2], strict=True)):
                _, new_mode, _, new_sha = meta.decode("ascii").split()[:4]
                parts = rel.decode("utf-8", "replace").split("/")
                if any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):  # a hostile clone
                    raise StoreError(f"{store}: refusing to mirror unsafe path {rel!r} from {new[:12]}")
                path = "/".join(parts)
                if new_sha == ZERO_SHA:
                    worktree.remove_file(root, path, store=store)
                    entries.append(b"0 %s\t%s\0" % (ZERO_SHA.encode(), rel))
                    continue
                try:
                    if int(new_mode, 8) >> 12 == 0o10:  # a regular file; a link or submodule is not mirrored
                        worktree.write_file(root, path, self.read_object(bytes.fromhex(new_sha), b"blob"), store=store)
                    else:
                        skipped.append(rel)
                except worktree.Unrepresentable:
                    skipped.append(rel)
                entries.append(b"%s %s\t%s\0" % (new_mode.encode(), new_sha.encode(), rel))
                if i == 0:
                    fire("worktree-partial")
        fire("worktree")
        # The index takes the new entries as they are (no file is read: nothing a filter could run on).
        self._update_index(["-z", "--index-info"], b"".join(entries))
        if skipped:
            self._update_index(["-z", "--skip-worktree", "--stdin"], b"".join(p + b"\0" for p in skipped))
        fire("index")
        return [p.decode("utf-8", "replace") for p in skipped]

    def _update_index(self, args: list[str], data: bytes) -> None:
        with tempfile.TemporaryFile() as fh:
            fh.write(data)
            fh.seek(0)
            self.repo.git.update_index(*args, istream=fh)
