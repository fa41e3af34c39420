"""Parser for `nvidia-smi --query-gpu=index,pci.bus_id,temperature.gpu,temperature.memory,power.draw
--format=csv,noheader,nounits`: one line per GPU, the thermal sample of phase 2 on NVIDIA nodes, and for
any other field list that starts `index,pci.bus_id` (`parse_query_rows`): phase 6's
`--query-gpu=index,pci.bus_id,utilization.gpu` (`UTIL_ARGV`) is one.

The format is nvidia-smi's documented CSV (nvidia-smi(1), "--query-gpu" and "--format=csv"; field names
and meanings from `nvidia-smi --help-query-gpu`): the asked fields in the asked order, separated by ", ",
one line per GPU in nvidia-smi's order; `noheader` drops the names line, `nounits` the " W"/" C" units.
`pci.bus_id` has nvidia-smi's 8-digit domain (`00000000:1B:00.0`), normalised to `dddd:bb:dd.f`.
`temperature.memory` is the HBM sensor: "N/A" on boards without one; nvidia-smi prints a field the GPU
cannot report as `N/A`, `[N/A]` or `[Not Supported]` (None here, explicit). No real capture of exactly
this query is in the corpus (2026-12): the layout is the documented one, the value forms those of the
public parsers' samples (`0, 00000000:01:00.0, ...`, `[N/A]`).

Refused, each with its form named (ParseError, never a value): nvidia-smi's failure messages
(`nvidia_smi_messages`); a names line (`--format` without `noheader`); a value with its unit (without
`nounits`); a line with another field count (cut, wrapped or another query); any other bracketed text
where a value belongs (`[Unknown Error]`, `[GPU requires reset]`, `[GPU is lost]`); a GPU index or BDF
printed twice; empty output; more than `MAX_GPUS` lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Bdf
from upgrade_gate.parse.common import normalize_bdf, strip_ansi
from upgrade_gate.parse.nvidia_smi_messages import refuse_messages

TOOL = "nvidia-smi-query-gpu"
FIELDS = ("index", "pci.bus_id", "temperature.gpu", "temperature.memory", "power.draw")
ARGV = ("nvidia-smi", f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits")
"""The thermal command this parser reads: the fields in this order, no names line, no units."""
UTIL_FIELDS = ("index", "pci.bus_id", "utilization.gpu")
UTIL_ARGV = ("nvidia-smi", f"--query-gpu={','.join(UTIL_FIELDS)}", "--format=csv,noheader,nounits")
"""Phase 6's utilisation sample on NVIDIA nodes (`utilization.gpu`: percent of the last sample period in
which a kernel ran, `nvidia-smi --help-query-gpu`)."""
MAX_GPUS = 1024

_NOT_AVAILABLE = frozenset({"n/a", "[n/a]", "[not supported]"})
_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSensors:
    """One GPU's line (None: nvidia-smi printed N/A, [N/A] or [Not Supported] for the field)."""

    index: int
    bdf: Bdf
    temperature_c: float | None  # temperature.gpu: the GPU core sensor
    memory_temperature_c: float | None  # temperature.memory: the HBM sensor
    power_w: float | None  # power.draw


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryGpu:
    """Every GPU's line, in nvidia-smi's order."""

    gpus: tuple[GpuSensors, ...]


def _value(raw: str, field: str, no: int, line: str) -> float | None:
    text = raw.strip()
    if text.lower() in _NOT_AVAILABLE:
        return None
    if _NUMBER.fullmatch(text):
        return float(text)
    if text.startswith("["):
        raise ParseError(TOOL, no, line, f"{field} is an error text {text!r}, not a value")
    if re.fullmatch(r"-?[0-9]+(?:\.[0-9]+)? *[A-Za-z%]+", text):
        raise ParseError(TOOL, no, line, f"{field} {text!r} has a unit: expected --format=csv,noheader,nounits")
    raise ParseError(TOOL, no, line, f"{field} {text!r} is not a number")


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryRow:
    """One GPU's line of any field list that starts `index,pci.bus_id` (values by field name, None: N/A)."""

    index: int
    bdf: Bdf
    values: dict[str, float | None]


def parse_query_rows(text: str, fields: tuple[str, ...]) -> tuple[QueryRow, ...]:
    """Parse a `--query-gpu=<fields> --format=csv,noheader,nounits` output; `fields` starts index,pci.bus_id.

    Every refusal of the module docstring applies to any field list; ParseError names the line and form."""
    if fields[:2] != FIELDS[:2]:
        raise ValueError(f"a query's fields start with {','.join(FIELDS[:2])}, got {','.join(fields)}")
    lines = strip_ansi(text).splitlines()
    refuse_messages(lines, TOOL)
    rows: list[QueryRow] = []
    seen_bdfs: set[str] = set()
    for no, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        cells = [c.strip() for c in line.split(",")]
        if cells[0] == fields[0] or cells[0].startswith("index"):
            raise ParseError(TOOL, no, line, "a names line: expected --format=csv,noheader")
        if len(cells) != len(fields):
            raise ParseError(TOOL, no, line, f"{len(cells)} fields, expected {len(fields)} ({','.join(fields)})")
        if len(rows) >= MAX_GPUS:
            raise ParseError(TOOL, no, line, f"more than {MAX_GPUS} GPUs")
        if not cells[0].isascii() or not cells[0].isdigit():
            raise ParseError(TOOL, no, line, f"index {cells[0]!r} is not a GPU index")
        index = int(cells[0])
        if any(r.index == index for r in rows):
            raise ParseError(TOOL, no, line, f"GPU {index} printed twice")
        bdf = normalize_bdf(cells[1], tool=TOOL, line_no=no)
        if str(bdf) in seen_bdfs:
            raise ParseError(TOOL, no, line, f"BDF {bdf} printed twice")
        seen_bdfs.add(str(bdf))
        values = {f: _value(c, f, no, line) for f, c in zip(fields[2:], cells[2:], strict=True)}
        rows.append(QueryRow(index=index, bdf=bdf, values=values))
    if not rows:
        raise ParseError(TOOL, 0, "", "no GPU line: empty output")
    return tuple(rows)


def parse_nvidia_smi_query_gpu(text: str) -> QueryGpu:
    """Parse the thermal query's CSV (`ARGV`) into a `QueryGpu`; ParseError naming the line and the form."""
    return QueryGpu(
        gpus=tuple(
            GpuSensors(
                index=r.index,
                bdf=r.bdf,
                temperature_c=r.values[FIELDS[2]],
                memory_temperature_c=r.values[FIELDS[3]],
                power_w=r.values[FIELDS[4]],
            )
            for r in parse_query_rows(text, FIELDS)
        )
    )


def parse_nvidia_smi_query_util(text: str) -> dict[str, float | None]:
    """`utilization.gpu` (%) by BDF from the utilisation query's CSV (`UTIL_ARGV`); ParseError as above."""
    return {str(r.bdf): r.values[UTIL_FIELDS[2]] for r in parse_query_rows(text, UTIL_FIELDS)}


PARSERS: dict[str, Callable[[str], object]] = {TOOL: parse_nvidia_smi_query_gpu}
