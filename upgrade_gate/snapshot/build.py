"""Build a `Snapshot` from a capture bundle: one code path for a live host and a recorded bundle.

`capture(LocalRunner(), ...)` on a node and `load_bundle(path)` offline both give a `Bundle`; this
module turns it into the typed snapshot. Every probe ends up in `snapshot.probes` with a reason when
it failed, timed out, was missing, or printed output its parser rejected: nothing vanishes, and the
judge turns a failed required probe into a blocking "missing evidence" finding.

How the pieces are joined (the identity rules of docs/architecture.md):
- GPU `index` is the order of GPU agents in `rocminfo`, the order HIP, RCCL and frameworks see. When
  rocminfo is unusable, amd-smi's order stands in and `na_reasons["index"]` says so.
- rocminfo prints no PCI domain, only bus:device.function; the domain comes from the full BDFs that
  amd-smi, rocm-smi or lspci printed for the same bus:device.function. A BDF with no such match is
  kept as unknown (None, with a reason), never completed with a guessed domain.
- Serial, product, partitions, VRAM, VBIOS and firmware are joined by BDF from amd-smi (or the
  rocm-smi fallback, recorded as such); firmware from `amd-smi firmware` is keyed by amd-smi's index,
  mapped to a BDF through `amd-smi static`/`list`.
- The fabric (XGMI links, PCIe links, SR-IOV functions, NICs) is assembled in `snapshot.fabric`.
- Facts several probes report (driver and ROCm version, NIC port state) are cross-checked, and error
  texts are rejected, in `snapshot.crosscheck`; what cannot be trusted lands in `evidence_issues`.
- rocm-smi's firmware is stored in amd-smi's vocabulary (`parse.firmware_names`); preambles a parser
  skipped are kept as the probe's `notes`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from upgrade_gate.abi.listing import parse_listing
from upgrade_gate.collect.bundle import Bundle, ProbeRecord, load_bundle
from upgrade_gate.collect.causes import known_cause
from upgrade_gate.collect.probes import absent_warns_names, fallback_names, probe_names
from upgrade_gate.errors import ParseError
from upgrade_gate.model import (
    Gpu,
    GpuLink,
    NodeInfo,
    ProbeStatus,
    Snapshot,
    Software,
    replace,
)
from upgrade_gate.parse import amdsmi, dmesg, lspci, nvidia_dmesg, preamble, rdma, rocminfo, rocmsmi, sysfs
from upgrade_gate.parse.amdsmi_types import AmdSmiStatic, AmdSmiVersion
from upgrade_gate.parse.firmware_names import rocmsmi_to_amdsmi
from upgrade_gate.parse.rocmsmi_types import RocmSmiInfo
from upgrade_gate.parse.sanity import error_text, version_problem
from upgrade_gate.snapshot import crosscheck, fabric
from upgrade_gate.snapshot.gpus import GpuSources, assemble_gpus
from upgrade_gate.snapshot.host import host_facts
from upgrade_gate.snapshot.nvidia import nvidia_facts
from upgrade_gate.vendors import AMD, NVIDIA, Vendor, vendor_of

T = TypeVar("T")
_RELEASE = re.compile(r"\d+(\.\d+)+")

_AMDSMI_PROBES = ("amdsmi_static", "amdsmi_list", "amdsmi_firmware", "amdsmi_version", "amdsmi_topology")


@dataclass(slots=True)
class _Evidence:
    """Parses each probe once, remembering how every probe ended."""

    bundle: Bundle
    vendor: Vendor = AMD
    statuses: dict[str, ProbeStatus] = field(default_factory=dict)
    causes: dict[str, str] = field(default_factory=dict)  # probe -> what its preamble says about it

    def parse(self, name: str, parser: Callable[[str], T]) -> T | None:
        """The parsed output of probe `name`, or None with the reason recorded in its status."""
        record = self.bundle.record(name)
        if record is None:
            return None
        if record.skipped:
            self.statuses[name] = _status(record, ok=True, reason=record.note)
            return None
        if not record.ok:
            self.statuses[name] = _status(record, ok=False, reason=record.reason)
            return None
        found, _ = preamble.split_preamble(record.result.stdout)
        notes = tuple(p.note for p in found)
        if preamble.causes(found):
            self.causes[name] = "; ".join(preamble.causes(found))
        try:
            value = parser(record.result.stdout)
        except ParseError as exc:
            # A tool that exits 0 yet states why it has nothing (rocm-smi without amdgpu) is named by that.
            cause = known_cause(record.result.stdout, record.result.stderr)
            why = f"{cause} (unparseable output: {exc})" if cause else f"unparseable output: {exc}"
            self.statuses[name] = _status(record, ok=False, reason=why, notes=notes)
            return None
        self.statuses[name] = _status(record, ok=True, reason=record.note, notes=notes)
        return value

    def reason(self, *names: str) -> str:
        """Why none of `names` gave a value (for `na_reasons`)."""
        parts = []
        for name in names:
            status = self.statuses.get(name)
            if status is None:
                parts.append(f"{name}: not captured")
            elif status.ok:
                parts.append(f"{name}: {status.reason or 'did not report it'}")
            else:
                parts.append(f"{name}: {status.reason}")
        return "; ".join(parts)

    def probe_statuses(self) -> tuple[ProbeStatus, ...]:
        """Every probe of the bundle in capture order, plus catalogue probes the bundle lacks.

        A fallback absent from the bundle is normal (it runs only when a probe it stands in for failed); a probe
        newer than some recorded bundles (`absent_warns`) absent warns; any other absent probe blocks. All three
        are read from the vendor's catalogue.
        """
        out = [self.statuses.get(r.name) or _status(r, ok=r.ok, reason=r.reason) for r in self.bundle.records]
        recorded = {r.name for r in self.bundle.records}
        fallbacks, warns = fallback_names(self.vendor), absent_warns_names(self.vendor)
        for name in probe_names(self.vendor):
            if name not in recorded and name not in fallbacks:
                out.append(
                    ProbeStatus(
                        name=name,
                        ok=False,
                        reason=f"{name}: absent from the capture bundle",
                        required=name not in warns,
                    )
                )
        return tuple(out)


def _status(record: ProbeRecord, *, ok: bool, reason: str | None, notes: tuple[str, ...] = ()) -> ProbeStatus:
    result = record.result
    return ProbeStatus(
        name=record.name,
        ok=ok,
        reason=reason,
        argv=result.argv,
        exit_code=result.returncode,
        duration_s=round(result.duration_s, 6),
        timed_out=result.timed_out,
        missing=result.missing,
        required=record.required,
        fallback_for=record.fallback_for,
        skipped=record.skipped,
        notes=notes,
    )


def build_snapshot(
    bundle: Bundle, *, node_class: str | None = None, patterns: dmesg.PatternTable | None = None
) -> Snapshot:
    """The schema-valid snapshot of the node a bundle captured.

    `patterns` classifies the kernel log (default: the shipped table); a site's fatal-error map passes
    its own (`Policy.kernel_events.table`), and the snapshot records which table it was.
    """
    vendor = vendor_of(r.name for r in bundle.records)
    ev = _Evidence(bundle, vendor=vendor)
    kernel = ev.parse("kernel", sysfs.parse_uname_r)
    pci = ev.parse("lspci", lspci.parse_lspci)
    issues = crosscheck.Issues()
    if vendor is NVIDIA:
        # The site's fatal-error map extends the AMD table; an NVIDIA log is classified with NVIDIA's own, and
        # a policy with site patterns then blocks on the table digest (rules.kernel): fail closed.
        table = nvidia_dmesg.load_nvidia_patterns()
        facts = nvidia_facts(ev.parse, ev.reason, issues, causes=ev.causes, kernel=kernel)
        gpus, gpu_links, software = facts.gpus, facts.links, facts.software
        families = {f for g in gpus if (f := nvidia_dmesg.family_of(g.gfx_target))}
        family = families.pop() if len(families) == 1 else None
        log = ev.parse("dmesg", lambda text: nvidia_dmesg.parse_nvidia_dmesg(text, table, family=family))
        libraries = None
    else:
        table = patterns if patterns is not None else dmesg.load_default_patterns()
        gpus, gpu_links, software = _amd_step(ev, issues, kernel, pci)
        log = ev.parse("dmesg", lambda text: dmesg.parse_dmesg(text, table))
        libraries = ev.parse("rocm_libs", lambda text: parse_listing(text, strip_prefix=bundle.host_root))
        libs_record = bundle.record("rocm_libs")
        if libraries is None and libs_record is not None and libs_record.skipped:
            libraries = ()  # no ROCm library folder on the node: recorded as none, the probe says why
    ibv = ev.parse("ibv_devinfo", rdma.parse_ibv_devinfo)
    links = ev.parse("rdma_link", rdma.parse_rdma_link)
    sriov_values = ev.parse("sysfs_sriov", sysfs.parse_sysfs_grep)
    ib_values = ev.parse("sysfs_ib", sysfs.parse_sysfs_grep)
    ibstat = ev.parse("ibstat", rdma.parse_ibstat)  # not in every catalogue: a third port-state source
    host, rccl_library, rccl_missing = host_facts(ev.parse, ev.reason, present={r.name for r in bundle.records})
    if vendor is AMD:
        reasons = {**software.na_reasons, **({"rccl_library": rccl_missing} if rccl_missing else {})}
        software = replace(software, rccl_library=rccl_library, na_reasons=reasons)
    nics = crosscheck.check_nics(
        fabric.nics(ibv, links, ib_values, sriov_values),
        crosscheck.port_views(ibv, links, ibstat),
        issues,
        incomplete=("ibstat",) if ibstat is not None and not ibstat.complete else (),
    )
    return Snapshot(
        node=NodeInfo(name=bundle.node, hostname=bundle.hostname, node_class=node_class),
        taken_at=bundle.taken_at,
        tool_version=bundle.tool_version,
        software=software,
        host=host,
        gpus=gpus,
        gpu_links=gpu_links,
        pcie=fabric.pcie(pci),
        nics=nics,
        sriov=fabric.sriov(sriov_values),
        events=log.events if log else (),
        event_patterns=table.digest if log else None,
        probes=ev.probe_statuses(),
        evidence_issues=tuple(issues.items),
        libraries=libraries,
    )


def _amd_step(
    ev: _Evidence, issues: crosscheck.Issues, kernel: sysfs.KernelRelease | None, pci: lspci.LspciResult | None
) -> tuple[tuple[Gpu, ...], tuple[GpuLink, ...], Software]:
    """The AMD node's GPUs (rocminfo, amd-smi, rocm-smi, lspci), GPU links and software versions."""
    info = ev.parse("rocminfo", rocminfo.parse_rocminfo)
    version = ev.parse("amdsmi_version", amdsmi.parse_amdsmi_version)
    listing = ev.parse("amdsmi_list", amdsmi.parse_amdsmi_list)
    static = ev.parse("amdsmi_static", amdsmi.parse_amdsmi_static)
    firmware = ev.parse("amdsmi_firmware", amdsmi.parse_amdsmi_firmware)
    topology = ev.parse("amdsmi_topology", amdsmi.parse_amdsmi_topology)
    rsmi = ev.parse("rocmsmi", rocmsmi.parse_rocmsmi)
    rsmi_topo = ev.parse("rocmsmi_topo", rocmsmi.parse_rocmsmi)
    driver_values = ev.parse("driver_version", sysfs.parse_sysfs_grep)
    rocm_values = ev.parse("rocm_version", sysfs.parse_sysfs_grep)
    gpus = assemble_gpus(
        GpuSources(
            rocminfo=info,
            static=static,
            listing=listing,
            firmware=firmware,
            rocmsmi=_amdsmi_vocabulary(rsmi),
            pci=pci,
            reason=ev.reason,
        )
    )
    crosscheck.check_gpu_sources(info, listing, static, rsmi, issues)
    amdsmi_cause = next((ev.causes[n] for n in _AMDSMI_PROBES if n in ev.causes), None)
    gpus = crosscheck.sanitize_gpus(gpus, issues, cause=amdsmi_cause)
    software = _software(ev, issues, kernel, driver_values, rocm_values, version, static, rsmi)
    return gpus, fabric.gpu_links(topology, rsmi_topo, rsmi), software


def _amdsmi_vocabulary(rsmi: RocmSmiInfo | None) -> RocmSmiInfo | None:
    """rocm-smi's firmware in amd-smi's block names and formats: the fallback itself must not diff."""
    if rsmi is None:
        return None
    return replace(rsmi, gpus=tuple(replace(g, firmware=rocmsmi_to_amdsmi(g.firmware)) for g in rsmi.gpus))


def snapshot_from_bundle(
    path: Path, *, node_class: str | None = None, patterns: dmesg.PatternTable | None = None
) -> Snapshot:
    """Load a capture bundle (directory or .tar.gz) and build its snapshot."""
    return build_snapshot(load_bundle(path), node_class=node_class, patterns=patterns)


# --------------------------------------------------------------------------- software


def _software(
    ev: _Evidence,
    issues: crosscheck.Issues,
    kernel: sysfs.KernelRelease | None,
    driver_values: sysfs.SysfsValues | None,
    rocm_values: sysfs.SysfsValues | None,
    version: AmdSmiVersion | None,
    static: AmdSmiStatic | None,
    rsmi: RocmSmiInfo | None,
) -> Software:
    # Most trustworthy first: the kernel's own module version, then what amd-smi read per GPU, then
    # amd-smi's summary line, then rocm-smi. Every GPU of `amd-smi static` is its own answer, so GPUs
    # that disagree about the driver they run are a conflict too.
    static_drivers = list(dict.fromkeys(g.driver_version for g in static.gpus if g.driver_version)) if static else []
    driver_answers: list[tuple[str, str | None]] = [("driver_version", _optional(sysfs.amdgpu_version, driver_values))]
    driver_answers += [("amdsmi_static", v) for v in static_drivers]
    driver_answers += [("amdsmi_version", version.printed("amdgpu_version") if version else None)]
    driver_answers += [("rocmsmi", rsmi.driver_version if rsmi else None)]
    driver, driver_why = crosscheck.pick(
        "software.driver_version", driver_answers, issues, check=version_problem, causes=ev.causes
    )
    rocm_file = _optional(sysfs.rocm_version, rocm_values)
    rocm_build, rocm_why = crosscheck.pick(
        "software.rocm_version",
        [("rocm_version", rocm_file), ("amdsmi_version", version.printed("rocm_version") if version else None)],
        issues,
        check=version_problem,
        causes=ev.causes,
        key=lambda v: _release(v) or v,
    )
    tool = version.tool_version if version else None
    if error_text(tool) is not None:
        tool = None
    values = {
        "kernel": kernel.release if kernel else None,
        "driver_version": driver,
        "rocm_version": _release(rocm_build),
        "amdsmi_version": tool,
    }
    sources = {
        "kernel": ("kernel",),
        "driver_version": ("driver_version", "amdsmi_version", "amdsmi_static", "rocmsmi"),
        "rocm_version": ("rocm_version", "amdsmi_version"),
        "amdsmi_version": ("amdsmi_version",),
    }
    rejected = {"driver_version": driver_why, "rocm_version": rocm_why}
    reasons = {key: rejected.get(key) or ev.reason(*sources[key]) for key, value in values.items() if value is None}
    return Software(
        kernel=values["kernel"],
        driver_version=values["driver_version"],
        rocm_version=values["rocm_version"],
        rocm_build=rocm_build,
        amdsmi_version=values["amdsmi_version"],
        na_reasons=reasons,
    )


def _release(raw: str | None) -> str | None:
    """'6.2.0-66' -> '6.2.0': the dotted release that change plans name (the build stays in rocm_build)."""
    if raw is None:
        return None
    match = _RELEASE.match(raw.strip())
    return match.group(0) if match else None


def _optional(getter: Callable[[sysfs.SysfsValues], str], values: sysfs.SysfsValues | None) -> str | None:
    if values is None or not values.values:
        return None
    try:
        return getter(values)
    except ParseError:
        return None


__all__ = ["build_snapshot", "snapshot_from_bundle"]
