"""Safe, in-memory reading of a capture bundle's files from a directory or a tarball.

Design decisions:
- Nothing is ever extracted. Tar members are read into memory with `TarFile.extractfile`, so a hostile
  bundle cannot write anywhere, whatever its member names say. Directory bundles are walked without
  following links and each file is opened with `O_NOFOLLOW`.
- Refused, with a `BundleError` naming the member: absolute names, `..` or empty path components,
  symlinks, hardlinks, devices, FIFOs and anything else that is neither a regular file nor a directory,
  a member over the per-member size limit, a running total over the bundle limit, too many members, and
  duplicate names. Sizes are checked from the tar header before any content is read, and reading stops at
  the first refused member, so a gzip bomb is not decompressed past it.
- Whether every member is named in the manifest is checked by `collect.bundle`, which knows the
  manifest; this module only returns the regular files (name -> bytes) and the directory names.
- A leading `./` (as `tar -C DIR .` writes) is stripped, so a bundle directory re-packed with plain tar
  still loads.
- Headers are bounded before they are materialised: tarfile reads a pax extended header or a GNU long
  name whole into memory, so `_BoundedTarInfo` refuses one whose size field is over `MAX_PAX_BYTES` /
  `MAX_LONGNAME_BYTES` (a 1 MB .tar.gz claiming a 1 GiB pax header cost 3.1 GB and two minutes), GNU
  sparse members, and more header records than `3 * max_members` (chained pax headers).
- When the caller passes `admit` (the bundle reader does), the manifest decides as early as possible:
  from the moment `manifest.json` has been read, a member it does not name is refused at its header,
  before its content is decompressed. Members that come before the manifest (a re-packed folder) are
  not read on the first pass, only noted; once the manifest admits them, a second pass reads them.
- The archive is read to its end, however many members it has: gzip checks its CRC and length, and bzip2
  and xz their own checks, only at the end of the stream, so a bit flipped in a stored block, a trailer cut
  off, or bytes after the compressed stream were read as valid evidence (break test 2026-12-07). After the
  archive's end marker only zero padding is taken, at most `MAX_PADDING_BYTES`.
- Limits are set so that the worst bundle the reader accepts stays well under 256 MiB of memory: a
  probe's output is capped at capture (16 MiB, `collect.runner`), a member may hold 32 MiB (tool output
  that is not UTF-8 grows up to 3x when the replacement characters are re-encoded), 96 MiB in all.
"""

from __future__ import annotations

import os
import stat
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from upgrade_gate.errors import BundleError

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class BundleLimits:
    """Size limits applied while reading a bundle."""

    max_member_bytes: int = 32 * MiB
    max_total_bytes: int = 96 * MiB
    max_members: int = 4096


MAX_PAX_BYTES = 64 * 1024
"""Largest pax extended header read (ours hold a path of at most 80 bytes; tar's own are tiny)."""

MAX_LONGNAME_BYTES = 4096
"""Largest GNU long name / long link read (PATH_MAX)."""

MANIFEST_NAME = "manifest.json"

MAX_PADDING_BYTES = 1 << 20
"""Zeros taken after a tar archive's end marker (GNU tar pads to its 10 KiB record; more is something else)."""
_HEADER_BUDGET = 3 * 4096 + 16  # header records while opening, before the limits are attached

Admit = Callable[[bytes], tuple[frozenset[str], frozenset[str]]]
"""Given the manifest's bytes, the (file names, folder names) it admits; raises BundleError if invalid."""


DEFAULT_LIMITS = BundleLimits()


@dataclass(frozen=True, slots=True, kw_only=True)
class BundleFiles:
    """The raw content of a bundle: regular files by bundle-relative name, and directory names."""

    files: dict[str, bytes]
    dirs: frozenset[str]


def member_name(raw: str, *, source: str) -> str:
    """Normalise a bundle-relative member name, refusing absolute paths and `..`/empty components."""
    name = raw
    while name.startswith("./"):
        name = name[2:]
    if name in ("", "."):
        return "."
    if name.startswith("/") or "\x00" in name or "\\" in name:
        raise BundleError(f"{source}: refused member {raw!r}: absolute or unsafe path")
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise BundleError(f"{source}: refused member {raw!r}: path escapes the bundle ('..' or empty part)")
    return name


def read_tar_files(path: Path, limits: BundleLimits = DEFAULT_LIMITS, *, admit: Admit | None = None) -> BundleFiles:
    """Read every member of the tarball at `path` into memory after checking it is safe.

    With `admit`, members the manifest does not name are refused as soon as their header is read.
    """
    source = str(path)
    try:
        with _open_tar(path, source) as tar:
            tar._ug_header_budget = 3 * limits.max_members + 16  # type: ignore[attr-defined]
            reader = _TarReader(source, limits, admit)
            reader.read(tar)
            reader.drain(tar)
        if reader.deferred:  # members seen before the manifest, now admitted: read them
            with _open_tar(path, source) as tar:
                reader.read_deferred(tar)
        return BundleFiles(files=reader.files, dirs=frozenset(reader.dirs))
    except RecursionError as exc:
        raise BundleError(f"{source}: refused: tar headers nested too deep") from exc
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise BundleError(f"{source}: not a readable tar archive: {detail}") from exc


class _BoundedTarInfo(tarfile.TarInfo):
    """A TarInfo that refuses oversized extended headers before tarfile reads them into memory."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> Any:
        source = getattr(tarfile_, "_ug_source", None) or str(tarfile_.name or "bundle")
        budget = getattr(tarfile_, "_ug_header_budget", _HEADER_BUDGET) - 1
        tarfile_._ug_header_budget = budget  # type: ignore[attr-defined]
        if budget < 0:
            raise BundleError(f"{source}: refused: too many tar header records")
        if self.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE) and self.size > MAX_PAX_BYTES:
            raise BundleError(f"{source}: refused: a pax extended header of {self.size} bytes (limit {MAX_PAX_BYTES})")
        if self.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK) and self.size > MAX_LONGNAME_BYTES:
            raise BundleError(f"{source}: refused: a GNU long name of {self.size} bytes (limit {MAX_LONGNAME_BYTES})")
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise BundleError(f"{source}: refused member {self.name!r}: GNU sparse file, not a regular file")
        return super()._proc_member(tarfile_)  # type: ignore[misc]


def _open_tar(path: Path, source: str) -> tarfile.TarFile:
    try:
        tar = tarfile.open(path, mode="r:*", tarinfo=_BoundedTarInfo)  # noqa: SIM115 - the caller closes it
    except BundleError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        # tarfile's message lists every compression it tried, over several lines
        raise BundleError(f"{source}: not a readable tar archive (plain, gzip, bzip2 or xz)") from exc
    tar._ug_source = source  # type: ignore[attr-defined]
    return tar


class _TarReader:
    """One bounded pass (or two, see the module docstring) over a tarball's members."""

    def __init__(self, source: str, limits: BundleLimits, admit: Admit | None) -> None:
        self.source = source
        self.limits = limits
        self.admit = admit
        self.files: dict[str, bytes] = {}
        self.dirs: set[str] = set()
        self.deferred: set[str] = set()
        self.admitted: tuple[frozenset[str], frozenset[str]] | None = None
        self.total = 0
        self.count = 0

    def _refuse(self, raw: str, why: str) -> BundleError:
        return BundleError(f"{self.source}: refused member {raw!r}: {why}")

    def _check_admitted(self, name: str, raw: str, is_dir: bool) -> None:
        assert self.admitted is not None
        files, dirs = self.admitted
        if is_dir and name not in dirs:
            raise self._refuse(raw, "folder not named in the manifest")
        if not is_dir and name not in files:
            raise self._refuse(raw, "not named in the manifest")

    def read(self, tar: tarfile.TarFile) -> None:
        limits = self.limits
        for member in tar:
            self.count += 1
            if self.count > limits.max_members:
                raise self._refuse(member.name, f"more than {limits.max_members} members")
            name = member_name(member.name, source=self.source)
            if self.admitted is not None:
                self._check_admitted(name, member.name, member.isdir())
            if member.isdir():
                self.dirs.add(name)
                continue
            if not member.isreg():
                raise self._refuse(member.name, f"{_tar_kind(member)}, not a regular file")
            if member.size > limits.max_member_bytes:
                raise self._refuse(
                    member.name, f"{member.size} bytes is over the {limits.max_member_bytes}-byte member limit"
                )
            self.total += member.size
            if self.total > limits.max_total_bytes:
                raise self._refuse(member.name, f"bundle is over the {limits.max_total_bytes}-byte limit")
            if name in self.files or name in self.dirs or name in self.deferred:
                raise self._refuse(member.name, "duplicate name")
            if self.admit is not None and self.admitted is None and name != MANIFEST_NAME:
                self.deferred.add(name)  # before the manifest: not read now (see the module docstring)
                continue
            self.files[name] = self._content(tar, member)
            if self.admit is not None and name == MANIFEST_NAME:
                self.admitted = self.admit(self.files[name])
                for seen in sorted(self.deferred):
                    self._check_admitted(seen, seen, False)
                for seen in sorted(self.dirs):
                    self._check_admitted(seen, seen, True)

    def drain(self, tar: tarfile.TarFile) -> None:
        """Read the stream past the archive's end marker to its end (module docstring): the compression's own
        checks run there; anything but zero padding is refused."""
        fileobj = tar.fileobj
        assert fileobj is not None
        left = MAX_PADDING_BYTES
        while chunk := fileobj.read(64 * 1024):
            if chunk.strip(b"\0"):
                raise BundleError(f"{self.source}: refused: data after the end of the tar archive")
            left -= len(chunk)
            if left < 0:
                raise BundleError(
                    f"{self.source}: refused: over {MAX_PADDING_BYTES} bytes after the end of the archive"
                )

    def read_deferred(self, tar: tarfile.TarFile) -> None:
        tar._ug_header_budget = 3 * self.limits.max_members + 16  # type: ignore[attr-defined]
        for member in tar:
            if not member.isreg():
                continue
            name = member_name(member.name, source=self.source)
            if name in self.deferred:
                self.files[name] = self._content(tar, member)
                self.deferred.discard(name)
                if not self.deferred:
                    return

    def _content(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
        handle = tar.extractfile(member)
        if handle is None:  # pragma: no cover - isreg() members always have content
            raise self._refuse(member.name, "no content")
        data = handle.read(member.size + 1)
        if len(data) != member.size:
            raise self._refuse(member.name, "truncated or oversized content")
        return data


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"symlink to {member.linkname!r}"
    if member.islnk():
        return f"hardlink to {member.linkname!r}"
    if member.ischr() or member.isblk():
        return "device"
    if member.isfifo():
        return "FIFO"
    return f"tar member type {member.type!r}"


def read_dir_files(root: Path, limits: BundleLimits = DEFAULT_LIMITS, *, admit: Admit | None = None) -> BundleFiles:
    """Read every file under the bundle directory `root` into memory, refusing links and specials.

    With `admit`, the manifest is read first and a file or folder it does not name is refused before
    it is read.
    """
    source = str(root)
    files: dict[str, bytes] = {}
    dirs: set[str] = set()
    total = 0
    count = 0
    admitted: tuple[frozenset[str], frozenset[str]] | None = None
    if admit is not None and os.path.lexists(os.path.join(root, MANIFEST_NAME)):
        admitted = admit(
            _read_nofollow(os.path.join(root, MANIFEST_NAME), MANIFEST_NAME, source, limits.max_member_bytes)
        )
    for top, subdirs, names in os.walk(root, followlinks=False, onerror=_raise_walk_error):
        subdirs.sort()
        rel_top = os.path.relpath(top, root)
        for entry in sorted(subdirs) + sorted(names):
            rel = entry if rel_top == "." else f"{rel_top}/{entry}"
            count += 1
            if count > limits.max_members:
                raise BundleError(f"{source}: refused member {rel!r}: more than {limits.max_members} members")
            full = os.path.join(top, entry)
            st = os.lstat(full)
            is_dir = stat.S_ISDIR(st.st_mode)
            if not is_dir and not stat.S_ISREG(st.st_mode):
                raise BundleError(f"{source}: refused member {rel!r}: {_mode_kind(st.st_mode)}, not a regular file")
            if admitted is not None and rel not in admitted[is_dir]:
                what = "folder not named" if is_dir else "not named"
                raise BundleError(f"{source}: refused member {rel!r}: {what} in the manifest")
            if is_dir:
                dirs.add(rel)
                continue
            if st.st_size > limits.max_member_bytes:
                raise BundleError(
                    f"{source}: refused member {rel!r}: {st.st_size} bytes is over the "
                    f"{limits.max_member_bytes}-byte member limit"
                )
            total += st.st_size
            if total > limits.max_total_bytes:
                raise BundleError(
                    f"{source}: refused member {rel!r}: bundle is over the {limits.max_total_bytes}-byte limit"
                )
            files[rel] = _read_nofollow(full, rel, source, limits.max_member_bytes)
    return BundleFiles(files=files, dirs=frozenset(dirs))


def _raise_walk_error(exc: OSError) -> None:
    raise BundleError(f"{exc.filename}: unreadable bundle directory: {exc.strerror}") from exc


def _read_nofollow(full: str, rel: str, source: str, limit: int) -> bytes:
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise BundleError(f"{source}: refused member {rel!r}: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise BundleError(f"{source}: refused member {rel!r}: not a regular file")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise BundleError(f"{source}: refused member {rel!r}: over the {limit}-byte member limit")
    return data


def _mode_kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"
