"""Pure parsers for rocm-smi: `--json`, the `-a` / `--show*` text sections, the concise table, `--showtopo`.

rocm-smi is upgrade-gate's fallback when amd-smi is missing or fails. Its JSON is built from the same
`key: value` strings as its text (rocm_smi.py `formatJson` splits each log line at `': '` into
`JSON_DATA['card<n>'][key]`), so both forms feed one builder keyed by the printed names; unknown keys
are ignored, known keys are matched case-insensitively, and a key printed twice with different values
is a ParseError. So are two firmware keys that name one block in amd-smi's vocabulary
(`parse.firmware_names`: "SMC" and "smc", or "SMC" and amd-smi's "PM") with different versions, and two
devices that print one PCI Bus (the snapshot joins rocm-smi to the other tools by BDF; amd-smi's listing of
one BDF twice is refused the same way, as a conflict).

Tool quirks (dated notes):
- ROCm 2.x (2019): single-line JSON with only sensor keys (`"Temperature (Sensor mem) (c)"`).
- ROCm 4.3 / 5.7 JSON: `"GPU ID"` (renamed `"Device ID"` in ROCm 6), `"Unique ID": "N/A"`,
  `"Serial Number": "0"` on MI100 (kept as printed: the snapshot builder judges identity),
  `"(Topology) Numa Affinity": "4294967295"` meaning no affinity (-> None), firmware keys
  `"<BLOCK> firmware version"`, `"Driver version"` and flat
  `"(Topology) Weight|Hops|Link type between DRM devices <a> and <b>"` keys under `"system"`;
  anonymous `"0".."15"` clock-level keys and `"PID<n>"` process keys are ignored.
- ROCm 6.0/6.1 `--showproductname --json`: no "Device ID" key; "Card Model" holds the device id beside a
  separate "Subsystem ID" (`_model_id`).
- `WARNING: ...` lines that precede the JSON document on stdout are kept as warnings.
- Text `--showtopo` prints symmetric matrices; an asymmetric pair is a ParseError because the JSON
  form of the same tool only ever reports the upper triangle.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Bdf
from upgrade_gate.parse.common import digits, is_na, load_json, looks_like_json, normalize_bdf
from upgrade_gate.parse.firmware_names import rocmsmi_block
from upgrade_gate.parse.rocmsmi_concise import parse_rocmsmi_concise
from upgrade_gate.parse.rocmsmi_text import Matrix, read_sections
from upgrade_gate.parse.rocmsmi_types import (
    RocmSmiConcise,
    RocmSmiGpu,
    RocmSmiInfo,
    RocmSmiLink,
    RocmSmiTopology,
)

TOOL = "rocm-smi"
_CARD_RE = re.compile(r"^card(\d+)$")
_TOPO_KEY_RE = re.compile(r"^\(Topology\) (Weight|Hops|Link type) between DRM devices (\d+) and (\d+)$", re.I)
_FW_SUFFIX = " firmware version"
_TEXT_KEYS = {
    "gpu id": "device_id",
    "device id": "device_id",
    "device name": "device_name",
    "device rev": "device_rev",
    "subsystem id": "subsystem_id",
    "guid": "guid",
    "unique id": "unique_id",
    "serial number": "serial",
    "vbios version": "vbios",
    "card series": "card_series",
    "card model": "card_model",
    "card vendor": "card_vendor",
    "card sku": "card_sku",
}
_INT_KEYS = {
    "vram total memory (b)": "vram_total_bytes",
    "vram total used memory (b)": "vram_used_bytes",
    "(topology) numa node": "numa_node",
    "(topology) numa affinity": "numa_affinity",
}
_NO_AFFINITY = frozenset({-1, 0xFFFFFFFF})
_MATRIX_FIELDS = {"weight": "weight", "hops": "hops", "link type": "link_type"}
_HEX_ID = re.compile(r"^0x[0-9a-fA-F]{4}$")


def _model_id(model: str | None, subsystem: str | None) -> str | None:
    """The device id a ROCm 6.0/6.1 `--showproductname` prints as "Card Model" (no "Device ID" key).

    That form prints "Subsystem ID" on its own line beside a hex "Card Model" (ROCm/rocm_smi_lib issue
    #159: "Card Model": "0x7408", "Subsystem ID": "0x0b0c" on an MI250X). Before ROCm 6, "Card model"
    is the subsystem (MI100: "0x0c34" beside "GPU ID": "0x738c") or a failed name lookup ("0x1002"), and no
    "Subsystem ID" key is printed: not a device id.
    """
    if model is None or subsystem is None or not _HEX_ID.match(model) or model.lower() == subsystem.lower():
        return None
    return model


Pair = tuple[str, str, int, str]  # (key, value, line_no, raw line)


def _gpu(index: int, pairs: list[Pair], errors: tuple[str, ...], tool: str) -> RocmSmiGpu:
    """Build one GPU from its printed `key: value` pairs."""
    printed: dict[str, tuple[str, int, str]] = {}  # field -> (value, line_no, raw line)
    firmware: dict[str, str] = {}
    blocks: dict[str, tuple[str, str]] = {}  # amd-smi's block name -> (key as printed, version in amd-smi's form)
    fw_na: list[str] = []
    for key, value, line_no, raw in pairs:
        name = " ".join(key.lower().split())
        found = value.strip()
        if name.endswith(_FW_SUFFIX) and len(name) > len(_FW_SUFFIX):
            block = " ".join(key.split())[: -len(_FW_SUFFIX)]
            if is_na(found):
                fw_na.append(f"firmware.{block}")
                continue
            target, version = rocmsmi_block(block, found)
            first, seen = blocks.setdefault(target, (key, version))
            if seen != version:
                what = (
                    f"{key!r} printed twice with different values"
                    if " ".join(first.lower().split()) == name
                    else f"{first!r} and {key!r} name one block (amd-smi's firmware {target}) with different values"
                )
                raise ParseError(tool, line_no, raw, f"GPU[{index}] {what}")
            if first == key:
                firmware.setdefault(block, found)
            continue
        field = _TEXT_KEYS.get(name) or _INT_KEYS.get(name) or ("bdf" if name == "pci bus" else None)
        if field is None:
            continue
        if printed.setdefault(field, (found, line_no, raw))[0] != found:
            raise ParseError(tool, line_no, raw, f"GPU[{index}] {key!r} printed twice with different values")
    na = [field for field, (value, _, _) in printed.items() if is_na(value)] + fw_na
    known = {field: entry for field, entry in printed.items() if field not in na}

    def text(field: str) -> str | None:
        return known[field][0] if field in known else None

    def number(field: str) -> int | None:
        if field not in known:
            return None
        value, line_no, raw = known[field]
        if not re.fullmatch(r"-?\d{1,20}", value):
            raise ParseError(tool, line_no, raw, f"expected an integer for {field}")
        return int(value)

    bdf = None
    if "bdf" in known:
        bdf = normalize_bdf(known["bdf"][0], tool=tool, line_no=known["bdf"][1])
    affinity = number("numa_affinity")
    if affinity in _NO_AFFINITY:
        affinity = None
        na.append("numa_affinity")
    return RocmSmiGpu(
        index=index,
        device_id=text("device_id") or _model_id(text("card_model"), text("subsystem_id")),
        device_name=text("device_name"),
        device_rev=text("device_rev"),
        subsystem_id=text("subsystem_id"),
        guid=text("guid"),
        unique_id=text("unique_id"),
        serial=text("serial"),
        bdf=bdf,
        vbios=text("vbios"),
        card_series=text("card_series"),
        card_model=text("card_model"),
        card_vendor=text("card_vendor"),
        card_sku=text("card_sku"),
        firmware=firmware,
        vram_total_bytes=number("vram_total_bytes"),
        vram_used_bytes=number("vram_used_bytes"),
        numa_node=number("numa_node"),
        numa_affinity=affinity,
        errors=errors,
        na_fields=tuple(na),
    )


def _link_value(field: str, value: str, *, tool: str, line_no: int, raw: str) -> int | str | None:
    if is_na(value):
        return None
    if field == "link_type":
        if not value.isalpha():
            raise ParseError(tool, line_no, raw, f"unexpected link type {value!r}")
        return value.upper()
    if not digits(value):
        raise ParseError(tool, line_no, raw, f"expected an integer {field}")
    return int(value)


def _links(found: dict[tuple[int, int], dict[str, int | str | None]]) -> tuple[RocmSmiLink, ...]:
    out = []
    for (a, b), fields in sorted(found.items()):
        weight, hops, kind = fields.get("weight"), fields.get("hops"), fields.get("link_type")
        out.append(
            RocmSmiLink(
                a=a,
                b=b,
                weight=weight if isinstance(weight, int) else None,
                hops=hops if isinstance(hops, int) else None,
                link_type=kind if isinstance(kind, str) else None,
            )
        )
    return tuple(out)


def _matrix_links(
    matrices: list[Matrix], tool: str
) -> tuple[dict[tuple[int, int], dict[str, int | str | None]], list[str]]:
    found: dict[tuple[int, int], dict[str, int | str | None]] = {}
    names: list[str] = []
    for matrix in matrices:
        title = matrix.title.lower()
        field = next((f for prefix, f in _MATRIX_FIELDS.items() if title.startswith(prefix)), None)
        if field is None:
            continue
        names.append(field)
        rows = {label: (line_no, cells, raw) for line_no, label, cells, raw in matrix.rows}
        if sorted(rows) != sorted(matrix.labels) or len(rows) != len(matrix.rows):
            raise ParseError(tool, matrix.line_no, matrix.title, "matrix rows do not match its columns")
        for i, a in enumerate(matrix.labels):
            for j, b in enumerate(matrix.labels):
                if a >= b:
                    continue
                line_no, cells, raw = rows[a]
                if cells[j] != rows[b][1][i]:
                    raise ParseError(tool, line_no, raw, f"{field} of GPU{a}/GPU{b} differs by direction")
                value = _link_value(field, cells[j], tool=tool, line_no=line_no, raw=raw)
                found.setdefault((a, b), {})[field] = value
    return found, names


def _json_info(text: str, warnings: tuple[str, ...]) -> RocmSmiInfo:
    doc = load_json(text, tool=TOOL)
    if not isinstance(doc, Mapping):
        raise ParseError(TOOL, 0, text[:80], "expected a JSON object of cards")
    gpus = []
    driver: str | None = None
    found: dict[tuple[int, int], dict[str, int | str | None]] = {}
    for name, body in doc.items():
        if not isinstance(body, Mapping):
            raise ParseError(TOOL, 0, f"{name}={body!r}"[:120], "expected an object of values")
        pairs = [(str(k), _scalar(v, f"{name}.{k}"), 0, f"{name}.{k}") for k, v in body.items()]
        card = _CARD_RE.match(str(name))
        if card:
            gpus.append(_gpu(int(card.group(1)), pairs, (), TOOL))
        elif name == "system":
            for key, value, _, raw in pairs:
                topo = _TOPO_KEY_RE.match(key)
                if topo:
                    field = _MATRIX_FIELDS[topo.group(1).lower()]
                    a, b = sorted((int(topo.group(2)), int(topo.group(3))))
                    found.setdefault((a, b), {})[field] = _link_value(field, value, tool=TOOL, line_no=0, raw=raw)
                elif key.lower() == "driver version":
                    driver = None if is_na(value) else value.strip()
    if not gpus and driver is None and not found:
        raise ParseError(TOOL, 0, text[:80], "no card or system data")
    ordered = tuple(sorted(gpus, key=lambda g: g.index))
    _one_device_per_bus(ordered, lambda i: f"card{i}")
    return RocmSmiInfo(
        form="json",
        gpus=ordered,
        driver_version=driver,
        links=_links(found),
        warnings=warnings,
    )


def _one_device_per_bus(gpus: tuple[RocmSmiGpu, ...], label: Callable[[int], str]) -> None:
    """Two devices that print one PCI Bus cannot both be that GPU: the snapshot joins tools by BDF, so
    either would silently stand for the other (a duplicate card hiding another's firmware). Partitions
    differ in the function and are distinct BDFs."""
    owner: dict[Bdf, int] = {}
    for gpu in gpus:
        if gpu.bdf is None:
            continue
        first = owner.setdefault(gpu.bdf, gpu.index)
        if first != gpu.index:
            raise ParseError(
                TOOL,
                0,
                f"{label(gpu.index)}: PCI Bus: {gpu.bdf}",
                f"{label(first)} and {label(gpu.index)} both print PCI Bus {gpu.bdf}: conflicting evidence for one GPU",
            )


def _scalar(value: object, path: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise ParseError(TOOL, 0, f"{path}={value!r}"[:120], "expected a string value")


def _text_info(text: str) -> RocmSmiInfo:
    sections = read_sections(text, tool=TOOL)
    by_gpu: dict[int, list[Pair]] = {}
    errors: dict[int, list[str]] = {}
    for entry in sections.entries:
        by_gpu.setdefault(entry.index, [])
        if entry.error:
            errors.setdefault(entry.index, []).append(f"{entry.section}: {entry.value}")
        elif entry.key is not None and entry.value is not None:
            by_gpu[entry.index].append((entry.key, entry.value, entry.line_no, entry.raw))
    driver = None
    for _, _, line in sections.free:
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "driver version" and value.strip():
            driver = None if is_na(value) else value.strip()
    found, _ = _matrix_links(sections.matrices, TOOL)
    if not by_gpu and driver is None and not found:
        raise ParseError(TOOL, 0, text[:80], "no rocm-smi GPU data")
    gpus = tuple(_gpu(i, by_gpu[i], tuple(errors.get(i, ())), TOOL) for i in sorted(by_gpu))
    _one_device_per_bus(gpus, lambda i: f"GPU {i}")
    return RocmSmiInfo(
        form="text", gpus=gpus, driver_version=driver, links=_links(found), warnings=tuple(sections.warnings)
    )


def parse_rocmsmi(text: str) -> RocmSmiInfo:
    """`rocm-smi ... --json` or its `-a` / `--show*` text sections: identity, firmware, topology."""
    lines = text.splitlines(keepends=True)
    warnings: list[str] = []
    while lines and (lines[0].startswith("WARNING") or not lines[0].strip()):
        if lines[0].strip():
            warnings.append(lines[0].strip().removeprefix("WARNING:").strip())
        lines.pop(0)
    if looks_like_json("".join(lines)):
        return _json_info("".join(lines), tuple(warnings))
    return _text_info(text)


def parse_rocmsmi_showtopo(text: str) -> RocmSmiTopology:
    """`rocm-smi --showtopo` text: weight / hops / link-type matrices and NUMA nodes per GPU."""
    tool = "rocm-smi-showtopo"
    sections = read_sections(text, tool=tool)
    found, names = _matrix_links(sections.matrices, tool)
    if not names:
        raise ParseError(tool, 0, text[:80], "no topology matrix")
    labels = sorted({label for matrix in sections.matrices for label in matrix.labels})
    by_gpu: dict[int, list[Pair]] = {}
    for entry in sections.entries:
        if entry.key is not None and entry.value is not None and entry.key.lower().startswith("(topology)"):
            by_gpu.setdefault(entry.index, []).append((entry.key, entry.value, entry.line_no, entry.raw))
    return RocmSmiTopology(
        gpus=tuple(labels),
        links=_links(found),
        numa=tuple(_gpu(i, by_gpu[i], (), tool) for i in sorted(by_gpu)),
        matrices=tuple(names),
        warnings=tuple(sections.warnings),
    )


PARSERS: dict[str, Callable[[str], object]] = {
    "rocm-smi": parse_rocmsmi,
    "rocm-smi-concise": parse_rocmsmi_concise,
    "rocm-smi-showtopo": parse_rocmsmi_showtopo,
}

__all__ = [
    "PARSERS",
    "RocmSmiConcise",
    "RocmSmiGpu",
    "RocmSmiInfo",
    "RocmSmiLink",
    "RocmSmiTopology",
    "parse_rocmsmi",
    "parse_rocmsmi_concise",
    "parse_rocmsmi_showtopo",
]
