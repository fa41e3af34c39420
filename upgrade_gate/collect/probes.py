"""The probe catalogue: every command and sysfs read a capture runs, as data.

Names, argv and parser keys are a contract shared by `capture`, the fake nodes and the snapshot
builder. docs/PROBES.md is generated from `CATALOGUE` (`python3 tools/gen_probes_doc.py`;
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

DEFAULT_TIMEOUT_S = 30.0
"""Seconds a probe may run unless the catalogue or `--timeout` says otherwise."""

GREP_ARGV = ("grep", "-H", ".")
"""Prefix of every file-read probe: grep's `path:value` form, one line per non-empty line."""

READLINK_ARGV = ("readlink", "-f", "--")
"""Prefix of the RCCL library probe: the real file behind the soname, one absolute path per line."""

AMDSMI_FALLBACK_TARGETS = ("amdsmi_list", "amdsmi_static", "amdsmi_firmware", "amdsmi_topology")


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


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandSpec:
    """A catalogue entry that runs one command."""

    name: str
    argv: tuple[str, ...]
    parser: str
    required: bool = True
    fallback_for: tuple[str, ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSpec:
    """A catalogue entry that reads the files its globs match under the host root."""

    name: str
    globs: tuple[str, ...]  # relative to the host root
    parser: str = "sysfs-grep"
    required: bool = True
    timeout_s: float = DEFAULT_TIMEOUT_S
    argv: tuple[str, ...] = GREP_ARGV  # the command the matched files are appended to


CATALOGUE: tuple[CommandSpec | FileSpec, ...] = (  # docs/PROBES.md is generated from this
    CommandSpec(name="rocminfo", argv=("rocminfo",), parser="rocminfo"),
    CommandSpec(
        name="amdsmi_version",
        argv=("amd-smi", "version", "--json"),
        parser="amd-smi-version",
        required=False,
    ),
    CommandSpec(name="amdsmi_list", argv=("amd-smi", "list", "--json"), parser="amd-smi-list"),
    CommandSpec(name="amdsmi_static", argv=("amd-smi", "static", "--json"), parser="amd-smi-static"),
    CommandSpec(name="amdsmi_firmware", argv=("amd-smi", "firmware", "--json"), parser="amd-smi-firmware"),
    CommandSpec(name="amdsmi_topology", argv=("amd-smi", "topology", "--json"), parser="amd-smi-topology"),
    CommandSpec(
        name="rocmsmi",
        argv=(
            "rocm-smi",
            "--showproductname",
            "--showbus",
            "--showuniqueid",
            "--showserial",
            "--showfwinfo",
            "--showdriverversion",
            "--json",
        ),
        parser="rocm-smi",
        required=False,
        fallback_for=AMDSMI_FALLBACK_TARGETS,
    ),
    CommandSpec(
        name="rocmsmi_topo",
        argv=("rocm-smi", "--showtopo", "--json"),
        parser="rocm-smi",
        required=False,
        fallback_for=("amdsmi_topology",),
    ),
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
    FileSpec(name="driver_version", globs=("sys/module/amdgpu/version",)),
    FileSpec(name="rocm_version", globs=("opt/rocm/.info/version",)),
    # upgrade-gate's own ELF reader lists the ROCm libraries (soname, symbol-set hash): upgrade_gate.abi.listing.
    # Optional: its loss blocks through rule library.unplanned wherever the baseline recorded libraries.
    FileSpec(
        name="rocm_libs",
        globs=("opt/rocm/lib",),
        parser="abi-list",
        argv=("upgrade-gate", "abi-list"),
        required=False,
        timeout_s=300.0,
    ),
    CommandSpec(name="kernel", argv=("uname", "-r"), parser="uname-r"),
    CommandSpec(name="dmesg", argv=("dmesg",), parser="dmesg"),
    # Host facts the incident names as causes (a BIOS update re-enumerates PCIe). No DMI (a VM) or no
    # ROCm: no file matches, the probe is skipped with that reason and the values are None with it.
    FileSpec(
        name="bios",
        globs=tuple(f"sys/class/dmi/id/{f}" for f in ("bios_vendor", "bios_version", "bios_date")),
        parser="host-files",
    ),
    FileSpec(name="kernel_cmdline", globs=("proc/cmdline",), parser="host-files"),
    FileSpec(name="os_release", globs=("etc/os-release", "usr/lib/os-release"), parser="host-files"),
    # The soname programs load; readlink -f names the real file (librccl.so.1.0.<ROCm build>).
    FileSpec(
        name="rccl_library",
        globs=("opt/rocm/lib/librccl.so.1",),
        parser="readlink-rccl",
        argv=READLINK_ARGV,
    ),
)


def probe_catalogue(host_root: Path = Path("/"), *, timeout_s: float | None = None) -> tuple[Probe, ...]:
    """Every probe in capture order, file-read globs expanded under `host_root`.

    `timeout_s`, when given, replaces every probe's own timeout.
    """
    root = Path(os.path.abspath(host_root))
    probes: list[Probe] = []
    for spec in CATALOGUE:
        probe = _command_probe(spec) if isinstance(spec, CommandSpec) else _file_probe(spec, root)
        if timeout_s is not None:
            probe = replace(probe, timeout_s=timeout_s)
        probes.append(probe)
    return tuple(probes)


def probe_names() -> tuple[str, ...]:
    """Names of every catalogue probe, in capture order."""
    return tuple(spec.name for spec in CATALOGUE)


def skipped_argv() -> dict[str, tuple[str, ...]]:
    """File-read probe -> the argv it records when skipped (its command with no file appended)."""
    return {spec.name: spec.argv for spec in CATALOGUE if isinstance(spec, FileSpec)}


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
