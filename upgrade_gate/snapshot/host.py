"""Host facts of a snapshot (`Snapshot.host`, `Software.rccl_library`) from the host probes.

The incident names BIOS drift (a BIOS update re-enumerates PCIe), kernel parameters, the OS release
and the RCCL library as causes, so each is recorded with the reason it is missing when it is:
- `bios`: `/sys/class/dmi/id/bios_{vendor,version,date}`; a host without DMI (many VMs) has no such
  files, the probe is skipped with "no files matched ..." and that is the recorded reason.
- `kernel_cmdline`: `/proc/cmdline`, whitespace collapsed, less the boot loader's `BOOT_IMAGE=` and
  `initrd=` tokens: they name the kernel image's path, which moves with every kernel update
  (`software.kernel` judges that), so keeping them would make every planned kernel change a
  "changed command line" in `diff` and in the gate alike.
- `os_release`: ID, VERSION_ID and PRETTY_NAME of `/etc/os-release` (else `/usr/lib/os-release`).
- `rccl_library`: the file name `/opt/rocm/lib/librccl.so.1` resolves to.
`captured` is True once any host probe is in the bundle: a snapshot whose bundle predates these probes
says so instead of pretending the host had no BIOS.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from upgrade_gate.model import Host
from upgrade_gate.parse.host import BIOS_FIELDS, HostFiles, parse_host_files, parse_rccl_readlink

HOST_PROBES = ("bios", "kernel_cmdline", "os_release", "rccl_library")
_OS_KEYS = {"os_id": "ID", "os_version_id": "VERSION_ID", "os_pretty_name": "PRETTY_NAME"}

Parse = Callable[[str, Callable[[str], Any]], Any]
Reason = Callable[..., str]


def host_facts(parse: Parse, reason: Reason, *, present: Collection[str]) -> tuple[Host, str | None, str | None]:
    """(host facts, RCCL library file name, why that name is unknown) from the bundle's host probes."""
    bios: HostFiles | None = parse("bios", parse_host_files)
    cmdline: HostFiles | None = parse("kernel_cmdline", parse_host_files)
    release: HostFiles | None = parse("os_release", parse_host_files)
    library = parse("rccl_library", parse_rccl_readlink)
    values: dict[str, str | None] = {f: bios.bios.get(f) if bios else None for f in BIOS_FIELDS}
    values["kernel_cmdline"] = _parameters(cmdline.cmdline) if cmdline else None
    for name, key in _OS_KEYS.items():
        values[name] = release.os_release.get(key) if release else None
    reasons: dict[str, str] = {}
    for name, value in values.items():
        if value is not None:
            continue
        probe = "bios" if name.startswith("bios_") else "kernel_cmdline" if name == "kernel_cmdline" else "os_release"
        parsed = {"bios": bios, "kernel_cmdline": cmdline, "os_release": release}[probe]
        if parsed is not None:  # the probe read its files, but this one printed nothing
            reasons[name] = f"{probe}: {_file_of(name, parsed)} printed nothing"
        else:
            reasons[name] = reason(probe)
    host = Host(captured=any(p in present for p in HOST_PROBES), **values, na_reasons=reasons)
    rccl: str | None = library.name if library is not None else None
    return host, rccl, None if rccl is not None else reason("rccl_library")


def _parameters(cmdline: str | None) -> str | None:
    if cmdline is None:
        return None
    return " ".join(t for t in cmdline.split() if not t.startswith(("BOOT_IMAGE=", "initrd=")))


def _file_of(name: str, parsed: HostFiles) -> str:
    if name.startswith("bios_"):
        return f"/sys/class/dmi/id/{name}"
    if name == "kernel_cmdline":
        return "/proc/cmdline"
    return f"{parsed.os_release_file or '/etc/os-release'} key {_OS_KEYS[name]}"
