"""Phase 3, NIC health: CVF's structural checks, read from the node's snapshot, every reason collected.

Checks (CVF PHASE3_CHECK_SCRIPT, ROCm/gpu-operator example/gpu-validation-cluster README, 2026):
1. NIC count: PCIe functions whose `vendor:device` is in `PHASE3_AMD_NIC_PCI_IDS` (snapshot `pcie[]`,
   from `lspci -D -nn -vvv`) == `PHASE3_EXPECTED_NIC_COUNT` (`nic-count:expected=N,actual=M`).
2./3. Link and RDMA state: every port of every AINIC ACTIVE (`rdma-state:<dev>=<state>`), and its
   physical state LINK_UP when reported (`link-state:<dev>=<state>`).
4. GID table: >= `PHASE3_MIN_GID_COUNT` GIDs per device (`gid-table:<dev>=<count>`), and a RoCE v2 GID
   on Ethernet ports.
5. Firmware: equal to `UPGRADE_GATE_NIC_FIRMWARE` when set; and, like CVF, a substring of
   `ROCE_WORKLOAD_IMAGE` when that is set and `PHASE3_DRIVER_FW_CHECK_ENABLED` (a mismatch fails only
   with `PHASE3_DRIVER_FW_STRICT`; the observed firmware is always annotated `observed-fw`).
Plus upgrade-gate's own: PCIe link of every AINIC not downgraded and at the expected generation/width
(`UPGRADE_GATE_NIC_PCIE_GEN` / `_WIDTH`), and `sriov_numvfs` == `UPGRADE_GATE_NIC_VF_COUNT`.

Design decisions:
- The AINICs are the RDMA devices whose PF BDF is one of the counted PCIe functions; a device whose BDF
  is unknown is checked too (it cannot be proven not to be one).
- Every counted AINIC function must carry an RDMA device (`rdma-devices:expected=N,actual=M`, naming the
  functions without one): an AINIC whose RDMA driver did not bind is a dead rail, although lspci still
  shows it. When some device's BDF is unknown the functions cannot be matched, so the devices are
  counted instead.
- Where CVF reads "no data" as SKIP (no fw_ver readable, no image), upgrade-gate fails closed: a value
  that is expected but unreadable is a reason. The probes this phase reads must all have succeeded;
  a failed one is an `error` naming it (CVF's `preflight-failed:ibv_devinfo=...`).
- The netdev operstate (`/sys/class/net/<if>/operstate`) is not in the snapshot; the port's physical
  state from `ibv_devinfo`/`rdma link` stands in for it.
"""

from __future__ import annotations

from upgrade_gate.model import Nic, PcieLink, PhaseResult, Snapshot
from upgrade_gate.parse.common import phys_up
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.phase import Outcome, PhaseContext

EVIDENCE_PROBES = ("lspci", "ibv_devinfo", "rdma_link", "sysfs_ib", "sysfs_sriov")


def amd_nic_links(snapshot: Snapshot, config: CvfConfig) -> tuple[PcieLink, ...]:
    """PCIe functions whose vendor:device is one of PHASE3_AMD_NIC_PCI_IDS."""
    ids = set(config.phase3_amd_nic_pci_ids)
    return tuple(p for p in snapshot.pcie if (p.vendor_device or "").lower() in ids)


def rail_nics(snapshot: Snapshot, config: CvfConfig) -> tuple[Nic, ...]:
    """The RDMA devices of the AINICs (by PF BDF; unknown BDF included), sorted by name."""
    bdfs = {p.bdf for p in amd_nic_links(snapshot, config)}
    return tuple(sorted((n for n in snapshot.nics if n.bdf is None or n.bdf in bdfs), key=lambda n: n.name))


def _state(raw: str | None) -> str | None:
    """`PORT_ACTIVE` / `4: PORT_ACTIVE` / `ACTIVE` -> `ACTIVE`."""
    if raw is None:
        return None
    text = raw.split(":", 1)[-1].strip().upper()
    return text.removeprefix("PORT_")


def _check_ports(out: Outcome, nic: Nic, config: CvfConfig) -> None:
    if not nic.ports:
        out.error(f"rdma-state:{nic.name}=unknown (no port reported: {nic.na_reasons.get('ports', 'no data')})")
        return
    for port in nic.ports:
        dev = nic.name if len(nic.ports) == 1 else f"{nic.name}/{port.port}"
        state = _state(port.state)
        if state != "ACTIVE":
            out.fail(f"rdma-state:{dev}={state or 'unknown'}")
        if port.phys_state is None:  # not reported is no evidence of a link, not a pass
            out.error(f"link-state:{dev}=unknown (physical state not reported)")
        elif not phys_up(port.phys_state):
            out.fail(f"link-state:{dev}={port.phys_state.split(':', 1)[-1].strip().upper()}")
        if port.gid_count is None:
            out.error(f"gid-table:{dev}=unknown (GID table not reported)")
        elif port.gid_count < config.phase3_min_gid_count:
            out.fail(f"gid-table:{dev}={port.gid_count} (PHASE3_MIN_GID_COUNT {config.phase3_min_gid_count})")
        if (port.link_layer or "Ethernet") == "Ethernet" and port.roce_v2 is not True:
            shown = "unknown" if port.roce_v2 is None else "absent"
            out.fail(f"roce-v2:{dev}={shown} (no RoCE v2 GID)")


def _check_firmware(out: Outcome, nic: Nic, config: CvfConfig) -> None:
    fw = nic.fw_ver
    if config.nic_firmware is not None:
        if fw is None:
            out.error(f"firmware:{nic.name}=unknown (UPGRADE_GATE_NIC_FIRMWARE {config.nic_firmware})")
        elif fw != config.nic_firmware:
            out.fail(f"firmware:{nic.name}={fw}, expected {config.nic_firmware} (UPGRADE_GATE_NIC_FIRMWARE)")
    image = config.roce_workload_image
    if image and config.phase3_fw_check_enabled and config.phase3_fw_strict:
        if fw is None:
            out.error(f"fw-image-mismatch:{nic.name}=unknown/image={image}")
        elif fw not in image:
            out.fail(f"fw-image-mismatch:{nic.name}={fw}/image={image}")


def _check_link(out: Outcome, link: PcieLink, nic_name: str, config: CvfConfig) -> None:
    shown = f"Gen {link.speed_gts:g} GT/s x{link.width}" if link.speed_gts and link.width else "unknown"
    if link.downgraded:
        out.fail(f"pcie-downgraded:{nic_name}={shown} (capable of {link.max_speed_gts:g} GT/s x{link.max_width})")
    want_speed, want_width = config.nic_pcie_speed_gts, config.nic_pcie_width
    if want_speed is not None and link.speed_gts != want_speed:
        out.fail(
            f"pcie-speed:{nic_name}={link.speed_gts} GT/s, expected {want_speed:g} GT/s (UPGRADE_GATE_NIC_PCIE_GEN)"
        )
    if want_width is not None and link.width != want_width:
        out.fail(f"pcie-width:{nic_name}=x{link.width}, expected x{want_width} (UPGRADE_GATE_NIC_PCIE_WIDTH)")


def _check_vfs(out: Outcome, nic: Nic, snapshot: Snapshot, expected: int) -> None:
    numvfs = nic.sriov_numvfs
    if numvfs is None and nic.bdf is not None:
        numvfs = next((f.numvfs for f in snapshot.sriov if f.bdf == nic.bdf), None)
    if numvfs is None:
        out.error(f"vf-count:{nic.name}=unknown, expected {expected} (UPGRADE_GATE_NIC_VF_COUNT)")
    elif numvfs != expected:
        out.fail(f"vf-count:{nic.name}={numvfs}, expected {expected} (UPGRADE_GATE_NIC_VF_COUNT)")


def _check_rdma_devices(out: Outcome, links: tuple[PcieLink, ...], nics: tuple[Nic, ...]) -> None:
    """Fail when an AINIC PCIe function has no RDMA device (by PF BDF; by count where a BDF is unknown)."""
    counted = f"rdma-devices:expected={len(links)},actual={len(nics)}"
    if any(n.bdf is None for n in nics):
        if len(nics) < len(links):
            out.fail(f"{counted} (an AINIC has no RDMA device)")
        return
    carried = {n.bdf for n in nics}
    bare = sorted(p.bdf for p in links if p.bdf not in carried)
    if bare:
        actual = len(links) - len(bare)
        out.fail(f"rdma-devices:expected={len(links)},actual={actual} (no RDMA device on AINIC {', '.join(bare)})")


class NicHealthPhase:
    """Phase 3."""

    number = 3
    name = cvf.PHASE_NAMES[3]
    label_key: str | None = cvf.NIC_HEALTH

    def run(self, ctx: PhaseContext) -> PhaseResult:
        """Check every AINIC of the snapshot; collect every reason."""
        out = Outcome()
        snap = ctx.snapshot
        config = ctx.config
        if snap is None:
            out.error("no snapshot of the node: NIC health is read from it")
            return out.result(self, config)
        for probe in snap.probes:
            if probe.name in EVIDENCE_PROBES and not probe.ok:
                out.error(f"preflight-failed:{probe.name}={probe.reason or 'failed'}")
        links = amd_nic_links(snap, config)
        if len(links) != config.phase3_expected_nic_count:
            out.fail(f"nic-count:expected={config.phase3_expected_nic_count},actual={len(links)}")
        link_of = {p.bdf: p for p in links}
        nics = rail_nics(snap, config)
        if links and not nics:
            out.fail(f"rdma-devices:expected={len(links)},actual=0 (no RDMA device on the AINICs)")
        elif links:
            _check_rdma_devices(out, links, nics)
        failed: list[str] = []
        for nic in nics:
            before = len(out.reasons)
            _check_ports(out, nic, config)
            _check_firmware(out, nic, config)
            link = link_of.get(nic.bdf) if nic.bdf is not None else None
            if link is not None:
                _check_link(out, link, nic.name, config)
            if config.nic_vf_count is not None:
                _check_vfs(out, nic, snap, config.nic_vf_count)
            if len(out.reasons) > before:
                failed.append(nic.name)
        observed = ",".join(f"{n.name}={n.fw_ver or 'unknown'}" for n in nics)
        extra = {"observed-fw": observed} if observed else {}
        if failed:
            extra["failed-nics"] = ",".join(failed)
        return out.result(self, config, extra=extra)

    def budget_s(self, config: CvfConfig, *, samples: int, nodes: int) -> float:
        """PHASE3_JOB_WAIT_TIME."""
        return config.phase3_job_wait_s

    def plan(self, config: CvfConfig, *, samples: int) -> tuple[str, ...]:
        """Dry-run description."""
        lines = [
            f"NIC count by PCI id {','.join(config.phase3_amd_nic_pci_ids)} == "
            f"PHASE3_EXPECTED_NIC_COUNT {config.phase3_expected_nic_count} (from the snapshot's lspci)",
            f"every AINIC port ACTIVE / LINK_UP, GIDs >= PHASE3_MIN_GID_COUNT {config.phase3_min_gid_count}, RoCE v2",
            "PCIe link of every AINIC not downgraded",
        ]
        if config.nic_firmware:
            lines.append(f"firmware == {config.nic_firmware}")
        if config.roce_workload_image and config.phase3_fw_check_enabled:
            lines.append(f"firmware is a substring of ROCE_WORKLOAD_IMAGE {config.roce_workload_image}")
        if config.nic_pcie_gen or config.nic_pcie_width:
            lines.append(f"PCIe Gen {config.nic_pcie_gen or 'any'} x{config.nic_pcie_width or 'any'}")
        if config.nic_vf_count is not None:
            lines.append(f"sriov_numvfs == {config.nic_vf_count} on every AINIC PF")
        return tuple(lines)
