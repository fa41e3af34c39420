"""The coverage table: for every field of the snapshot, who judges it, or why nobody does.

One table, read by both `diff` and `gate`, so the two can never disagree again: `diff` counts as
UNEXPECTED exactly the changes at *compared* fields that the plan does not explain, and `gate` blocks
on every one of those (the named rule, or the `field.unplanned` backstop when that rule said nothing
at the path). A test walks `schemas/snapshot.schema.json` and fails on any field without an entry, so
a new field is unjudged only by a decision someone wrote down here.

Kinds of entry (paths in schema form: `gpus[].compute_partition`, `nics[].ports[].mtu`; `x[]` is an
item of the array `x`, i.e. one appearing or vanishing):
- `compared(rule)`: a change against the baseline outside the plan blocks. `rule` is the rule that
  speaks for the field; `field.unplanned` is the generic "value changed outside the plan" rule, so
  judging a new field that way is one line: `"software.bios_version": compared(UNPLANNED),`.
- `checked(rule, reason)`: judged on the candidate's own value (a threshold, a state, statistics) by
  `rule`; a difference from the baseline is that rule's business, not a finding by itself (a port
  coming back ACTIVE, a link training faster, a new bandwidth sample are not regressions). `diff`
  lists such changes without counting them.
- `informational(reason)`: nobody judges it, for the reason given.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

UNPLANNED = "field.unplanned"


class CoverageKind(StrEnum):
    """How a snapshot field is judged."""

    COMPARED = "compared"
    CHECKED = "checked"
    INFORMATIONAL = "informational"


@dataclass(frozen=True, slots=True)
class Coverage:
    """One entry of the table."""

    kind: CoverageKind
    rule: str | None = None
    reason: str | None = None


def compared(rule: str = UNPLANNED) -> Coverage:
    """A change outside the plan blocks; `rule` speaks for the field."""
    return Coverage(CoverageKind.COMPARED, rule=rule)


def checked(rule: str, reason: str) -> Coverage:
    """`rule` judges the candidate's value; a bare difference is not a finding (why: `reason`)."""
    return Coverage(CoverageKind.CHECKED, rule=rule, reason=reason)


def informational(reason: str) -> Coverage:
    """Not judged, because `reason`."""
    return Coverage(CoverageKind.INFORMATIONAL, reason=reason)


_NA = informational("why a value is absent; the absent value itself is judged where it matters")
_PHASE = "phase results are judged on the candidate alone (phase.failed, evidence.missing)"
_PROBE = "probe health is judged on the candidate alone, against the baseline's probe list"
_BW = (
    "bandwidth is judged statistically (bandwidth.regression/threshold), like with like; "
    "phase 2's thermal/* readings by thermal.outlier (peers, class, baseline)"
)
_WORKLOAD = (
    "phases 6-7's device maps: phase 7's rank -> UUID against phase 6's (workload.index_dependent); a GPU the "
    "snapshot does not list fails the phase"
)
_LIB = "judged per soname against the plan's ROCm change and soname bumps (the diff leaves hashes out)"
_EVENT = "kernel events are judged on the candidate's dmesg (dmesg.fatal)"
_ISSUE = "sources that disagree, or answered only with error texts: judged on the candidate alone"
_HEALTH = "the candidate's own state blocks (pending or failed repair, reset required), whatever the baseline's"
_GROWN = "a count above the baseline GPU's blocks; non-zero and not above it warns (an old, already repaired error)"
_CORRECTED = "corrected by the hardware; the uncorrectable counts and the repair state are judged"

COVERAGE: Mapping[str, Coverage] = {
    # ------------------------------------------------------------------ document and node
    "schema_version": informational("document format; another version is refused when loaded"),
    "taken_at": checked("evidence.taken_at", "differs on every capture; judged against now and the baseline"),
    "tool_version": informational("upgrade-gate's own version, not the node's"),
    "node.name": informational("the key the baseline is stored under: equal by construction"),
    "node.hostname": informational("the OS host name; node.name identifies the node"),
    "node.node_class": checked(
        "evidence.missing", "which class's rules apply: another than the baseline's blocks; none takes the baseline's"
    ),
    "node.labels": informational("Kubernetes labels; CVF writes its verdicts there, judged as phases"),
    # ------------------------------------------------------------------ software
    "software.kernel": compared("software.kernel"),
    "software.driver_version": compared("software.driver"),
    "software.rocm_version": compared("software.rocm"),
    "software.rocm_build": compared("software.rocm"),
    "software.amdsmi_version": compared("software.rocm"),
    "software.na_reasons": _NA,
    "software.rccl_library": compared("software.rccl"),
    # ------------------------------------------------------------------ host facts the incident names
    "host.bios_vendor": compared("host.bios"),
    "host.bios_version": compared("host.bios"),
    "host.bios_date": compared("host.bios"),
    "host.kernel_cmdline": compared("host.kernel_cmdline"),
    "host.os_id": compared("host.os_release"),
    "host.os_version_id": compared("host.os_release"),
    "host.os_pretty_name": compared("host.os_release"),
    "host.captured": checked("host.bios", "a baseline from before host facts were captured warns once per rule"),
    "host.na_reasons": _NA,
    # ------------------------------------------------------------------ ROCm libraries
    "libraries[]": checked("library.unplanned", _LIB),
    "libraries[].soname": checked("library.unplanned", _LIB),
    "libraries[].path": checked("library.unplanned", _LIB),
    "libraries[].symbols_sha256": checked("library.unplanned", _LIB),
    "libraries[].symbol_count": checked("library.unplanned", _LIB),
    "libraries[].file_sha256": checked("library.unplanned", _LIB),
    # ------------------------------------------------------------------ GPUs
    "gpus[]": compared("device.missing"),
    "gpus[].index": compared("device.order_changed"),
    "gpus[].bdf": compared("device.order_changed"),
    "gpus[].serial": compared("device.identity_changed"),
    "gpus[].unique_id": compared("device.identity_changed"),
    "gpus[].product_name": compared(),
    "gpus[].gfx_target": compared(),
    "gpus[].device_id": compared(),
    "gpus[].numa_node": compared(),
    "gpus[].compute_partition": compared(),
    "gpus[].memory_partition": compared(),
    "gpus[].vram_total_mib": compared(),
    "gpus[].compute_units": compared(),
    "gpus[].firmware": compared("firmware.unplanned"),
    "gpus[].vbios": compared("vbios.unplanned"),
    "gpus[].na_reasons": _NA,
    "gpus[].health": checked(
        "gpu.health",
        "appearing (a baseline from before the field) is no finding; vanishing where the node's probe reports it "
        "is missing evidence",
    ),
    "gpus[].health.source": informational("which probe printed the counters"),
    "gpus[].health.ecc_mode": checked("gpu.health", "ECC switched off (or on) since the baseline blocks"),
    "gpus[].health.ecc_mode_pending": checked("gpu.health", "a mode change waiting for the next reset blocks"),
    "gpus[].health.compute_mode": checked("gpu.health", "Prohibited, or another mode than the baseline's, blocks"),
    "gpus[].health.ecc_volatile_uncorrectable": checked("gpu.health", _GROWN),
    "gpus[].health.ecc_aggregate_uncorrectable": checked("gpu.health", _GROWN),
    "gpus[].health.remapped_rows_correctable": informational(_CORRECTED),
    "gpus[].health.remapped_rows_uncorrectable": checked("gpu.health", _GROWN),
    "gpus[].health.remap_pending": checked("gpu.health", _HEALTH),
    "gpus[].health.remap_failure": checked("gpu.health", _HEALTH),
    "gpus[].health.retired_pages_single_bit": informational(_CORRECTED),
    "gpus[].health.retired_pages_double_bit": checked("gpu.health", _GROWN),
    "gpus[].health.retirement_pending": checked("gpu.health", _HEALTH),
    "gpus[].health.reset_required": checked("gpu.health", _HEALTH),
    "gpus[].health.na_reasons": _NA,
    # ------------------------------------------------------------------ XGMI / PCIe
    "gpu_links[]": compared("xgmi.link_changed"),
    "gpu_links[].a": compared("xgmi.link_changed"),
    "gpu_links[].b": compared("xgmi.link_changed"),
    "gpu_links[].link_type": compared("xgmi.link_changed"),
    "gpu_links[].hops": compared("xgmi.link_changed"),
    "gpu_links[].weight": compared("xgmi.link_changed"),
    "gpu_links[].access": compared("xgmi.link_changed"),
    "pcie[]": compared("pcie.downgrade"),
    "pcie[].bdf": compared("pcie.downgrade"),
    "pcie[].vendor_device": compared(),
    "pcie[].speed_gts": checked("pcie.downgrade", "below the maximum or the baseline blocks; faster is no regression"),
    "pcie[].width": checked("pcie.downgrade", "below the maximum or the baseline blocks; wider is no regression"),
    "pcie[].max_speed_gts": compared(),
    "pcie[].max_width": compared(),
    "pcie[].downgraded": checked("pcie.downgrade", "lspci's own verdict on the current link"),
    # ------------------------------------------------------------------ NICs
    "nics[]": compared("nic.missing"),
    "nics[].name": compared("nic.missing"),
    "nics[].bdf": compared(),
    "nics[].netdev": compared(),
    "nics[].fw_ver": compared("nic.firmware"),
    "nics[].node_guid": compared(),
    "nics[].vendor_part_id": compared(),
    "nics[].ports[]": compared(),
    "nics[].ports[].port": compared(),
    "nics[].ports[].state": checked("nic.port_state", "every port must be ACTIVE now, whatever it was"),
    "nics[].ports[].phys_state": checked("nic.port_state", "an ACTIVE port must be physically LINK_UP now"),
    "nics[].ports[].link_layer": compared(),
    "nics[].ports[].rate_gbps": checked("nic.port_state", "slower than the baseline blocks; faster is none"),
    "nics[].ports[].mtu": compared(),
    "nics[].ports[].gid_count": checked("nic.gid_count", "below PHASE3_MIN_GID_COUNT or the baseline blocks"),
    "nics[].ports[].roce_v2": checked("nic.roce_v2", "an Ethernet port must carry a RoCE v2 GID now"),
    "nics[].ports[].netdev": compared(),
    "nics[].sriov_numvfs": checked("sriov.vf_count", "judged per PF (sysfs first, this count as fallback)"),
    "nics[].sriov_totalvfs": compared(),
    "nics[].na_reasons": _NA,
    "sriov[]": compared("sriov.vf_count"),
    "sriov[].bdf": compared("sriov.vf_count"),
    "sriov[].numvfs": compared("sriov.vf_count"),
    "sriov[].totalvfs": compared(),
    # ------------------------------------------------------------------ events, measurements, phases, probes
    "events[]": checked("dmesg.fatal", _EVENT),
    "event_patterns": informational("which pattern table classified the events; the events themselves are judged"),
    "evidence_issues[]": checked("evidence.missing", _ISSUE),
    "evidence_issues[].kind": checked("evidence.missing", _ISSUE),
    "evidence_issues[].subject": checked("evidence.missing", _ISSUE),
    "evidence_issues[].message": checked("evidence.missing", _ISSUE),
    "evidence_issues[].values": checked("evidence.missing", _ISSUE),
    "probes[].notes": informational("what a probe's preamble said (MPI/UCX warnings skipped); causes are judged"),
    "events[].kind": checked("dmesg.fatal", _EVENT),
    "events[].severity": checked("dmesg.fatal", _EVENT),
    "events[].bdf": checked("dmesg.fatal", _EVENT),
    "events[].line_no": checked("dmesg.fatal", _EVENT),
    "events[].text": checked("dmesg.fatal", _EVENT),
    "measurements[]": checked("bandwidth.not_comparable", _BW),
    "measurements[].key": checked("bandwidth.not_comparable", _BW),
    "measurements[].unit": checked("bandwidth.not_comparable", _BW),
    "measurements[].samples": checked("bandwidth.regression", _BW),
    "measurements[].settings": checked("bandwidth.not_comparable", _BW),
    "measurements[].source": informational("which probe or phase produced the measurement"),
    "measurements[].higher_is_better": checked("bandwidth.regression", _BW),
    "phases[]": checked("evidence.missing", _PHASE),
    "phases[].phase": checked("evidence.missing", _PHASE),
    "phases[].name": checked("evidence.missing", _PHASE),
    "phases[].status": checked("phase.failed", _PHASE),
    "phases[].reason": checked("phase.failed", _PHASE),
    "phases[].reasons": checked("phase.failed", _PHASE),
    "phases[].measurements[]": checked("bandwidth.not_comparable", _BW),
    "phases[].measurements[].key": checked("bandwidth.not_comparable", _BW),
    "phases[].measurements[].unit": checked("bandwidth.not_comparable", _BW),
    "phases[].measurements[].samples": checked("bandwidth.regression", _BW),
    "phases[].measurements[].settings": checked("bandwidth.not_comparable", _BW),
    "phases[].device_map[]": checked("workload.index_dependent", _WORKLOAD),
    "phases[].device_map[].rank": checked("workload.index_dependent", _WORKLOAD),
    "phases[].device_map[].bdf": checked("workload.index_dependent", _WORKLOAD),
    "phases[].device_map[].uuid": checked("workload.index_dependent", _WORKLOAD),
    "phases[].device_map[].visible": checked("workload.index_dependent", _WORKLOAD),
    "phases[].measurements[].source": informational("which probe or phase produced the measurement"),
    "phases[].measurements[].higher_is_better": checked("bandwidth.regression", _BW),
    "phases[].labels": informational("the CVF labels the phase result implies; its status is judged"),
    "phases[].annotations": informational("CVF annotations (measured values, reasons) already judged"),
    "phases[].duration_s": informational("wall time differs on every run"),
    "phases[].tool_duration_s": informational("wall time differs on every run"),
    "phases[].peer": informational("phase 4/5 partner, chosen per run"),
    "probes[]": checked("evidence.missing", _PROBE),
    "probes[].name": checked("evidence.missing", _PROBE),
    "probes[].ok": checked("evidence.missing", _PROBE),
    "probes[].reason": checked("evidence.missing", _PROBE),
    "probes[].argv": informational("the command line; what it printed is judged"),
    "probes[].exit_code": checked("evidence.missing", _PROBE),
    "probes[].duration_s": informational("wall time differs on every run"),
    "probes[].timed_out": checked("evidence.missing", _PROBE),
    "probes[].missing": checked("evidence.missing", _PROBE),
    "probes[].required": checked("evidence.missing", _PROBE),
    "probes[].fallback_for": checked("evidence.missing", _PROBE),
    "probes[].skipped": checked("evidence.missing", _PROBE),
}
"""Schema path -> how the field is judged (see the module docstring)."""

_ALIASES = {"measurements[].n_samples": "measurements[].samples"}  # the diff's view of a measurement
_BRACKETS = re.compile(r"\[[^\[\]]*\]")


def schema_path(path: str) -> str:
    """`gpus[serial=X].firmware.PM` -> `gpus[].firmware.PM` (labels and keys become `[]`)."""
    return _BRACKETS.sub("[]", path)


def coverage_of(path: str) -> tuple[str, Coverage] | None:
    """The entry covering a diff or finding path (longest schema prefix), with its schema path."""
    field = schema_path(path)
    parts = field.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        candidate = _ALIASES.get(candidate, candidate)
        if candidate in COVERAGE:
            return candidate, COVERAGE[candidate]
        if f"{candidate}[]" in COVERAGE:  # a whole array changed at once (`measurements`: {...} -> {})
            return f"{candidate}[]", COVERAGE[f"{candidate}[]"]
    return None


def schema_fields(schema: Mapping[str, Any]) -> Iterator[str]:
    """Every field path of a JSON Schema: objects recurse, `x[]` for arrays of objects, maps are leaves; a
    nullable object is also a path of its own (it can appear or vanish as a whole, as an array item can).

    Retired fields (`deprecated`: accepted as null from old documents, dropped on decoding) hold no facts.
    """
    defs = schema.get("$defs", {})

    def resolve(node: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in node:
            node = defs[str(node["$ref"]).rsplit("/", 1)[1]]
        for alt in node.get("anyOf", ()):
            alt = resolve(alt)
            if alt.get("type") != "null":
                return alt
        return node

    def walk(node: Mapping[str, Any], prefix: str) -> Iterator[str]:
        node = resolve(node)
        for name, sub in node.get("properties", {}).items():
            if sub.get("deprecated") is True:
                continue
            path = f"{prefix}{name}"
            target = resolve(sub)
            if target.get("type") == "array" and "properties" in resolve(target.get("items", {})):
                yield f"{path}[]"
                yield from walk(target["items"], f"{path}[].")
            elif "properties" in target:
                if any(alt.get("type") == "null" for alt in sub.get("anyOf", ())):
                    yield path
                yield from walk(target, f"{path}.")
            else:
                yield path

    yield from walk(schema, "")
