"""The probe catalogue: every command and sysfs read a capture runs, as data.

Names, argv and parser keys are a contract shared by `capture`, the fake nodes and the snapshot
builder. This is the one source of probe facts: a vendor (`upgrade_gate.vendors`) names its own probes,
`catalogue(vendor)` puts them around the common ones, and what is required, optional or a fallback is
read from the entries here (`fallback_names`, `optional_names`, `absent_warns_names`), never kept in a
second list.
docs/PROBES.md is generated from `CATALOGUE` (`python3 tools/gen_probes_doc.py`;
tests/test_collect_probes.py fails when it is stale), so the document cannot drift from the code.

Design decisions:
- A file-read probe is `grep -H . FILE...` over the files its globs match under the host root, so
  the bundle holds grep's real `path:value` lines and the sysfs parser reads one format. The one
  exception is `rccl_library`, `readlink -f -- FILE`: the library's real file name is the evidence. Globs are
  expanded here, in Python (sorted, per glob in catalogue order), never by a shell.
- A file-read probe whose globs match no file at all is not run (grep with no file operand would read
  stdin). `probe_catalogue` returns it with argv `grep -H .` and `skip_reason` set to
  "no files matched <glob>, ..."; `capture` records it as ok with empty output and that reason, so a
  node without the file (no ROCm installed, no RDMA devices) is an explicit, explained empty value that
  the snapshot builder turns into None-with-reason, never a silent gap.
- `required` marks evidence the gate cannot do without: when neither the probe nor a fallback that
  stood in for it succeeded, the judge must block. Fallback probes themselves are not required: their
  absence matters only through the probe they stand in for.
- `fallback_for` names the probes a fallback stands in for; `capture` runs a fallback only when one of
  those failed and records which ones it actually stood in for.

Dated notes:
- 2026-11: paths in file-read argv (and so in grep's output) carry the host-root prefix, e.g.
  `/host/sys/bus/pci/devices/0000:05:00.0/sriov_numvfs` when run with `--host-root /host`; the bundle
  manifest records `host_root` so readers can strip it.
- 2026-12: a host root other than `/` is read the way a chroot would: an absolute symlink on the
  host (`/opt/rocm -> /etc/alternatives/rocm -> /opt/rocm-6.2.0`, as ROCm's packages install it) points
  into the host root, not into the capture pod. Without this every version file under `/opt/rocm` of a
  Kubernetes capture (`--host-root /host`) matched nothing. Only the literal head of a glob is re-rooted,
  and only when the plain glob matched nothing, so the sysfs paths keep their unresolved names.
- 2026-11: `Path.glob` follows the `/sys/bus/pci/devices/*` symlinks into `/sys/devices/...` but the
  argv keeps the unresolved `/sys/bus/pci/devices/<bdf>/...` path, which is what names the PF's BDF.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from upgrade_gate.model import replace
from upgrade_gate.vendors import AMD, VENDORS, Vendor
from upgrade_gate.vendors.amd import AMDSMI_FALLBACK_TARGETS
from upgrade_gate.vendors.base import (
    DEFAULT_TIMEOUT_S,
    GREP_ARGV,
    READLINK_ARGV,
    CommandSpec,
    FileSpec,
    ProbeSpec,
)

__all__ = [
    "AMDSMI_FALLBACK_TARGETS",
    "CATALOGUE",
    "COMMON_FABRIC",
    "COMMON_HOST",
    "DEFAULT_TIMEOUT_S",
    "GREP_ARGV",
    "READLINK_ARGV",
    "CommandSpec",
    "FileSpec",
    "Probe",
    "absent_warns_names",
    "catalogue",
    "fallback_names",
    "optional_names",
    "probe_catalogue",
    "probe_names",
    "skipped_argv",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Probe:
    """One command (or sysfs read) whose raw output feeds one parser."""

    name: str
    argv: tuple[str, ...]
    parser: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    required: bool = True
    fallback_for: tuple[str, ...] = ()
    skip_reason: str | None = None  # set: not run, recorded ok with empty output and this reason


COMMON_FABRIC: tuple[ProbeSpec, ...] = (
    CommandSpec(name="lspci", argv=("lspci", "-D", "-nn", "-vvv"), parser="lspci"),
    CommandSpec(name="ibv_devinfo", argv=("ibv_devinfo", "-v"), parser="ibv_devinfo"),
    CommandSpec(name="rdma_link", argv=("rdma", "link", "show"), parser="rdma-link"),
    FileSpec(
        name="sysfs_sriov",
        globs=("sys/bus/pci/devices/*/sriov_numvfs", "sys/bus/pci/devices/*/sriov_totalvfs"),
    ),
    # Read through the PCI device so each line names both the PF's BDF and the RDMA device:
    # /sys/bus/pci/devices/<bdf>/infiniband/<dev>/fw_ver is the same file as /sys/class/infiniband/<dev>/fw_ver.
    FileSpec(name="sysfs_ib", globs=("sys/bus/pci/devices/*/infiniband/*/fw_ver",)),
)
"""Probes every vendor's node runs after its GPU probes: PCIe, RDMA NICs, SR-IOV."""

COMMON_HOST: tuple[ProbeSpec, ...] = (
    # Host facts the incident names as causes (a BIOS update re-enumerates PCIe). No DMI (a VM) or no
    # ROCm: no file matches, the probe is skipped with that reason and the values are None with it.
    FileSpec(
        name="bios",
        globs=tuple(f"sys/class/dmi/id/{f}" for f in ("bios_vendor", "bios_version", "bios_date")),
        parser="host-files",
    ),
    FileSpec(name="kernel_cmdline", globs=("proc/cmdline",), parser="host-files"),
    FileSpec(name="os_release", globs=("etc/os-release", "usr/lib/os-release"), parser="host-files"),
)
"""Host facts every vendor's node records (after the kernel and its log)."""


def catalogue(vendor: Vendor = AMD) -> tuple[ProbeSpec, ...]:
    """Every catalogue entry of a `vendor` node, in capture order: the vendor's GPU probes, the common
    fabric, the vendor's stack, the kernel and its log (the vendor's parser), host facts, the vendor's tail."""
    return (
        *vendor.gpu_probes,
        *COMMON_FABRIC,
        *vendor.stack_probes,
        CommandSpec(name="kernel", argv=("uname", "-r"), parser="uname-r"),
        CommandSpec(name="dmesg", argv=("dmesg",), parser=vendor.dmesg_parser),
        *COMMON_HOST,
        *vendor.tail_probes,
    )


CATALOGUE: tuple[ProbeSpec, ...] = catalogue(AMD)  # docs/PROBES.md is generated from this
"""The AMD node's catalogue (the default vendor); `catalogue(vendor)` gives any vendor's."""


def probe_catalogue(
    host_root: Path = Path("/"), *, timeout_s: float | None = None, vendor: Vendor = AMD
) -> tuple[Probe, ...]:
    """Every probe of a `vendor` node in capture order, file-read globs expanded under `host_root`.

    `timeout_s`, when given, replaces every probe's own timeout.
    """
    root = Path(os.path.abspath(host_root))
    probes: list[Probe] = []
    for spec in catalogue(vendor):
        probe = _command_probe(spec) if isinstance(spec, CommandSpec) else _file_probe(spec, root)
        if timeout_s is not None:
            probe = replace(probe, timeout_s=timeout_s)
        probes.append(probe)
    return tuple(probes)


def probe_names(vendor: Vendor = AMD) -> tuple[str, ...]:
    """Names of every catalogue probe of a `vendor` node, in capture order."""
    return tuple(spec.name for spec in catalogue(vendor))


def fallback_names(vendor: Vendor = AMD) -> frozenset[str]:
    """Probes that only run when a probe they stand in for failed: absent from a bundle is normal for them."""
    return frozenset(s.name for s in catalogue(vendor) if isinstance(s, CommandSpec) and s.fallback_for)


def optional_names(vendor: Vendor = AMD) -> frozenset[str]:
    """Probes whose failure warns instead of blocking (fallbacks included)."""
    return frozenset(s.name for s in catalogue(vendor) if not s.required)


def absent_warns_names(vendor: Vendor = AMD) -> frozenset[str]:
    """Probes a bundle may lack with a warning (newer than some recorded bundles); any other absent probe that
    is not a fallback is missing required evidence, optional or not (an old bundle is no excuse)."""
    return frozenset(s.name for s in catalogue(vendor) if s.absent_warns)


def skipped_argv() -> dict[str, tuple[str, ...]]:
    """File-read probe -> the argv it records when skipped (its command with no file appended), any vendor."""
    out: dict[str, tuple[str, ...]] = {}
    for vendor in VENDORS:
        for spec in catalogue(vendor):
            if isinstance(spec, FileSpec):
                out.setdefault(spec.name, spec.argv)
    return out


def _command_probe(spec: CommandSpec) -> Probe:
    return Probe(
        name=spec.name,
        argv=spec.argv,
        parser=spec.parser,
        timeout_s=spec.timeout_s,
        required=spec.required,
        fallback_for=spec.fallback_for,
    )


def _file_probe(spec: FileSpec, root: Path) -> Probe:
    files: list[str] = []
    for pattern in spec.globs:
        files.extend(sorted(str(p) for p in _glob_under(root, pattern)))
    skip = None
    if not files:
        shown = ", ".join(str(root / g) for g in spec.globs)
        skip = f"no files matched {shown}"
    return Probe(
        name=spec.name,
        argv=(*spec.argv, *files),
        parser=spec.parser,
        timeout_s=spec.timeout_s,
        required=spec.required,
        skip_reason=skip,
    )


_MAX_LINKS = 40
"""Symlinks followed while re-rooting one path, as the kernel's own limit (ELOOP)."""

_GLOB_CHARS = frozenset("*?[")


def _glob_under(root: Path, pattern: str) -> list[Path]:
    """`root.glob(pattern)`, re-rooting absolute symlinks in the pattern's literal head (see Dated notes)."""
    found = list(root.glob(pattern))
    if found or root == Path("/"):
        return found
    parts = pattern.split("/")
    literal = 0
    while literal < len(parts) and not _GLOB_CHARS & set(parts[literal]):
        literal += 1
    head = _reroot(root, parts[:literal])
    if head is None:
        return []
    rest = "/".join(parts[literal:])
    if not rest:
        return [head] if head.exists() else []
    return list(head.glob(rest))


def _reroot(root: Path, parts: list[str]) -> Path | None:
    """Resolve `parts` below `root` as if `root` were `/`; None when a link loops or leaves nothing."""
    pending = [p for p in parts if p not in ("", ".")]
    current = root
    links = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            current = current.parent if current != root else root
            continue
        step = current / part
        if not step.is_symlink():
            current = step
            continue
        links += 1
        if links > _MAX_LINKS:
            return None
        target = os.readlink(step)
        if target.startswith("/"):
            current = root
        pending[:0] = [p for p in target.split("/") if p not in ("", ".")]
    return current
