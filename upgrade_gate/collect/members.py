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
"""

from __future__ import annotations

import os
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from upgrade_gate.errors import BundleError

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class BundleLimits:
    """Size limits applied while reading a bundle."""

    max_member_bytes: int = 64 * MiB
    max_total_bytes: int = 512 * MiB
    max_members: int = 4096


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


def read_tar_files(path: Path, limits: BundleLimits = DEFAULT_LIMITS) -> BundleFiles:
    """Read every member of the tarball at `path` into memory after checking it is safe."""
    source = str(path)
    try:
        with _open_tar(path, source) as tar:
            return _read_tar(tar, source, limits)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise BundleError(f"{source}: not a readable tar archive: {detail}") from exc


def _open_tar(path: Path, source: str) -> tarfile.TarFile:
    try:
        return tarfile.open(path, mode="r:*")
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        # tarfile's message lists every compression it tried, over several lines
        raise BundleError(f"{source}: not a readable tar archive (plain, gzip, bzip2 or xz)") from exc


def _read_tar(tar: tarfile.TarFile, source: str, limits: BundleLimits) -> BundleFiles:
    files: dict[str, bytes] = {}
    dirs: set[str] = set()
    total = 0
    count = 0
    for member in tar:
        count += 1
        if count > limits.max_members:
            raise BundleError(f"{source}: refused member {member.name!r}: more than {limits.max_members} members")
        name = member_name(member.name, source=source)
        if member.isdir():
            dirs.add(name)
            continue
        if not member.isreg():
            raise BundleError(f"{source}: refused member {member.name!r}: {_tar_kind(member)}, not a regular file")
        if member.size > limits.max_member_bytes:
            raise BundleError(
                f"{source}: refused member {member.name!r}: {member.size} bytes is over the "
                f"{limits.max_member_bytes}-byte member limit"
            )
        total += member.size
        if total > limits.max_total_bytes:
            raise BundleError(
                f"{source}: refused member {member.name!r}: bundle is over the {limits.max_total_bytes}-byte limit"
            )
        if name in files or name in dirs:
            raise BundleError(f"{source}: refused member {member.name!r}: duplicate name")
        handle = tar.extractfile(member)
        if handle is None:  # pragma: no cover - isreg() members always have content
            raise BundleError(f"{source}: refused member {member.name!r}: no content")
        data = handle.read(member.size + 1)
        if len(data) != member.size:
            raise BundleError(f"{source}: refused member {member.name!r}: truncated or oversized content")
        files[name] = data
    return BundleFiles(files=files, dirs=frozenset(dirs))


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


def read_dir_files(root: Path, limits: BundleLimits = DEFAULT_LIMITS) -> BundleFiles:
    """Read every file under the bundle directory `root` into memory, refusing links and specials."""
    source = str(root)
    files: dict[str, bytes] = {}
    dirs: set[str] = set()
    total = 0
    count = 0
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
            if stat.S_ISDIR(st.st_mode):
                dirs.add(rel)
                continue
            if not stat.S_ISREG(st.st_mode):
                raise BundleError(f"{source}: refused member {rel!r}: {_mode_kind(st.st_mode)}, not a regular file")
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
