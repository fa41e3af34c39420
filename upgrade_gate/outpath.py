"""Where an output goes: what the tool may do to the path a user named for a report, snapshot or page.

Every document the tool writes (reports, snapshots, metrics, window pages, the demo's plan) goes
through `docio.write_atomic`, which asks `decide` what the path is before touching it (issue 26):

- `-`, `/dev/stdout` (and `/dev/fd/1`, `/proc/self/fd/1`) mean standard output; `/dev/stderr`
  (`/dev/fd/2`, `/proc/self/fd/2`) standard error. They are written to the stream the tool holds,
  never opened by name: as root, a rename onto `/dev/stdout` replaced the link every program uses.
- Nothing there, or a regular file this user may write: written to a temp file in the same folder,
  fsynced and renamed over it, so a reader never sees half a document.
- A character device (`/dev/null`, `/dev/full`, a terminal) or a FIFO: written through, opened
  without following a link, without O_CREAT or O_TRUNC, and a FIFO without blocking (no reader is
  an error, not a hang). A write that fails (`/dev/full`: ENOSPC) is one line naming it, exit 4.
- Refused, exit 3, naming the path: a symlink (never replaced: renaming over it replaced the link,
  writing through it writes wherever it points), a block device, a socket, a folder, a regular file
  this user may not write (renaming over it would replace what the user could not change).

Design decision: `decide` is a pure function of the path and its `lstat` result, so every case is
tested on a made-up stat (a block device, /dev/full) without touching a real device.
"""

from __future__ import annotations

import enum
import os
import stat
from pathlib import Path

from upgrade_gate.errors import InputError

STDOUT_NAMES = frozenset({"-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"})
"""Output paths that mean the tool's own standard output."""
STDERR_NAMES = frozenset({"/dev/stderr", "/dev/fd/2", "/proc/self/fd/2"})
"""Output paths that mean the tool's own standard error."""


class Action(enum.Enum):
    """How `docio.write_atomic` writes to a path."""

    STDOUT = "stdout"
    STDERR = "stderr"
    CREATE = "create"  # nothing there: temp file, rename
    REPLACE = "replace"  # a regular file this user may write: temp file, rename over it
    THROUGH = "through"  # a character device or FIFO: opened and written, never renamed over


def decide(path: Path, st: os.stat_result | None, *, writable: bool = True) -> Action:
    """What may be done to `path`, given its `os.lstat` (None: nothing there) and whether this user
    may write it; raises InputError (exit 3, naming the path) for what must not be touched."""
    name = str(path)
    if name in STDOUT_NAMES:
        return Action.STDOUT
    if name in STDERR_NAMES:
        return Action.STDERR
    if st is None:
        return Action.CREATE
    mode = st.st_mode
    if stat.S_ISREG(mode):
        if not writable:
            raise InputError(f"{path}: not writable by this user (mode {stat.S_IMODE(mode):04o}); not replacing it")
        return Action.REPLACE
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return Action.THROUGH
    raise InputError(f"{path}: {_kind(mode)}; an output must be a regular file, a FIFO, a character device or -")


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "is a symbolic link (never replaced; name its target)"
    if stat.S_ISDIR(mode):
        return "is a folder"
    if stat.S_ISBLK(mode):
        return "is a block device"
    if stat.S_ISSOCK(mode):
        return "is a socket"
    return f"is not a file (mode {mode:o})"


def action_for(path: Path) -> Action:
    """`decide` on the path as it is now."""
    if str(path) in STDOUT_NAMES or str(path) in STDERR_NAMES:
        return decide(path, None)
    try:
        st = os.lstat(path)
    except OSError:  # nothing there, or a parent that is a file: creating it fails as it always did (exit 4)
        return Action.CREATE
    return decide(path, st, writable=not stat.S_ISREG(st.st_mode) or os.access(path, os.W_OK))


def open_through(path: Path) -> int:
    """A write descriptor on the character device or FIFO at `path` (never through a link, never
    waiting for a FIFO's reader); InputError if what is there changed since `decide` saw it."""
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        import errno

        if exc.errno == errno.ENXIO:
            raise InputError(f"{path}: a FIFO with no reader (start the reader first)") from exc
        if exc.errno == errno.ELOOP:
            raise InputError(f"{path}: {_kind(stat.S_IFLNK)}") from exc
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
            raise InputError(f"{path}: {_kind(mode)}; it changed while being opened")
        os.set_blocking(fd, True)  # the reader is there: wait for it as any writer would
    except BaseException:
        os.close(fd)
        raise
    return fd
