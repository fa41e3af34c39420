"""Parsers for file reads: `grep -H . FILE...` lines, KFD topology `properties` files, `uname -r`.

Design notes:
- A file-read probe runs `grep -H . FILE...`, whose documented output (grep(1), `-H`) is one
  `FILENAME:LINE` per non-empty line. The path itself may hold colons (PCI BDF directories such as
  `/sys/bus/pci/devices/0000:05:00.0/sriov_numvfs`), so the line is split after the first
  `/<known file name>:` rather than at any colon; an unknown file name is a ParseError, not a guess.
  Empty files print nothing, so their path is simply absent from the result.
- `sriov_numvfs` / `sriov_totalvfs` hold one decimal integer and a newline (kernel
  Documentation/ABI/testing/sysfs-bus-pci); `/sys/class/infiniband/*/fw_ver`, `/sys/module/amdgpu/version`
  and `/opt/rocm/.info/version` hold one version string. Those one-liners are not in the corpus
  (INDEX.md "gaps"); the fixtures follow these documented formats with values taken from the corpus.
- A `grep: FILE: ...` line means grep could not read a file: ParseError (the evidence is incomplete).
- SR-IOV counts are checked while parsing (not only when `sriov_by_pf` reads them later): a value such as
  `N/A` is the probe's parse failure, recorded against the probe, instead of an error raised while the
  snapshot is assembled that names neither the bundle nor the probe.
- KFD `properties` files (`/sys/class/kfd/kfd/topology/nodes/N/properties` and `mem_banks/M/properties`)
  are `name value` lines with decimal integer values (kfd_topology.c prints them with `%u`/`%llu`).
  `location_id` is `bus << 8 | device << 3 | function` and `domain` the PCI domain, so unlike
  rocminfo's BDFID the full BDF is known. CPU nodes have `simd_count 0` and no BDF.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Bdf
from upgrade_gate.parse.bdf import PciAddress
from upgrade_gate.parse.common import check_name, digits, normalize_bdf, strip_ansi

GREP_TOOL = "sysfs-grep"
KFD_TOOL = "kfd-properties"
UNAME_TOOL = "uname-r"

KNOWN_FILES = (
    "sriov_numvfs",
    "sriov_totalvfs",
    "fw_ver",
    "version",
    "unique_id",
    "serial_number",
    "numa_node",
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
)
_GREP_LINE_RE = re.compile(r"^(?P<path>(?:.*?/)?(?:" + "|".join(KNOWN_FILES) + r")):(?P<value>.*)$")
_SRIOV_RE = re.compile(r"/devices/(?P<bdf>[^/]+)/sriov_(?P<kind>numvfs|totalvfs)$")
_IB_FW_RE = re.compile(r"/infiniband/(?P<dev>[^/]+)/fw_ver$")
_IB_PCI_RE = re.compile(
    r"/devices/(?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])/infiniband/(?P<dev>[^/]+)/fw_ver$"
)
_KFD_LINE_RE = re.compile(r"^(?P<key>[a-z][a-z0-9_]*) (?P<value>-?\d+)$")
_RELEASE_RE = re.compile(r"^(?P<major>\d+)\.(?P<minor>\d+)(?:\.(?P<patch>\d+))?[A-Za-z0-9._+~-]*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class SysfsValues:
    """File path -> its (single) non-empty line, as read by `grep -H .`."""

    values: dict[str, str] = field(default_factory=dict)
    line_nos: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class KfdProperties:
    """One KFD topology `properties` file: every `name value` pair, plus the decoded identity."""

    values: dict[str, int]
    bdf: Bdf | None  # from domain + location_id, for GPU nodes only
    gfx_target: str | None  # "gfx908" from gfx_target_version 90008, for GPU nodes only


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelRelease:
    """`uname -r`: the running kernel release."""

    release: str  # "5.15.0-112-generic"
    major: int
    minor: int
    patch: int | None


# --------------------------------------------------------------------------- grep -H


def parse_sysfs_grep(text: str) -> SysfsValues:
    """Parse `grep -H . FILE...` output into path -> value; ParseError on grep errors or odd lines."""
    values: dict[str, str] = {}
    line_nos: dict[str, int] = {}
    for no, line in enumerate(strip_ansi(text).splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("grep: "):
            raise ParseError(GREP_TOOL, no, line, "grep could not read a file")
        match = _GREP_LINE_RE.match(line)
        if match is None:
            raise ParseError(GREP_TOOL, no, line, "not a `path:value` line of a known sysfs file")
        path, value = match.group("path"), match.group("value").strip()
        ib = _IB_FW_RE.search(path)
        if ib is not None:  # the RDMA device name is part of the path
            check_name(ib.group("dev"), tool=GREP_TOOL, line_no=no, excerpt=line)
        if path in values:
            raise ParseError(GREP_TOOL, no, line, f"{path} has more than one line")
        if not value:
            raise ParseError(GREP_TOOL, no, line, f"{path}: blank value")
        values[path] = value
        line_nos[path] = no
    result = SysfsValues(values=values, line_nos=line_nos)
    sriov_by_pf(result)  # SR-IOV counts are checked here, where a bad one is the probe's parse failure
    return result


def _decimal(values: SysfsValues, path: str) -> int:
    raw = values.values[path]
    if not digits(raw):
        raise ParseError(GREP_TOOL, values.line_nos[path], f"{path}:{raw}", "expected a decimal integer")
    return int(raw)


def sriov_by_pf(values: SysfsValues) -> dict[Bdf, tuple[int | None, int | None]]:
    """PF BDF -> (sriov_numvfs, sriov_totalvfs); None where that file printed nothing.

    Never raises on a `parse_sysfs_grep` result: the parse has already run it (see the module notes).
    """
    out: dict[Bdf, tuple[int | None, int | None]] = {}
    numvfs_line: dict[Bdf, int] = {}
    for path in sorted(values.values):
        match = _SRIOV_RE.search(path)
        if match is None:
            continue
        bdf = normalize_bdf(match.group("bdf"), tool=GREP_TOOL, line_no=values.line_nos[path])
        num, total = out.get(bdf, (None, None))
        count = _decimal(values, path)
        if match.group("kind") == "numvfs":
            num = count
            numvfs_line[bdf] = values.line_nos[path]
        else:
            total = count
        out[bdf] = (num, total)
    for bdf, (num, total) in out.items():
        if num is not None and total is not None and num > total:
            raise ParseError(GREP_TOOL, numvfs_line[bdf], str(bdf), f"sriov_numvfs {num} above sriov_totalvfs {total}")
    return out


def ib_fw_versions(values: SysfsValues) -> dict[str, str]:
    """RDMA device name -> firmware version from `/sys/class/infiniband/<dev>/fw_ver`."""
    out: dict[str, str] = {}
    for path, value in sorted(values.values.items()):
        match = _IB_FW_RE.search(path)
        if match is not None:
            out[match.group("dev")] = value
    return out


def ib_device_bdfs(values: SysfsValues) -> dict[str, Bdf]:
    """RDMA device name -> its PCI function, from `/sys/bus/pci/devices/<bdf>/infiniband/<dev>/fw_ver` paths."""
    out: dict[str, Bdf] = {}
    for path in sorted(values.values):
        match = _IB_PCI_RE.search(path)
        if match is not None:
            out[match.group("dev")] = Bdf(match.group("bdf").lower())
    return out


def single_value(values: SysfsValues, *, path_suffix: str) -> str:
    """The value of the one file whose path ends with `path_suffix`; ParseError if none or several."""
    hits = [p for p in values.values if p.endswith(path_suffix)]
    if len(hits) != 1:
        what = "no file" if not hits else f"{len(hits)} files"
        raise ParseError(GREP_TOOL, 0, path_suffix, f"{what} matching {path_suffix!r}")
    return values.values[hits[0]]


def amdgpu_version(values: SysfsValues) -> str:
    """The amdgpu kernel module version (`/sys/module/amdgpu/version`)."""
    return single_value(values, path_suffix="/sys/module/amdgpu/version")


def rocm_version(values: SysfsValues) -> str:
    """The ROCm release from `/opt/rocm/.info/version`."""
    return single_value(values, path_suffix="/.info/version")


# --------------------------------------------------------------------------- KFD properties


def parse_kfd_properties(text: str) -> KfdProperties:
    """Parse a KFD topology `properties` file (`name value` lines, integer values)."""
    values: dict[str, int] = {}
    for no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped:
            continue
        match = _KFD_LINE_RE.match(stripped)
        if match is None:
            raise ParseError(KFD_TOOL, no, line, "not a `name integer` property line")
        key = match.group("key")
        if key in values:
            raise ParseError(KFD_TOOL, no, line, f"duplicate property {key!r}")
        values[key] = int(match.group("value"))
    if not values:
        raise ParseError(KFD_TOOL, 0, "", "empty properties file")
    bdf: Bdf | None = None
    gfx: str | None = None
    if values.get("simd_count", 0) > 0:
        if "location_id" in values and "domain" in values:
            loc = values["location_id"]
            if not 0 <= loc <= 0xFFFF or not 0 <= values["domain"] <= 0xFFFF:
                raise ParseError(KFD_TOOL, 0, f"location_id {loc}", "location_id/domain out of range")
            bdf = PciAddress.from_bdf_id(loc, domain=values["domain"]).bdf
        version = values.get("gfx_target_version", 0)
        if version > 0:
            major, minor, step = version // 10000, (version // 100) % 100, version % 100
            if minor > 15 or step > 15:
                raise ParseError(KFD_TOOL, 0, f"gfx_target_version {version}", "undecodable gfx target")
            gfx = f"gfx{major}{minor:x}{step:x}"
    return KfdProperties(values=values, bdf=bdf, gfx_target=gfx)


# --------------------------------------------------------------------------- uname -r


def parse_uname_r(text: str) -> KernelRelease:
    """Parse `uname -r`: exactly one kernel release string."""
    lines = [(no, line.strip()) for no, line in enumerate(text.splitlines(), 1) if line.strip()]
    if len(lines) != 1:
        raise ParseError(UNAME_TOOL, lines[1][0] if lines else 0, text[:120], "expected exactly one line")
    no, release = lines[0]
    match = _RELEASE_RE.match(release)
    if match is None:
        raise ParseError(UNAME_TOOL, no, release, "not a kernel release string")
    patch = match.group("patch")
    return KernelRelease(
        release=release,
        major=int(match.group("major")),
        minor=int(match.group("minor")),
        patch=int(patch) if patch is not None else None,
    )


PARSERS: dict[str, Callable[[str], object]] = {
    "sysfs-grep": parse_sysfs_grep,
    "kfd-properties": parse_kfd_properties,
    "uname-r": parse_uname_r,
}
