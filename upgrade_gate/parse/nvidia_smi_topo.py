"""Parser for `nvidia-smi topo -m`: the GPU/NIC connection matrix, CPU and NUMA affinity, NIC names.

Design notes and tool quirks:
- Columns come from the header row, never from one sample's spacing. nvidia-smi separates cells with
  tabs; a paste through a terminal or a web page turns them into runs of spaces, so a cell boundary is
  a tab or two or more spaces ("CPU Affinity" keeps its single space). Self cells print as " X ".
- The device columns are the header names before the first attribute column ("CPU Affinity",
  "NUMA Affinity", "GPU NUMA ID" since R530). Driver 580 prints an empty cell between NUMA Affinity and
  GPU NUMA ID ("0\\t\\tN/A", corpus nvidia-smi/h100-dgx-topo-m-...), and NIC rows end in empty
  attribute cells: empty trailing cells are dropped before the attributes are matched to the header.
- A cell is one of the legend's connection kinds (X, SYS, NODE, PHB, PXB, PIX, NV<n>; SOC, the pre-R384
  name of SYS); anything else (a wrapped line, an error text) is a ParseError naming the cell. The
  matrix must be square (a row per column: a cut-off capture names devices it has no row for) and
  symmetric with X on the diagonal.
- NIC columns are "NIC<n>" since R470, named in the "NIC Legend:" block ("NIC0: mlx5_0"); older drivers
  print the RDMA device name as the column itself. A NIC column without a legend entry keeps its column
  name only (`nic_names` lacks it); the later snapshot builder decides whether that is enough.
- Sanity cap: more than 256 device columns is refused from the header (the pairs grow as its square).
- nvidia-smi's failure messages are refused by name (`nvidia_smi_messages`); other text before the header
  (a shell prompt) or after the legends is refused as such.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from upgrade_gate.errors import ParseError
from upgrade_gate.parse.common import digits, strip_ansi
from upgrade_gate.parse.nvidia_smi_messages import refuse_messages

TOOL = "nvidia-smi-topo"

ATTRIBUTES = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
MAX_DEVICES = 256  # sanity cap: every pair is a link, so 2,000 devices were 2M links (2.4 GB peak)
_CELL_SPLIT_RE = re.compile(r"\t| {2,}")
_CONNECTION_RE = re.compile(r"^(?:X|SYS|SOC|NODE|PHB|PXB|PIX|NV[1-9]\d{0,2})$")
_LEGEND_LINE_RE = re.compile(r"^\s+(?:X|SYS|SOC|NODE|PHB|PXB|PIX|NV#)\s+= \S")
_NIC_LEGEND_RE = re.compile(r"^\s+(?P<nic>NIC\d+): (?P<name>\S+)$")
_AFFINITY_RE = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$")
# Closeness of a path, nearest first (the legend's order): a GPU's NIC is the one behind the nearest path.
PATH_RANK = {"NV": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}


@dataclass(frozen=True, slots=True, kw_only=True)
class TopoLink:
    """One device pair of the matrix (a before b in column order) and how they connect."""

    a: str
    b: str
    connection: str  # as printed: "NV18", "PXB", "SYS"
    nvlinks: int | None = None  # the bonded NVLink count of an NV<n> cell

    @property
    def is_nvlink(self) -> bool:
        """True for an NV<n> connection."""
        return self.nvlinks is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class TopoDevice:
    """One row of the matrix: a GPU or a NIC, with its affinity columns (None where N/A or empty)."""

    name: str  # "GPU0", "NIC3", or an RDMA device name on old drivers
    kind: str  # "gpu" or "nic"
    cpu_affinity: str | None = None  # "0-55,112-167"
    numa_affinity: int | None = None
    gpu_numa_id: int | None = None
    na_fields: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TopoMatrix:
    """`nvidia-smi topo -m`: devices in column order, every pair's connection, the NIC legend."""

    devices: tuple[TopoDevice, ...]
    links: tuple[TopoLink, ...]
    nic_names: dict[str, str] = field(default_factory=dict)  # "NIC0" -> "mlx5_0"
    legend: bool = False  # whether the "Legend:" block was printed (a cut capture lacks it)

    def nic_affinity(self) -> dict[str, tuple[str, ...]]:
        """NIC -> the GPUs behind its nearest PCIe path (PIX before PXB before PHB ...)."""
        out: dict[str, tuple[str, ...]] = {}
        kinds = {d.name: d.kind for d in self.devices}
        for nic in (d.name for d in self.devices if d.kind == "nic"):
            paths = [
                (link.b if link.a == nic else link.a, PATH_RANK.get(link.connection, 9))
                for link in self.links
                if nic in (link.a, link.b) and kinds[link.b if link.a == nic else link.a] == "gpu"
            ]
            best = min((rank for _, rank in paths), default=None)
            out[nic] = tuple(gpu for gpu, rank in paths if rank == best)
        return out


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in _CELL_SPLIT_RE.split(line.rstrip("\n"))]


def _kind(name: str) -> str:
    return "gpu" if re.fullmatch(r"GPU\d+", name) else "nic"


def _header(lines: list[str]) -> tuple[int, list[str], list[str]]:
    """(index of the header line, device columns, attribute columns)."""
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        names = [c for c in _cells(line) if c]
        if not line[:1].isspace() or not names or names[0] != "GPU0":
            raise ParseError(TOOL, i + 1, line, "text before the matrix header (a shell prompt or a message)")
        split = next((k for k, n in enumerate(names) if n in ATTRIBUTES), len(names))
        devices, attributes = names[:split], names[split:]
        if any(n not in ATTRIBUTES for n in attributes) or len(set(attributes)) != len(attributes):
            raise ParseError(TOOL, i + 1, line, "header columns out of order (attributes before devices)")
        if len(devices) > MAX_DEVICES:
            raise ParseError(TOOL, i + 1, line[:80], f"{len(devices)} device columns, more than {MAX_DEVICES}")
        if len(set(devices)) != len(devices):
            raise ParseError(TOOL, i + 1, line, "a device column named twice")
        return i, devices, attributes
    raise ParseError(TOOL, 0, "", "empty output")


def _attributes(name: str, tail: list[str], attributes: list[str], line_no: int, line: str) -> TopoDevice:
    values = [c for c in tail if c]
    kind = _kind(name)
    if not values:
        return TopoDevice(name=name, kind=kind)
    if len(values) != len(attributes):
        raise ParseError(TOOL, line_no, line, f"{len(values)} attribute cells for {len(attributes)} columns")
    na: list[str] = []
    got: dict[str, str | None] = {}
    for column, value in zip(attributes, values, strict=True):
        if value == "N/A":
            na.append(column)
            got[column] = None
            continue
        ok = _AFFINITY_RE.match(value) if column == "CPU Affinity" else digits(value) and len(value) < 6
        if not ok:
            raise ParseError(TOOL, line_no, line, f"{column} {value!r} is not an affinity")
        got[column] = value
    numa, gpu_numa = got.get("NUMA Affinity"), got.get("GPU NUMA ID")
    return TopoDevice(
        name=name,
        kind=kind,
        cpu_affinity=got.get("CPU Affinity"),
        numa_affinity=int(numa) if numa is not None else None,
        gpu_numa_id=int(gpu_numa) if gpu_numa is not None else None,
        na_fields=tuple(na),
    )


def _legends(lines: list[str], start: int) -> tuple[bool, dict[str, str]]:
    legend, nic_names, section = False, {}, ""
    for i in range(start, len(lines)):
        line = lines[i].rstrip()
        if not line.strip():
            continue
        if line == "Legend:":
            legend, section = True, "legend"
        elif line == "NIC Legend:":
            section = "nic"
        elif section == "legend" and _LEGEND_LINE_RE.match(line):
            continue
        elif section == "nic" and (match := _NIC_LEGEND_RE.match(line)):
            nic_names[match.group("nic")] = match.group("name")
        else:
            raise ParseError(TOOL, i + 1, line, "unexpected line after the matrix")
    return legend, nic_names


def parse_nvidia_smi_topo(text: str) -> TopoMatrix:
    """Parse `nvidia-smi topo -m` into a `TopoMatrix`; ParseError naming the line at fault."""
    lines = strip_ansi(text).splitlines()
    refuse_messages(lines, TOOL)
    at, columns, attributes = _header(lines)
    rows: dict[str, list[str]] = {}
    devices: list[TopoDevice] = []
    i = at + 1
    while i < len(lines) and lines[i].strip():
        line, no = lines[i], i + 1
        cells = _cells(line)
        name = cells[0]
        if name != (columns[len(rows)] if len(rows) < len(columns) else None):
            raise ParseError(TOOL, no, line, f"row {name!r} where the header's next device belongs")
        row = cells[1 : 1 + len(columns)]
        if len(row) < len(columns):
            raise ParseError(TOOL, no, line, f"{len(row)} cells for {len(columns)} device columns: the row is cut")
        for column, cell in zip(columns, row, strict=True):
            if not _CONNECTION_RE.match(cell):
                raise ParseError(TOOL, no, line, f"{name}/{column} cell {cell!r} is not a connection kind")
        rows[name] = row
        devices.append(_attributes(name, cells[1 + len(columns) :], attributes, no, line))
        i += 1
    if len(rows) != len(columns):
        raise ParseError(
            TOOL, i, lines[i - 1] if i else "", f"header names {len(columns)} devices but {len(rows)} rows: output cut"
        )
    links: list[TopoLink] = []
    for x, a in enumerate(columns):
        if rows[a][x] != "X":
            raise ParseError(TOOL, at + 2 + x, lines[at + 1 + x], f"{a}/{a} is not X")
        for y in range(x + 1, len(columns)):
            b = columns[y]
            cell = rows[a][y]
            if rows[b][x] != cell or cell == "X":
                raise ParseError(TOOL, at + 2 + y, lines[at + 1 + y], f"{b}/{a} {rows[b][x]!r} but {a}/{b} {cell!r}")
            nvlinks = int(cell[2:]) if cell.startswith("NV") else None
            links.append(TopoLink(a=a, b=b, connection=cell, nvlinks=nvlinks))
    legend, nic_names = _legends(lines, i)
    unknown = sorted(set(nic_names) - set(columns))
    if unknown:
        raise ParseError(TOOL, i, unknown[0], f"NIC Legend names {unknown[0]}, which the matrix lacks")
    return TopoMatrix(devices=tuple(devices), links=tuple(links), nic_names=nic_names, legend=legend)


PARSERS: dict[str, Callable[[str], object]] = {TOOL: parse_nvidia_smi_topo}
