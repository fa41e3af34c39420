"""Snapshot facts that more than one rule family reads, derived once here.

Rule families (one module each under `judge.rules`) never import each other (import-linter's
independence contract); what two of them share lives here or in `rules.base`.
- `merged_measurements`: measurements by key with duplicates pooled (bandwidth, fleet, thermal rules);
  `bandwidth_key`: which of them the bandwidth rules judge (not the `THERMAL_PREFIX` readings).
- `vf_map`: VFs enabled per PF (pcie and fleet rules).
- `comparable_cmdline`: the kernel command line as compared (host rules and the diff).
- `starts_off_plan`: a baseline version the plan did not expect to start from (software, firmware).
"""

from __future__ import annotations

from upgrade_gate.judge.plan import version_matches
from upgrade_gate.model import Measurement, Snapshot, measurements_of

THERMAL_PREFIX = "thermal/"
"""Measurements under this prefix (phase 2's temperatures and power) are judged by `rules.thermal` only."""


def bandwidth_key(key: str) -> bool:
    """True for a measurement the bandwidth rules judge (everything but the thermal readings)."""
    return not key.startswith(THERMAL_PREFIX)


# Several rules read the merged measurements of the same snapshot; a judge run builds them once per
# snapshot. Keyed by identity (snapshots hold dicts, so they are not hashable) with the snapshot kept
# alive in the entry so an id is never reused while cached; small, since rules run node by node.
_MERGED: dict[int, tuple[Snapshot, tuple[dict[str, Measurement], dict[str, str]]]] = {}
_MERGED_MAX = 16


def merged_measurements(snapshot: Snapshot) -> tuple[dict[str, Measurement], dict[str, str]]:
    """Measurements by key (duplicates pooled), and keys that could not be merged -> why (do not mutate)."""
    hit = _MERGED.get(id(snapshot))
    if hit is not None and hit[0] is snapshot:
        return hit[1]
    merged = _merge(snapshot)
    if len(_MERGED) >= _MERGED_MAX:
        _MERGED.clear()
    _MERGED[id(snapshot)] = (snapshot, merged)
    return merged


def _merge(snapshot: Snapshot) -> tuple[dict[str, Measurement], dict[str, str]]:
    out: dict[str, Measurement] = {}
    broken: dict[str, str] = {}
    for m in measurements_of(snapshot):
        have = out.get(m.key)
        if have is None:
            out[m.key] = m
        elif have.unit == m.unit and have.settings == m.settings:
            out[m.key] = Measurement(
                key=m.key,
                unit=m.unit,
                samples=have.samples + m.samples,
                settings=dict(m.settings),
                source=have.source,
                higher_is_better=have.higher_is_better,
            )
        else:
            broken[m.key] = f"measured twice with different settings ({have.settings} vs {m.settings})"
    return out, broken


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
