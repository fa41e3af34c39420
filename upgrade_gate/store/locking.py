"""Serialising writers of a baseline store, and clearing what a killed writer left behind.

Every write to a store (init, save, deny, write_document) holds an exclusive `fcntl.flock` on
`.git/upgrade-gate.flock` for its whole read-modify-commit. The kernel drops a flock when its holder
dies, so a killed save never leaves this lock stale. A second writer waits (polling) up to a timeout
and then fails with `StoreConflictError`; it never interleaves with the first.

Design notes:
- 2026-11: git's own lock files (`index.lock`, `HEAD.lock`, `refs/**/<ref>.lock`, `packed-refs.lock`,
  `config.lock`) are created by the git binary and renamed over their target as its last, atomic step.
  A writer killed before that rename leaves the lock file but the target untouched (the previous
  baseline stays the committed one), so deleting such a leftover is safe. What is not safe is deleting
  a lock a live git process holds (someone running git by hand in the store). While we hold the flock
  no other upgrade-gate writer can hold one, so we treat a git lock file as stale only when it is older
  than `STALE_AFTER_S`; a younger one fails the write with a message naming it (retry, or remove it
  once sure no git process runs). Temp files of our own making (gitdb's `objects/obj*` object temp
  files and `.*.tmp` working-tree temp files) are removed whatever their age: only a flock holder
  writes them, and they are never read as data. A streamed save (`BaselineStore.save_stream`) writes
  its blobs before taking the flock, under another name (`objects/ug-*.tmp`): those are removed only
  once older than `STALE_AFTER_S`, so a writer never removes one that is being written.
- flock is advisory and local: on NFS it may not exclude writers on other hosts. The ref update is a
  compare-and-swap (`git update-ref NEW OLD`), so such a writer still cannot overwrite a save; it gets
  `StoreConflictError` instead.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from upgrade_gate.errors import StoreConflictError, StoreError

LOCK_NAME = "upgrade-gate.flock"
STALE_AFTER_S = 60.0
_POLL_S = 0.05
_GIT_LOCKS = ("index.lock", "HEAD.lock", "packed-refs.lock", "config.lock", "shallow.lock")


@contextmanager
def store_lock(git_dir: Path, *, timeout_s: float, store: Path) -> Iterator[None]:
    """Hold the store's exclusive writer lock; StoreConflictError after `timeout_s` of waiting."""
    lock_path = git_dir / LOCK_NAME
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(f"{store}: cannot open the store lock {lock_path}: {exc.strerror}") from exc
    with _held(fd, timeout_s=timeout_s, what=f"{store}: another writer holds the store lock {lock_path}"):
        yield


@contextmanager
def init_lock(store: Path, *, timeout_s: float) -> Iterator[None]:
    """Hold an exclusive flock on the store folder itself while it is created (before `.git` exists).

    Eight concurrent first saves into a store that does not exist yet all land: each waits here, and
    only the first runs `git init`; the others find a store.
    """
    try:
        fd = os.open(store, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise StoreError(f"{store}: cannot open the store folder: {exc.strerror}") from exc
    with _held(fd, timeout_s=timeout_s, what=f"{store}: another writer is creating the store"):
        yield


@contextmanager
def _held(fd: int, *, timeout_s: float, what: str) -> Iterator[None]:
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StoreConflictError(f"{what} (waited {timeout_s:g} s); retry when it has finished") from None
                time.sleep(_POLL_S)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def git_lock_files(git_dir: Path) -> tuple[Path, ...]:
    """Every git lock file currently present in `git_dir` (not our flock file)."""
    found = [git_dir / name for name in _GIT_LOCKS if (git_dir / name).exists()]
    refs = git_dir / "refs"
    if refs.is_dir():
        found.extend(sorted(refs.rglob("*.lock")))
    return tuple(found)


def own_temp_files(git_dir: Path, work_tree: Path) -> tuple[Path, ...]:
    """Temp files only an upgrade-gate writer creates: gitdb object temps and worktree `.*.tmp`."""
    found: list[Path] = []
    objects = git_dir / "objects"
    if objects.is_dir():
        found.extend(p for p in objects.glob("obj*") if p.is_file())
    found.extend(p for p in work_tree.glob(".*.tmp") if p.is_file())
    for folder in work_tree.iterdir():
        if folder.is_dir() and not folder.name.startswith("."):
            found.extend(p for p in folder.glob(".*.tmp") if p.is_file())
    return tuple(sorted(found))


def clear_leftovers(git_dir: Path, work_tree: Path, *, store: Path, now: float | None = None) -> tuple[Path, ...]:
    """Remove what a killed writer left (call with the flock held); returns the removed paths.

    Raises StoreConflictError naming a git lock file younger than STALE_AFTER_S.
    """
    current = time.time() if now is None else now
    removed: list[Path] = []
    for lock in git_lock_files(git_dir):
        try:
            age = current - lock.stat().st_mtime
        except FileNotFoundError:
            continue  # its owner finished meanwhile
        if age < STALE_AFTER_S:
            raise StoreConflictError(
                f"{store}: {lock} is held by a running git process, or was left by a save killed "
                f"{max(age, 0.0):.0f} s ago; retry, or remove it once sure no git process uses the store"
            )
        lock.unlink(missing_ok=True)
        removed.append(lock)
    for tmp in own_temp_files(git_dir, work_tree):
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    for tmp in streamed_temp_files(git_dir):  # written without the flock: only a stale one is a leftover
        try:
            if current - tmp.stat().st_mtime >= STALE_AFTER_S:
                tmp.unlink(missing_ok=True)
                removed.append(tmp)
        except FileNotFoundError:
            continue
    return tuple(removed)


def streamed_temp_files(git_dir: Path) -> tuple[Path, ...]:
    """Object temp files of a streamed save (`objects/ug-*.tmp`), which writes blobs without the flock
    (a fleet's reading takes minutes; other writers must not wait for it): each lives milliseconds."""
    objects = git_dir / "objects"
    return tuple(sorted(p for p in objects.glob("ug-*.tmp") if p.is_file())) if objects.is_dir() else ()
