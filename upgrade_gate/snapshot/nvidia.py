"""The NVIDIA node's GPUs, GPU links and software versions, from `nvidia-smi -q -x` and `topo -m`.

The vendor step of the snapshot builder for `vendors.NVIDIA` (the AMD step is `snapshot.gpus` with the
AMD parts of `snapshot.build`); the result is the same vendor-neutral `Gpu`, `GpuLink` and `Software`.

How the fields map (docs/vendors.md has the table):
- `index` is the GPU's position in `nvidia-smi -q -x`, nvidia-smi's index: PCI bus order. CUDA's default
  order is FASTEST_FIRST; the pin the judge offers sets CUDA_DEVICE_ORDER=PCI_BUS_ID with it.
- `unique_id` is the `GPU-<uuid>` CUDA_VISIBLE_DEVICES takes; `serial` the board serial. A board without
  one prints zeros (Tesla T4 fixture): that is no serial (None with the reason), never 8 GPUs sharing one.
- `gfx_target` holds the architecture as printed ("Hopper"), the family the kernel-log table keys on.
- `firmware` holds the inforom blocks (`inforom.img`, `inforom.oem`, `inforom.ecc`, `inforom.pwr`) and the
  GSP firmware (`gsp`); `vbios` the VBIOS.
- `compute_partition` is the MIG mode ("MIG Enabled" / "MIG Disabled", as printed), with the mode the next
  reset brings where it differs ("MIG Disabled (pending Enabled)": a partition change already made); None
  where the GPU has no MIG support. NVIDIA has no memory partition mode: `memory_partition` is None with that reason.
- Links: every GPU pair of `topo -m`; an `NV<n>` cell is NVLINK with `weight` = n, the bonded link
  count (a lost link changes it), a PCIe path (PIX/PXB/PHB/NODE/SYS) is PCIE. GPUs of the matrix are
  nvidia-smi's indices, mapped to BDFs through `-q -x`.
- `driver_version`: the loaded module's `/sys/module/nvidia/version` first, then nvidia-smi's
  `<driver_version>`; two that disagree are a conflict (evidence issue). ROCm fields are None with the
  reason. The CUDA version nvidia-smi prints is the driver's CUDA API level, which the driver version
  decides: it is not a separate fact of the snapshot (docs/vendors.md).
- A `-q -x` document that holds fewer `<gpu>` elements than `attached_gpus` (a per-GPU `-i` query, or a
  cut capture) makes the probe fail: the node's GPUs would be incomplete.
- `health` (`gpu_health`): the uncorrectable ECC counters of `<ecc_errors><volatile>` and `<aggregate>` by
  nvidia-smi's own names (`dram_uncorrectable`, `sram_uncorrectable`, DTD v13's `sram_uncorrectable_parity`
  / `_secded`; correctable counters are left out: the hardware corrected them), `<remapped_rows>`,
  `<retired_pages>` and `<gpu_reset_status><reset_required>`. A value printed N/A is None with the
  element named in `health.na_reasons` (Turing prints remapped rows N/A, Ampere and later retired pages;
  ECC counters are N/A with ECC disabled). A GPU whose document has none of those elements gets no
  block, with the reason: `gpu.health` reads that as missing evidence on an NVIDIA node. An error text
  in any of them ("[GPU requires reset]") is refused by the parser, so the probe fails (fail closed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Bdf, Gpu, GpuHealth, GpuLink, GpuSerial, IssueKind, LinkType, Software, replace
from upgrade_gate.parse import lspci, sysfs
from upgrade_gate.parse.nvidia_smi_topo import TopoMatrix, parse_nvidia_smi_topo
from upgrade_gate.parse.nvidia_smi_types import NvidiaGpu, NvidiaSmiLog
from upgrade_gate.parse.nvidia_smi_xml import TOOL as XML_TOOL
from upgrade_gate.parse.nvidia_smi_xml import parse_nvidia_smi_xml
from upgrade_gate.parse.sanity import version_problem
from upgrade_gate.snapshot import crosscheck

Parse = Callable[[str, Callable[[str], Any]], Any]
Reason = Callable[..., str]

_NO_ROCM = "an NVIDIA node: no ROCm"
_NO_MEMORY_PARTITION = "NVIDIA GPUs have no memory partition mode (MIG divides memory per GPU instance)"
_NO_COMPUTE_UNITS = "nvidia-smi -q -x prints no SM count outside MIG devices"


@dataclass(frozen=True, slots=True, kw_only=True)
class NvidiaFacts:
    """What the NVIDIA step gives the snapshot."""

    gpus: tuple[Gpu, ...]
    links: tuple[GpuLink, ...]
    software: Software


def parse_whole_node(text: str) -> NvidiaSmiLog:
    """`nvidia-smi -q -x` of the whole node: every attached GPU must be in the document."""
    log = parse_nvidia_smi_xml(text)
    if not log.complete:
        raise ParseError(
            XML_TOOL,
            0,
            f"attached_gpus {log.attached_gpus}",
            f"lists {len(log.gpus)} of {log.attached_gpus} attached GPUs (a per-GPU -i query or a cut document)",
        )
    return log


def nvidia_facts(
    parse: Parse,
    reason: Reason,
    issues: crosscheck.Issues,
    *,
    causes: Mapping[str, str],
    kernel: sysfs.KernelRelease | None,
) -> NvidiaFacts:
    """GPUs, links and software of an NVIDIA node from its bundle's probes (see the module docstring)."""
    log: NvidiaSmiLog | None = parse("nvidia_smi", parse_whole_node)
    topo: TopoMatrix | None = parse("nvidia_smi_topo", parse_nvidia_smi_topo)
    driver_values: sysfs.SysfsValues | None = parse("driver_version", sysfs.parse_sysfs_grep)
    gpus = tuple(_gpu(g, topo, reason) for g in log.gpus) if log is not None else ()
    gpus = crosscheck.sanitize_gpus(gpus, issues, cause=causes.get("nvidia_smi"))
    if log is not None:
        # build_snapshot parsed lspci already and does not pass it: parsed again (same status recorded).
        check_gpu_pcie(log, parse("lspci", lspci.parse_lspci), issues)
    links = _links(topo, {g.index: g.bdf for g in gpus if g.bdf}) if topo is not None else ()
    module = _module_version(driver_values)
    driver, driver_why = crosscheck.pick(
        "software.driver_version",
        [("driver_version", module), ("nvidia_smi", log.driver_version if log else None)],
        issues,
        check=version_problem,
        causes=causes,
    )
    reasons = {
        "rocm_version": _NO_ROCM,
        "amdsmi_version": _NO_ROCM,
    }
    if kernel is None:
        reasons["kernel"] = reason("kernel")
    if driver is None:
        reasons["driver_version"] = driver_why or reason("driver_version", "nvidia_smi")
    software = Software(
        kernel=kernel.release if kernel else None,
        driver_version=driver,
        na_reasons=reasons,
    )
    return NvidiaFacts(gpus=gpus, links=links, software=software)


# PCIe generation -> transfer rate (GT/s), the rates lspci prints (PCI-SIG base specifications 1.0-6.0).
_GEN_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
_LINK_GEN = "pci/pci_gpu_link_info/pcie_gen/current_link_gen"
_LINK_WIDTH = "pci/pci_gpu_link_info/link_widths/current_link_width"


def _xml_link(g: NvidiaGpu) -> str:
    gen = f"Gen{g.pcie_gen_current}" if g.pcie_gen_current is not None else "Gen?"
    return f"{gen} x{g.pcie_width_current if g.pcie_width_current is not None else '?'}"


def _lspci_link(speed: float | None, width: int | None) -> str:
    gen = next((n for n, gts in _GEN_GTS.items() if gts == speed), None)
    rate = "? GT/s" if speed is None else f"{speed:g} GT/s"
    return f"{f'Gen{gen} ({rate})' if gen is not None else rate} x{width if width is not None else '?'}"


def check_gpu_pcie(log: NvidiaSmiLog, pci: lspci.LspciResult | None, issues: crosscheck.Issues) -> None:
    """Cross-check each GPU's current PCIe link in `-q -x` against lspci's LnkSta for the same BDF.

    The snapshot's `pcie` links come from lspci (judged by `pcie.downgrade` against LnkCap and the baseline);
    nvidia-smi's `<pci_gpu_link_info>` is a second source of the same fact. Issues (the judge blocks on each,
    `evidence.missing`, naming nvidia_smi): a current gen or width nvidia-smi printed N/A or not at all (the
    link is unreadable), lspci listing no link for the GPU's BDF, and the two sources disagreeing. A speed or
    width lspci itself left unknown is `pcie.downgrade`'s (it blocks), not compared here; without lspci
    output (its probe failed: missing evidence of its own) only nvidia-smi's side is checked. The maximum is
    not compared: nvidia-smi's `max_link_gen` is what the GPU *and the system* allow, lspci's LnkCap the
    device's own capability, and the two differ on a healthy Gen5 GPU in a Gen4 slot.
    """
    links = {str(link.bdf): link for link in lspci.pcie_links(pci)} if pci is not None else {}
    for g in log.gpus:
        subject = f"pcie[bdf={g.bdf}]"
        if g.pcie_gen_current is None or g.pcie_width_current is None:
            parts = [e for e, v in ((_LINK_GEN, g.pcie_gen_current), (_LINK_WIDTH, g.pcie_width_current)) if v is None]
            printed = ", ".join(f"{'N/A' if e in g.na_fields else 'nothing'} for <{e.rsplit('/')[-1]}>" for e in parts)
            issues.add(
                IssueKind.ERROR_VALUE,
                subject,
                f"GPU {g.index} ({g.bdf}): nvidia-smi -q -x printed {printed}: its PCIe link cannot be read",
                {"nvidia_smi": _xml_link(g)},
            )
            continue
        if pci is None:
            continue
        link = links.get(str(g.bdf))
        if link is None:
            issues.add(
                IssueKind.ABSENT_IN_SOURCE,
                subject,
                f"GPU {g.index} ({g.bdf}): nvidia-smi -q -x reports a {_xml_link(g)} link, lspci none for that BDF",
                {"nvidia_smi": _xml_link(g), "lspci": "no link"},
            )
            continue
        speed_differs = link.speed_gts is not None and link.speed_gts != _GEN_GTS.get(g.pcie_gen_current)
        width_differs = link.width is not None and link.width != g.pcie_width_current
        if speed_differs or width_differs:
            theirs = _lspci_link(link.speed_gts, link.width)
            issues.add(
                IssueKind.CONFLICT,
                subject,
                f"GPU {g.index} ({g.bdf}): nvidia-smi -q -x says its PCIe link runs {_xml_link(g)}, lspci {theirs}",
                {"nvidia_smi": _xml_link(g), "lspci": theirs},
            )


def _module_version(values: sysfs.SysfsValues | None) -> str | None:
    """The one value of `/sys/module/nvidia/version` (grep's `path:value` line)."""
    if values is None:
        return None
    found = [v for path, v in values.values.items() if path.endswith("/sys/module/nvidia/version")]
    return found[0] if len(found) == 1 else None


def _serial(raw: str | None) -> tuple[GpuSerial | None, str | None]:
    if raw is None:
        return None, "nvidia-smi -q -x printed no serial (N/A)"
    if raw.strip("0") == "":
        return None, f"nvidia-smi -q -x printed {raw!r}: a board without a serial"
    return GpuSerial(raw), None


def _gpu(g: NvidiaGpu, topo: TopoMatrix | None, reason: Reason) -> Gpu:
    reasons: dict[str, str] = {}
    serial, why = _serial(g.serial)
    if why is not None:
        reasons["serial"] = why
    numa = None
    if topo is not None:
        row = next((d for d in topo.devices if d.name == f"GPU{g.index}"), None)
        numa = row.numa_affinity if row is not None else None
    partition = f"MIG {g.mig_current}" if g.mig_current else None
    if partition is not None and g.mig_pending is not None and g.mig_pending != g.mig_current:
        partition += f" (pending {g.mig_pending})"  # the next reset changes it: a partition change (break test)
    gpu = Gpu(
        index=g.index,
        bdf=g.bdf,
        serial=serial,
        unique_id=g.uuid,
        product_name=g.product_name,
        gfx_target=g.architecture,
        device_id=g.device_id,
        numa_node=numa,
        compute_partition=partition,
        vram_total_mib=g.fb_total_mib,
        firmware=dict(g.firmware),
        vbios=g.vbios,
    )
    health, health_why = gpu_health(g)
    gpu = replace(gpu, health=health)
    if health_why is not None:
        reasons["health"] = health_why
    fields = {
        "unique_id": "uuid",
        "product_name": "product_name",
        "gfx_target": "product_architecture",
        "device_id": "pci/pci_device_id",
        "vram_total_mib": "fb_memory_usage/total",
        "vbios": "vbios_version",
        "compute_partition": "mig_mode/current_mig",
    }
    for name, element in fields.items():
        if getattr(gpu, name) is None:
            printed = "N/A" if element in g.na_fields else "nothing"
            reasons[name] = f"nvidia-smi -q -x printed {printed} for <{element}>"
    if numa is None:
        reasons["numa_node"] = reason("nvidia_smi_topo") if topo is None else "nvidia-smi topo -m: no NUMA affinity"
    if not gpu.firmware:
        reasons["firmware"] = "nvidia-smi -q -x printed no inforom or GSP firmware version"
    reasons["memory_partition"] = _NO_MEMORY_PARTITION
    reasons["compute_units"] = _NO_COMPUTE_UNITS
    return replace(gpu, na_reasons=reasons)


HEALTH_SOURCE = "nvidia_smi"
_NO_HEALTH = (
    "nvidia-smi -q -x printed no <ecc_errors>, <retired_pages>, <remapped_rows> or <gpu_reset_status> for this GPU"
)


def gpu_health(g: NvidiaGpu) -> tuple[GpuHealth | None, str | None]:
    """The GPU's health block from `-q -x` (see the module docstring), or None with the reason."""
    na = set(g.na_fields)
    printed_reset = g.reset_required is not None or "gpu_reset_status/reset_required" in na
    printed_rows = g.remapped_rows is not None or "remapped_rows" in na
    if g.ecc is None and g.retired_pages is None and not printed_rows and not printed_reset:
        return None, _NO_HEALTH
    reasons: dict[str, str] = {}
    ecc = g.ecc
    volatile = {k: v for k, v in (ecc.volatile if ecc else {}).items() if "uncorrectable" in k}
    aggregate = {k: v for k, v in (ecc.aggregate if ecc else {}).items() if "uncorrectable" in k}
    mode = f" (ECC {ecc.current_mode})" if ecc is not None and ecc.current_mode else ""
    for scope, counts in (("volatile", volatile), ("aggregate", aggregate)):
        unprinted = sorted(f for f in na if f.startswith(f"{scope}/") and "uncorrectable" in f)
        for element in unprinted:  # each counter printed N/A is named, even beside counters that were printed
            reasons[f"ecc_{scope}_uncorrectable.{element.split('/', 1)[1]}"] = (
                f"nvidia-smi -q -x printed N/A for <{element}>{mode}"
            )
        if not counts:
            reasons[f"ecc_{scope}_uncorrectable"] = (
                f"nvidia-smi -q -x printed N/A for {', '.join(f'<{f}>' for f in unprinted)}{mode}"
                if unprinted
                else f"nvidia-smi -q -x printed no uncorrectable counter under <ecc_errors><{scope}>"
            )
    rows, pages = g.remapped_rows, g.retired_pages
    health = GpuHealth(
        source=HEALTH_SOURCE,
        ecc_mode=ecc.current_mode if ecc else None,
        ecc_mode_pending=ecc.pending_mode if ecc else None,
        ecc_volatile_uncorrectable=volatile,
        ecc_aggregate_uncorrectable=aggregate,
        remapped_rows_correctable=rows.correctable if rows else None,
        remapped_rows_uncorrectable=rows.uncorrectable if rows else None,
        remap_pending=rows.pending if rows else None,
        remap_failure=rows.failure if rows else None,
        retired_pages_single_bit=pages.single_bit_count if pages else None,
        retired_pages_double_bit=pages.double_bit_count if pages else None,
        retirement_pending=pages.pending if pages else None,
        reset_required=g.reset_required,
        compute_mode=g.compute_mode,
    )
    elements = {
        "ecc_mode": "ecc_mode/current_ecc",
        "ecc_mode_pending": "ecc_mode/pending_ecc",
        "remapped_rows_correctable": "remapped_rows/remapped_row_corr",
        "remapped_rows_uncorrectable": "remapped_rows/remapped_row_unc",
        "remap_pending": "remapped_rows/remapped_row_pending",
        "remap_failure": "remapped_rows/remapped_row_failure",
        "retired_pages_single_bit": "retired_pages/multiple_single_bit_retirement/retired_count",
        "retired_pages_double_bit": "retired_pages/double_bit_retirement/retired_count",
        "retirement_pending": "retired_pages/pending_retirement",
        "reset_required": "gpu_reset_status/reset_required",
        "compute_mode": "compute_mode",
    }
    for name, element in elements.items():
        if getattr(health, name) is not None:
            continue
        section = element.split("/", 1)[0]
        if element in na or section in na:
            where = f"<{section}>" if section in na else f"<{element}>"
            reasons[name] = f"nvidia-smi -q -x printed N/A for {where}"
        else:
            reasons[name] = f"nvidia-smi -q -x printed no <{element}>"
    return replace(health, na_reasons=reasons), None


def _links(topo: TopoMatrix, bdf_of: Mapping[int, Bdf]) -> tuple[GpuLink, ...]:
    """GPU pairs of the matrix (a < b by BDF); pairs whose GPU has no BDF are left out."""
    out: dict[tuple[Bdf, Bdf], GpuLink] = {}
    index = {d.name: int(d.name[3:]) for d in topo.devices if d.kind == "gpu" and d.name[3:].isdigit()}
    for link in topo.links:
        ia, ib = index.get(link.a), index.get(link.b)
        if ia is None or ib is None:
            continue  # a NIC pair: the NIC's side is read from ibv_devinfo and sysfs
        ba, bb = bdf_of.get(ia), bdf_of.get(ib)
        if ba is None or bb is None or ba == bb:
            continue
        a, b = sorted((ba, bb))
        kind = LinkType.NVLINK if link.is_nvlink else LinkType.PCIE
        out.setdefault((a, b), GpuLink(a=a, b=b, link_type=kind, hops=None, weight=link.nvlinks))
    return tuple(out[k] for k in sorted(out))
