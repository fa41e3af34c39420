"""The store's git folder as upgrade-gate trusts it: where it is, which of its files may be opened, and
refs read exactly (brk14: the store was trusted by its location).

A baseline store is data handed to the tool (`store.gitsafe`), and so is its git folder. Git and
gitpython follow whatever that folder says: a `.git` that is a file (`gitdir: ...`, as a linked worktree
or submodule has) or a symbolic link, or a `commondir` file in it, makes every read and write go to
another repository; a FIFO where a ref, `packed-refs` or `config` should be makes the first reader wait
forever; an empty ref file crashed gitpython; and gitpython's name lookup (`NAME`, `refs/NAME`,
`refs/tags/NAME`, ...) read a stray `.git/NAME` or `.git/refs/NAME` in place of the tag `NAME`.

Design decisions:
- `git_dir` is the one place that says where a store's git folder is, called before git or gitpython
  opens anything (every command opens the store through `BaselineStore._open`, and `init` calls it
  before `git init`). It costs a dozen `lstat`s, once per store opened (a gate over 8,192 nodes opens it
  once): `.git` must be the store's own folder, with no `commondir`; the files git or gitpython reads on
  every command (`HEAD`, `config`, `packed-refs`, `index`, `shallow`, the store lock) must be regular
  files or absent, and `refs`, `logs` and `objects` real folders; the config may not include another
  file (`[include]`, `[includeIf]`). Each refusal is one line naming the
  path and why (`UnsafeStoreError`, exit 3: bad input, as the store's other refusals of its content).
- Refs are read by `Refs`, never through gitpython's `SymbolicReference` nor `rev_parse`'s search:
  `read("refs/tags/NAME")` reads exactly that loose file (each folder on the way `lstat`ed: no link
  followed, no FIFO opened) or its `packed-refs` line. `lookup(NAME)` applies git's order itself, so a
  ref that git would take before a tag of the same name is refused, not read: naming the tag there
  would read something else.
- Before a write (`check_writable`, once per save, under the store lock), `refs/` and `logs/` are walked
  and any symbolic link or special file in them is refused: git appends reflogs and creates refs
  through links (a reflog linked to a file outside the store was appended to). Refusing was chosen over
  writing around the link, because git itself does the writing and cannot be told not to follow one.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from upgrade_gate import docio
from upgrade_gate.errors import InputError, NotFoundError

DOT_GIT = ".git"
# Opened by git or gitpython on (nearly) every command; each must be a regular file when present.
_FILES = ("HEAD", "config", "packed-refs", "index", "shallow", "upgrade-gate.flock")
_FOLDERS = ("refs", "logs", "objects")  # written into by saves: never a link to somewhere else
_WALKED = ("refs", "logs")  # checked whole before a write (`check_writable`)

# git's order for a short name (refs.c `ref_rev_parse_rules`, gitpython's `name_to_object`).
_RULES = ("{}", "refs/{}", "refs/tags/{}", "refs/heads/{}", "refs/remotes/{}", "refs/remotes/{}/HEAD")
_BASELINE_REFS = ("refs/tags/", "refs/heads/", "refs/remotes/")
_PSEUDO_REF = re.compile(r"[A-Z][A-Z_]*")  # HEAD, ORIG_HEAD, FETCH_HEAD: git's names directly in .git
_HEX40 = re.compile(r"[0-9a-f]{40}")
_PACKED_LINE = re.compile(r"([0-9a-f]{40}) (refs/\S+)")
_MAX_REF_BYTES = 4096  # a loose ref is 41 bytes (a symbolic one a line); FETCH_HEAD a few lines
_MAX_PACKED_BYTES = 256 * 1024 * 1024
_MAX_DEPTH = 5  # symbolic refs followed (git's SYMREF_MAXDEPTH)
_MAX_CONFIG_BYTES = 1024 * 1024
# A section header `[include]` or `[includeIf "..."]`, names case-insensitive, at a line's start.
_INCLUDE = re.compile(rb"(?im)^[ \t]*\[[ \t]*include(?:if)?\b[^\]\n]*\]")


class UnsafeStoreError(InputError):
    """The store's git folder is not its own, or holds what git would follow or wait on (exit 3)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Ref:
    """A ref as read: its full name (`refs/tags/v1`, `HEAD`) and the object id it names (hex)."""

    name: str
    sha: str


def _kind(mode: int) -> str:
    for test, what in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return what
    return f"mode {mode:o}"


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnsafeStoreError(f"{path}: unreadable: {exc.strerror}") from exc


def git_dir(store: Path) -> Path | None:
    """`<store>/.git` once checked (see the module docstring); None when the store has none."""
    dot = store / DOT_GIT
    info = _lstat(dot)
    if info is None:
        return None
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeStoreError(
            f"{dot}: is a symbolic link (to {os.readlink(dot)}), so git would read and write that repository; "
            "a baseline store's .git must be a folder of its own"
        )
    if stat.S_ISREG(info.st_mode):
        raise UnsafeStoreError(
            f"{dot}: is a file (`gitdir: ...`, a linked worktree's or submodule's), so git would read and write "
            "the repository it names; a baseline store's .git must be a folder of its own"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeStoreError(f"{dot}: is {_kind(info.st_mode)}, not a folder; refusing the store")
    common = dot / "commondir"
    if _lstat(common) is not None:
        raise UnsafeStoreError(
            f"{common}: makes git take refs, config and objects from another repository (a linked worktree's "
            "file); a baseline store must be a repository of its own: remove it"
        )
    for name in _FILES:
        _regular_or_absent(dot / name)
    _no_include(dot / "config")
    for name in _FOLDERS:
        found = _lstat(dot / name)
        if found is not None and not stat.S_ISDIR(found.st_mode):
            raise UnsafeStoreError(
                f"{dot / name}: is {_kind(found.st_mode)}, not a folder; git would read and write through it"
            )
    return dot


def _no_include(config: Path) -> None:
    """Refuse a config that includes another file (`[include] path`, `[includeIf ...]`): git and gitpython
    would read it, wherever it is, and a FIFO there would hang them (git-config(1), "Includes"). A store's
    config is its own; a bound on its size keeps the check cheap."""
    try:
        with config.open("rb") as handle:
            data = handle.read(_MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UnsafeStoreError(f"{config}: unreadable: {exc.strerror}") from exc
    if len(data) > _MAX_CONFIG_BYTES:
        raise UnsafeStoreError(f"{config}: over {_MAX_CONFIG_BYTES} bytes; a store's git config is a few lines")
    found = _INCLUDE.search(data)
    if found is not None:
        raise UnsafeStoreError(
            f"{config}: includes another file ({found.group(0).decode('utf-8', 'replace').strip()}), which git "
            "would read from wherever it is; a baseline store's config must be its own: remove the section"
        )


def _regular_or_absent(path: Path) -> bool:
    """True for a regular file, False when absent; UnsafeStoreError for anything else (never opened)."""
    info = _lstat(path)
    if info is None:
        return False
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeStoreError(f"{path}: is {_kind(info.st_mode)}, not a regular file; refusing the store")
    return True


def check_writable(git_dir: Path) -> None:
    """Refuse a write into a git folder whose `refs/` or `logs/` hold a symbolic link or a special file
    (git would create a ref or append a reflog through it: outside the store)."""
    for top in _WALKED:
        _walk(git_dir / top)


def _walk(folder: Path) -> None:
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UnsafeStoreError(f"{folder}: unreadable: {exc.strerror}") from exc
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            _walk(Path(entry.path))
        elif not entry.is_file(follow_symlinks=False):
            what = _kind(entry.stat(follow_symlinks=False).st_mode)
            raise UnsafeStoreError(
                f"{entry.path}: is {what}; git writes refs and reflogs through such a path (outside the store, "
                "or waiting forever), so upgrade-gate writes nothing here: remove it"
            )


def split_rev(ref: str) -> tuple[str, str]:
    """A ref expression as (name, operators): `rocm-6.1.3~0` -> (`rocm-6.1.3`, `~0`)."""
    cut = min((i for i in (ref.find(c) for c in "~^:@") if i >= 0), default=len(ref))
    return ref[:cut], ref[cut:]


def _plain_name(name: str) -> bool:
    """A name that stays inside the git folder as a path (no `..`, no absolute path, no control bytes)."""
    parts = name.split("/")
    return (
        bool(name)
        and all(p not in ("", ".", "..") for p in parts)
        and not any(ord(c) < 0x20 or c in "\\\x7f" for c in name)
    )


class Refs:
    """The refs of one store's git folder, read exactly (see the module docstring)."""

    def __init__(self, git_dir: Path, *, store: Path) -> None:
        self.git_dir = git_dir
        self.store = store
        self._packed: dict[str, str] = {}
        self._packed_key: tuple[int, int, int] | None = None

    # ------------------------------------------------------------------ one ref

    def read(self, name: str, *, _depth: int = 0) -> str | None:
        """The object id the full ref `name` names (symbolic refs followed), or None when there is none."""
        loose = self._loose(name)
        if loose is None:
            return self.packed().get(name)
        if loose.startswith("ref:"):
            target = loose.removeprefix("ref:").strip()
            if _depth >= _MAX_DEPTH or not (target.startswith("refs/") and _plain_name(target)):
                raise UnsafeStoreError(f"{self.git_dir / name}: a symbolic ref to {target[:80]!r}; refusing it")
            return self.read(target, _depth=_depth + 1)
        return loose

    def head(self) -> tuple[str | None, str | None]:
        """(the branch HEAD names, or None when detached; the commit id it names, or None when unborn)."""
        loose = self._loose("HEAD")
        if loose is None:
            raise UnsafeStoreError(f"{self.git_dir / 'HEAD'}: missing; not a usable git folder")
        if not loose.startswith("ref:"):
            return None, loose
        branch = loose.removeprefix("ref:").strip()
        if not (branch.startswith("refs/heads/") and _plain_name(branch)):
            raise UnsafeStoreError(f"{self.git_dir / 'HEAD'}: names {branch[:80]!r}, not a branch; refusing it")
        return branch, self.read(branch)

    def _loose(self, name: str, *, lenient: bool = False) -> str | None:
        """The content of the loose ref file `name` (a 40-hex id or `ref: ...`), None when there is none.
        Every folder on the way is `lstat`ed (a link is refused, never followed); with `lenient` a file
        that is no ref reads as none (a file directly in .git that git would skip as well)."""
        if not _plain_name(name):
            return None
        path = self.git_dir
        parts = name.split("/")
        for i, part in enumerate(parts):
            path = path / part
            info = _lstat(path)
            if info is None or (stat.S_ISDIR(info.st_mode) and i == len(parts) - 1):
                return None  # absent, or a folder where the file would be: packed or no such ref
            if stat.S_ISDIR(info.st_mode):
                continue
            if i < len(parts) - 1 and stat.S_ISREG(info.st_mode):
                return None  # a file where a folder would be: no such ref (as git reads it)
            if not stat.S_ISREG(info.st_mode):
                raise UnsafeStoreError(
                    f"{path}: is {_kind(info.st_mode)}, not a ref file; git would follow it or "
                    "wait on it, so upgrade-gate refuses it (remove it, or restore the ref)"
                )
        try:
            data = docio.read_bytes(path, limit=_MAX_REF_BYTES, follow=False)
        except NotFoundError:
            return None
        except InputError:
            if lenient:
                return None
            raise
        text = data.decode("utf-8", "replace").strip()
        first = text.split(maxsplit=1)[0] if text else ""
        if text.startswith("ref:"):
            return text.splitlines()[0]
        if _HEX40.fullmatch(first):
            return first
        if lenient:
            return None
        what = "an empty ref file" if not text else "not a ref (neither a 40-hex commit id nor `ref: ...`)"
        raise UnsafeStoreError(f"{path}: {what}; git cannot read it either: restore the ref (or remove the file)")

    def packed(self) -> dict[str, str]:
        """Full ref name -> object id of `packed-refs` (read again only when the file changed)."""
        path = self.git_dir / "packed-refs"
        info = _lstat(path)
        if info is None:
            self._packed, self._packed_key = {}, None
            return self._packed
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeStoreError(f"{path}: is {_kind(info.st_mode)}, not a regular file; refusing the store")
        key = (info.st_ino, info.st_size, info.st_mtime_ns)
        if key != self._packed_key:
            self._packed = _parse_packed(path, docio.read_bytes(path, limit=_MAX_PACKED_BYTES, follow=False))
            self._packed_key = key
        return self._packed

    # ------------------------------------------------------------------ names

    def lookup(self, base: str) -> Ref | None:
        """The ref a short name reads in git's order (`NAME`, `refs/NAME`, `refs/tags/NAME`, ...), or None.

        Refused (UnsafeStoreError) when what git would take first is not a tag, branch, remote branch or
        HEAD-like name (`.git/NAME`, `.git/refs/NAME`: planted beside the tag, it would be read instead),
        or when it is not a tag but a tag of that name exists further down git's order.
        """
        if not _plain_name(base):
            return None
        names = [rule.format(base) for rule in _RULES]
        for i, name in enumerate(names):
            top = i == 0 and not name.startswith("refs/")
            sha = self._top(name) if top else self.read(name)
            if sha is None:
                continue
            where = self.git_dir / name
            if not name.startswith("refs/tags/"):
                tag = next((n for n in names[i + 1 :] if n.startswith("refs/tags/") and self._exists(n)), None)
                if tag is not None:
                    raise UnsafeStoreError(
                        f"{self.store}: {base!r} names the tag {tag}, but git reads {where} first; upgrade-gate "
                        f"reads neither: remove {where}"
                    )
                if not (name.startswith(_BASELINE_REFS) or _PSEUDO_REF.fullmatch(name)):
                    raise UnsafeStoreError(
                        f"{self.store}: {base!r} reads {where}, which is neither a tag, a branch nor HEAD "
                        "(a ref planted beside them?); refusing it"
                    )
            return Ref(name=name, sha=sha)
        return None

    def _top(self, name: str) -> str | None:
        """A ref file directly in the git folder (`HEAD`, or a stray `.git/NAME`): git skips one that is
        no ref (`config`, `index`), and so does this."""
        loose = self._loose(name, lenient=True)
        if loose is None:
            return None
        return self.read(name) if loose.startswith("ref:") else loose

    def _exists(self, name: str) -> bool:
        return os.path.lexists(self.git_dir / name) or name in self.packed()

    def tags(self) -> dict[str, str]:
        """Tag name -> object id for every tag (loose files walked without following a link, and
        `packed-refs`); a tag that is a symbolic link or special file is refused."""
        found = {
            name.removeprefix("refs/tags/"): sha for name, sha in self.packed().items() if name.startswith("refs/tags/")
        }
        root = self.git_dir / "refs" / "tags"
        if _lstat(root) is None:
            return found
        _walk(root)  # no link, FIFO or device anywhere below (each is refused, naming it)
        for folder, _dirs, files in os.walk(root):
            for file in files:
                name = Path(folder, file).relative_to(self.git_dir).as_posix()
                sha = self.read(name)
                if sha is not None:
                    found[name.removeprefix("refs/tags/")] = sha
        return found


def _parse_packed(path: Path, data: bytes) -> dict[str, str]:
    refs: dict[str, str] = {}
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if not line or line.startswith(("#", "^")):
            continue  # the header, and the peeled id under an annotated tag
        match = _PACKED_LINE.fullmatch(line)
        if match is None:
            raise UnsafeStoreError(f"{path}: line {number} is not `<40-hex id> refs/...`: {line[:80]!r}")
        refs[match.group(2)] = match.group(1)
    return refs
