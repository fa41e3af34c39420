"""Decoded baselines kept beside the store's git objects, so that `gate` reads a baseline as a msgpack
decode of a few kilobytes instead of inflating, hashing and parsing ~130 KB of indented JSON (issue 14).

Design decisions:
- Where: `<git dir>/upgrade-gate/decoded/key-<key id>/<fingerprint>/<xx>/<blob id>`, inside the
  repository's git folder (never in the working tree, never committed, not cloned), in a folder of
  this user's cache key (`cachekey`: each user who reads the store keeps entries of their own). An
  entry is named by the git blob it was decoded from, and carries that id inside. The fingerprint
  names the decoded form: the class, its msgspec JSON Schema, the package version and the source of
  `upgrade_gate/model/` (a default changed in the model changes it too), hashed; a cache written by
  another model is never read.
- What: a header (magic, the blob id, a MAC) and the record as msgpack (msgspec, from the same
  annotations as the JSON codec) compressed as one Zstandard frame that states its size (`pack`):
  ~7.9 KB an entry for the bench fleet's 132 KB 8-GPU snapshot document, inflated in ~18 us (zlib level 1 took
  ~94 us and 8.4 KB: a fifth of a gate's baseline read, issue 29). A snapshot is kept in its v2 form (`_form`: the
  measurements as columns, as the store's documents are), converted back on a hit; its column checks
  run there too, and an entry that fails them is a miss.
- Trust (issue 26: caches are never trusted by location): the MAC is keyed BLAKE2b with this user's
  secret (`cachekey.user_key`, a 0600 file in the user's own cache folder), over the fingerprint, the
  blob id and the body. Anyone who can write the git folder can still write an entry, but not one
  that reads: a body rewritten and its digest recomputed (as the unkeyed BLAKE2b digest of `UGD1`
  allowed, which let a forged entry pass a changed node at an immutable tag while `git fsck` and the
  tag check looked clean), an entry copied under another blob's name or into another fingerprint's
  folder, all fail the MAC and are misses. An entry is written only by this module, from a document
  that was schema-valid when the store saved it (`baseline save`) or whose blob was just checked
  against its object id (`gate`, on a miss). A hit does not read the git object again, so a store
  whose object was damaged or lost after the entry was written still reads the baseline saved under
  that id; `git fsck` is what finds the damage.
- Anything wrong with an entry (absent, unreadable, a link, a folder, oversized, truncated, a MAC
  or id that does not match, another model, an encode that fails) is a miss: the baseline is read from
  git and checked against its object id, as without a cache, and the entry is written again. A key
  that is refused (a link, group- or world-accessible, another user's) turns the cache off: every
  read is a miss and nothing is written. A gate never fails, and never passes, because of the cache.
- Bounded: an entry is read by `docio.read_bytes` (no link followed, no FIFO waited on, nothing read
  past 16 MiB), and one whose frame states more than 16 MiB (or no size) is not inflated (a
  bench-fleet node is 62 KB of msgpack; msgpack can still grow ~40x into Python objects; only this
  user's own entries get that far now, since the MAC is checked before anything is inflated).
- Writes are atomic (a temporary file in the entry's folder, renamed over the name), so concurrent
  workers writing the same entry both leave a whole one; entries are read-only (0444) like git objects.
  A read-only store or a full disk only means misses: a write that fails is dropped without a warning,
  because nothing is lost (the verified read from git is still there, at its old speed). Folders are
  made one at a time from the git folder down and each is checked not to be a link: a store handed
  over may hold links in its git folder, and nothing is written, or pruned, through one (issue 26).
- `baseline save` removes the folders of other fingerprints (another release's entries) in this key's
  folder when it writes its own, and the folders an earlier release kept directly under `decoded/`
  (the unkeyed `UGD1` layout); other keys' folders are other users' and are left alone. Nothing else
  prunes: an entry per saved blob (~8.6 KB, 12 KB on 4 KB blocks) stays until the folder is deleted,
  which is safe at any time (`rm -rf <store>/.git/upgrade-gate/decoded`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import stat
import tempfile
import typing
from collections.abc import Collection
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import zstandard

from upgrade_gate import cachekey
from upgrade_gate.docio import read_bytes
from upgrade_gate.errors import GateError

T = TypeVar("T")

FOLDER = ("upgrade-gate", "decoded")
MAX_ENTRY_BYTES = 16 * 1024 * 1024  # an entry read at all (8.6 KB for an 8-GPU node); larger is a miss
MAX_DECODED_BYTES = 16 * 1024 * 1024  # what an entry may inflate to (62 KB for an 8-GPU node)
MAGIC = b"UGD2"  # UGD1 carried an unkeyed digest: anyone who could write the folder could forge it
_ID, _MAC = 20, cachekey.MAC_BYTES
_HEADER = len(MAGIC) + _ID + _MAC
PURPOSE = b"ug-decoded"  # the MAC's personalisation: an entry of another cache never reads here
LEVEL = 3  # Zstandard's default: inflating (what a read pays) is ~18 us at any level; 1 to 9 differ by 5% in size
BODY = b"zstd-frame-with-size"  # how a body is compressed, in the fingerprint (earlier entries: zlib 1)


def pack(raw: bytes) -> bytes:
    """An entry's body: `raw` (the record's msgpack) as one Zstandard frame that states its size."""
    # A compressor (and a decompressor, in `unpack`) per call: zstandard's are not thread-safe, and one
    # shared by the threads of a process crashed it (a segfault in tests/test_store_decoded.py's
    # concurrent writers, 2 runs in 6). Making one costs ~3 us.
    return zstandard.ZstdCompressor(level=LEVEL, write_content_size=True, write_checksum=False).compress(raw)


def unpack(body: bytes | memoryview) -> bytes | None:
    """The record's msgpack a body holds, or None: not one whole frame, a frame that does not state its
    size or states more than `MAX_DECODED_BYTES` (refused before inflating: a stated size is what
    Zstandard allocates), or anything after it."""
    try:
        size = zstandard.frame_content_size(body)
        if not 0 <= size <= MAX_DECODED_BYTES:
            return None  # -1: no size stated
        raw: bytes = zstandard.ZstdDecompressor().decompress(
            body, max_output_size=MAX_DECODED_BYTES, read_across_frames=False, allow_extra_data=False
        )
    except zstandard.ZstdError:
        return None
    return raw if len(raw) == size else None


ENTRY_RULES = b"2"
"""How entries are made, in the fingerprint: 2 = only from a document decoded strictly (a miss) or just
saved. Entries of 1 could hold a baseline committed by hand that no schema check had read."""


@functools.cache
def _form(cls: type) -> type:
    """What an entry of `cls` holds: a `Snapshot` as its v2 form (`model.columnar.SnapshotV2`, each
    sweep's settings once and the samples as columns), every other record as itself. The v2 form
    decodes in ~half the CPU of the per-measurement one (139 + 40 us to convert back, against 287 us, on
    the bench fleet's 8-GPU node) and inflates from ~8.4 KB to ~40 KB instead of ~64 KB."""
    from upgrade_gate.model import Snapshot

    if cls is Snapshot:
        from upgrade_gate.model.columnar import SnapshotV2

        return typing.cast(type, SnapshotV2)
    return cls


@functools.cache
def fingerprint(cls: type) -> str:
    """A name for `cls`'s decoded form: its name, the JSON Schema of what an entry holds (msgspec's, from
    the annotations the decode follows; `_form`), the package version, the model's source and
    `ENTRY_RULES`, hashed."""
    from upgrade_gate import __version__

    form = _form(cls)
    schema = msgspec.json.encode(msgspec.json.schema(form), order="sorted")
    names = b"%s\0%s\0%s" % (cls.__qualname__.encode(), form.__qualname__.encode(), BODY)
    digest = hashlib.sha256(b"%s\0%s\0%s\0%s\0%s" % (names, __version__.encode(), schema, _model_source(), ENTRY_RULES))
    return f"{cls.__name__.lower()}-{digest.hexdigest()[:16]}"


def _unwrapped(cls: type, stored: Any) -> Any:
    """The record of `cls` an entry's decoded `stored` form holds (`_form`)."""
    if _form(cls) is cls:
        return stored
    from upgrade_gate.model.columnar import from_wire

    return from_wire(stored, where="decoded cache entry")  # its column checks raise SchemaError: a miss


def _wrapped(cls: type, value: object) -> object:
    if _form(cls) is cls:
        return value
    from upgrade_gate.model.columnar import to_wire

    return to_wire(typing.cast(Any, value))


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
    """The decoded-baseline cache of one store (see the module docstring); off when the key is refused."""

    def __init__(self, git_dir: Path) -> None:
        self.key = cachekey.user_key()
        self.folder = Path(git_dir).joinpath(*FOLDER)
        self.root = self.folder / f"key-{self.key.id}" if self.key is not None else self.folder

    def entry(self, cls: type, blob: bytes) -> Path:
        """Where the decoded form of git blob `blob` (its binary object id) as `cls` lives."""
        hexsha = blob.hex()
        return self.root / fingerprint(cls) / hexsha[:2] / hexsha[2:]

    def get(self, cls: type[T], blob: bytes) -> T | None:
        """The decoded record of `blob`, or None on any miss (module docstring)."""
        if self.key is None:
            return None
        kind: Any = cls
        try:
            packed = read_bytes(self.entry(cls, blob), limit=MAX_ENTRY_BYTES, follow=False)
            if len(packed) < _HEADER or packed[: len(MAGIC)] != MAGIC:
                return None
            body = memoryview(packed)[_HEADER:]
            if packed[len(MAGIC) : len(MAGIC) + _ID] != blob or not self.key.verify(
                memoryview(packed)[len(MAGIC) + _ID : _HEADER], PURPOSE, fingerprint(kind).encode(), blob, body
            ):
                return None  # written for another blob or model, forged, or damaged since
            raw = unpack(body)
            if raw is None:
                return None  # truncated, inflating beyond the bound, or followed by something else
            decoded: T = _unwrapped(kind, _decoder(_form(kind)).decode(raw))
        except (
            GateError,
            msgspec.DecodeError,
        ):  # absent, not a file, oversized; ValidationError is a DecodeError
            return None
        return decoded

    def seal(self, cls: type, blob: bytes, body: bytes) -> bytes:
        """The entry for `blob` around the compressed record `body` (header and MAC); needs the key."""
        if self.key is None:
            raise ValueError("the cache key was refused: no entry can be sealed")
        return MAGIC + blob + self.key.mac(PURPOSE, fingerprint(cls).encode(), blob, body) + body

    def put(self, cls: type, blob: bytes, value: object) -> bool:
        """Write the decoded form of `blob` atomically; False when it could not be written (a miss later)."""
        if self.key is None:
            return False
        path = self.entry(cls, blob)
        try:
            data = self.seal(cls, blob, pack(_ENCODER.encode(_wrapped(cls, value))))
            self._make_folders(path.parent)
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
        except (OSError, ValueError, TypeError, OverflowError, RecursionError, msgspec.EncodeError, GateError):
            return False
        return True

    def prune(self, keep: Collection[type]) -> None:
        """Remove the folders of every fingerprint but those of `keep` (another release's entries) in
        this key's folder, and an earlier release's unkeyed folders beside it. Only folders named like a
        fingerprint, only under real folders (a link anywhere on the way, and nothing is removed): a
        store handed over may hold links, and what the tool did not create is not its to remove. Best
        effort: a reader of a removed entry misses and reads git."""
        if self.key is None or not (self._real_folder(self.root) and self._real_folder(self.folder)):
            return
        wanted = {fingerprint(cls) for cls in keep}
        legacy = tuple(f"{cls.__name__.lower()}-" for cls in keep)  # UGD1 kept <fingerprint>/ in `folder`
        try:
            folders = [p for p in self.root.iterdir() if p.name not in wanted]
            folders += [p for p in self.folder.iterdir() if p.name.startswith(legacy)]
        except OSError:
            return
        for folder in folders:
            if _FINGERPRINT.fullmatch(folder.name):
                shutil.rmtree(folder, ignore_errors=True)  # refuses a link itself; never follows one inside

    def _real_folder(self, path: Path) -> bool:
        """True when `path` and every folder above it up to the git folder is a folder, not a link."""
        top = self.folder.parent.parent
        current = top
        try:
            for part in path.relative_to(top).parts:
                current = current / part
                if not stat.S_ISDIR(os.lstat(current).st_mode):
                    return False
        except (OSError, ValueError):
            return False
        return True

    def _make_folders(self, path: Path) -> None:
        """Make `path` and the folders above it, one at a time from the git folder down, each checked
        to be a folder and not a link (OSError otherwise): nothing is written through a link."""
        current = self.folder.parent.parent
        for part in path.relative_to(current).parts:
            current = current / part
            with contextlib.suppress(FileExistsError):
                os.mkdir(current)
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                raise OSError(f"{current}: a link or not a folder; the decoded cache does not write there")


_FINGERPRINT = re.compile(r"[a-z0-9_]+-[0-9a-f]{16}")
"""What `fingerprint` names a folder: the only names `prune` removes."""


def blob_id(data: bytes) -> bytes:
    """The git object id of a blob with content `data` (what git names it by)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).digest()
