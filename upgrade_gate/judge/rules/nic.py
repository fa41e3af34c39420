"""RDMA NIC rules: presence and count, port state, GID table, RoCE v2, NIC firmware.

Design decisions:
- NICs are matched by RDMA device name (`ionic_0`): rails are wired by name, so a NIC that is still
  there under another name (same PF BDF) is reported as renamed, which breaks the rail mapping just
  like a GPU order change breaks the rank mapping.
- Count: CVF phase 3 counts NICs by PCI id (`PHASE3_AMD_NIC_PCI_IDS`, default `1dd8:1002`) against
  `PHASE3_EXPECTED_NIC_COUNT`. The same count is taken from the PCIe links of the snapshot, for nodes
  whose class runs phase 3 and that have NICs (in the baseline, the candidate or the PCIe list).
  A class whose count the policy declares (`nics.expected_count`) is held to it whatever it shows:
  none at all blocks a class that declares NICs, and any NIC (RDMA device or PCI id) blocks a class
  declared NIC-less (0), which otherwise passes without them.
- Port state: `PORT_ACTIVE` (ibv_devinfo), `ACTIVE` (rdma link) and `Active` (ibstat) all mean
  active; anything else, or unknown, blocks. An active port's physical state must be link-up too
  (`LINK_UP` from ibv_devinfo -v and rdma link, `LinkUp` from ibstat, `5: LinkUp` in sysfs): DISABLED,
  POLLING, LINK_DOWN, an error text or none at all blocks, as a down `state` does, whatever the
  baseline showed. A lower link rate than the baseline's blocks too.
- GIDs: fewer than `PHASE3_MIN_GID_COUNT`, unknown, or fewer than the baseline's port blocks (a lost
  IPv4 address takes its RoCE v2 GIDs with it).
- RoCE v2: an Ethernet port must carry a RoCE v2 GID; a port that had one in the baseline must still.
- Firmware: a change outside the plan's `change.nic_firmware`, a miss of its `to`, or (with no plan
  target) a version other than `UPGRADE_GATE_NIC_FIRMWARE` blocks.
- The five rules read one derivation per node (`_nics`: the candidate's NICs by name, the baseline's,
  each port beside its baseline port), kept for the judge batch (`facts.batch_cache`) and shared
  read-only; the state texts are matched once per distinct text (`port_active`, `_phys_up`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

from upgrade_gate.judge.idcache import IdCache
from upgrade_gate.judge.plan import version_matches
from upgrade_gate.judge.rules.base import NodeContext, finding, show, spec
from upgrade_gate.judge.rules.facts import batch_cache
from upgrade_gate.model import Finding, Nic, NicPort, Snapshot
from upgrade_gate.parse.common import phys_up

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry

_NIC_LABEL = "feature.node.kubernetes.io/amd-nic"


@lru_cache(maxsize=256)  # a fleet's ports print a handful of states: the regex once per text
def port_active(state: str | None) -> bool:
    """True for PORT_ACTIVE / ACTIVE / Active (with or without a `(4)` code)."""
    if state is None:
        return False
    text = re.sub(r"\(.*?\)", "", state).strip().upper()
    return text.removeprefix("PORT_").removeprefix("4:").strip() == "ACTIVE"


_phys_up = lru_cache(maxsize=256)(phys_up)  # as port_active: a handful of physical states


PortPair = tuple[Nic, NicPort, NicPort | None]


class _Nics(NamedTuple):
    """A node's NICs as the NIC rules read them (shared by them: do not mutate)."""

    baseline: Snapshot | None  # the baseline the rest was derived against
    named: tuple[Nic, ...]  # the candidate's NICs, by name
    base: dict[str, Nic]  # the baseline's NICs by name
    pairs: tuple[PortPair, ...]  # (candidate NIC, its port, the same port in the baseline or None)


_NICS: IdCache[Snapshot, _Nics] = batch_cache()  # by candidate: five rules a node read them


def _nics(ctx: NodeContext) -> _Nics:
    """`ctx`'s NIC facts, derived once per node and judge batch."""
    hit = _NICS.peek(ctx.candidate)
    if hit is not None and hit.baseline is ctx.baseline:
        return hit
    named = tuple(sorted(ctx.candidate.nics, key=lambda n: n.name))
    base = {n.name: n for n in ctx.baseline.nics} if ctx.baseline is not None else {}
    pairs: list[PortPair] = []
    for nic in named:
        was = base.get(nic.name)
        was_ports = {p.port: p for p in was.ports} if was is not None else {}
        for port in nic.ports:
            pairs.append((nic, port, was_ports.get(port.port)))
    found = _Nics(ctx.baseline, named, base, tuple(pairs))
    _NICS.put(ctx.candidate, found)
    return found


def _port_path(nic: Nic, port: NicPort) -> str:
    return f"nics[name={nic.name}].ports[port={port.port}]"


def check_missing(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Baseline NICs still present by name, each listed once; the NIC count CVF phase 3 expects."""
    nics = _nics(ctx)
    listed = [n.name for n in nics.named]
    for name in sorted({n for n in listed if listed.count(n) > 1}) if len(set(listed)) != len(listed) else ():
        yield finding(
            ctx,
            entry,
            f"NIC {name} is listed {listed.count(name)} times: the snapshot contradicts itself (which entry is "
            "judged would depend on their order)",
            device=name,
            path=f"nics[name={name}]",
            expected="listed once",
            actual=listed.count(name),
            evidence="ibv_devinfo",
        )
    gone = sorted(nics.base.keys() - {n.name for n in ctx.candidate.nics})
    by_bdf = {str(n.bdf): n for n in ctx.candidate.nics if n.bdf is not None} if gone else {}
    for name in gone:
        was = nics.base[name]
        moved = by_bdf.get(str(was.bdf)) if was.bdf is not None else None
        message = (
            f"NIC {name} ({was.bdf}) is now named {moved.name}: the rail mapping changed"
            if moved is not None and moved.name not in nics.base
            else f"NIC {name} ({was.bdf or 'unknown BDF'}) is missing"
        )
        yield finding(
            ctx,
            entry,
            message,
            device=name,
            path=f"nics[name={name}]",
            expected="present",
            actual=moved.name if moved is not None else "absent",
            evidence="ibv_devinfo",
        )
    t = ctx.policy.thresholds
    ids = {i.lower() for i in t.nic_pci_ids}
    counted = sorted({str(lk.bdf) for lk in ctx.candidate.pcie if (lk.vendor_device or "").lower() in ids})
    declared = ctx.policy.expected_nics(ctx.node_class)
    if declared is not None:
        yield from _declared_count(ctx, entry, declared, counted)
        return
    has_nics = bool(counted or ctx.candidate.nics or nics.base or ctx.candidate.node.labels.get(_NIC_LABEL) == "true")
    if has_nics and ctx.policy.phase_applies(3, ctx.node_class) and len(counted) != t.expected_nic_count:
        yield finding(
            ctx,
            entry,
            f"{len(counted)} NICs with PCI id {', '.join(t.nic_pci_ids)} found, expected {t.expected_nic_count} "
            f"({t.source('expected_nic_count')})",
            path="nics",
            expected=t.expected_nic_count,
            actual=len(counted),
            evidence="lspci",
        )


def _declared_count(ctx: NodeContext, entry: RuleEntry, declared: int, counted: list[str]) -> Iterable[Finding]:
    cls = ctx.node_class or "*"
    rdma = len(ctx.candidate.nics)
    if declared == 0:
        if rdma or counted:
            yield finding(
                ctx,
                entry,
                f"class {cls} is declared without RDMA NICs (policy nics.expected_count: 0) but {rdma} RDMA "
                f"device(s) and {len(counted)} NIC(s) by PCI id were found",
                path="nics",
                expected=0,
                actual=max(rdma, len(counted)),
                evidence="ibv_devinfo",
            )
        return
    t = ctx.policy.thresholds
    found = max(rdma, len(counted))
    if len(counted) != declared and rdma != declared:
        yield finding(
            ctx,
            entry,
            f"class {cls} declares {declared} RDMA NICs (policy nics.expected_count) but {rdma} RDMA device(s) "
            f"and {len(counted)} NIC(s) with PCI id {', '.join(t.nic_pci_ids)} were found",
            path="nics",
            expected=declared,
            actual=found,
            evidence="lspci",
        )


def check_port_state(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Every port active, and not slower than in the baseline."""
    for nic, port, was in _nics(ctx).pairs:
        if not port_active(port.state):
            yield finding(
                ctx,
                entry,
                f"NIC {nic.name} port {port.port}: state {show(port.state)} (phys {show(port.phys_state)}), "
                "expected ACTIVE",
                device=nic.name,
                path=f"{_port_path(nic, port)}.state",
                expected="ACTIVE",
                actual=port.state,
                evidence="ibv_devinfo",
            )
        elif not _phys_up(port.phys_state):
            yield finding(
                ctx,
                entry,
                f"NIC {nic.name} port {port.port}: state {port.state} but physical state {show(port.phys_state)}, "
                "expected LINK_UP",
                device=nic.name,
                path=f"{_port_path(nic, port)}.phys_state",
                expected="LINK_UP",
                actual=port.phys_state,
                evidence="ibv_devinfo",
            )
        if was is not None and was.rate_gbps is not None and (port.rate_gbps or 0.0) < was.rate_gbps:
            yield finding(
                ctx,
                entry,
                f"NIC {nic.name} port {port.port}: link rate {show(port.rate_gbps)} Gb/s, baseline "
                f"{was.rate_gbps:g} Gb/s",
                device=nic.name,
                path=f"{_port_path(nic, port)}.rate_gbps",
                expected=was.rate_gbps,
                actual=port.rate_gbps,
                evidence="ibv_devinfo",
            )


def check_gids(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """GID count per port vs PHASE3_MIN_GID_COUNT and the baseline."""
    t = ctx.policy.thresholds
    for nic, port, was in _nics(ctx).pairs:
        floor, by_baseline = t.min_gid_count, False
        if was is not None and was.gid_count is not None and was.gid_count > floor:
            floor, by_baseline = was.gid_count, True
        if port.gid_count is None or port.gid_count < floor:  # the words only for a finding
            why = f"baseline {floor}" if by_baseline else f"PHASE3_MIN_GID_COUNT {floor} ({t.source('min_gid_count')})"
            yield finding(
                ctx,
                entry,
                f"NIC {nic.name} port {port.port}: {show(port.gid_count)} GIDs, expected at least {floor} ({why})",
                device=nic.name,
                path=f"{_port_path(nic, port)}.gid_count",
                expected=floor,
                actual=port.gid_count,
                evidence="ibv_devinfo",
            )


def check_roce(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """RoCE v2 GID present on Ethernet ports (and wherever the baseline had one)."""
    for nic, port, was in _nics(ctx).pairs:
        ethernet = (port.link_layer or "").lower() == "ethernet"
        needed = ethernet or (was is not None and was.roce_v2 is True)
        if needed and port.roce_v2 is not True:
            yield finding(
                ctx,
                entry,
                f"NIC {nic.name} port {port.port}: no RoCE v2 GID "
                f"({'unknown' if port.roce_v2 is None else 'none in the GID table'})",
                device=nic.name,
                path=f"{_port_path(nic, port)}.roce_v2",
                expected=True,
                actual=port.roce_v2,
                evidence="ibv_devinfo",
            )


def check_firmware(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """NIC firmware vs the plan, the baseline and UPGRADE_GATE_NIC_FIRMWARE."""
    planned = ctx.plan.change.nic_firmware if ctx.plan is not None else None
    pinned = ctx.policy.thresholds.nic_firmware
    nics = _nics(ctx)
    base = nics.base
    for nic in nics.named:
        path = f"nics[name={nic.name}].fw_ver"
        before = base[nic.name].fw_ver if nic.name in base else None
        if planned is not None:
            if not version_matches(nic.fw_ver, planned.to_version):
                yield finding(
                    ctx,
                    entry,
                    f"NIC {nic.name}: firmware {show(nic.fw_ver)}, the plan moves it to {planned.to_version}",
                    device=nic.name,
                    path=path,
                    expected=planned.to_version,
                    actual=nic.fw_ver,
                    evidence="sysfs_ib",
                )
            continue
        if nic.name in base and before != nic.fw_ver:
            yield finding(
                ctx,
                entry,
                f"NIC {nic.name}: firmware changed outside the plan: {show(before)} -> {show(nic.fw_ver)}",
                device=nic.name,
                path=path,
                expected=before,
                actual=nic.fw_ver,
                evidence="sysfs_ib",
            )
        elif pinned is not None and nic.fw_ver != pinned:
            yield finding(
                ctx,
                entry,
                f"NIC {nic.name}: firmware {show(nic.fw_ver)}, expected {pinned} "
                f"({ctx.policy.thresholds.source('nic_firmware')})",
                device=nic.name,
                path=path,
                expected=pinned,
                actual=nic.fw_ver,
                evidence="sysfs_ib",
            )


SPECS = (
    spec(
        "nic.missing",
        "a baseline NIC is gone or renamed, a NIC is listed twice, or the NIC count is not CVF's expected",
        check_missing,
    ),
    spec("nic.port_state", "an RDMA port is not ACTIVE, or slower than in the baseline", check_port_state),
    spec("nic.gid_count", "a port has fewer GIDs than PHASE3_MIN_GID_COUNT or the baseline", check_gids),
    spec("nic.roce_v2", "an Ethernet port carries no RoCE v2 GID", check_roce),
    spec("nic.firmware", "NIC firmware moved outside the plan or missed its target", check_firmware),
)
