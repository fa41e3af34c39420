"""The one secret behind every cache the tool reads back, and the keyed MAC that seals an entry.

Issue 26: caches are never trusted by location. An entry in a shared `--cache-dir`, or in a store's
git folder, can be written by whoever can write there; a digest anyone can recompute (SHA-256,
unkeyed BLAKE2b) only catches damage, not a forgery. So every entry the tool reads back is sealed
with a MAC keyed by a secret only this user holds, and one whose MAC does not check out is a miss
(the value is computed again from its source), never a pass and never a crash.

Design decisions:
- The key: 32 random bytes in `$XDG_CACHE_HOME/upgrade-gate/cache.key` (else `~/.cache/...`), the
  user's own cache folder, never the folder a cache is shared in (`--cache-dir` does not move it).
  Created on first use: mode 0600 in a folder made 0700, written to a temporary name and linked into
  place, so two first runs at once agree on one key (the second one's link fails and it reads the
  first's) and nothing that was already there is ever replaced.
- A key file that is a symbolic link, not a regular file, not this user's (by effective uid), readable
  or writable by group or others, or not exactly 32 bytes is refused: every cache is then off for
  the process (nothing read, nothing written), which costs speed, never a verdict. It is not replaced
  by a fresh key: the file is not one this tool made as it stands, and replacing it would destroy
  what we did not create (and hide that someone tampered with it). `refusal()` says why, so a
  command can print it; removing the file makes a new key at the next run.
- The checks are made on the open descriptor (`O_NOFOLLOW`, then `fstat`), so the file cannot be
  swapped between the check and the read.
- The MAC is keyed BLAKE2b-256 (as strong as HMAC-SHA256 here, and one call), with a `purpose`
  as its personalisation (one per cache, so an entry of one cache is never valid in another) over
  length-prefixed parts (so the parts cannot be re-split). Each cache MACs everything that names and
  makes the entry: its format or fingerprint, the id of the source it was made from, and its body.
- The key is read once per process (and per key path); forked workers inherit it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

KEY_NAME = "cache.key"
KEY_BYTES = 32
MAC_BYTES = 32
_PERSON_BYTES = 16  # BLAKE2b's personalisation length


@dataclass(frozen=True, slots=True)
class CacheKey:
    """This user's cache secret (never printed: `repr` leaves it out)."""

    secret: bytes = field(repr=False)
    path: Path

    def mac(self, purpose: bytes, *parts: bytes | memoryview) -> bytes:
        """The MAC of `parts` (length-prefixed) for the cache named `purpose` (at most 16 bytes)."""
        if len(purpose) > _PERSON_BYTES:
            raise ValueError(f"cache purpose {purpose!r}: at most {_PERSON_BYTES} bytes")
        digest = hashlib.blake2b(key=self.secret, digest_size=MAC_BYTES, person=purpose)
        for part in parts:
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
        return digest.digest()

    def verify(self, tag: bytes | memoryview, purpose: bytes, *parts: bytes | memoryview) -> bool:
        """True when `tag` is the MAC of `parts` for `purpose` (compared in constant time)."""
        return hmac.compare_digest(bytes(tag), self.mac(purpose, *parts))

    @property
    def id(self) -> str:
        """A name for this key that reveals nothing of it (16 hex digits): caches keep each user's
        entries in a folder of its own, so that users sharing a cache folder do not overwrite
        each other's entries with ones the other cannot read."""
        return self.mac(b"ug-key-id").hex()[:16]


def key_path() -> Path:
    """Where this user's key lives: `$XDG_CACHE_HOME/upgrade-gate/cache.key`, else `~/.cache/...`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "upgrade-gate" / KEY_NAME


_LOADED: dict[str, CacheKey | str] = {}  # key path -> the key, or why it was refused


def user_key() -> CacheKey | None:
    """This user's key, created on first use; None when it is refused (every cache is then off)."""
    found = _loaded(key_path())
    return found if isinstance(found, CacheKey) else None


def refusal() -> str | None:
    """Why the key was refused (one line naming the file), or None when caches can be used."""
    found = _loaded(key_path())
    return found if isinstance(found, str) else None


def forget() -> None:
    """Drop the keys read by this process (the next use reads the file again)."""
    _LOADED.clear()


def _loaded(path: Path) -> CacheKey | str:
    name = str(path)
    found = _LOADED.get(name)
    if found is None:
        found = _LOADED[name] = _load_or_create(path)
    return found


def _load_or_create(path: Path) -> CacheKey | str:
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    except _Refused as exc:
        return f"{path}: cache key refused ({exc}); caches are off (remove the file and a new key is made)"
    except OSError as exc:
        return f"{path}: cache key unreadable ({exc.strerror or exc}); caches are off"
    try:
        return _create(path)
    except _Refused as exc:
        return f"{path}: cache key refused ({exc}); caches are off (remove the file and a new key is made)"
    except OSError as exc:
        return f"{path}: cache key could not be created ({exc.strerror or exc}); caches are off"


class _Refused(Exception):
    """A key file that exists but is not one to trust."""


def _read(path: Path) -> CacheKey:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if path.is_symlink():  # ELOOP from O_NOFOLLOW (whether or not the link dangles)
            raise _Refused("a symbolic link") from None
        raise exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Refused("not a regular file")
        if info.st_uid != os.geteuid():
            raise _Refused(f"owned by uid {info.st_uid}, not this user")
        if info.st_mode & 0o077:
            raise _Refused(f"mode {stat.S_IMODE(info.st_mode):04o}: group or others may use it; 0600 is required")
        secret = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(secret) != KEY_BYTES:
        raise _Refused(f"{len(secret)} bytes, not {KEY_BYTES}")
    return CacheKey(secret=secret, path=path)


def _create(path: Path) -> CacheKey:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{KEY_NAME}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, secrets.token_bytes(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)  # never replaces: a key another run made first wins
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return _read(path)  # the key as it now stands, checked like any other
