"""Parser for `amd-smi monitor` tables: power, temperature and utilisation per GPU (the thermal sampling of
phase 2, the utilisation sampling of phase 6).

`amd-smi monitor -p -t` prints one header row and one row per GPU (per XCP where the tool splits a
device); amd-smi builds both with `str.rjust` per column (amdsmi_commands.py `monitor`: `"POWER".rjust(7)`,
`"GPU_T".rjust(8)`, ...), so every cell is right-aligned under its header. Cells are therefore cut at
the header cells' right edges (a value longer than its header grows to the left, never past the previous
header); a cell that straddles an edge is a ParseError, never a guess. Unknown columns are ignored;
values are read by column name and unit:
- `POWER` (W): `current_socket_power` of the GPU metrics table, `average_socket_power` on older tables;
- `PWR_CAP` (W): the socket power cap, printed with `-p` outside the default output;
- `GPU_T` / `GPU_TEMP` (°C): `temperature_hotspot` (the junction sensor; APUs fall back to the GFX
  temperature); `MEM_T` / `MEM_TEMP` (°C): `temperature_mem` (HBM);
- `GFX%` / `GFX_UTIL` (%): `gfx_activity` (the graphics engine busy share); `MEM%` / `MEM_UTIL` (%):
  `umc_activity` (the memory controller busy share), printed by `-u` (and in the default output);
- `TIMESTAMP` (epoch seconds, `--watch` only), `GPU`, `XCP`.
`N/A` is a missing value (kept as None, named in `na_fields`), never zero.

Tool quirks (dated notes):
- 2024 (ROCm 6.2-era amd-smi, AMD blog "Getting to Know Your GPU"): headers `GPU_TEMP  MEM_TEMP`,
  `GFX_UTIL`, `MEM_UTIL`; values "42 °C", "182 W".
- 2025 (ROCm 7.0, corpus mi350x-8gpu-monitor-putm): `GPU  POWER  PWR_CAP   GPU_T   MEM_T ...`; the
  utilisation columns are `GFX%  MEM%` with values "100 %", "0 %" (the 2024 `GFX_UTIL`/`MEM_UTIL`).
- 2025 (`--watch`, corpus monitor-watch-timestamp-...): a banner line `'CTRL' + 'C' to stop watching
  output:` first, a leading `TIMESTAMP` column, and a header starting with a space.
- 2025 (CPX/NPS4 doc example): an `XCP` column; only XCP 0 of each device reports sensors, the other
  rows print `N/A`. Newer amd-smi prints `XCP` for every device.
- The degree sign is U+00B0 ("°C"); a mangled sign is a ParseError (no unit is guessed).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from upgrade_gate.errors import ParseError
from upgrade_gate.parse.common import digits, is_na, strip_ansi

TOOL = "amd-smi-monitor"
WATCH_BANNER = "'CTRL' + 'C' to stop watching output:"
_VALUE_RE = re.compile(r"^(?P<number>-?\d+(?:\.\d+)?)\s*(?P<unit>\S+)$")
_NUMERIC = {  # column -> (field, unit the tool prints)
    "POWER": ("power_w", "W"),
    "PWR_CAP": ("power_cap_w", "W"),
    "GPU_T": ("hotspot_c", "°C"),
    "GPU_TEMP": ("hotspot_c", "°C"),
    "MEM_T": ("memory_c", "°C"),
    "MEM_TEMP": ("memory_c", "°C"),
    "GFX%": ("gfx_util_pct", "%"),
    "GFX_UTIL": ("gfx_util_pct", "%"),
    "MEM%": ("mem_util_pct", "%"),
    "MEM_UTIL": ("mem_util_pct", "%"),
}
_INTEGER = {"GPU": "gpu", "XCP": "xcp", "TIMESTAMP": "timestamp"}


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorRow:
    """One row of `amd-smi monitor`: a GPU (or one XCP of it) at one time."""

    gpu: int  # amd-smi's index (`amd-smi list` maps it to a BDF), not HIP's
    xcp: int | None = None
    timestamp: int | None = None
    power_w: float | None = None
    power_cap_w: float | None = None
    hotspot_c: float | None = None
    memory_c: float | None = None
    gfx_util_pct: float | None = None
    mem_util_pct: float | None = None
    na_fields: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AmdSmiMonitor:
    """The monitor table: its columns as printed and its rows in print order."""

    columns: tuple[str, ...]
    rows: tuple[MonitorRow, ...]
    watch: bool = False


def _cells(line: str, ends: list[int], *, line_no: int) -> list[str]:
    """Cut a right-aligned row at the header cells' right edges."""
    cells: list[str] = []
    start = 0
    for i, end in enumerate(ends):
        stop = len(line) if i == len(ends) - 1 else end
        if 0 < stop < len(line) and not line[stop - 1].isspace() and not line[stop].isspace():
            raise ParseError(TOOL, line_no, line, f"a value straddles the edge of column {i + 1}")
        cells.append(line[start:stop].strip())
        start = stop
    return cells


def _read_row(columns: list[str], cells: list[str], *, line_no: int, line: str) -> MonitorRow:
    values: dict[str, object] = {}
    na: list[str] = []
    for column, cell in zip(columns, cells, strict=True):
        key = column.upper()
        if key in _INTEGER:
            if not digits(cell):
                raise ParseError(TOOL, line_no, line, f"expected an integer {column}, got {cell!r}")
            values[_INTEGER[key]] = int(cell)
        elif key in _NUMERIC:
            field, unit = _NUMERIC[key]
            if is_na(cell):
                na.append(field)
                continue
            match = _VALUE_RE.match(cell)
            if match is None or match.group("unit") != unit:
                raise ParseError(TOOL, line_no, line, f"expected {column} in {unit}, got {cell!r}")
            values[field] = float(match.group("number"))
        elif not cell:
            raise ParseError(TOOL, line_no, line, f"empty {column} cell")
    gpu = values.get("gpu")
    if not isinstance(gpu, int):
        raise ParseError(TOOL, line_no, line, "row without a GPU index")

    def num(name: str) -> float | None:
        value = values.get(name)
        return value if isinstance(value, float) else None

    def integer(name: str) -> int | None:
        value = values.get(name)
        return value if isinstance(value, int) else None

    return MonitorRow(
        gpu=gpu,
        xcp=integer("xcp"),
        timestamp=integer("timestamp"),
        power_w=num("power_w"),
        power_cap_w=num("power_cap_w"),
        hotspot_c=num("hotspot_c"),
        memory_c=num("memory_c"),
        gfx_util_pct=num("gfx_util_pct"),
        mem_util_pct=num("mem_util_pct"),
        na_fields=tuple(na),
    )


def parse_amdsmi_monitor(text: str) -> AmdSmiMonitor:
    """The `amd-smi monitor` table (one iteration, or several with `--watch`)."""
    lines = [line.rstrip() for line in strip_ansi(text).splitlines()]
    pos, watch = 0, False
    while pos < len(lines) and not lines[pos].strip():
        pos += 1
    if pos < len(lines) and lines[pos].strip() == WATCH_BANNER:
        watch, pos = True, pos + 1
    if pos >= len(lines):
        raise ParseError(TOOL, 0, text[:80], "no monitor table header")
    header = lines[pos]
    found = [(m.end(), m.group()) for m in re.finditer(r"\S+", header)]
    columns = [name for _, name in found]
    if "GPU" not in columns:
        raise ParseError(TOOL, pos + 1, header, "expected the monitor table header (a GPU column)")
    ends = [end for end, _ in found]
    rows: list[MonitorRow] = []
    seen: set[tuple[int, int | None, int | None]] = set()
    for line_no, line in enumerate(lines[pos + 1 :], start=pos + 2):
        if not line.strip():
            continue
        if line == header:  # --watch reprints the header every iteration
            continue
        row = _read_row(columns, _cells(line, ends, line_no=line_no), line_no=line_no, line=line)
        ident = (row.gpu, row.xcp, row.timestamp)
        if ident in seen:
            raise ParseError(TOOL, line_no, line, f"GPU {row.gpu} printed twice for the same time")
        seen.add(ident)
        rows.append(row)
    if not rows:
        raise ParseError(TOOL, 0, text[:80], "monitor table without rows")
    return AmdSmiMonitor(columns=tuple(columns), rows=tuple(rows), watch=watch)


PARSERS: dict[str, Callable[[str], object]] = {TOOL: parse_amdsmi_monitor}
