"""Decoded baselines kept beside the store's git objects, so that `gate` reads a baseline as a msgpack
decode of a few kilobytes instead of inflating, hashing and parsing ~130 KB of indented JSON (issue 14).

Design decisions:
- Where: `<git dir>/upgrade-gate/decoded/<fingerprint>/<xx>/<blob id>`, inside the repository's git
  folder (never in the working tree, never committed, not cloned). An entry is named by the git blob it
  was decoded from, and carries that id inside, so it is content-addressed: it cannot go stale for that
  blob, and an entry copied under another name is not read. The fingerprint names the decoded form: the
  class, its msgspec JSON Schema, the package version and the source of `upgrade_gate/model/` (a default
  changed in the model changes it too), hashed; a cache written by another model is never read.
- What: a header (magic, the blob id, a BLAKE2b-256 digest of the rest) and the record as msgpack
  (msgspec, from the same annotations as the JSON codec) compressed with zlib level 1: ~8.6 KB for the
  bench fleet's 132 KB 8-GPU snapshot document (bench/ANALYSIS.md).
- Trust, which is the store's own: an entry is written only by this module, from a document that was
  schema-valid when the store saved it (`baseline save`) or whose blob was just checked against its
  object id (`gate`, on a miss). On a read the digest is checked (as git checks an object against its
  id), the inflated stream must end where the entry does, and the decode is typed. Anyone who can write
  the git folder can forge an entry, as they can forge a commit and move the branch: the cache adds no
  way in. A hit does not read the git object again, so a store whose object was damaged or lost after the
  entry was written still reads the baseline saved under that id; `git fsck` is what finds the damage.
- Anything wrong with an entry (absent, unreadable, a link, a folder, oversized, truncated, a digest
  or id that does not match, another model, an encode that fails) is a miss: the baseline is read from
  git and checked against its object id, as without a cache, and the entry is written again. A gate
  never fails because of the cache.
- Bounded: an entry is read by `docio.read_bytes` (no link followed, no FIFO waited on, nothing read
  past 16 MiB), and one that inflates beyond 16 MiB is not decoded (a
  bench-fleet node is 62 KB of msgpack; msgpack can still grow ~40x into Python objects, so a forged
  entry costs at most ~0.6 GiB, and the JSON read from git has no tighter bound).
- Writes are atomic (a temporary file in the entry's folder, renamed over the name), so concurrent
  workers writing the same entry both leave a whole one; entries are read-only (0444) like git objects.
  A read-only store or a full disk only means misses: a write that fails is dropped without a warning,
  because nothing is lost (the verified read from git is still there, at its old speed).
- `baseline save` removes the folders of other fingerprints (another release's entries) when it writes
  its own. Nothing else prunes: an entry per saved blob (~8.6 KB, 12 KB on 4 KB blocks) stays until the
  folder is deleted, which is safe at any time (`rm -rf <store>/.git/upgrade-gate/decoded`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import tempfile
import zlib
from collections.abc import Collection
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from upgrade_gate.docio import read_bytes
from upgrade_gate.errors import GateError

T = TypeVar("T")

FOLDER = ("upgrade-gate", "decoded")
MAX_ENTRY_BYTES = 16 * 1024 * 1024  # an entry read at all (8.6 KB for an 8-GPU node); larger is a miss
MAX_DECODED_BYTES = 16 * 1024 * 1024  # what an entry may inflate to (62 KB for an 8-GPU node)
MAGIC = b"UGD1"
_ID, _DIGEST = 20, 32
_HEADER = len(MAGIC) + _ID + _DIGEST
LEVEL = 1  # zlib level: inflate time is what a read pays; level 1 compresses these documents ~8x already


ENTRY_RULES = b"2"
"""How entries are made, in the fingerprint: 2 = only from a document decoded strictly (a miss) or just
saved. Entries of 1 could hold a baseline committed by hand that no schema check had read."""


@functools.cache
def fingerprint(cls: type) -> str:
    """A name for `cls`'s decoded form: its name, its JSON Schema (msgspec's, from the annotations the
    decode follows), the package version, the model's source and `ENTRY_RULES`, hashed."""
    from upgrade_gate import __version__

    schema = msgspec.json.encode(msgspec.json.schema(cls), order="sorted")
    digest = hashlib.sha256(
        b"%s\0%s\0%s\0%s\0%s" % (cls.__qualname__.encode(), __version__.encode(), schema, _model_source(), ENTRY_RULES)
    )
    return f"{cls.__name__.lower()}-{digest.hexdigest()[:16]}"


@functools.cache
def _model_source() -> bytes:
    """The text of `upgrade_gate/model/*.py`, hashed: defaults and factories are not in the schema."""
    import upgrade_gate.model

    digest = hashlib.sha256()
    for path in sorted(Path(upgrade_gate.model.__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest().encode()


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
        """The decoded record of `blob`, or None on any miss (module docstring)."""
        try:
            packed = read_bytes(self.entry(cls, blob), limit=MAX_ENTRY_BYTES, follow=False)
            if len(packed) < _HEADER or packed[: len(MAGIC)] != MAGIC:
                return None
            body = memoryview(packed)[_HEADER:]
            if packed[len(MAGIC) : len(MAGIC) + _ID] != blob or _digest(body) != packed[len(MAGIC) + _ID : _HEADER]:
                return None  # written for another blob, or damaged since
            inflater = zlib.decompressobj()
            raw = inflater.decompress(body, MAX_DECODED_BYTES)
            if not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
                return None  # truncated, inflating beyond the bound, or followed by something else
            kind: Any = cls
            decoded: T = _decoder(kind).decode(raw)
        except (
            GateError,
            zlib.error,
            msgspec.DecodeError,
        ):  # absent, not a file, oversized; ValidationError is a DecodeError
            return None
        return decoded

    def put(self, cls: type, blob: bytes, value: object) -> bool:
        """Write the decoded form of `blob` atomically; False when it could not be written (a miss later)."""
        path = self.entry(cls, blob)
        try:
            body = zlib.compress(_ENCODER.encode(value), LEVEL)
            data = MAGIC + blob + _digest(body) + body
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                os.fchmod(fd, 0o444)  # content-addressed: never rewritten in place, like a git object
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        # An encode can fail on a value msgpack cannot hold (an integer beyond 64 bits, which JSON and the
        # schema allow): that baseline is simply not cached.
        except (OSError, ValueError, TypeError, OverflowError, RecursionError, msgspec.EncodeError):
            return False
        return True

    def prune(self, keep: Collection[type]) -> None:
        """Remove the folders of every fingerprint but those of `keep` (another release's entries). Best
        effort: a reader of a removed entry misses and reads git."""
        wanted = {fingerprint(cls) for cls in keep}
        try:
            folders = [p for p in self.root.iterdir() if p.name not in wanted]
        except OSError:
            return
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


def _digest(data: bytes | memoryview) -> bytes:
    return hashlib.blake2b(data, digest_size=_DIGEST).digest()


def blob_id(data: bytes) -> bytes:
    """The git object id of a blob with content `data` (what git names it by)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).digest()
