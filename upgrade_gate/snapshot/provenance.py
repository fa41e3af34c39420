"""Provenance: which probe (or CVF phase) produced each fact of a snapshot, in the builder's order of trust.

The snapshot builder (`snapshot.build`, `snapshot.gpus`, `snapshot.fabric`) takes every fact from a
fixed list of sources, the first that answers winning: a GPU's unique id from rocminfo, else amd-smi's
ASIC serial, else rocm-smi's; its firmware from `amd-smi firmware`, else rocm-smi; a NIC's ports from
`ibv_devinfo`, its netdev from `rdma link`. This table states those lists once, keyed by the snapshot
path grammar that the diff, the plan globs and every finding share (`gpus[serial=X].firmware.PM`,
`nics[name=ionic_0].ports[port=1].state`, `measurements[key=mesh/all_reduce/busbw/1024]`), so that the
judge's cause builder can say which evidence a finding depends on without reading its message.

`value_source(path, probes)` answers the question the cause builder asks: on this side, was the value
at `path` taken from its first-choice source, or did that source fail (the value is then absent, or a
stand-in's, possibly in another format)? A source that was not captured at all on a side (a fallback
that only runs when the first choice failed, `rocmsmi`) is skipped, as the builder skips it.

A phase is a source too (`phase 2` for the mesh measurements and the thermal readings under its load);
the phases' own order (a phase runs only when the one before passed) is the validate stage's, read
from the phase results.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from upgrade_gate.model import ProbeStatus
from upgrade_gate.vendors import VENDORS

_GPU_STATIC = ("amdsmi_static", "rocmsmi")
_GPU_FIELDS: Mapping[str, tuple[str, ...]] = {
    "index": ("rocminfo", "amdsmi_static", "rocmsmi"),
    "bdf": ("rocminfo", "amdsmi_static", "amdsmi_list", "lspci"),
    "unique_id": ("rocminfo", "amdsmi_static", "rocmsmi"),
    "gfx_target": ("rocminfo", "amdsmi_static"),
    "compute_units": ("rocminfo", "amdsmi_static"),
    "product_name": _GPU_STATIC,
    "serial": _GPU_STATIC,
    "device_id": _GPU_STATIC,
    "numa_node": _GPU_STATIC,
    "compute_partition": ("amdsmi_static",),
    "memory_partition": ("amdsmi_static",),
    "vram_total_mib": _GPU_STATIC,
    "vbios": _GPU_STATIC,
    "firmware": ("amdsmi_firmware", "rocmsmi"),
}
_NIC_FIELDS: Mapping[str, tuple[str, ...]] = {
    "netdev": ("rdma_link",),
    "bdf": ("sysfs_ib",),
    "fw_ver": ("ibv_devinfo", "sysfs_ib"),
    "sriov_numvfs": ("sysfs_sriov",),
    "sriov_totalvfs": ("sysfs_sriov",),
}
_PORT_FIELDS: Mapping[str, tuple[str, ...]] = {"netdev": ("rdma_link",), "state": ("ibv_devinfo", "rdma_link")}
_TOP: Mapping[str, tuple[str, ...]] = {
    "gpus": ("rocminfo", "amdsmi_static", "rocmsmi"),
    "gpu_links": ("amdsmi_topology", "rocmsmi_topo"),
    "pcie": ("lspci",),
    "sriov": ("sysfs_sriov",),
    "events": ("dmesg",),
    "event_patterns": ("dmesg",),
    "libraries": ("rocm_libs",),
    "software.kernel": ("kernel",),
    "software.driver_version": ("driver_version", "amdsmi_static", "amdsmi_version", "rocmsmi"),
    "software.rocm_version": ("rocm_version", "amdsmi_version"),
    "software.rocm_build": ("rocm_version", "amdsmi_version"),
    "software.amdsmi_version": ("amdsmi_version",),
    "software.rccl_library": ("rccl_library",),
    "host.bios_vendor": ("bios",),
    "host.bios_version": ("bios",),
    "host.bios_date": ("bios",),
    "host.kernel_cmdline": ("kernel_cmdline",),
    "host.os_id": ("os_release",),
    "host.os_version_id": ("os_release",),
    "host.os_pretty_name": ("os_release",),
}
_PHASE_OF_SCOPE = {"mesh": 2, "thermal": 2, "rail": 4, "cluster": 5}
_ITEM = re.compile(r"^(?P<top>[a-z_]+)(?:\[[^\]]*\])?(?:\.(?P<rest>.*))?$")
_MEASUREMENT = re.compile(r"^(?:phases\[phase=\d+\]\.)?measurements\[key=(?P<scope>[^/\]]+)")
_PHASE = re.compile(r"^(?:baseline\.)?phases\[phase=(?P<n>\d+)\]")


def phase_source(number: int) -> str:
    """The source name of CVF phase `number` (`phase 2`)."""
    return f"phase {number}"


def sources_of(path: str) -> tuple[str, ...]:
    """The probes (or `phase N`) the builder takes the value at `path` from, first choice first: the shared
    table's, then every other vendor's (`Vendor.field_sources`). Probe names differ between vendors and a
    side that did not capture a source skips it, so one list serves every vendor's nodes."""
    shared = _shared_sources(path)
    extra = _vendor_sources(path)
    return shared + tuple(s for s in extra if s not in shared) if extra else shared


def _vendor_sources(path: str) -> tuple[str, ...]:
    match = _ITEM.match(path)
    if match is None:
        return ()
    top, rest = match["top"], match["rest"] or ""
    field = rest.split(".")[0].split("[")[0]
    keys = (f"{top}.{field}", top) if field else (top,)
    out: list[str] = []
    for vendor in VENDORS[1:]:  # the first (AMD) is the shared table
        found = next((vendor.field_sources[k] for k in keys if k in vendor.field_sources), ())
        out += [s for s in found if s not in out]
    return tuple(out)


def _shared_sources(path: str) -> tuple[str, ...]:
    phase = _PHASE.match(path)
    if phase is not None:
        return (phase_source(int(phase["n"])),)
    metric = _MEASUREMENT.match(path)
    if metric is not None:
        number = _PHASE_OF_SCOPE.get(metric["scope"])
        return (phase_source(number),) if number is not None else ()
    match = _ITEM.match(path)
    if match is None:
        return ()
    top, rest = match["top"], match["rest"] or ""
    field = rest.split(".")[0].split("[")[0]
    if top == "gpus" and field:
        return _GPU_FIELDS.get(field, _TOP["gpus"])
    if top == "nics":
        if field == "ports":
            leaf = rest.rsplit(".", 1)[-1] if "." in rest else ""
            return _PORT_FIELDS.get(leaf, ("ibv_devinfo",))
        return _NIC_FIELDS.get(field, ("ibv_devinfo",))
    if path == "nics":  # the NIC count by PCI id (nic.missing)
        return ("lspci",)
    for key in (f"{top}.{field}", top):
        if key in _TOP:
            return _TOP[key]
    return ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """The first-choice source of a value failed on one side: the value is absent or a stand-in's."""

    probe: ProbeStatus
    stand_in: str | None  # the source that answered instead, None when none did


def value_source(path: str, probes: Mapping[str, ProbeStatus]) -> Failure | None:
    """The failed first-choice source of the value at `path` on the side that ran `probes`, else None.

    Sources the side did not capture at all are skipped (a fallback runs only when needed); a phase is
    not a probe and is left to the phase results (None here).
    """
    tried = [probes[name] for name in sources_of(path) if name in probes]
    if not tried or tried[0].ok:
        return None
    stand_in = next((p.name for p in tried[1:] if p.ok and not p.skipped), None)
    return Failure(probe=tried[0], stand_in=stand_in)
