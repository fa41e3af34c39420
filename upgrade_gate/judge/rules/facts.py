"""Snapshot facts that more than one rule family reads, derived once here.

Rule families (one module each under `judge.rules`) never import each other (import-linter's
independence contract); what two of them share lives here, in `rules.base`, or (measurements) in
`rules.measured`.
- `vf_map`: VFs enabled per PF (pcie and fleet rules).
- `comparable_cmdline`: the kernel command line as compared (host rules and the diff).
- `starts_off_plan`: a baseline version the plan did not expect to start from (software, firmware).
"""

from __future__ import annotations

from upgrade_gate.judge.plan import version_matches
from upgrade_gate.model import Snapshot


def vf_map(snapshot: Snapshot) -> dict[str, int | None]:
    """VFs enabled per PF BDF: sysfs SR-IOV records first, a NIC's own count as fallback."""
    out: dict[str, int | None] = {str(f.bdf): f.numvfs for f in snapshot.sriov}
    for nic in snapshot.nics:
        if nic.bdf is not None and nic.sriov_numvfs is not None:
            out.setdefault(str(nic.bdf), nic.sriov_numvfs)
    return out


_BOOT_LOADER_KEYS = ("BOOT_IMAGE=", "initrd=")


def comparable_cmdline(value: str | None) -> str | None:
    """The kernel command line as compared: without the boot loader's `BOOT_IMAGE=` / `initrd=`."""
    if value is None:
        return None
    return " ".join(t for t in value.split() if not t.startswith(_BOOT_LOADER_KEYS))


def starts_off_plan(before: str | None, from_version: str | None) -> bool:
    """True when the plan names the version it starts from and the baseline has another one."""
    return from_version is not None and before is not None and not version_matches(before, from_version)
