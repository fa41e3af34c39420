"""Parsers for the host facts the incident names as causes: BIOS, kernel command line, OS release, RCCL.

Formats (documented; the corpus has none of these files, the fixtures are this machine's and the
documented layouts):
- BIOS, command line and OS release are file reads (`grep -H . FILE...`, one `FILENAME:LINE` per
  non-empty line, see `parse.sysfs`). `/sys/class/dmi/id/bios_vendor`, `bios_version` and `bios_date`
  hold one line each (kernel Documentation/ABI/testing/sysfs-firmware-dmi... `dmi/id`; the date is
  printed as the SMBIOS table holds it, "MM/DD/YYYY"); `/proc/cmdline` is one line (proc(5)).
  `/etc/os-release` (or `/usr/lib/os-release`, its documented fallback) is os-release(5): `KEY=VALUE`
  lines, `#` comments, values optionally in single or double quotes with shell-style backslash escapes.
- The file a path names is found by its suffix (`/sys/class/dmi/id/bios_version`, `/proc/cmdline`,
  `/etc/os-release`, `/usr/lib/os-release`), so a `--host-root` prefix is allowed; any other path, a
  `grep:` error line, or a second line of a one-line file is a ParseError.
- The RCCL library is `readlink -f` of `<host-root>/opt/rocm/lib/librccl.so.1` (the soname rccl-tests
  and frameworks load, "Librccl path : /opt/rocm/lib/librccl.so.1" in corpus rccl-tests/mi355x-2node-...):
  one absolute path per line. ROCm names the real file `librccl.so.1.0.<ROCm build>` (e.g.
  `librccl.so.1.0.70200` in ROCm 7.2.0); its file name is what is recorded, never a guessed RCCL release.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from upgrade_gate.errors import ParseError
from upgrade_gate.parse.common import RCCL_FILE_RE, strip_ansi

HOST_TOOL = "host-files"
READLINK_TOOL = "readlink"

BIOS_FIELDS = ("bios_vendor", "bios_version", "bios_date")
_ONE_LINE = (*(f"sys/class/dmi/id/{f}" for f in BIOS_FIELDS), "proc/cmdline")
_OS_RELEASE = ("etc/os-release", "usr/lib/os-release")
_LINE_RE = re.compile(
    r"^(?P<path>(?:.*?/)?(?P<file>" + "|".join(re.escape(f) for f in (*_ONE_LINE, *_OS_RELEASE)) + r")):(?P<value>.*)$"
)
_KEY_RE = re.compile(r"^(?P<key>[A-Z][A-Z0-9_]*)=(?P<value>.*)$")
_ESCAPE_RE = re.compile(r"\\(.)")


@dataclass(frozen=True, slots=True, kw_only=True)
class HostFiles:
    """What the host file reads said: BIOS fields, the kernel command line, os-release keys."""

    bios: dict[str, str] = field(default_factory=dict)  # "bios_version" -> value
    cmdline: str | None = None
    os_release: dict[str, str] = field(default_factory=dict)  # "VERSION_ID" -> value (unquoted)
    os_release_file: str | None = None  # which file the keys came from


@dataclass(frozen=True, slots=True, kw_only=True)
class RcclLibrary:
    """The file librccl.so.1 resolves to."""

    path: str
    name: str  # "librccl.so.1.0.70200"


def _unquote(raw: str, line_no: int, line: str) -> str:
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        inner = value[1:-1]
        return inner if value[0] == "'" else _ESCAPE_RE.sub(r"\1", inner)
    if value[:1] in ("'", '"'):
        raise ParseError(HOST_TOOL, line_no, line, "unterminated quote in an os-release value")
    return _ESCAPE_RE.sub(r"\1", value)


def parse_host_files(text: str) -> HostFiles:
    """`grep -H .` over the DMI BIOS files, /proc/cmdline and os-release (any subset of them)."""
    bios: dict[str, str] = {}
    cmdline: str | None = None
    releases: dict[str, dict[str, str]] = {}
    for no, line in enumerate(strip_ansi(text).splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("grep: "):
            raise ParseError(HOST_TOOL, no, line, "grep could not read a file")
        match = _LINE_RE.match(line)
        if match is None:
            raise ParseError(HOST_TOOL, no, line, "not a `path:value` line of a known host file")
        name, value = match.group("file"), match.group("value")
        if name in _OS_RELEASE:
            body = value.strip()
            if not body or body.startswith("#"):
                continue
            kv = _KEY_RE.match(body)
            if kv is None:
                raise ParseError(HOST_TOOL, no, line, "not an os-release KEY=VALUE line")
            releases.setdefault(name, {})[kv.group("key")] = _unquote(kv.group("value"), no, line)
            continue
        value = " ".join(value.split())
        if not value:
            raise ParseError(HOST_TOOL, no, line, f"{name}: blank value")
        if name == "proc/cmdline":
            if cmdline is not None:
                raise ParseError(HOST_TOOL, no, line, "/proc/cmdline has more than one line")
            cmdline = value
            continue
        key = name.rsplit("/", 1)[1]
        if key in bios:
            raise ParseError(HOST_TOOL, no, line, f"{name} has more than one line")
        bios[key] = value
    chosen = next((f for f in _OS_RELEASE if f in releases), None)  # /etc first, as os-release(5) says
    return HostFiles(
        bios=bios,
        cmdline=cmdline,
        os_release=releases.get(chosen, {}) if chosen else {},
        os_release_file=f"/{chosen}" if chosen else None,
    )


def parse_rccl_readlink(text: str) -> RcclLibrary:
    """`readlink -f .../librccl.so.1`: the real RCCL library file; ParseError for anything else."""
    paths = [(no, line.strip()) for no, line in enumerate(strip_ansi(text).splitlines(), 1) if line.strip()]
    if not paths:
        raise ParseError(READLINK_TOOL, 0, "", "readlink printed no path")
    names = set()
    for no, path in paths:
        name = path.rsplit("/", 1)[-1]
        if not path.startswith("/") or RCCL_FILE_RE.match(name) is None:
            raise ParseError(READLINK_TOOL, no, path, "not the absolute path of a librccl.so file")
        names.add(name)
    if len(names) > 1:
        raise ParseError(READLINK_TOOL, paths[1][0], paths[1][1], f"several RCCL libraries: {sorted(names)}")
    no, path = paths[0]
    return RcclLibrary(path=path, name=path.rsplit("/", 1)[-1])


PARSERS: dict[str, Callable[[str], object]] = {"host-files": parse_host_files, "readlink-rccl": parse_rccl_readlink}
