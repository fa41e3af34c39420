"""Parser for `nvidia-smi -q -x`: every GPU's identity, firmware, MIG, ECC and clock-event state.

Design notes and tool quirks:
- The document is read with expat into a small tree that keeps each element's line, so a refusal names
  the line of the value at fault. Only the elements the gate needs are read; the rest (clocks, power,
  processes) is ignored, so a new DTD that adds elements still parses.
- XML from nvidia-smi never declares entities: a DOCTYPE with an internal subset or an entity
  declaration is refused before anything is expanded (no entity-expansion bombs). The DOCTYPE's system
  id names the schema generation (`nvsmi_device_v11.dtd` .. `v13`), kept as `dtd`.
- DTD v12 (driver R535) renamed `<clocks_throttle_reasons>` / `clocks_throttle_reason_*` to
  `<clocks_event_reasons>` / `clocks_event_reason_*`; both are read, the element name is kept in
  `clock_reasons_element`, and the reasons are named without the prefix ("sw_power_cap").
- `attached_gpus` may exceed the `<gpu>` elements (`nvidia-smi -q -x -i 0`, and the corpus' telegraf
  fixture trimmed to one of four GPUs): kept as printed, `NvidiaSmiLog.complete` tells the two apart.
- A value is read only in its expected shape: a UUID is `GPU-` and five hex groups, a BDF goes through
  `PciAddress`, counters are integers, modes are from a closed set (Enabled/Disabled, Active/Not
  Active, Yes/No). `N/A` is None named in `na_fields`. Anything else where a value belongs (an error text
  such as "Unknown Error", a value wrapped over two lines) is a ParseError naming the element, never a value.
- Sanity cap: more than 100,000 elements is refused as it is met (a real log holds ~1,000 per GPU), so a
  16 MiB document of empty elements costs no more than the cap (peak 1,195 MB before the cap).
- Before the document: nvidia-smi's failure messages (`nvidia_smi_messages`) are refused by name; any
  other text (a shell prompt, a banner) is refused as "text before the XML document". ANSI remnants are
  stripped first, as in every parser (`common.strip_ansi`). Truncation is expat's "no element found".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from xml.parsers import expat

from upgrade_gate.errors import ParseError
from upgrade_gate.parse.common import digits, normalize_bdf, strip_ansi
from upgrade_gate.parse.nvidia_smi_messages import refuse_messages
from upgrade_gate.parse.nvidia_smi_types import (
    EccState,
    MigDevice,
    NvidiaGpu,
    NvidiaSmiLog,
    RemappedRows,
    RetiredPages,
)
from upgrade_gate.parse.sanity import error_text

TOOL = "nvidia-smi-q-x"

_UUID_RE = re.compile(r"^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_TOKEN_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]*$")  # serials, VBIOS, inforom and GSP versions
_NV_ERROR_RE = re.compile(r"\berror\b|requires reset|not supported|insufficient permissions|^\[.*\]$", re.I)
_SIZE_MIB_RE = re.compile(r"^(\d+) MiB$")
_WIDTH_RE = re.compile(r"^(\d+)x$")
_MAX_ELEMENTS = 100_000  # a 1-GPU log holds ~1,000 elements; 16 MiB of `<a/>` would be 4M tree nodes (1.2 GB)
_MODES = frozenset({"Enabled", "Disabled"})
_COMPUTE_MODES = frozenset({"Default", "Exclusive_Thread", "Prohibited", "Exclusive_Process"})
"""`<compute_mode>` as nvidia-smi prints NVML's nvmlComputeMode_t (DEFAULT, EXCLUSIVE_THREAD (support removed),
PROHIBITED, EXCLUSIVE_PROCESS); the three fixtures print "Default". Another word is a ParseError, not a guess."""
_YES_NO = {"Yes": True, "No": False}
_REASON_STATES = {"Active": True, "Not Active": False}


@dataclass(slots=True)
class _Node:
    tag: str
    line: int
    attrs: dict[str, str]
    children: list[_Node] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def child(self, tag: str) -> _Node | None:
        return next((c for c in self.children if c.tag == tag), None)

    def find(self, path: str) -> _Node | None:
        node: _Node | None = self
        for tag in path.split("/"):
            node = node.child(tag) if node is not None else None
        return node


def _build_tree(text: str) -> tuple[_Node, str | None]:
    """The document's root element and the DOCTYPE's system id; ParseError for anything expat refuses."""
    parser = expat.ParserCreate()
    stack: list[_Node] = []
    root: list[_Node] = []
    doctype: list[str | None] = []

    count = [0]

    def start(tag: str, attrs: dict[str, str]) -> None:
        count[0] += 1
        if count[0] > _MAX_ELEMENTS:
            raise ParseError(TOOL, parser.CurrentLineNumber, f"<{tag}>", f"more than {_MAX_ELEMENTS} XML elements")
        node = _Node(tag, parser.CurrentLineNumber, attrs)
        (stack[-1].children if stack else root).append(node)
        stack.append(node)

    def end(_tag: str) -> None:
        stack.pop()

    def chars(data: str) -> None:
        if stack:
            stack[-1].parts.append(data)

    def doctype_start(_name: str, sysid: str | None, _pubid: str | None, has_internal: int) -> None:
        if has_internal:
            raise ParseError(TOOL, parser.CurrentLineNumber, "<!DOCTYPE ... [", "DOCTYPE with an internal subset")
        doctype.append(sysid)

    def entity(*_args: Any) -> None:
        raise ParseError(TOOL, parser.CurrentLineNumber, "<!ENTITY", "entity declaration (nvidia-smi declares none)")

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = chars
    parser.StartDoctypeDeclHandler = doctype_start
    parser.EntityDeclHandler = entity
    try:
        parser.Parse(text, True)
    except expat.ExpatError as exc:
        lines = text.splitlines()
        excerpt = lines[exc.lineno - 1] if 0 < exc.lineno <= len(lines) else text[-80:]
        what = (
            "truncated XML document"
            if exc.code == expat.errors.codes[expat.errors.XML_ERROR_NO_ELEMENTS]
            else "not XML"
        )
        raise ParseError(TOOL, exc.lineno, excerpt, f"{what}: {expat.errors.messages[exc.code]}") from None
    if not root:
        raise ParseError(TOOL, 0, text[:80], "no XML element")
    return root[0], (doctype[0] if doctype else None)


def _refuse_preamble(text: str) -> None:
    lines = text.splitlines()
    refuse_messages(lines, TOOL)
    for no, line in enumerate(lines, 1):
        if line.strip():
            if not line.lstrip().startswith("<"):
                raise ParseError(TOOL, no, line, "text before the XML document (a shell prompt or a message)")
            return
    raise ParseError(TOOL, 0, "", "empty output")


class _Reader:
    """Reads one `<gpu>`'s leaves in their expected shapes, collecting the N/A ones."""

    def __init__(self, gpu: _Node) -> None:
        self.gpu = gpu
        self.na: list[str] = []

    def raw(self, path: str, node: _Node | None = None) -> tuple[str, int] | None:
        """The stripped text at `path` and its line, None where absent or N/A (recorded)."""
        leaf = (node or self.gpu).find(path)
        if leaf is None:
            return None
        if leaf.children:
            raise ParseError(TOOL, leaf.line, f"<{leaf.tag}>", f"<{path}> holds elements where a value belongs")
        value = leaf.text.strip()
        if value == "N/A":
            self.na.append(path if node is None else f"{node.tag}/{path}")
            return None
        if "\n" in value:
            raise ParseError(TOOL, leaf.line, value.replace("\n", "\\n"), f"<{path}> value wrapped over lines")
        problem = error_text(value) or ("error text" if _NV_ERROR_RE.search(value) else None)
        if problem is not None:
            raise ParseError(TOOL, leaf.line, value, f"<{path}> holds an error text, not a value ({problem})")
        return value, leaf.line

    def shaped(self, path: str, check: Callable[[str], bool], what: str, node: _Node | None = None) -> str | None:
        got = self.raw(path, node)
        if got is None:
            return None
        value, line = got
        if not check(value):
            raise ParseError(TOOL, line, value, f"<{path}> is not {what}")
        return value

    def integer(self, path: str, node: _Node | None = None, *, regex: re.Pattern[str] | None = None) -> int | None:
        got = self.raw(path, node)
        if got is None:
            return None
        value, line = got
        match = regex.match(value) if regex else None
        number = match.group(1) if match else value
        if not digits(number) or len(number) > 18:
            raise ParseError(TOOL, line, value, f"<{path}> is not a count")
        return int(number)

    def choice(self, path: str, allowed: dict[str, bool] | frozenset[str], node: _Node | None = None) -> str | None:
        return self.shaped(path, lambda v: v in allowed, f"one of {sorted(allowed)}", node)

    def flag(self, path: str, node: _Node | None = None) -> bool | None:
        value = self.choice(path, _YES_NO, node)
        return None if value is None else _YES_NO[value]


def _token(value: str) -> bool:
    return bool(_TOKEN_RE.match(value))


def _firmware(reader: _Reader) -> dict[str, str]:
    blocks = {
        "inforom.img": "inforom_version/img_version",
        "inforom.oem": "inforom_version/oem_object",
        "inforom.ecc": "inforom_version/ecc_object",
        "inforom.pwr": "inforom_version/pwr_object",
        "gsp": "gsp_firmware_version",
    }
    out: dict[str, str] = {}
    for block, path in blocks.items():
        value = reader.shaped(path, _token, "a firmware version")
        if value is not None:
            out[block] = value
    return out


def _mig_devices(reader: _Reader) -> tuple[MigDevice, ...]:
    container = reader.gpu.child("mig_devices")
    if container is None:
        return ()
    devices: list[MigDevice] = []
    for node in container.children:
        if node.tag != "mig_device":
            continue
        index = reader.integer("index", node)
        if index is None:
            raise ParseError(TOOL, node.line, "<mig_device>", "MIG device without an index")
        devices.append(
            MigDevice(
                index=index,
                gpu_instance_id=reader.integer("gpu_instance_id", node),
                compute_instance_id=reader.integer("compute_instance_id", node),
                multiprocessor_count=reader.integer("device_attributes/shared/multiprocessor_count", node),
                memory_total_mib=reader.integer("fb_memory_usage/total", node, regex=_SIZE_MIB_RE),
            )
        )
    return tuple(devices)


def _counters(reader: _Reader, section: _Node | None) -> dict[str, int]:
    if section is None:
        return {}
    out: dict[str, int] = {}
    for leaf in section.children:
        if leaf.children:
            continue
        if leaf.tag.endswith("_exceeded"):  # DTD v13 `sram_threshold_exceeded`: Yes/No, not a count
            reader.flag(leaf.tag, section)
            continue
        value = reader.integer(leaf.tag, section)
        if value is not None:
            out[leaf.tag] = value
    return out


def _ecc(reader: _Reader) -> EccState | None:
    mode, errors = reader.gpu.child("ecc_mode"), reader.gpu.child("ecc_errors")
    if mode is None and errors is None:
        return None
    return EccState(
        current_mode=reader.choice("ecc_mode/current_ecc", _MODES),
        pending_mode=reader.choice("ecc_mode/pending_ecc", _MODES),
        volatile=_counters(reader, errors.child("volatile") if errors else None),
        aggregate=_counters(reader, errors.child("aggregate") if errors else None),
    )


def _retired(reader: _Reader) -> RetiredPages | None:
    if reader.gpu.child("retired_pages") is None:
        return None
    return RetiredPages(
        single_bit_count=reader.integer("retired_pages/multiple_single_bit_retirement/retired_count"),
        double_bit_count=reader.integer("retired_pages/double_bit_retirement/retired_count"),
        pending=reader.flag("retired_pages/pending_retirement"),
    )


def _remapped(reader: _Reader) -> RemappedRows | None:
    node = reader.gpu.child("remapped_rows")
    if node is None:
        return None
    if not node.children:
        reader.raw("remapped_rows")  # "N/A" (recorded) or refused
        return None
    return RemappedRows(
        correctable=reader.integer("remapped_rows/remapped_row_corr"),
        uncorrectable=reader.integer("remapped_rows/remapped_row_unc"),
        pending=reader.flag("remapped_rows/remapped_row_pending"),
        failure=reader.flag("remapped_rows/remapped_row_failure"),
    )


def _clock_reasons(reader: _Reader) -> tuple[str | None, tuple[str, ...]]:
    for element, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ):
        node = reader.gpu.child(element)
        if node is None:
            continue
        active = [
            leaf.tag.removeprefix(prefix)
            for leaf in node.children
            if not leaf.children and reader.choice(f"{element}/{leaf.tag}", _REASON_STATES) == "Active"
        ]
        return element, tuple(active)
    return None, ()


def _pci_ids(reader: _Reader) -> tuple[str | None, str | None]:
    raw = reader.shaped("pci/pci_device_id", lambda v: bool(re.fullmatch(r"[0-9A-Fa-f]{8}", v)), "8 hex digits")
    if raw is None:
        return None, None
    return f"0x{raw[:4].lower()}", f"0x{raw[4:].lower()}"


def _gpu(index: int, node: _Node) -> NvidiaGpu:
    reader = _Reader(node)
    bus_id = node.attrs.get("id") or ""
    bdf = normalize_bdf(bus_id, tool=TOOL, line_no=node.line)
    printed = reader.shaped("pci/pci_bus_id", lambda v: True, "a PCI address")
    if printed is not None and normalize_bdf(printed, tool=TOOL, line_no=node.line) != bdf:
        raise ParseError(TOOL, node.line, printed, f"<pci_bus_id> differs from the <gpu id> {bus_id!r}")
    device_id, vendor_id = _pci_ids(reader)
    element, active = _clock_reasons(reader)
    return NvidiaGpu(
        index=index,
        bdf=bdf,
        minor_number=reader.integer("minor_number"),
        product_name=reader.shaped("product_name", lambda v: True, "a name"),
        architecture=reader.shaped("product_architecture", lambda v: True, "an architecture name"),
        serial=reader.shaped("serial", _token, "a serial number"),
        uuid=reader.shaped("uuid", lambda v: bool(_UUID_RE.match(v)), "a GPU UUID"),
        vbios=reader.shaped("vbios_version", _token, "a VBIOS version"),
        firmware=_firmware(reader),
        device_id=device_id,
        vendor_id=vendor_id,
        subsystem_id=reader.shaped("pci/pci_sub_system_id", _token, "a subsystem id"),
        board_part_number=reader.shaped("board_part_number", _token, "a part number"),
        module_id=reader.integer("gpu_module_id"),
        compute_mode=reader.choice("compute_mode", _COMPUTE_MODES),
        mig_current=reader.choice("mig_mode/current_mig", _MODES),
        mig_pending=reader.choice("mig_mode/pending_mig", _MODES),
        mig_devices=_mig_devices(reader),
        ecc=_ecc(reader),
        retired_pages=_retired(reader),
        remapped_rows=_remapped(reader),
        clock_reasons_element=element,
        clock_reasons_active=active,
        pcie_gen_current=reader.integer("pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
        pcie_gen_max=reader.integer("pci/pci_gpu_link_info/pcie_gen/max_link_gen"),
        pcie_width_current=reader.integer("pci/pci_gpu_link_info/link_widths/current_link_width", regex=_WIDTH_RE),
        pcie_width_max=reader.integer("pci/pci_gpu_link_info/link_widths/max_link_width", regex=_WIDTH_RE),
        fb_total_mib=reader.integer("fb_memory_usage/total", regex=_SIZE_MIB_RE),
        fabric_state=reader.shaped("fabric/state", lambda v: True, "a fabric state"),
        fabric_status=reader.shaped("fabric/status", lambda v: True, "a fabric status"),
        reset_required=reader.flag("gpu_reset_status/reset_required"),
        na_fields=tuple(reader.na),
    )


def parse_nvidia_smi_xml(text: str) -> NvidiaSmiLog:
    """Parse `nvidia-smi -q -x` output into an `NvidiaSmiLog`; ParseError naming the line at fault."""
    text = strip_ansi(text)
    _refuse_preamble(text)
    root, dtd_path = _build_tree(text)
    if root.tag != "nvidia_smi_log":
        raise ParseError(TOOL, root.line, f"<{root.tag}>", "not an nvidia-smi log (root is not <nvidia_smi_log>)")
    top = _Reader(root)
    attached = top.integer("attached_gpus")
    if attached is None:
        raise ParseError(TOOL, root.line, "<nvidia_smi_log>", "no <attached_gpus>")
    gpus = tuple(_gpu(i, node) for i, node in enumerate(n for n in root.children if n.tag == "gpu"))
    if len(gpus) > attached:
        raise ParseError(TOOL, root.line, f"{attached}", f"{len(gpus)} <gpu> elements but attached_gpus {attached}")
    if len({g.bdf for g in gpus}) != len(gpus):
        raise ParseError(TOOL, root.line, "<gpu id>", "two <gpu> elements with the same PCI address")
    return NvidiaSmiLog(
        dtd=dtd_path,
        timestamp=top.shaped("timestamp", lambda v: True, "a timestamp"),
        driver_version=top.shaped("driver_version", _token, "a driver version"),
        cuda_version=top.shaped("cuda_version", _token, "a CUDA version"),
        attached_gpus=attached,
        gpus=gpus,
    )


PARSERS: dict[str, Callable[[str], object]] = {TOOL: parse_nvidia_smi_xml}
