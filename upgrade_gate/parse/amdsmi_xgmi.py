"""Text parser for `amd-smi xgmi`: LINK METRIC TABLE, XGMI LINK STATUS and GPU LINK PORT STATUS.

Tool quirks (dated notes):
- ROCm 6.1 changelog example: the metric table's destination columns are BDFs, header cells are
  single-space separated; ROCm 7.x prints `GPU<n>` destinations.
- ROCm 7.x changelog, "before fix": on GPUs without XGMI amd-smi printed sentinel maxima glued
  together ("65535 Gb/s4294967295 Gb/sN/A"); cells that run together are a ParseError, and a
  separated sentinel (0xFFFF, 0xFFFFFFFF, ...) is unknown (None), never a bandwidth.
- ROCm 7.x mVF guests: XGMI LINK STATUS is N/A everywhere although the links are up; N/A is unknown
  (None), never "down". GPU LINK PORT STATUS has one `port_num` header for all port columns.
"""

from __future__ import annotations

import re

from upgrade_gate.errors import ParseError
from upgrade_gate.model import replace
from upgrade_gate.parse.amdsmi_text import Line, numbered_lines, table_body, titled_sections
from upgrade_gate.parse.amdsmi_types import (
    AmdSmiXgmi,
    AmdSmiXgmiLinkStatus,
    AmdSmiXgmiMetric,
    AmdSmiXgmiPortStatus,
)
from upgrade_gate.parse.common import is_na, normalize_bdf, slice_row

_GPU_LABEL_RE = re.compile(r"^GPU(\d+)$")
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?) Gb/s$")
_SIZE_RE = re.compile(r"^(\d+) (B|KB|MB|GB)$")
_SENTINELS = frozenset({0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})
_KB_POWER = {"B": -1, "KB": 0, "MB": 1, "GB": 2}


def _row_label(label: str, *, tool: str, line_no: int, line: str) -> int:
    match = _GPU_LABEL_RE.match(label)
    if match is None:
        raise ParseError(tool, line_no, line, "expected a 'GPU<n>' row label")
    return int(match.group(1))


def _rate(value: str, *, tool: str, line_no: int, line: str) -> float | None:
    if is_na(value):
        return None
    match = _RATE_RE.match(value)
    if match is None:
        raise ParseError(tool, line_no, line, f"expected 'N Gb/s', got {value!r}")
    number = float(match.group(1))
    return None if number in _SENTINELS else number


def _kb(value: str, *, tool: str, line_no: int, line: str) -> int | None:
    if is_na(value):
        return None
    match = _SIZE_RE.match(value)
    if match is None:
        raise ParseError(tool, line_no, line, f"expected 'N KB', got {value!r}")
    power = _KB_POWER[match.group(2)]
    return int(match.group(1)) * 1024**power if power >= 0 else int(match.group(1)) // 1024


def _metrics(body: list[Line], tool: str, title_line: int) -> tuple[list[str], list[AmdSmiXgmiMetric]]:
    columns, rows = table_body(body, tool, title_line=title_line)
    names = [name for _, name in columns]
    if names[:4] != ["bdf", "bit_rate", "max_bandwidth", "link_type"]:
        raise ParseError(tool, title_line + 1, body[0][1] if body else "", "unexpected LINK METRIC header")
    starts = [0] + [start for start, _ in columns]
    dests = names[4:]
    out: list[AmdSmiXgmiMetric] = []
    for line_no, line in rows:
        cells = slice_row(line, starts, tool=tool, line_no=line_no)
        label = cells[0]
        if label in ("Read", "Write"):
            if not out:
                raise ParseError(tool, line_no, line, f"{label} row before any GPU row")
            if any(cells[1:5]):
                raise ParseError(tool, line_no, line, f"{label} row with link fields")
            values = tuple(_kb(value, tool=tool, line_no=line_no, line=line) for value in cells[5:])
            if label == "Read":
                out[-1] = replace(out[-1], read_kb=values)
            else:
                out[-1] = replace(out[-1], write_kb=values)
            continue
        if any(cells[5:]):
            raise ParseError(tool, line_no, line, "GPU row with per-destination values")
        out.append(
            AmdSmiXgmiMetric(
                index=_row_label(label, tool=tool, line_no=line_no, line=line),
                bdf=normalize_bdf(cells[1], tool=tool, line_no=line_no),
                bit_rate_gbps=_rate(cells[2], tool=tool, line_no=line_no, line=line),
                max_bandwidth_gbps=_rate(cells[3], tool=tool, line_no=line_no, line=line),
                link_type=None if is_na(cells[4]) else cells[4],
            )
        )
    return dests, out


def _link_status(body: list[Line], tool: str, title_line: int) -> list[AmdSmiXgmiLinkStatus]:
    columns, rows = table_body(body, tool, title_line=title_line)
    names = [name for _, name in columns]
    if names[:1] != ["bdf"] or not names[1:]:
        raise ParseError(tool, title_line + 1, body[0][1] if body else "", "unexpected LINK STATUS header")
    dests = [_row_label(name, tool=tool, line_no=title_line + 1, line=body[0][1]) for name in names[1:]]
    starts = [0] + [start for start, _ in columns]
    out = []
    for line_no, line in rows:
        label, bdf, *values = slice_row(line, starts, tool=tool, line_no=line_no)
        src = _row_label(label, tool=tool, line_no=line_no, line=line)
        src_bdf = normalize_bdf(bdf, tool=tool, line_no=line_no)
        for dst, value in zip(dests, values, strict=True):
            if dst == src:
                continue
            status = None if is_na(value) else value.upper()
            if status is not None and not status.isalpha():
                raise ParseError(tool, line_no, line, f"unexpected link status {value!r}")
            out.append(AmdSmiXgmiLinkStatus(src_index=src, src_bdf=src_bdf, dst_index=dst, status=status))
    return out


def _port_status(body: list[Line], tool: str, title_line: int) -> list[AmdSmiXgmiPortStatus]:
    columns, rows = table_body(body, tool, title_line=title_line)
    if [name for _, name in columns][:1] != ["bdf"]:
        raise ParseError(tool, title_line + 1, body[0][1] if body else "", "unexpected PORT STATUS header")
    out = []
    for line_no, line in rows:
        parts = line.split()
        if len(parts) < 2:
            raise ParseError(tool, line_no, line, "expected 'GPU<n> <bdf> <ports...>'")
        label, bdf, *ports = parts
        out.append(
            AmdSmiXgmiPortStatus(
                index=_row_label(label, tool=tool, line_no=line_no, line=line),
                bdf=normalize_bdf(bdf, tool=tool, line_no=line_no),
                ports=tuple(None if is_na(port) else port for port in ports),
            )
        )
    return out


def parse_xgmi_text(text: str, *, tool: str) -> AmdSmiXgmi:
    """`amd-smi xgmi` text: LINK METRIC TABLE, XGMI LINK STATUS and GPU LINK PORT STATUS."""
    sections, truncated = titled_sections(numbered_lines(text), tool)
    dests: list[str] = []
    metrics: list[AmdSmiXgmiMetric] = []
    status: list[AmdSmiXgmiLinkStatus] = []
    ports: list[AmdSmiXgmiPortStatus] = []
    for title, title_line, body in sections:
        if title == "LINK METRIC TABLE":
            dests, found = _metrics(body, tool, title_line)
            metrics.extend(found)
        elif title == "XGMI LINK STATUS":
            status.extend(_link_status(body, tool, title_line))
        elif title == "GPU LINK PORT STATUS":
            ports.extend(_port_status(body, tool, title_line))
        else:
            raise ParseError(tool, title_line, title, "unknown xgmi table")
    if not (metrics or status or ports):
        raise ParseError(tool, 0, text[:80], "no xgmi table")
    return AmdSmiXgmi(
        destinations=tuple(dests),
        metrics=tuple(metrics),
        link_status=tuple(status),
        port_status=tuple(ports),
        truncated=truncated,
    )
