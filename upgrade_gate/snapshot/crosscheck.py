"""One fact, several sources: take the most trustworthy answer, and record what cannot be trusted.

Design decisions (issue 10, "evidence sanity at the edge"):
- Every source that answered is asked; a value that is an error text (`parse.sanity`) is not an
  answer. The fact takes the most trustworthy answer, in the order the caller gives (for the amdgpu
  driver: the kernel's own `/sys/module/amdgpu/version`, then `amd-smi static`, `amd-smi version`,
  `rocm-smi`).
- Sources that answered and disagree are an `EvidenceIssue(CONFLICT)`; a fact whose only answers were
  error texts is an `EvidenceIssue(ERROR_VALUE)`, with the cause in the fact's `na_reasons`; so is a fact
  whose most trusted answering source printed an error text while a lesser one answered (the value is
  kept, the broken evidence blocks). The judge
  blocks on every issue (`evidence.missing`), so "the same error on both sides" is never "unchanged".
- GPUs: the AMD tools that list GPUs (rocminfo, amd-smi list, amd-smi static, rocm-smi) must list the same
  devices (compared by bus:device: rocminfo prints no PCI domain, partitions differ only in the function),
  and amd-smi list and amd-smi static must give one index the same BDF: amd-smi list is how firmware is
  mapped to a GPU. A device one lists and another does not is ABSENT_IN_SOURCE, an index two of them
  place apart (or a BDF printed for two indexes) a CONFLICT, a BDF printed N/A an ERROR_VALUE.
- NIC ports: state comes from every source that answered (`ibv_devinfo`, `rdma link`, `ibstat` when
  captured); any non-ACTIVE answer wins over ACTIVE ones (the port keeps the state that blocks), any
  disagreement is a CONFLICT, and a device or port one source lists and another does not is
  ABSENT_IN_SOURCE: evidence missing, not a device to ignore.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from upgrade_gate.model import EvidenceIssue, Gpu, IssueKind, Nic, NicPort, replace
from upgrade_gate.parse import rdma, rocminfo
from upgrade_gate.parse.amdsmi_types import AmdSmiList, AmdSmiStatic
from upgrade_gate.parse.bdf import PciAddress
from upgrade_gate.parse.rocmsmi_types import RocmSmiInfo
from upgrade_gate.parse.sanity import error_text

SOURCE_NAMES = {
    "driver_version": "sysfs /sys/module/amdgpu/version",
    "rocm_version": "/opt/rocm/.info/version",
    "amdsmi_static": "amd-smi static",
    "amdsmi_version": "amd-smi version",
    "amdsmi_list": "amd-smi list",
    "rocmsmi": "rocm-smi",
    "ibv_devinfo": "ibv_devinfo",
    "rdma_link": "rdma link",
    "ibstat": "ibstat",
}
# GPU text fields that come from a tool's printout and must not be an error text.
_GPU_TEXT = (
    "serial",
    "unique_id",
    "product_name",
    "gfx_target",
    "device_id",
    "compute_partition",
    "memory_partition",
    "vbios",
)


def _label(source: str) -> str:
    return SOURCE_NAMES.get(source, source)


@dataclass(slots=True)
class Issues:
    """Collects the evidence issues of one snapshot."""

    items: list[EvidenceIssue] = field(default_factory=list)

    def add(self, kind: IssueKind, subject: str, message: str, values: Mapping[str, str]) -> None:
        """Record one issue."""
        self.items.append(EvidenceIssue(kind=kind, subject=subject, message=message, values=dict(values)))


def pick(
    subject: str,
    answers: Sequence[tuple[str, str | None]],
    issues: Issues,
    *,
    check: Callable[[str | None], str | None],
    causes: Mapping[str, str] | None = None,
    key: Callable[[str], object] = str.lower,
) -> tuple[str | None, str | None]:
    """(value, reason when None) of one fact from (source, printed value) pairs, most trusted first.

    `answers` holds only sources that ran and answered; a None value means the source did not report
    the fact. `causes` adds what a source's output said about itself (amd-smi's missing-group banner);
    `key` says when two printed values are one fact (ROCm compares the release: "6.2.0-66" is "6.2.0").
    """
    accepted: list[tuple[str, str]] = []
    rejected: list[tuple[str, str, str]] = []
    for source, value in answers:
        if value is None:
            continue
        problem = check(value)
        if problem is None:
            accepted.append((source, value.strip()))
        else:
            extra = (causes or {}).get(source)
            rejected.append((source, value, f"{problem}; {extra}" if extra else problem))
    distinct = {key(v) for _, v in accepted}
    if len(distinct) > 1:
        shown = ", ".join(f"{_label(s)} {v!r}" for s, v in accepted)
        issues.add(
            IssueKind.CONFLICT,
            subject,
            f"{subject}: sources disagree ({shown}); kept {_label(accepted[0][0])}'s {accepted[0][1]!r}",
            {s: v for s, v in accepted},
        )
    if accepted:
        first = next(s for s, v in answers if v is not None)  # the most trusted source that answered
        if first != accepted[0][0]:
            # The most trusted source that answered printed an error text: the value kept is a lesser
            # source's, and the best evidence of it is broken (an /opt/rocm/.info/version reading "ERR").
            source, value, why = next(r for r in rejected if r[0] == first)
            issues.add(
                IssueKind.ERROR_VALUE,
                subject,
                f"{subject}: {_label(source)} printed {value!r} ({why}); only {_label(accepted[0][0])} gave "
                f"{accepted[0][1]!r}",
                {source: value, accepted[0][0]: accepted[0][1]},
            )
        return accepted[0][1], None
    if not rejected:
        return None, None
    reason = "; ".join(f"{_label(s)}: {why}" for s, _, why in rejected)
    issues.add(IssueKind.ERROR_VALUE, subject, f"{subject} unknown: {reason}", {s: v for s, v, _ in rejected})
    return None, reason


def sanitize_gpus(gpus: Sequence[Gpu], issues: Issues, *, cause: str | None) -> tuple[Gpu, ...]:
    """GPUs with every error-text value replaced by None (reason recorded, issue raised)."""
    out = []
    for gpu in gpus:
        changes: dict[str, object] = {}
        reasons = dict(gpu.na_reasons)
        for name in _GPU_TEXT:
            value = getattr(gpu, name)
            problem = error_text(value) if isinstance(value, str) else None
            if problem is not None:
                changes[name] = None
                reasons[name] = f"{problem}; {cause}" if cause else problem
                issues.add(
                    IssueKind.ERROR_VALUE,
                    f"gpus[{gpu.index}].{name}",
                    f"GPU {gpu.index} ({gpu.bdf or 'unknown BDF'}) {name} unknown: {reasons[name]}",
                    {name: str(value)},
                )
        firmware = dict(gpu.firmware)
        for block, version in gpu.firmware.items():
            problem = error_text(version)
            if problem is not None:
                del firmware[block]
                reasons[f"firmware.{block}"] = problem
                issues.add(
                    IssueKind.ERROR_VALUE,
                    f"gpus[{gpu.index}].firmware.{block}",
                    f"GPU {gpu.index} ({gpu.bdf or 'unknown BDF'}) firmware {block} unknown: {problem}",
                    {block: version},
                )
        if changes or firmware != gpu.firmware:
            gpu = replace(gpu, **changes, firmware=firmware, na_reasons=reasons)
        out.append(gpu)
    return tuple(out)


# --------------------------------------------------------------------------- NIC ports


def _norm_state(state: str | None) -> str | None:
    """PORT_ACTIVE / ACTIVE / Active / 4: ACTIVE -> ACTIVE; LINK_UP / LinkUp -> LINKUP."""
    if state is None:
        return None
    text = re.sub(r"\(.*?\)", "", state).strip().upper()
    text = re.sub(r"^\d+:\s*", "", text).removeprefix("PORT_")
    return text.replace("_", "").replace(" ", "")


@dataclass(frozen=True, slots=True)
class PortView:
    """One source's view of one port."""

    state: str
    phys_state: str | None


def port_views(
    ibv: rdma.IbvDevinfo | None, links: rdma.RdmaLinks | None, ibstat: rdma.Ibstat | None
) -> dict[str, dict[str, dict[int, PortView]]]:
    """source -> device -> port -> view, for every source that answered."""
    out: dict[str, dict[str, dict[int, PortView]]] = {}
    if ibv is not None:
        out["ibv_devinfo"] = {d.name: {p.port: PortView(p.state, p.phys_state) for p in d.ports} for d in ibv.devices}
    if links is not None:
        view: dict[str, dict[int, PortView]] = {}
        for lk in links.links:
            view.setdefault(lk.device, {})[lk.port] = PortView(lk.state, lk.physical_state)
        out["rdma_link"] = view
    if ibstat is not None:
        out["ibstat"] = {ca.name: {p.port: PortView(p.state, p.physical_state) for p in ca.ports} for ca in ibstat.cas}
    return out


def check_nics(
    nics: Sequence[Nic],
    views: dict[str, dict[str, dict[int, PortView]]],
    issues: Issues,
    *,
    incomplete: Sequence[str] = (),
) -> tuple[Nic, ...]:
    """NICs whose port state is the worst any source printed; disagreements and absences recorded.

    `incomplete` names sources whose output is known to be cut short (ibstat's `ibpanic`): a device
    they lack is reported by the probe's own failure, not again here.
    """
    devices = sorted({name for view in views.values() for name in view} | {n.name for n in nics})
    for name in devices:
        present = [s for s, view in views.items() if name in view]
        absent = [s for s, view in views.items() if name not in view and s not in incomplete]
        if present and absent:
            issues.add(
                IssueKind.ABSENT_IN_SOURCE,
                f"nics[name={name}]",
                f"NIC {name} is listed by {', '.join(map(_label, present))} but absent from "
                f"{', '.join(map(_label, absent))}: a device that vanished from one source is missing evidence",
                {**{s: "present" for s in present}, **{s: "absent" for s in absent}},
            )
    out = []
    for nic in nics:
        problem = error_text(nic.fw_ver)
        if problem is not None:
            issues.add(
                IssueKind.ERROR_VALUE,
                f"nics[name={nic.name}].fw_ver",
                f"NIC {nic.name} firmware unknown: {problem}",
                {"fw_ver": str(nic.fw_ver)},
            )
            nic = replace(nic, fw_ver=None, na_reasons={**nic.na_reasons, "fw_ver": problem})
        ports = []
        port_numbers = sorted(
            {p for view in views.values() for p in view.get(nic.name, {})} | {p.port for p in nic.ports}
        )
        by_port = {p.port: p for p in nic.ports}
        for number in port_numbers:
            port = by_port.get(number) or NicPort(port=number)
            port = _check_port(nic.name, number, port, views, issues)
            ports.append(port)
        out.append(replace(nic, ports=tuple(ports)) if ports != list(nic.ports) else nic)
    return tuple(out)


def _check_port(
    name: str, number: int, port: NicPort, views: dict[str, dict[str, dict[int, PortView]]], issues: Issues
) -> NicPort:
    subject = f"nics[name={name}].ports[{number}]"
    seen = {s: view[name][number] for s, view in views.items() if name in view and number in view[name]}
    missing = [s for s, view in views.items() if name in view and number not in view[name]]
    if seen and missing:
        issues.add(
            IssueKind.ABSENT_IN_SOURCE,
            subject,
            f"NIC {name} port {number} is listed by {', '.join(map(_label, seen))} but not by "
            f"{', '.join(map(_label, missing))}",
            {**{s: v.state for s, v in seen.items()}, **{s: "absent" for s in missing}},
        )
    if not seen:
        return port
    states = {s: _norm_state(v.state) for s, v in seen.items()}
    phys = {s: _norm_state(v.phys_state) for s, v in seen.items() if v.phys_state is not None}
    if len(set(states.values())) > 1 or len(set(phys.values())) > 1:
        shown = "; ".join(
            f"{_label(s)} {v.state}" + (f"/{v.phys_state}" if v.phys_state else "") for s, v in seen.items()
        )
        issues.add(
            IssueKind.CONFLICT,
            f"{subject}.state",
            f"NIC {name} port {number} state differs between sources ({shown}): one source sees the port down",
            {s: v.state + (f"/{v.phys_state}" if v.phys_state else "") for s, v in seen.items()},
        )
    worst = next((s for s, st in states.items() if st != "ACTIVE"), None)
    if worst is None:
        return port if port.state is not None else replace(port, state=seen[next(iter(seen))].state)
    view = seen[worst]
    return replace(port, state=view.state, phys_state=view.phys_state or port.phys_state)


__all__ = ["SOURCE_NAMES", "Issues", "PortView", "check_nics", "pick", "port_views", "sanitize_gpus"]


def _device(bdf: str) -> str:
    """'0000:05:00.3' or rocminfo's '05:00.3' -> '05:00.0': the device (partitions differ only in the
    function; rocminfo prints no domain)."""
    return PciAddress.parse(bdf, allow_missing_domain=True).with_function(0).short


def check_gpu_sources(
    info: rocminfo.RocmInfo | None,
    listing: AmdSmiList | None,
    static: AmdSmiStatic | None,
    rsmi: RocmSmiInfo | None,
    issues: Issues,
) -> None:
    """The GPU sources that answered list the same devices, and amd-smi's two listings agree on each
    index's BDF (see the module docstring)."""
    seen: dict[str, set[str]] = {}
    if info is not None:
        seen["rocminfo"] = {_device(a.bus_dev_fn) for a in info.gpu_agents if a.bus_dev_fn}
    indexed: dict[str, dict[int, str]] = {}
    for source, gpus in (
        ("amdsmi_list", listing.gpus if listing else None),
        ("amdsmi_static", static.gpus if static else None),
    ):
        if gpus is None:
            continue
        by_index: dict[int, str] = {}
        index_of: dict[str, int] = {}
        for gpu in gpus:
            if gpu.bdf is None:
                if "bdf" in gpu.na_fields:
                    issues.add(
                        IssueKind.ERROR_VALUE,
                        f"gpus[{source}={gpu.index}].bdf",
                        f"{_label(source)} printed N/A for GPU {gpu.index}'s BDF",
                        {source: "N/A"},
                    )
                continue
            other = index_of.setdefault(str(gpu.bdf), gpu.index)
            if other != gpu.index:
                issues.add(
                    IssueKind.CONFLICT,
                    f"gpus[bdf={gpu.bdf}]",
                    f"{_label(source)} lists BDF {gpu.bdf} for GPU {other} and GPU {gpu.index}",
                    {f"{source} GPU {other}": str(gpu.bdf), f"{source} GPU {gpu.index}": str(gpu.bdf)},
                )
            by_index[gpu.index] = str(gpu.bdf)
        indexed[source] = by_index
        seen[source] = {_device(b) for b in by_index.values()}
    if rsmi is not None and rsmi.gpus:
        seen["rocmsmi"] = {_device(str(g.bdf)) for g in rsmi.gpus if g.bdf}
    a, b = indexed.get("amdsmi_list", {}), indexed.get("amdsmi_static", {})
    for index in sorted(a.keys() & b.keys()):
        if a[index] != b[index]:
            issues.add(
                IssueKind.CONFLICT,
                f"gpus[amdsmi_list={index}].bdf",
                f"amd-smi GPU {index}: amd-smi list says {a[index]}, amd-smi static {b[index]}",
                {"amdsmi_list": a[index], "amdsmi_static": b[index]},
            )
    sources = [name for name, devices in seen.items() if devices]
    for device in sorted(set().union(*(seen[n] for n in sources)) if sources else ()):
        having = [n for n in sources if device in seen[n]]
        lacking = [n for n in sources if device not in seen[n]]
        if lacking:
            issues.add(
                IssueKind.ABSENT_IN_SOURCE,
                f"gpus[bus={device}]",
                f"GPU {device} is listed by {', '.join(map(_label, having))} but absent from "
                f"{', '.join(map(_label, lacking))}: a device one tool lists and another does not is missing evidence",
                {n: "listed" if n in having else "absent" for n in sources},
            )
