"""Snapshot facts that more than one rule family reads, derived once here.

Rule families (one module each under `judge.rules`) never import each other (import-linter's
independence contract); what two of them share lives here, in `rules.base`, or (measurements) in
`rules.measured`.
- `vf_map` / `vf_reports`: VFs enabled per PF (pcie and fleet rules). A PF's count is reported twice, by
  its sysfs SR-IOV record and by the NIC on that BDF (both read from `sriov_numvfs`, so they agree on a
  collected snapshot). Counts that disagree, or a negative one, are garbled evidence: `vf_map` gives
  such a PF no count (None, unknown); `vf_reports` lists each source's count so a rule can name them.
- `comparable_cmdline`: the kernel command line as compared (host rules and the diff).
- `starts_off_plan`: a baseline version the plan did not expect to start from (software, firmware).
"""

from __future__ import annotations

from typing import NamedTuple

from upgrade_gate.judge.plan import version_matches
from upgrade_gate.model import Snapshot


class VfReport(NamedTuple):
    """One source's VF count of a PF: its sysfs SR-IOV record (`nic` None) or a NIC's own `sriov_numvfs`."""

    nic: str | None
    vfs: int | None


def vf_reports(snapshot: Snapshot) -> dict[str, list[VfReport]]:
    """Every VF count per PF BDF; a NIC without a count only where sysfs has a record to contradict."""
    out: dict[str, list[VfReport]] = {}
    for f in snapshot.sriov:
        out.setdefault(str(f.bdf), []).append(VfReport(None, f.numvfs))
    for nic in sorted(snapshot.nics, key=lambda n: n.name):
        pf = str(nic.bdf) if nic.bdf is not None else None
        if pf is not None and (nic.sriov_numvfs is not None or pf in out):
            out.setdefault(pf, []).append(VfReport(nic.name, nic.sriov_numvfs))
    return out


def doubtful(reports: list[VfReport]) -> bool:
    """The counts of one PF disagree, or one is negative: garbled evidence."""
    counts = {r.vfs for r in reports}
    return len(counts) > 1 or any(c is not None and c < 0 for c in counts)


def vf_map(snapshot: Snapshot, reports: dict[str, list[VfReport]] | None = None) -> dict[str, int | None]:
    """VFs enabled per PF BDF (sysfs record or a NIC's own count); None where unknown or garbled.
    `reports`: the snapshot's `vf_reports`, when the caller has them already."""
    found = vf_reports(snapshot) if reports is None else reports
    return {pf: None if doubtful(rs) else rs[0].vfs for pf, rs in found.items()}


_BOOT_LOADER_KEYS = ("BOOT_IMAGE=", "initrd=")


def comparable_cmdline(value: str | None) -> str | None:
    """The kernel command line as compared: without the boot loader's `BOOT_IMAGE=` / `initrd=`."""
    if value is None:
        return None
    return " ".join(t for t in value.split() if not t.startswith(_BOOT_LOADER_KEYS))


def starts_off_plan(before: str | None, from_version: str | None) -> bool:
    """True when the plan names the version it starts from and the baseline has another one."""
    return from_version is not None and before is not None and not version_matches(before, from_version)
