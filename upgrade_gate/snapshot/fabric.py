"""The snapshot's fabric: the GPU link matrix, PCIe links, SR-IOV functions and RDMA NICs.

- GPU links come from `amd-smi topology` (one entry per unordered BDF pair); without it from
  `rocm-smi --showtopo`, whose GPU numbers are mapped to BDFs through rocm-smi's own BDF list.
- PCIe links are lspci's, kept for the classes whose links matter to the gate (network, display,
  processing accelerators, co-processors).
- NICs come from `ibv_devinfo -v` (ports, GID tables), with netdevs from `rdma link show` and the PF's
  BDF from the sysfs path `/sys/bus/pci/devices/<bdf>/infiniband/<dev>/fw_ver`. When ibv_devinfo failed,
  the devices rdma link and sysfs saw are kept (with reasons), so no device silently disappears.
"""

from __future__ import annotations

from collections.abc import Iterable

from upgrade_gate.model import Bdf, GpuLink, LinkType, Nic, NicPort, PcieLink, SriovFunction
from upgrade_gate.parse import lspci, rdma, sysfs
from upgrade_gate.parse.amdsmi_types import AmdSmiTopology
from upgrade_gate.parse.rocmsmi_types import RocmSmiInfo

# PCI classes whose links matter to the gate: network, display, processing accelerators, co-processors.
_LINK_CLASSES = ("02", "03", "12", "0b40")


def _link_type(raw: str | None) -> LinkType:
    if raw is None:
        return LinkType.UNKNOWN
    try:
        return LinkType(raw.upper())
    except ValueError:
        return LinkType.UNKNOWN


def gpu_links(
    topology: AmdSmiTopology | None, rsmi_topo: RocmSmiInfo | None, rsmi: RocmSmiInfo | None
) -> tuple[GpuLink, ...]:
    """GPU pairs (a < b by BDF) with link type, hops and weight."""
    out: dict[tuple[Bdf, Bdf], GpuLink] = {}
    if topology is not None:
        for link in topology.links:
            a, b = sorted((link.src, link.dst))
            out.setdefault(
                (a, b),
                GpuLink(
                    a=a,
                    b=b,
                    link_type=_link_type(link.link_type),
                    hops=link.hops,
                    weight=link.weight,
                    access=link.access,
                ),
            )
        return tuple(out[k] for k in sorted(out))
    # rocm-smi --showtopo numbers GPUs by its own index: map through its BDFs (same run or the info probe).
    source = rsmi_topo if rsmi_topo is not None and rsmi_topo.links else None
    if source is None:
        return ()
    bdf_of = {g.index: g.bdf for g in (*source.gpus, *(rsmi.gpus if rsmi else ())) if g.bdf}
    for rl in source.links:
        ba, bb = bdf_of.get(rl.a), bdf_of.get(rl.b)
        if ba is None or bb is None or ba == bb:
            continue
        a, b = sorted((ba, bb))
        out.setdefault((a, b), GpuLink(a=a, b=b, link_type=_link_type(rl.link_type), hops=rl.hops, weight=rl.weight))
    return tuple(out[k] for k in sorted(out))


def pcie(pci: lspci.LspciResult | None) -> tuple[PcieLink, ...]:
    """lspci's links of the devices whose class matters to the gate."""
    if pci is None:
        return ()
    wanted = {d.bdf for d in pci.devices if d.class_id and d.class_id.startswith(_LINK_CLASSES)}
    return tuple(link for link in lspci.pcie_links(pci) if link.bdf in wanted)


def sriov(values: sysfs.SysfsValues | None) -> tuple[SriovFunction, ...]:
    """One record per PF with SR-IOV files, sorted by BDF."""
    if values is None:
        return ()
    pairs = sysfs.sriov_by_pf(values)
    return tuple(SriovFunction(bdf=bdf, numvfs=pairs[bdf][0], totalvfs=pairs[bdf][1]) for bdf in sorted(pairs))


def nics(
    ibv: rdma.IbvDevinfo | None,
    links: rdma.RdmaLinks | None,
    ib_values: sysfs.SysfsValues | None,
    sriov_values: sysfs.SysfsValues | None,
) -> tuple[Nic, ...]:
    """RDMA NICs in ibv_devinfo's order, joined with rdma link and sysfs by device name."""
    bdf_of = sysfs.ib_device_bdfs(ib_values) if ib_values else {}
    fw_of = sysfs.ib_fw_versions(ib_values) if ib_values else {}
    vfs = sysfs.sriov_by_pf(sriov_values) if sriov_values else {}
    link_of = {(lk.device, lk.port): lk for lk in links.links} if links else {}
    names: Iterable[str]
    if ibv is not None:
        names = [d.name for d in ibv.devices]
    else:  # ibv_devinfo failed: keep what rdma link and sysfs saw, so no device silently disappears
        names = sorted({lk.device for lk in link_of.values()} | set(fw_of))
    devices = {d.name: d for d in ibv.devices} if ibv else {}
    out = []
    for name in names:
        dev = devices.get(name)
        ports = _ports(dev, name, link_of)
        bdf = bdf_of.get(name)
        numvfs, totalvfs = vfs.get(bdf, (None, None)) if bdf else (None, None)
        reasons = {}
        if bdf is None:
            reasons["bdf"] = "no /sys/bus/pci/devices/<bdf>/infiniband entry for this device"
            # The SR-IOV counts are read at the PF's address: unknown for the same reason.
            reasons["sriov_numvfs"] = reasons["sriov_totalvfs"] = reasons["bdf"]
        elif bdf not in vfs:
            reasons["sriov_numvfs"] = reasons["sriov_totalvfs"] = "no sriov_numvfs/totalvfs read at its PCI address"
        if dev is None:
            reasons["ports"] = "ibv_devinfo did not report this device"
        if not any(p.netdev for p in ports):
            reasons["netdev"] = "rdma link reported no netdev for this device"
        out.append(
            Nic(
                name=name,
                bdf=bdf,
                netdev=next((p.netdev for p in ports if p.netdev), None),
                fw_ver=dev.fw_ver if dev else fw_of.get(name),
                node_guid=dev.node_guid if dev else None,
                vendor_part_id=dev.vendor_part_id if dev else None,
                ports=ports,
                sriov_numvfs=numvfs,
                sriov_totalvfs=totalvfs,
                na_reasons=reasons,
            )
        )
    return tuple(out)


def _ports(dev: rdma.IbvDevice | None, name: str, link_of: dict[tuple[str, int], rdma.RdmaLink]) -> tuple[NicPort, ...]:
    if dev is None:
        return tuple(
            NicPort(port=port, state=lk.state, phys_state=lk.physical_state, netdev=lk.netdev)
            for (dev_name, port), lk in sorted(link_of.items())
            if dev_name == name
        )
    out = []
    for p in dev.ports:
        lk = link_of.get((name, p.port))
        out.append(
            NicPort(
                port=p.port,
                state=p.state,
                phys_state=p.phys_state,
                link_layer=p.link_layer,
                rate_gbps=p.rate_gbps,
                mtu=p.active_mtu,
                gid_count=p.gid_count,
                roce_v2=p.roce_v2,
                netdev=lk.netdev if lk else None,
            )
        )
    return tuple(out)
