"""Find the ELF files of a tree and read them: in parallel, symbol tables only, cached by file hash.

Design decisions:
- A library tree is every file under the root whose name looks like a shared object (`*.so`,
  `*.so.N...`) and starts with the ELF magic; a linker script named `libc.so` is skipped. Device code
  objects (`EM_AMDGPU`, rocBLAS' thousands of `.co`/`.hsaco` files) and static archives are never
  read. Symlinks inside the tree are aliases of the file they point at (read once); directory links
  are not followed, so `/opt/rocm/lib/llvm` does not pull a second tree in.
- A consumer is a path, a directory (walked: every ELF file in it) or a glob. A path or glob that
  names nothing is bad input (exit 3), not an empty pass.
- Each file is hashed (SHA-256) and its `ElfAbi` is cached under `<cache>/key-<key id>/<hash[:2]>/
  <hash>.abi`: a header (`ENTRY_MAGIC`, then a MAC) and the JSON rows `_dump` writes, tagged with
  `CACHE_FORMAT`. A changed file has a new hash, so the cache never serves stale data and needs no
  invalidation. Entries are written atomically (temp file + rename), so parallel readers and
  concurrent runs can share one cache folder.
- Trust (issue 26: caches are never trusted by location): the cache folder may be shared (another
  user's, mode 0777), so anyone may write an entry there. Before `abi-3`, an entry was trusted by its
  name and the hash inside it: the running library's entry copied under the candidate's hash (the hash
  inside edited to match) made the candidate read as the running library, and a BLOCK a PASS. Now the
  MAC (keyed BLAKE2b with this user's secret, `cachekey`) covers the format, the file's hash and the
  body: an entry this user's runs did not write is a miss and the file is read again. Each key has a
  folder of its own (made 0700), so users sharing a folder each keep (and read) only their own
  entries. A key that is refused (a link, group- or world-accessible, another user's) turns the cache
  off, and so does a key folder that is a link or another account's (planted at its name, which is
  visible in a shared folder): nothing is written through it.
- An entry is read without following a link, without waiting on a FIFO and up to `MAX_ENTRY_BYTES`
  (`docio.read_bytes`), and decoded strictly (a msgspec Struct of exactly the keys and JSON types
  `_dump` writes): anything else, damaged or edited, is a miss and the file is read again, never a
  crash (exit 70), a hang, or a value of the wrong type (`"false"` read as true).
- pyelftools is pure Python (GIL-bound), so files are read by a process pool; a handful of files are
  read in-process, where a pool would cost more than it saves.
- Within one run (the scans sharing a `memo`) a file already read and unchanged since (same device,
  inode, size, mtime and ctime) is not hashed again: a file both trees share is read once. Nothing
  stat-keyed is persisted: across runs only the content hash decides.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import msgspec

from upgrade_gate import cachekey
from upgrade_gate.abi.elf import ElfAbi, ElfError, Export, Import, is_elf, read_elf
from upgrade_gate.cpus import usable_cpus
from upgrade_gate.docio import read_bytes
from upgrade_gate.errors import EnvironmentFailure, GateError, InputError

CACHE_FORMAT = "abi-3"
"""Bump when `ElfAbi` or the reader's rules change: old cache entries are then ignored."""

ENTRY_MAGIC = b"UGA3"  # then the MAC, then the JSON rows (abi-2 entries were bare, unauthenticated JSON)
PURPOSE = b"ug-abi-entry"  # the MAC's personalisation: an entry of another cache never reads here
MAX_ENTRY_BYTES = 64 * 1024 * 1024  # an entry read at all; larger is a miss (Debian's libamd_comgr: 1.07 MB)
_HEADER = len(ENTRY_MAGIC) + cachekey.MAC_BYTES

_SHARED_NAME = re.compile(r".+\.so(\.[0-9][0-9A-Za-z._+-]*)?")
_POOL_MIN_FILES = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class ElfFile:
    """One ELF file of a tree: where it is, the names it is reached by, what it exports and needs."""

    path: str  # as found (under the root given)
    aliases: tuple[str, ...] = ()  # symlinks in the tree that point at it
    abi: ElfAbi

    @property
    def key(self) -> str:
        """The soname; for a library without one, its shortest in-tree link name, else its file name.

        A link name (`librccl.so.1` -> `librccl.so.1.0.60103`) is what loaders and linkers use and it
        survives a rebuild; the file name carries the build and would make every upgrade a removal.
        """
        if self.abi.soname:
            return self.abi.soname
        names = [Path(a).name for a in self.aliases] or [Path(self.path).name]
        return min(names, key=lambda n: (len(n), n))


@dataclass(frozen=True, slots=True, kw_only=True)
class ScanStats:
    """What a scan did, for the bench and the report."""

    files: int
    cache_hits: int
    skipped_not_elf: tuple[str, ...] = ()


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/upgrade-gate/abi` (or `~/.cache/...`)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "upgrade-gate" / "abi"


def library_files(root: Path) -> tuple[list[Path], dict[Path, list[str]], list[str]]:
    """Shared-object files of a tree (each real file once), the other names they have, non-ELF names."""
    if not root.is_dir():
        raise InputError(f"{root}: not a directory")
    names_of: dict[Path, list[Path]] = {}  # real file -> every path of the tree that reaches it
    for dirpath, _dirs, names in os.walk(root, followlinks=False):
        for name in sorted(names):
            if not _SHARED_NAME.fullmatch(name):
                continue
            path = Path(dirpath) / name
            target = path.resolve()
            if target.is_file():  # dangling links are skipped: the soname they meant is judged as missing
                names_of.setdefault(target, []).append(path)
    files: list[Path] = []
    aliases: dict[Path, list[str]] = {}
    not_elf: list[str] = []
    for target, paths in names_of.items():
        real = [p for p in paths if not p.is_symlink()]
        primary = real[0] if real else target
        if not is_elf(primary):
            not_elf.append(str(primary))
            continue
        files.append(primary)
        aliases[primary] = sorted(str(p) for p in paths if p != primary)
    return sorted(files), aliases, sorted(not_elf)


def consumer_files(specs: Sequence[str]) -> list[Path]:
    """The ELF files named by paths, directories or globs; one that names nothing is InputError."""
    out: list[Path] = []
    for spec in specs:
        matches = [Path(p) for p in sorted(glob.glob(spec, recursive=True))] if glob.has_magic(spec) else [Path(spec)]
        found: list[Path] = []
        for match in matches:
            if match.is_dir():
                for dirpath, _dirs, names in os.walk(match, followlinks=False):
                    for name in sorted(names):
                        path = Path(dirpath) / name
                        if path.is_file() and not path.is_symlink() and is_elf(path):
                            found.append(path)
            elif match.is_file():
                if not is_elf(match):
                    if not glob.has_magic(spec):
                        raise InputError(f"consumer {spec}: not an ELF file")
                    continue
                found.append(match)
        if not found:
            raise InputError(f"consumer {spec}: no ELF file found there")
        out.extend(found)
    return list(dict.fromkeys(out))


def scan(
    paths: Iterable[Path],
    *,
    cache_dir: Path | None,
    workers: int | None = None,
    memo: dict[tuple[int, ...], ElfAbi] | None = None,
) -> tuple[dict[Path, ElfAbi], int]:
    """Read every file (in parallel, through the cache); returns path -> ElfAbi and the cache hits.

    `memo`, shared by the scans of one run, remembers files already read (keyed by `stat_key`). The
    cache is off when this user's key is refused (`cachekey.refusal()` says why).
    """
    memo = {} if memo is None else memo
    key = cachekey.user_key() if cache_dir is not None else None
    folder = _key_folder(cache_dir, key) if cache_dir is not None and key is not None else None
    out: dict[Path, ElfAbi] = {}
    hits = 0
    todo: list[Path] = []
    for path in dict.fromkeys(paths):
        known = memo.get(stat_key(path))
        if known is not None:  # the same unchanged file, already read in this process (e.g. in both trees)
            out[path] = known
            hits += 1
        else:
            todo.append(path)
    jobs = [(str(p), folder, key) for p in todo]
    if len(jobs) < _POOL_MIN_FILES or workers == 1:
        results = [_read_one(job) for job in jobs]
    else:
        try:
            with ProcessPoolExecutor(max_workers=workers or usable_cpus()) as pool:
                results = list(pool.map(_read_one, jobs, chunksize=max(1, len(jobs) // 64)))
        except BrokenProcessPool as exc:  # a reader killed (out of memory, a signal): nothing was judged
            raise EnvironmentFailure(f"ELF reader processes died: {exc}") from None
    for path, (abi, hit, error) in zip(todo, results, strict=True):
        if abi is None:
            raise ElfError(error or f"{path}: unreadable")
        hits += hit
        out[path] = abi
        memo[stat_key(path)] = abi
    return out, hits


def _key_folder(cache_dir: Path, key: cachekey.CacheKey) -> str | None:
    """This key's folder in the cache (made 0700), or None, the cache off for this run, when it cannot be
    made or is not this user's folder: a link or another account's folder planted at its name in a
    shared cache would have this run write its entries wherever that points."""
    folder = cache_dir / f"key-{key.id}"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return None
    return str(folder)


def stat_key(path: Path) -> tuple[int, ...]:
    """Identity of an unchanged file within one run: device, inode, size, mtime and ctime."""
    try:
        st = path.stat()
    except OSError:
        return (-1, id(path))  # never matches: the read reports the error
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _read_one(job: tuple[str, str | None, cachekey.CacheKey | None]) -> tuple[ElfAbi | None, bool, str | None]:
    """Worker: hash, look up the cache, read on a miss. Errors travel back as text (picklable)."""
    path, cache, key = job
    try:
        with open(path, "rb") as fh:
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
    except OSError as exc:
        return None, False, f"{path}: unreadable: {exc.strerror or exc}"
    entry = Path(cache) / digest[:2] / f"{digest}.abi" if cache is not None and key is not None else None
    if entry is not None and key is not None:
        try:
            cached = _load(read_bytes(entry, limit=MAX_ENTRY_BYTES, follow=False), digest, key)
        except GateError:
            cached = None  # absent, unreadable, a link, a folder, oversized: read the file and rewrite the entry
        if cached is not None:
            return cached, True, None
    try:
        abi = read_elf(Path(path), digest)
    except ElfError as exc:
        return None, False, str(exc)
    if entry is not None and key is not None:
        _write_atomic(entry, seal(key, digest, json.dumps(_dump(abi), separators=(",", ":")).encode()))
    return abi, False, None


def seal(key: cachekey.CacheKey, digest: str, body: bytes) -> bytes:
    """The cache entry for the file hashed `digest` holding `body` (the JSON rows): magic, MAC, body."""
    return ENTRY_MAGIC + key.mac(PURPOSE, CACHE_FORMAT.encode(), digest.encode(), body) + body


def _dump(abi: ElfAbi) -> dict[str, object]:
    """The cache entry: compact rows instead of the generic codec (decoding is the warm path's cost)."""
    return {
        "format": CACHE_FORMAT,
        "sha256": abi.sha256,
        "kind": abi.kind,
        "machine": abi.machine,
        "soname": abi.soname,
        "needed": list(abi.needed),
        "version_defs": list(abi.version_defs),
        "exports": [[e.name, e.version, e.default, e.binding, e.type] for e in abi.exports],
        "imports": [[i.name, i.version, i.library, i.weak] for i in abi.imports],
    }


class _Entry(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A cache entry exactly as `_dump` writes it: every key, no other, each of its own JSON type."""

    format: str
    sha256: str
    kind: str
    machine: str
    soname: str | None
    needed: tuple[str, ...]
    version_defs: tuple[str, ...]
    exports: tuple[tuple[str, str | None, bool, str, str], ...]  # name, version, default, binding, type
    imports: tuple[tuple[str, str | None, str | None, bool], ...]  # name, version, library, weak


_ENTRY = msgspec.json.Decoder(_Entry)


def _load(data: bytes, digest: str, key: cachekey.CacheKey) -> ElfAbi | None:
    """An entry back, or None (a miss: the file is read again) unless it is exactly what `_dump` wrote
    for this file and sealed with this user's key: a MAC that does not check out (another user's entry,
    one copied from another hash, edited, damaged), another format or hash, a key missing or unknown, a
    value of another JSON type (a list for a version, `"false"` for a flag) or a row of another length."""
    body = memoryview(data)[_HEADER:]
    if data[: len(ENTRY_MAGIC)] != ENTRY_MAGIC or not key.verify(
        memoryview(data)[len(ENTRY_MAGIC) : _HEADER], PURPOSE, CACHE_FORMAT.encode(), digest.encode(), body
    ):
        return None
    try:
        doc = _ENTRY.decode(body)
    except msgspec.DecodeError:  # not JSON, or not the entry's shape (ValidationError is a DecodeError)
        return None
    if doc.format != CACHE_FORMAT or doc.sha256 != digest:
        return None
    return ElfAbi(
        sha256=doc.sha256,
        kind=doc.kind,
        machine=doc.machine,
        soname=doc.soname,
        needed=doc.needed,
        version_defs=doc.version_defs,
        exports=tuple(Export(name=n, version=v, default=d, binding=b, type=t) for n, v, d, b, t in doc.exports),
        imports=tuple(Import(name=n, version=v, library=lib, weak=w) for n, v, lib, w in doc.imports),
    )


def _write_atomic(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)  # a link planted at the name is replaced, never written through
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError:
        pass  # a read-only or full cache only costs speed, never correctness


@dataclass(frozen=True, slots=True, kw_only=True)
class LibraryTree:
    """The shared libraries of one tree by soname (file name when a library has none)."""

    root: str
    libraries: dict[str, ElfFile]
    duplicates: tuple[str, ...] = ()  # files whose soname another file of the tree already had
    stats: ScanStats


def read_library_tree(
    root: Path,
    *,
    cache_dir: Path | None,
    workers: int | None = None,
    memo: dict[tuple[int, ...], ElfAbi] | None = None,
    allow_empty: bool = False,
) -> LibraryTree:
    """Every host shared library under `root`; InputError when there is none (nothing to compare),
    unless `allow_empty` (the snapshot's listing records "none", which the gate compares with the baseline)."""
    files, aliases, not_elf = library_files(root)
    abis, hits = scan(files, cache_dir=cache_dir, workers=workers, memo=memo)
    libraries: dict[str, ElfFile] = {}
    duplicates: list[str] = []
    for path in files:
        abi = abis[path]
        if abi.kind != "ET_DYN" or abi.machine == "EM_AMDGPU":
            continue  # executables and device code objects are not libraries to link against
        item = ElfFile(path=str(path), aliases=tuple(aliases.get(path, ())), abi=abi)
        if item.key in libraries:
            duplicates.append(str(path))
            continue
        libraries[item.key] = item
    if not libraries and not allow_empty:
        raise InputError(f"{root}: no shared library (lib*.so*) found in this tree")
    return LibraryTree(
        root=str(root),
        libraries=dict(sorted(libraries.items())),
        duplicates=tuple(duplicates),
        stats=ScanStats(files=len(files), cache_hits=hits, skipped_not_elf=tuple(not_elf)),
    )
