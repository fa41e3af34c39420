"""Writing the store's working-tree mirror without following a symbolic link (no git here).

The committed tree is the store; the working tree only mirrors it for people browsing the folder
(`store.gitobjects.GitObjects.sync_worktree` decides what changes). Anyone with the folder may have
put a link there (`nodes -> /etc`, or a checkout of a hand-made commit whose `nodes` is a link), so
every path is walked from the store folder one component at a time with `O_NOFOLLOW` and file
descriptors (`openat`, `mkdirat`, `renameat`, `unlinkat`): a link where a folder should be refuses
the mirror (`StoreError`, which a save reports as a warning: it has landed), and a link where a file
should be is replaced by the file, never written through.

A file whose name the file system cannot hold (a 253-character node name makes a 258-byte file name;
Linux allows 255) is reported back as `unrepresentable`, so the index can mark it skip-worktree: the
baseline is committed and readable, and `git status` does not show it deleted for ever.

Temp files are `.ug-<random>.tmp` (short whatever the target's name, and matched by
`store.locking.own_temp_files`).
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from upgrade_gate.errors import StoreError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Unrepresentable(Exception):
    """The file system cannot hold this path (a name longer than its limit)."""


@contextmanager
def _folder(root: int, parts: list[str], *, create: bool, store: Path) -> Iterator[int | None]:
    """A descriptor of the folder `parts` below `root` (None when absent and not `create`)."""
    fd = os.dup(root)
    try:
        for i, part in enumerate(parts):
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    yield None
                    return
                with suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    where = "/".join(parts[: i + 1])
                    raise StoreError(
                        f"{store}: {where} in the working tree is a link or a file, not a folder; "
                        "upgrade-gate does not write through it (remove it, the next save restores it)"
                    ) from exc
                if exc.errno == errno.ENAMETOOLONG:
                    raise Unrepresentable("/".join(parts[: i + 1])) from exc
                raise
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def write_file(root: int, rel: str, data: bytes, *, store: Path) -> None:
    """Write `data` at `rel` (slash-separated) below the folder `root`: temp file + rename, 0644."""
    *parents, name = rel.split("/")
    with _folder(root, parents, create=True, store=store) as fd:
        assert fd is not None
        tmp = f".ug-{secrets.token_hex(6)}.tmp"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=fd)
        try:
            try:
                os.fchmod(out, 0o644)  # whatever the umask: a mirrored file reads like any checkout
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view) :]
            finally:
                os.close(out)
            try:
                os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)  # a link named `name` is replaced
            except OSError as exc:
                if exc.errno == errno.ENAMETOOLONG:
                    raise Unrepresentable(rel) from exc
                if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise StoreError(f"{store}: {rel} in the working tree is a folder, not a file") from exc
                raise
        except BaseException:
            with suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=fd)
            raise


def remove_file(root: int, rel: str, *, store: Path) -> None:
    """Remove the file (or link) at `rel` below `root`, if there is one; a folder there is left."""
    *parents, name = rel.split("/")
    try:
        with _folder(root, parents, create=False, store=store) as fd:
            if fd is None:
                return
            try:
                if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    return
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                return
            except OSError as exc:
                if exc.errno != errno.ENAMETOOLONG:
                    raise
    except Unrepresentable:
        return  # a name the file system cannot hold was never written


@contextmanager
def opened(work_tree: Path) -> Iterator[int]:
    """A descriptor of the store folder (the operator named it: it may itself be reached by a link)."""
    fd = os.open(work_tree, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)
