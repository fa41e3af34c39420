"""Parser for rocm-smi's concise default table (`rocm-smi` without arguments).

Columns are located by the header row (cells separated by two or more spaces, so
`[Model : Revision]` stays one column) and each data row is cut at those positions
(`common.slice_row`); values are interpreted by column name, unknown columns are ignored.

Layouts (dated notes):
- ROCm 2.x (2019): `GPU  Temp  AvgPwr  SCLK  MCLK  Fan  Perf  PwrCap  VRAM%  GPU%`, "38.0c", fan
  "21.96%", no sub-header and no separator before the rows.
- ROCm 6.0/6.1: `Device  [Model : Revision]  Temp  Power  Partitions (Mem, Compute) ...`; each
  device row is followed by an indented row holding the device name cut to 20 characters
  ("Navi 33 [Radeon RX 7"); unsupported values print as `None` / `Unsupported` / `N/A`.
- ROCm 6.2+: `Device  Node  IDs (DID, GUID)  Temp (Junction)  Power (Socket)  Partitions
  (Mem, Compute, ID) ...`; partitioned GPUs print one row per partition ("NPS1, TPX, 2"). ROCm 6.2.3
  wrapped the sub-header in `ESC[3m`...`ESC[0m` (seen in caret notation `^[3m`); column widths change
  with the values (dynamic), so nothing here assumes fixed positions.
"""

from __future__ import annotations

import re

from upgrade_gate.errors import ParseError
from upgrade_gate.parse.common import digits, header_columns, is_na, slice_row, strip_ansi
from upgrade_gate.parse.rocmsmi_types import RocmSmiConcise, RocmSmiConciseRow

TOOL = "rocm-smi-concise"
_RULE_RE = re.compile(r"^=+(?:[^=]*=+)?\s*$")
_WARNING_RE = re.compile(r"^WARNING:?\s*(?P<message>.*?)\s*$")
_NUMBER_RE = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(\S*)$")
_MISSING = frozenset({"n/a", "none", "unsupported"})
_UNITS = {"temp_c": ("c", "°c"), "power": ("w",), "clock": ("mhz",), "percent": ("%",)}


class _Row:
    """Mutable accumulator for one row while its cells are read."""

    def __init__(self, line_no: int, line: str) -> None:
        self.line_no = line_no
        self.line = line
        self.values: dict[str, object] = {}
        self.na: list[str] = []

    def fail(self, message: str) -> ParseError:
        return ParseError(TOOL, self.line_no, self.line, message)

    def missing(self, cell: str, name: str) -> bool:
        if not cell.strip():
            raise self.fail(f"empty {name} cell")
        if cell.strip().lower() in _MISSING:
            self.na.append(name)
            return True
        return False

    def number(self, cell: str, name: str, kind: str) -> None:
        if self.missing(cell, name):
            return
        match = _NUMBER_RE.match(cell)
        if match is None or match.group(2).lower() not in _UNITS[kind]:
            raise self.fail(f"unexpected {name} value {cell!r}")
        self.values[name] = float(match.group(1))


def _ids(row: _Row, cell: str) -> None:
    if row.missing(cell, "device_id"):
        return
    did, sep, guid = cell.partition(",")
    if not sep:
        raise row.fail(f"expected 'DID, GUID', got {cell!r}")
    row.values["device_id"] = did.strip() or None
    row.values["guid"] = None if is_na(guid) else guid.strip() or None


def _model(row: _Row, cell: str) -> None:
    if row.missing(cell, "device_id"):
        return
    if not cell.startswith("[") or " : " not in cell:
        raise row.fail(f"expected '[model : revision]', got {cell!r}")
    model, _, revision = cell[1:].rstrip("]").partition(" : ")
    row.values["device_id"] = model.strip()
    row.values["revision"] = revision.strip() or None


def _partitions(row: _Row, cell: str) -> None:
    parts = [part.strip() for part in cell.split(",")]
    if len(parts) not in (2, 3):
        raise row.fail(f"expected 'Mem, Compute[, ID]', got {cell!r}")
    for name, part in zip(("memory_partition", "compute_partition"), parts, strict=False):
        if not row.missing(part, name):
            row.values[name] = part
    if len(parts) == 3 and not row.missing(parts[2], "partition_id"):
        if not digits(parts[2]):
            raise row.fail(f"expected a partition id, got {parts[2]!r}")
        row.values["partition_id"] = int(parts[2])


def _integer(row: _Row, cell: str, name: str) -> None:
    if row.missing(cell, name):
        return
    if not digits(cell):
        raise row.fail(f"expected an integer {name}, got {cell!r}")
    row.values[name] = int(cell)


def _read_cell(row: _Row, column: str, cell: str) -> None:
    key = column.lower()
    if key in ("device", "gpu"):
        if not digits(cell):
            raise row.fail(f"expected a device index, got {cell!r}")
        row.values["device"] = int(cell)
    elif key == "node":
        _integer(row, cell, "node")
    elif key == "ids":
        _ids(row, cell)
    elif key.startswith("[model"):
        _model(row, cell)
    elif key == "temp":
        row.number(cell, "temp_c", "temp_c")
    elif key in ("power", "avgpwr"):
        row.number(cell, "power_w", "power")
    elif key == "pwrcap":
        row.number(cell, "power_cap_w", "power")
    elif key in ("sclk", "mclk"):
        row.number(cell, f"{key}_mhz", "clock")
    elif key == "fan":
        row.number(cell, "fan_percent", "percent")
    elif key in ("vram%", "gpu%"):
        row.number(cell, f"{key[:-1]}_percent", "percent")
    elif key == "partitions":
        _partitions(row, cell)
    elif key == "perf" and not row.missing(cell, "perf"):
        row.values["perf"] = cell


def _build(row: _Row) -> RocmSmiConciseRow:
    values = row.values
    device = values.get("device")
    if not isinstance(device, int):
        raise row.fail("row without a device index")

    def text(name: str) -> str | None:
        value = values.get(name)
        return value if isinstance(value, str) else None

    def number(name: str) -> float | None:
        value = values.get(name)
        return value if isinstance(value, float) else None

    node, partition_id = values.get("node"), values.get("partition_id")
    return RocmSmiConciseRow(
        device=device,
        node=node if isinstance(node, int) else None,
        device_id=text("device_id"),
        guid=text("guid"),
        revision=text("revision"),
        name=text("name"),
        temp_c=number("temp_c"),
        power_w=number("power_w"),
        memory_partition=text("memory_partition"),
        compute_partition=text("compute_partition"),
        partition_id=partition_id if isinstance(partition_id, int) else None,
        sclk_mhz=number("sclk_mhz"),
        mclk_mhz=number("mclk_mhz"),
        fan_percent=number("fan_percent"),
        perf=text("perf"),
        power_cap_w=number("power_cap_w"),
        vram_percent=number("vram_percent"),
        gpu_percent=number("gpu_percent"),
        na_fields=tuple(row.na),
    )


def parse_rocmsmi_concise(text: str) -> RocmSmiConcise:
    """The concise `rocm-smi` table: one row per device (or compute partition)."""
    lines = list(enumerate(strip_ansi(text).splitlines(), start=1))
    warnings: list[str] = []
    pos = 0
    while pos < len(lines):
        line_no, line = lines[pos]
        columns = header_columns(line, min_gap=2)
        if columns and columns[0][1] in ("Device", "GPU") and len(columns) >= 4:
            break
        warning = _WARNING_RE.match(line)
        if warning:
            warnings.append(warning.group("message"))
        elif line.strip() and not _RULE_RE.match(line):
            raise ParseError(TOOL, line_no, line, "expected the concise table header")
        pos += 1
    else:
        raise ParseError(TOOL, 0, text[:80], "no concise table header")
    names = [name for _, name in columns]
    starts = [start for start, _ in columns]
    model_col = next((i for i, name in enumerate(names) if name.lower().startswith("[model")), None)
    pos += 1
    if pos < len(lines) and lines[pos][1][:1].isspace() and lines[pos][1].strip():
        pos += 1  # sub-header: units and sensor names
    if pos < len(lines) and _RULE_RE.match(lines[pos][1]):
        pos += 1
    rows: list[_Row] = []
    while pos < len(lines) and lines[pos][1].strip() and not _RULE_RE.match(lines[pos][1]):
        line_no, line = lines[pos]
        cells = slice_row(line, starts, tool=TOOL, line_no=line_no)
        if not cells[0]:
            others = [cell for i, cell in enumerate(cells) if i != model_col and cell]
            if model_col is None or not rows or others or "name" in rows[-1].values:
                raise ParseError(TOOL, line_no, line, "row without a device index")
            rows[-1].values["name"] = cells[model_col]
        else:
            row = _Row(line_no, line)
            for name, cell in zip(names, cells, strict=True):
                _read_cell(row, name, cell)
            rows.append(row)
        pos += 1
    for line_no, line in lines[pos:]:
        warning = _WARNING_RE.match(line)
        if warning:
            warnings.append(warning.group("message"))
        elif line.strip() and not _RULE_RE.match(line):
            raise ParseError(TOOL, line_no, line, "unexpected line after the concise table")
    if not rows:
        raise ParseError(TOOL, 0, text[:80], "concise table without rows")
    built = [_build(row) for row in rows]
    if len({row.device for row in built}) != len(built):
        raise ParseError(TOOL, 0, text[:80], "device index printed twice")
    return RocmSmiConcise(columns=tuple(names), rows=tuple(built), warnings=tuple(warnings))
