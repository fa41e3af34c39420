"""Join the GPU views of rocminfo, amd-smi, rocm-smi and lspci into `Gpu` records.

rocminfo gives the enumeration order (HIP's indices) and bus:device.function without a PCI domain;
amd-smi gives full BDFs, serials, partitions, VRAM, VBIOS and firmware keyed by its own index;
rocm-smi is the recorded fallback when amd-smi failed; lspci confirms which full BDFs exist. The join
key is always the full BDF. Nothing is guessed: a field no source reported is None with a reason.

Compute partitions (MI300X DPX/QPX/CPX) are the exception that lspci cannot confirm: every partition is
printed by rocminfo (and amd-smi, rocm-smi) with its partition number in the BDF function (05:00.0 ...
05:00.7), while lspci lists the device once, at function 0 (partitions are not PCI functions,
ROCm/rocm-systems#5805). A partition BDF no tool printed with a domain takes the domain of the device
(bus:device.0) that lspci or amd-smi confirmed, so partitions keep their identity (the judge tells them
apart by (ids, function)) instead of all losing their BDF.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from upgrade_gate.model import Bdf, Gpu, GpuSerial, replace
from upgrade_gate.parse import lspci, rocminfo
from upgrade_gate.parse.amdsmi_types import AmdSmiFirmware, AmdSmiList, AmdSmiStatic, AmdSmiStaticGpu
from upgrade_gate.parse.bdf import PciAddress
from upgrade_gate.parse.rocmsmi_types import RocmSmiGpu, RocmSmiInfo

AMD_HEALTH_NOT_CAPTURED = (
    "not captured: no AMD probe prints ECC or RAS error counts (amd-smi static's ras section holds the ECC "
    "configuration and a bad-page threshold flag; amd-smi metric --ecc is not a probe)"
)
"""Why an AMD GPU's `health` is None (docs/vendors.md); `gpu.health` does not judge it."""

_AMD_VENDOR = "1002"
_GPU_CLASSES = ("03", "12", "0b40")
# amd-smi static's name (its parser's `na_fields`) for each Gpu field it can supply.
_STATIC_NAME = {
    "serial": "board_serial",
    "unique_id": "asic_serial",
    "product_name": "market_name",
    "gfx_target": "gfx_target",
    "device_id": "device_id",
    "numa_node": "numa_node",
    "compute_partition": "compute_partition",
    "memory_partition": "memory_partition",
    "vram_total_mib": "vram_total_mib",
    "compute_units": "compute_units",
    "vbios": "vbios.version",
}
# Fields whose absence is explained in na_reasons.
_REPORTED = (
    "serial",
    "unique_id",
    "product_name",
    "gfx_target",
    "device_id",
    "numa_node",
    "compute_partition",
    "memory_partition",
    "vram_total_mib",
    "compute_units",
    "vbios",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSources:
    """Parsed outputs that describe GPUs (None where the probe failed) and a reason lookup."""

    rocminfo: rocminfo.RocmInfo | None
    static: AmdSmiStatic | None
    listing: AmdSmiList | None
    firmware: AmdSmiFirmware | None
    rocmsmi: RocmSmiInfo | None
    pci: lspci.LspciResult | None
    reason: Callable[..., str]


def _short(bdf: Bdf) -> str:
    """'0000:05:00.0' -> '05:00.0' (rocminfo's domain-less form)."""
    return PciAddress.parse(bdf).short


def _full_bdfs(src: GpuSources) -> dict[str, Bdf | None]:
    """bus:dev.fn -> the one full BDF any tool printed for it (None when two domains share it)."""
    seen: dict[str, set[Bdf]] = {}

    def add(bdfs: Iterable[Bdf | None]) -> None:
        for bdf in bdfs:
            if bdf:
                seen.setdefault(_short(bdf), set()).add(bdf)

    if src.static:
        add(g.bdf for g in src.static.gpus)
    if src.listing:
        add(g.bdf for g in src.listing.gpus)
    if src.rocmsmi:
        add(g.bdf for g in src.rocmsmi.gpus)
    if src.pci:
        add(
            d.bdf
            for d in src.pci.devices
            if (d.vendor_device or "").startswith(_AMD_VENDOR) and (d.class_id or "").startswith(_GPU_CLASSES)
        )
    return {short: (next(iter(full)) if len(full) == 1 else None) for short, full in seen.items()}


def _partition_bdf(full: dict[str, Bdf | None], short: str) -> Bdf | None:
    """`05:00.3` -> `0000:05:00.3` when the device's function 0 is confirmed (see the module docstring)."""
    partition = PciAddress.parse(short, allow_missing_domain=True)
    device = full.get(partition.with_function(0).short)
    if partition.function == 0 or device is None:
        return None
    return PciAddress.parse(device).with_function(partition.function).bdf


def _firmware_by_bdf(src: GpuSources) -> dict[Bdf, dict[str, str]]:
    if src.firmware is None:
        return {}
    bdf_of: dict[int, Bdf] = {}
    pairs = [(g.index, g.bdf) for g in src.listing.gpus] if src.listing else []
    pairs += [(g.index, g.bdf) for g in src.static.gpus] if src.static else []
    for index, bdf in pairs:
        if bdf:
            bdf_of.setdefault(index, bdf)
    out: dict[Bdf, dict[str, str]] = {}
    for fw in src.firmware.gpus:
        bdf = bdf_of.get(fw.index)
        if bdf is not None and fw.firmware is not None:
            out[bdf] = dict(fw.firmware)
    return out


def _serial(static: AmdSmiStaticGpu | None, rsmi: RocmSmiGpu | None) -> GpuSerial | None:
    # The board (FRU product) serial: what amd-smi prints as BOARD.PRODUCT_SERIAL and rocm-smi as
    # "Serial Number". The ASIC serial is the unique id (rocminfo's GPU-<hex>, rocm-smi "Unique ID").
    raw = (static.board_serial if static else None) or (rsmi.serial if rsmi else None)
    return GpuSerial(raw) if raw else None


def assemble_gpus(src: GpuSources) -> tuple[Gpu, ...]:
    """GPUs in enumeration order, each joined across tools by full BDF."""
    static_by_bdf = {g.bdf: g for g in src.static.gpus if g.bdf} if src.static else {}
    rsmi_by_bdf = {g.bdf: g for g in src.rocmsmi.gpus if g.bdf} if src.rocmsmi else {}
    fw_by_bdf = _firmware_by_bdf(src)
    full = _full_bdfs(src)

    order: list[tuple[Bdf | None, rocminfo.RocmAgent | None, dict[str, str]]] = []
    if src.rocminfo is not None:
        for gpu_agent in src.rocminfo.gpu_agents:
            reasons: dict[str, str] = {}
            short = gpu_agent.bus_dev_fn
            bdf = (full.get(short) or _partition_bdf(full, short)) if short else None
            if bdf is None:
                reasons["bdf"] = (
                    f"rocminfo printed bus {short} without a PCI domain and no other tool confirmed it"
                    if short
                    else "rocminfo printed no BDFID for this agent"
                )
            order.append((bdf, gpu_agent, reasons))
    else:
        why = f"index from amd-smi/rocm-smi order, not HIP's: {src.reason('rocminfo')}"
        fallback = src.static.gpus if src.static else (src.rocmsmi.gpus if src.rocmsmi else ())
        order = [(g.bdf, None, {"index": why}) for g in fallback]

    gpus = []
    for index, (bdf, agent, reasons) in enumerate(order):
        st = static_by_bdf.get(bdf) if bdf else None
        rs = rsmi_by_bdf.get(bdf) if bdf else None
        firmware = (fw_by_bdf.get(bdf) if bdf else None) or (dict(rs.firmware) if rs else {})
        vram_kb = rocminfo.vram_kb(agent) if agent else None
        gpu = Gpu(
            index=index,
            bdf=bdf,
            serial=_serial(st, rs),
            unique_id=(agent.uuid if agent else None)
            or (st.asic_serial if st else None)
            or (rs.unique_id if rs else None),
            product_name=(st.market_name if st else None)
            or (agent.marketing_name if agent else None)
            or (rs.device_name if rs else None),
            gfx_target=(agent.gfx_target if agent else None) or (st.gfx_target if st else None),
            device_id=(st.device_id if st else None) or (rs.device_id if rs else None),
            numa_node=_first_int(st.numa_node if st else None, rs.numa_node if rs else None),
            compute_partition=st.compute_partition if st else None,
            memory_partition=st.memory_partition if st else None,
            vram_total_mib=_first_int(
                st.vram_total_mib if st else None, vram_kb // 1024 if vram_kb is not None else None
            ),
            compute_units=_first_int(agent.compute_units if agent else None, st.compute_units if st else None),
            firmware=firmware,
            # rocm-smi's "VBIOS version" (--showvbios) is the part number amd-smi prints beside its version:
            # a fallback fleet compares like with like; a node that changed tools reads as changed (closed).
            vbios=(st.vbios.version if st and st.vbios else None) or (rs.vbios if rs else None),
        )
        for name in _REPORTED:
            if getattr(gpu, name) is None:
                reasons.setdefault(name, _why_none(name, st, src))
        if not firmware:
            reasons.setdefault("firmware", src.reason("amdsmi_firmware", "rocmsmi"))
        reasons["health"] = AMD_HEALTH_NOT_CAPTURED
        gpus.append(replace(gpu, na_reasons=reasons))
    return tuple(gpus)


def _why_none(name: str, static: AmdSmiStaticGpu | None, src: GpuSources) -> str:
    """Why a GPU field is None: amd-smi static printed N/A for it (a value the tool could not read, said
    so: the cause grouping names it), else what each source's status says."""
    if static is not None and _STATIC_NAME.get(name) in static.na_fields:
        return f"amd-smi static printed N/A for {_STATIC_NAME[name]}"
    return src.reason("amdsmi_static", "rocmsmi")


def _first_int(*values: int | None) -> int | None:
    return next((v for v in values if v is not None), None)
