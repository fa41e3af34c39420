"""Decoded baselines kept beside the store's git objects, so that `gate` reads a baseline as a msgpack
decode of a few kilobytes instead of inflating, hashing and parsing ~130 KB of indented JSON (issue 14).

Design decisions:
- Where: `<git dir>/upgrade-gate/decoded/<fingerprint>/<xx>/<blob id>`, inside the repository's git
  folder (never in the working tree, never committed, not cloned). An entry is named by the git blob it
  was decoded from, so it is content-addressed: it cannot go stale for that blob. The fingerprint names
  the decoded form (the class, its generated JSON Schema and the package version): a cache written by
  another model is never read, only left behind.
- What: the record as msgpack (msgspec, from the same annotations as the JSON codec), compressed with
  zlib level 1 (~8.6 KB for a 132 KB 8-GPU snapshot document; measured in bench/ANALYSIS.md).
- Trust: an entry is written only by this module, from a document that was schema-valid when the store
  saved it (`baseline save`) or whose blob's object id was just checked (`gate`, on a miss). zlib checks
  the entry's Adler-32 when it inflates it, the inflated stream must end exactly where the file does,
  and the decode is typed. Reads are bounded: an entry that is not a regular file (a link is not
  followed, a FIFO not waited on), is over 16 MiB, or inflates beyond 256 MiB, is not read further.
  Anything wrong with an entry (absent, unreadable, truncated, corrupt, oversized, of another model) is
  a miss: the baseline is read from git and checked against its object id as before. So the cache can
  only make a read faster, never change what is read; a gate never fails because of it.
- Writes are atomic (a temporary file in the entry's folder, renamed over the name), so concurrent
  workers writing the same entry both leave a whole one. A read-only store or a full disk only means
  misses: a write that fails is dropped without a warning, because nothing is lost (the verified read
  from git is still there, at its old speed).
- Nothing prunes the folder: an entry per saved blob (~8.6 KB) stays until the folder is deleted, which
  is safe at any time (`rm -rf <store>/.git/upgrade-gate/decoded`); the next gate rebuilds what it reads.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import stat
import tempfile
import zlib
from pathlib import Path
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

FOLDER = ("upgrade-gate", "decoded")
MAX_ENTRY_BYTES = 16 * 1024 * 1024  # an entry read at all (8.6 KB for an 8-GPU node); larger is a miss
MAX_DECODED_BYTES = 256 * 1024 * 1024  # what an entry may inflate to (62 KB for an 8-GPU node)
LEVEL = 1  # zlib level: inflate time is what a read pays; level 1 compresses these documents ~8x already


@functools.cache
def fingerprint(cls: type) -> str:
    """A name for `cls`'s decoded form: its name, its JSON Schema (msgspec's, from the annotations the
    decode follows) and the package version, hashed."""
    from upgrade_gate import __version__

    schema = msgspec.json.encode(msgspec.json.schema(cls), order="sorted")
    digest = hashlib.sha256(b"%s\0%s\0%s" % (cls.__qualname__.encode(), __version__.encode(), schema))
    return f"{cls.__name__.lower()}-{digest.hexdigest()[:16]}"


@functools.cache
def _decoder(cls: type) -> msgspec.msgpack.Decoder[Any]:
    return msgspec.msgpack.Decoder(cls)


_ENCODER = msgspec.msgpack.Encoder()


class DecodedCache:
    """The decoded-baseline cache of one store (see the module docstring)."""

    def __init__(self, git_dir: Path) -> None:
        self.root = Path(git_dir).joinpath(*FOLDER)

    def entry(self, cls: type, blob: bytes) -> Path:
        """Where the decoded form of git blob `blob` (its binary object id) as `cls` lives."""
        hexsha = blob.hex()
        return self.root / fingerprint(cls) / hexsha[:2] / hexsha[2:]

    def get(self, cls: type[T], blob: bytes) -> T | None:
        """The decoded record of `blob`, or None on any miss (absent, unreadable, corrupt, other model)."""
        try:
            packed = _read_entry(self.entry(cls, blob))
            if packed is None:
                return None
            inflater = zlib.decompressobj()
            raw = inflater.decompress(packed, MAX_DECODED_BYTES)
            if not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
                return None  # truncated, inflating beyond the bound, or followed by something else
            kind: Any = cls
            decoded: T = _decoder(kind).decode(raw)
        except (OSError, zlib.error, msgspec.DecodeError):  # ValidationError is a DecodeError
            return None
        return decoded

    def put(self, cls: type, blob: bytes, value: object) -> bool:
        """Write the decoded form of `blob` atomically; False when it could not be written (a miss later)."""
        path = self.entry(cls, blob)
        try:
            data = zlib.compress(_ENCODER.encode(value), LEVEL)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except (OSError, TypeError, msgspec.EncodeError):
            return False
        return True


def _read_entry(path: Path) -> bytes | None:
    """An entry's bytes: a regular file (not followed through a link, never waited on like a FIFO) of at
    most MAX_ENTRY_BYTES; None otherwise. OSError when it cannot be opened (absent)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ENTRY_BYTES:
            return None
        parts = []
        left = info.st_size + 1  # one more: a file that grew since fstat shows as too long
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            parts.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(parts)
    return data if len(data) <= info.st_size else None


def blob_id(data: bytes) -> bytes:
    """The git object id of a blob with content `data` (what git names it by)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).digest()
