"""Snapshot facts that more than one rule family reads, derived once here.

Rule families (one module each under `judge.rules`) never import each other (import-linter's
independence contract); what two of them share lives here, in `rules.base`, or (measurements) in
`rules.measured`.
- `vf_map` / `vf_reports` / `vf_facts`: VFs enabled per PF (pcie and fleet rules). A PF's count is
  reported twice, by its sysfs SR-IOV record and by the NIC on that BDF (both read from `sriov_numvfs`,
  so they agree on a collected snapshot). Counts that disagree, or a negative one, are garbled evidence:
  `vf_map` gives such a PF no count (None, unknown); `vf_reports` lists each source's count so a rule
  can name them. Three rule calls a node read them (the candidate twice, the baseline once), so they
  are derived once per snapshot and judge batch (`vf_facts`), sorted by PF, and shared read-only; a
  baseline whose `sriov` and `nics` equal its candidate's (the usual node) shares the candidate's.
- `batch_cache` / `forget`: the caches of values derived from a batch's snapshots (these facts, and any
  a rule family keeps of its own) hold the snapshots, so the judge releases them all with each batch.
- `comparable_cmdline`: the kernel command line as compared (host rules and the diff).
- `starts_off_plan`: a baseline version the plan did not expect to start from (software, firmware).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from upgrade_gate.judge.idcache import IdCache
from upgrade_gate.judge.plan import version_matches
from upgrade_gate.model import Snapshot


class VfReport(NamedTuple):
    """One source's VF count of a PF: its sysfs SR-IOV record (`nic` None) or a NIC's own `sriov_numvfs`."""

    nic: str | None
    vfs: int | None


class VfFacts(NamedTuple):
    """A snapshot's VF counts, each mapping sorted by PF BDF (shared: do not mutate)."""

    reports: Mapping[str, tuple[VfReport, ...]]  # every source's count per PF (`vf_reports`)
    counts: Mapping[str, int | None]  # VFs per PF, None where unknown or garbled (`vf_map`)
    doubts: Mapping[str, tuple[VfReport, ...]]  # the PFs whose counts are garbled (`doubtful`)


_CACHES: list[IdCache[Any, Any]] = []


def batch_cache(limit: int = 256) -> IdCache[Any, Any]:
    """An `IdCache` of values derived from a judge batch's snapshots, released by `forget` with the batch
    (256: a batch of `judge.BATCH` nodes has two snapshots a node)."""
    cache: IdCache[Any, Any] = IdCache(limit)
    _CACHES.append(cache)
    return cache


def forget() -> None:
    """Drop every `batch_cache` (the judge calls it after each batch: the caches hold the snapshots)."""
    for cache in _CACHES:
        cache.clear()


_VFS: IdCache[Snapshot, VfFacts] = batch_cache()


def vf_facts(snapshot: Snapshot, like: Snapshot | None = None) -> VfFacts:
    """The snapshot's VF counts, derived once per snapshot and judge batch. `like`: another snapshot (the
    candidate of a baseline) whose facts serve where its SR-IOV and NIC sections equal `snapshot`'s."""
    hit = _VFS.peek(snapshot)
    if hit is not None:
        return hit
    if like is not None and like.sriov == snapshot.sriov and like.nics == snapshot.nics:
        found = vf_facts(like)
    else:
        found = _vf_facts(snapshot)
    _VFS.put(snapshot, found)
    return found


def _vf_facts(snapshot: Snapshot) -> VfFacts:
    """The facts of `snapshot.sriov` and `snapshot.nics`, which are all it reads (`vf_facts(like=)` relies
    on that)."""
    found: dict[str, list[VfReport]] = {}
    for f in snapshot.sriov:
        found.setdefault(str(f.bdf), []).append(VfReport(None, f.numvfs))
    for nic in sorted(snapshot.nics, key=lambda n: n.name):
        pf = str(nic.bdf) if nic.bdf is not None else None
        if pf is not None and (nic.sriov_numvfs is not None or pf in found):
            found.setdefault(pf, []).append(VfReport(nic.name, nic.sriov_numvfs))
    reports = {pf: tuple(found[pf]) for pf in sorted(found)}
    doubts = {pf: rs for pf, rs in reports.items() if doubtful(rs)}
    counts = {pf: None if pf in doubts else rs[0].vfs for pf, rs in reports.items()}
    return VfFacts(reports=reports, counts=counts, doubts=doubts)


def vf_reports(snapshot: Snapshot) -> Mapping[str, tuple[VfReport, ...]]:
    """Every VF count per PF BDF; a NIC without a count only where sysfs has a record to contradict."""
    return vf_facts(snapshot).reports


def doubtful(reports: Sequence[VfReport]) -> bool:
    """The counts of one PF disagree, or one is negative: garbled evidence."""
    counts = {r.vfs for r in reports}
    if len(counts) != 1:
        return len(counts) > 1  # sources that disagree (none at all: nothing to doubt)
    (count,) = counts
    return count is not None and count < 0


def vf_map(snapshot: Snapshot) -> Mapping[str, int | None]:
    """VFs enabled per PF BDF (sysfs record or a NIC's own count); None where unknown or garbled."""
    return vf_facts(snapshot).counts


_BOOT_LOADER_KEYS = ("BOOT_IMAGE=", "initrd=")


def comparable_cmdline(value: str | None) -> str | None:
    """The kernel command line as compared: without the boot loader's `BOOT_IMAGE=` / `initrd=`."""
    if value is None:
        return None
    return " ".join(t for t in value.split() if not t.startswith(_BOOT_LOADER_KEYS))


def starts_off_plan(before: str | None, from_version: str | None) -> bool:
    """True when the plan names the version it starts from and the baseline has another one."""
    return from_version is not None and before is not None and not version_matches(before, from_version)
