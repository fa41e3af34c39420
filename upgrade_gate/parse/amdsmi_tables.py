"""Text parsers for amd-smi's table-shaped commands `topology` and `partition` (`xgmi`: `amdsmi_xgmi`).

Column positions come from each table's header row (`common.header_columns`); a data cell that
runs into the next column is a ParseError, not a guess about where one value ends.

Tool quirks (dated notes):
- amd-smi `topology` (ROCm 6.1 changelog example and a 2-GPU PCIe capture): one `<NAME> TABLE:`
  per field, a header row of BDFs, rows labelled by BDF, then a `Legend:` block. Newer releases
  add CACHE COHERANCY / ATOMICS / DMA / BI-DIRECTIONAL tables (spelled "COHERANCY" by the tool);
  the 6.1 example has blank lines between tables, the newer capture has none.
- amd-smi `partition` (ROCm 6.3): CURRENT_PARTITION table, one MEMORY_PARTITION block per GPU,
  then ACCELERATOR_PARTITION_PROFILES; header rows end with two spaces in one capture and none in
  the other. On MI300A in CPX the table prints ACCELERATOR_TYPE N/A although `static --partition`
  says CPX: N/A stays None here, the snapshot builder decides which source wins.
"""

from __future__ import annotations

import re

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Bdf
from upgrade_gate.parse.amdsmi_text import (
    Line,
    numbered_lines,
    read_blocks,
    table_body,
    titled_sections,
)
from upgrade_gate.parse.amdsmi_types import (
    AmdSmiCurrentPartition,
    AmdSmiMemoryPartition,
    AmdSmiPartition,
    AmdSmiPartitionProfile,
    AmdSmiTopoLink,
    AmdSmiTopology,
)
from upgrade_gate.parse.amdsmi_values import Fields
from upgrade_gate.parse.common import digits, is_na, normalize_bdf, slice_row

_BW_RE = re.compile(r"^(\d+)-(\d+)$")
_CURRENT_FIELDS = {
    "MEMORY": "memory",
    "ACCELERATOR_TYPE": "accelerator_type",
    "ACCELERATOR_PROFILE_INDEX": "profile_index",
    "PARTITION_ID": "partition_ids",
}


def _cell_int(value: str, *, tool: str, line_no: int, line: str) -> int | None:
    if is_na(value):
        return None
    if digits(value):
        return int(value)
    raise ParseError(tool, line_no, line, f"expected an integer, got {value!r}")


# --------------------------------------------------------------------------- topology


def _topology_cell(table: str, value: str, *, tool: str, line_no: int, line: str) -> object:
    if is_na(value):
        return None
    if table == "ACCESS":
        if value in ("ENABLED", "DISABLED"):
            return value == "ENABLED"
    elif table in ("WEIGHT", "HOPS"):
        return _cell_int(value, tool=tool, line_no=line_no, line=line)
    elif table == "LINK TYPE":
        if value in ("XGMI", "PCIE", "UNKNOWN"):
            return value
    elif table == "NUMA BW":
        match = _BW_RE.match(value)
        if match:
            return (int(match.group(1)), int(match.group(2)))
    else:
        return value
    raise ParseError(tool, line_no, line, f"unexpected {table} value {value!r}")


_TABLE_FIELDS = {
    "ACCESS": "access",
    "WEIGHT": "weight",
    "HOPS": "hops",
    "LINK TYPE": "link_type",
    "NUMA BW": "numa_bw",
    "CACHE COHERANCY": "coherent",
    "ATOMICS": "atomics",
    "DMA": "dma",
    "BI-DIRECTIONAL": "bi_dir",
}


def _topo_link(src: Bdf, dst: Bdf, found: dict[str, object]) -> AmdSmiTopoLink:
    def text(table: str) -> str | None:
        value = found.get(table)
        return value if isinstance(value, str) else None

    def number(table: str) -> int | None:
        value = found.get(table)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    access = found.get("ACCESS")
    numa = found.get("NUMA BW")
    bw_min, bw_max = numa if isinstance(numa, tuple) else (None, None)
    return AmdSmiTopoLink(
        src=src,
        dst=dst,
        access=access if isinstance(access, bool) else None,
        weight=number("WEIGHT"),
        hops=number("HOPS"),
        link_type=text("LINK TYPE"),
        numa_bw_min=bw_min,
        numa_bw_max=bw_max,
        coherent=text("CACHE COHERANCY"),
        atomics=text("ATOMICS"),
        dma=text("DMA"),
        bi_dir=text("BI-DIRECTIONAL"),
    )


def parse_topology_text(text: str, *, tool: str) -> AmdSmiTopology:
    """`amd-smi topology` text: one matrix per table, combined into ordered GPU pairs."""
    lines = numbered_lines(text)
    legend = next((i for i, (_, line) in enumerate(lines) if line.strip() == "Legend:"), len(lines))
    sections, _ = titled_sections(lines[:legend], tool)
    if not sections:
        raise ParseError(tool, 0, text[:80], "no topology table")
    bdfs: list[Bdf] = []
    cells: dict[tuple[int, int], dict[str, object]] = {}
    tables: list[str] = []
    for title, title_line, body in sections:
        if not title.endswith(" TABLE"):
            raise ParseError(tool, title_line, title, "expected '<NAME> TABLE:'")
        table = title[: -len(" TABLE")]
        columns, rows = table_body(body, tool, title_line=title_line)
        header = [normalize_bdf(name, tool=tool, line_no=title_line + 1) for _, name in columns]
        if not bdfs:
            bdfs = header
        elif header != bdfs:
            raise ParseError(tool, title_line + 1, body[0][1], "table columns differ from the first table")
        if len(rows) != len(bdfs):
            raise ParseError(tool, title_line, title, f"{len(rows)} rows for {len(bdfs)} GPUs")
        tables.append(_TABLE_FIELDS.get(table, table.lower().replace(" ", "_")))
        starts = [0] + [start for start, _ in columns]
        for i, (line_no, line) in enumerate(rows):
            label, *values = slice_row(line, starts, tool=tool, line_no=line_no)
            if normalize_bdf(label, tool=tool, line_no=line_no) != bdfs[i]:
                raise ParseError(tool, line_no, line, "row order differs from the column order")
            for j, value in enumerate(values):
                if i == j:
                    continue
                parsed = _topology_cell(table, value, tool=tool, line_no=line_no, line=line)
                cells.setdefault((i, j), {})[table] = parsed
    links = [_topo_link(bdfs[i], bdfs[j], found) for (i, j), found in sorted(cells.items())]
    return AmdSmiTopology(form="text", bdfs=tuple(bdfs), links=tuple(links), tables=tuple(tables))


# --------------------------------------------------------------------------- partition


def _current_rows(body: list[Line], tool: str, title_line: int) -> tuple[list[AmdSmiCurrentPartition], list[Line]]:
    columns, rows = table_body(body, tool, title_line=title_line)
    names = [name for _, name in columns]
    if names[:1] != ["GPU_ID"]:
        raise ParseError(tool, title_line + 1, body[0][1] if body else "", "expected a GPU_ID column")
    starts = [start for start, _ in columns]
    out: list[AmdSmiCurrentPartition] = []
    rest: list[Line] = []
    for pos, (line_no, line) in enumerate(rows):
        if not digits(line[:1]):
            rest = rows[pos:]
            break
        row = dict(zip(names, slice_row(line, starts, tool=tool, line_no=line_no), strict=True))
        if not digits(row["GPU_ID"]):
            raise ParseError(tool, line_no, line, "expected a GPU index")
        na = [_CURRENT_FIELDS[name] for name, value in row.items() if name in _CURRENT_FIELDS and is_na(value)]
        ids = row.get("PARTITION_ID", "N/A")
        out.append(
            AmdSmiCurrentPartition(
                gpu=int(row["GPU_ID"]),
                memory=None if is_na(row.get("MEMORY", "N/A")) else row["MEMORY"],
                accelerator_type=None if is_na(row.get("ACCELERATOR_TYPE", "N/A")) else row["ACCELERATOR_TYPE"],
                profile_index=_cell_int(
                    row.get("ACCELERATOR_PROFILE_INDEX", "N/A"), tool=tool, line_no=line_no, line=line
                ),
                partition_ids=None if is_na(ids) else _id_list(ids, tool=tool, line_no=line_no, line=line),
                na_fields=tuple(na),
            )
        )
    return out, rest


def _id_list(value: str, *, tool: str, line_no: int, line: str) -> tuple[int, ...]:
    parts = [part.strip() for part in value.split(",")]
    if not all(digits(part) for part in parts):
        raise ParseError(tool, line_no, line, f"expected partition ids, got {value!r}")
    return tuple(int(part) for part in parts)


def _profiles(body: list[Line], tool: str, title_line: int) -> list[AmdSmiPartitionProfile]:
    columns, rows = table_body(body, tool, title_line=title_line)
    names = [name for _, name in columns]
    if names[:1] != ["GPU_ID"]:
        raise ParseError(tool, title_line + 1, body[0][1] if body else "", "expected a GPU_ID column")
    starts = [start for start, _ in columns]
    out = []
    for line_no, line in rows:
        gpu, *values = slice_row(line, starts, tool=tool, line_no=line_no)
        if not digits(gpu):
            raise ParseError(tool, line_no, line, "expected a GPU index")
        mapping = {name: (None if is_na(value) else value) for name, value in zip(names[1:], values, strict=True)}
        out.append(AmdSmiPartitionProfile(gpu=int(gpu), values=mapping))
    return out


def _memory_blocks(lines: list[Line], tool: str) -> list[AmdSmiMemoryPartition]:
    doc = read_blocks("", tool=tool, lines=lines)
    out = []
    for block in doc.blocks:
        section = Fields(tool, block.data, where=block.where).child("memory_partition")
        if section is None:
            raise ParseError(tool, block.line_no, f"GPU: {block.index}", "GPU block without MEMORY_PARTITION")
        caps = section.text("caps", "caps")
        out.append(
            AmdSmiMemoryPartition(
                gpu=block.index,
                caps=None if caps is None else tuple(part.strip() for part in caps.split(",")),
                current=section.text("current", "current"),
            )
        )
    return out


def parse_partition_text(text: str, *, tool: str) -> AmdSmiPartition:
    """`amd-smi partition`: current partitions, memory partition blocks and profile table."""
    current: list[AmdSmiCurrentPartition] = []
    memory: list[AmdSmiMemoryPartition] = []
    profiles: list[AmdSmiPartitionProfile] = []
    sections, _ = titled_sections(numbered_lines(text), tool)
    for title, title_line, body in sections:
        if title == "CURRENT_PARTITION":
            rows, rest = _current_rows(body, tool, title_line)
            current.extend(rows)
            memory.extend(_memory_blocks(rest, tool))
        elif title == "ACCELERATOR_PARTITION_PROFILES":
            profiles.extend(_profiles(body, tool, title_line))
        elif title == "MEMORY_PARTITION":
            memory.extend(_memory_blocks(body, tool))
        else:
            raise ParseError(tool, title_line, title, "unknown partition section")
    if not current and not memory:
        raise ParseError(tool, 0, text[:80], "no partition table")
    return AmdSmiPartition(current=tuple(current), memory=tuple(memory), profiles=tuple(profiles))
