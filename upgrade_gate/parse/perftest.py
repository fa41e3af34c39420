"""Parser for perftest `ib_write_bw` output (client, server, or both interleaved in one capture).

Design decisions:
- The result table is found by its header line (`#bytes #iterations BW peak[U] BW average[U]
  MsgRate[Mpps]`); every later line that starts with a digit must be a complete 5-column numeric row,
  otherwise ParseError (a truncated row is never half-read).
- Server and client outputs are often captured together (superbench fixtures interleave them line by
  line; a backgrounded server shares the terminal with the client). Header key/values keep their first
  value; rows that are exact duplicates (the server echoes the client's final report) are kept once.
- One message size has one result. perftest prints one row per size per run, and where the server
  prints the size too it prints the same numbers (a one-way server prints the client's report it
  received; a bidirectional side prints local + remote, the same sum on both sides: print_full_bw_report).
  So a size printed with different numbers, or more often than there are table headers (one per run
  in the capture), is a ParseError naming both lines: keeping either row would be a guess.
- `BW peak` is the best window of the run (`opt_delta` is the minimum time per message over windows
  that include the whole run, whose rate is `BW average`: print_report_bw), so a peak below the
  average is impossible, and a ParseError. A peak of 0.00 is perftest's "not measured" (noPeak: `-D`,
  `-N`, `--run_infinitely`, or more than 20000 iterations; the "BW peak won't be measured" warning is
  not always in the capture: the SC24 bnxt_re0 `-D 10` output lacks it) and is accepted.
- `to_measurement` refuses an output without a `Device :` header line: the rail check (the output is
  the named rail's) cannot be made without it. Every complete real output prints it (perftest's
  ctx_print_test_info; all corpus and fixture captures); only the hand-trimmed 8 MiB fragment lacks it,
  and that one also lacks `Number of qps`, so it never made a measurement.
- Units: `Gb/sec` (--report_gbits) is kept; `MB/sec` and `MiB/sec` are both 2^20 bytes/s in perftest
  (`format_factor = 0x100000` for MBS, 125000000 for GBS: linux-rdma/perftest src/perftest_parameters.c
  @fdf716b, print_report_bw), so `bw_average_gbps = value * 2^20 * 8 / 1e9`.
- Shell noise is tolerated, not parsed: bash job lines (`[1] 650300`, `[1]+ Done ...`), a prompt glued to
  the first output line, `Connected:` / `Completed:` / `Total run time:` lines, ROCm buffer messages.
  `WARNING:` and `Conflicting CPU frequency ...` lines are kept in `warnings`.

Tool quirks (dated notes):
- perftest >= 4.5 prints `MiB/sec`; older releases print `MB/sec` for the same quantity.
- 2026 perftest with --enable-rocm (AINIC bundle 1.117.5): `Use ROCm memory : ON` header line; a server
  run with `-a` prints only the largest size; five-digit MiB/s values push MsgRate right (columns are
  whitespace-split, never sliced by offset).
- Duration mode (`-D`) prints `BW peak` 0.00 ("WARNING: BW peak won't be measured in this run.").
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Measurement
from upgrade_gate.parse.common import digits

TOOL = "ib_write_bw"

_UNIT_TO_GBPS = {"Gb/sec": 1.0, "MB/sec": 1048576 * 8 / 1e9, "MiB/sec": 1048576 * 8 / 1e9}
_TABLE_RE = re.compile(
    r"#bytes\s+#iterations\s+BW peak\[(?P<u1>[^\]]+)\]\s+BW average\[(?P<u2>[^\]]+)\]\s+MsgRate\[Mpps\]\s*$"
)
_KV_RE = re.compile(r"(?P<key>[A-Za-z][\w*\-./ ]*?)[ \t]*:[ \t]*(?P<val>\S(?:[^\t]*?))(?=[ \t]{2,}|\t|$)")
_PROMPT_RE = re.compile(r"^(?:\[[^\]@\s]+@[^\]]+\][$#]|[\w.-]+@[\w.-]+:[^$#\s]*[$#])\s*")
_SKIP_RE = re.compile(
    r"^(?:\[\d+\][+-]?\s|(?:local|remote) address:|GID:|Connected:|Completed:|Total run time:|"
    r"Using |allocated |deallocating |\*)"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PerftestRow:
    """One row of the bandwidth table."""

    bytes: int
    iterations: int
    bw_peak: float
    bw_average: float
    msg_rate_mpps: float
    unit: str  # "Gb/sec", "MB/sec", "MiB/sec" as printed
    bw_average_gbps: float  # normalised to Gb/s


@dataclass(frozen=True, slots=True, kw_only=True)
class PerftestResult:
    """One `ib_write_bw` run: header settings and the table rows."""

    test: str | None  # "RDMA_Write BW Test", "RDMA_Write Bidirectional BW Test"
    device: str | None
    num_qps: int | None
    link_type: str | None  # "Ethernet", "IB"
    gid_index: int | None
    mtu_bytes: int | None
    bidirectional: bool
    use_rocm: bool  # "Use ROCm memory : ON" (GPUDirect RDMA from GPU memory)
    role: str  # "client", "server" or "mixed" (both outputs in one capture)
    unit: str
    rows: tuple[PerftestRow, ...]
    header: dict[str, str] = field(default_factory=dict)  # every header key/value as printed
    warnings: tuple[str, ...] = ()

    @property
    def largest(self) -> PerftestRow:
        """The row with the largest message size (sizes are unique: the parser refuses a repeated size)."""
        return max(self.rows, key=lambda r: r.bytes)

    @property
    def bw_average_gbps(self) -> float:
        """BW average of the largest message size, in Gb/s."""
        return self.largest.bw_average_gbps


def _opt_int(header: dict[str, str], key: str) -> int | None:
    m = re.match(r"^(\d+)", header.get(key, ""))
    return int(m.group(1)) if m else None


def parse_ib_write_bw(text: str) -> PerftestResult:
    """Parse `ib_write_bw` output; ParseError when there is no complete result table."""
    header: dict[str, str] = {}
    titles: list[str] = []
    warnings: list[str] = []
    rows: list[PerftestRow] = []
    seen: dict[int, tuple[PerftestRow, int, int]] = {}  # bytes -> (row, first line, times printed)
    tables = 0  # table headers: one per run in the capture
    unit: str | None = None
    waiting = False
    for no, raw in enumerate(text.splitlines(), 1):
        line = _PROMPT_RE.sub("", raw.strip())
        if not line or set(line) <= {"-"}:
            continue
        table = _TABLE_RE.search(line)
        if table is not None:
            u1, u2 = table.group("u1"), table.group("u2")
            if u1 != u2 or u1 not in _UNIT_TO_GBPS or (unit is not None and unit != u1):
                raise ParseError(TOOL, no, raw, f"unknown or mixed bandwidth units {u1!r}/{u2!r}")
            unit = u1
            tables += 1
            continue
        if digits(line[0]) and unit is not None:
            cells = line.split()
            try:
                size, iters = int(cells[0]), int(cells[1])
                peak, avg, rate = (float(c) for c in cells[2:])
                if not all(math.isfinite(v) for v in (peak, avg, rate)):
                    raise ValueError("non-finite")
            except (ValueError, IndexError):
                raise ParseError(TOOL, no, raw, "result row is not 5 numeric columns") from None
            row = PerftestRow(
                bytes=size,
                iterations=iters,
                bw_peak=peak,
                bw_average=avg,
                msg_rate_mpps=rate,
                unit=unit,
                bw_average_gbps=avg * _UNIT_TO_GBPS[unit],
            )
            if peak != 0.0 and peak < avg:
                raise ParseError(
                    TOOL,
                    no,
                    raw,
                    f"BW peak {cells[2]} is below BW average {cells[3]}: a peak is never below the average",
                )
            if size not in seen:
                seen[size] = (row, no, 1)
                rows.append(row)
                continue
            first, first_no, times = seen[size]
            if row != first:
                raise ParseError(TOOL, no, raw, f"second, different row for {size} bytes (first on line {first_no})")
            if times + 1 > tables:
                raise ParseError(
                    TOOL, no, raw, f"{size} bytes printed {times + 1} times under {tables} table header(s)"
                )
            seen[size] = (first, first_no, times + 1)
            continue
        if line.startswith("WARNING") or line.startswith("Conflicting CPU frequency"):
            warnings.append(line)
        elif "Waiting for client" in line:
            waiting = True
        elif re.fullmatch(r"[\w* ]+ (?:BW|Bidirectional BW) Test", line):
            titles.append(line)
        elif not _SKIP_RE.match(line):
            for m in _KV_RE.finditer(line):
                header.setdefault(m.group("key").strip(), m.group("val").strip())
    if unit is None:
        raise ParseError(TOOL, 0, text[:80], "no '#bytes #iterations BW peak ...' table header")
    if not rows:
        raise ParseError(TOOL, 0, text[-80:], "result table has no rows (run failed or truncated)")
    role = "mixed" if len(titles) > 1 else ("server" if waiting else "client")
    return PerftestResult(
        test=titles[0] if titles else None,
        device=header.get("Device"),
        num_qps=_opt_int(header, "Number of qps"),
        link_type=header.get("Link type"),
        gid_index=_opt_int(header, "GID index"),
        mtu_bytes=_opt_int(header, "Mtu"),
        bidirectional=any("Bidirectional" in t for t in titles),
        use_rocm=header.get("Use ROCm memory") == "ON",
        role=role,
        unit=unit,
        rows=tuple(rows),
        header=header,
        warnings=tuple(warnings),
    )


def to_measurement(result: PerftestResult, *, rail: str, peer: str | None) -> Measurement:
    """`rail/<rail>/write_bw` in Gb/s: BW average of the largest message size.

    Settings: `msg_size`, `qps`, `peer`, plus `bidirectional` / `use_rocm` = "true" when set, because a
    bidirectional or GPU-memory run is not comparable with a plain one.
    """
    if result.num_qps is None:
        raise ParseError(TOOL, 0, "", "no 'Number of qps' header: the run's settings are unknown")
    if result.device is None:
        raise ParseError(TOOL, 0, "", f"no 'Device :' header: cannot check that the output is for rail {rail!r}")
    if result.device != rail:
        raise ParseError(TOOL, 0, result.device, f"output is for device {result.device!r}, not rail {rail!r}")
    row = result.largest
    settings = {"msg_size": str(row.bytes), "qps": str(result.num_qps)}
    if peer is not None:
        settings["peer"] = peer
    if result.bidirectional:
        settings["bidirectional"] = "true"
    if result.use_rocm:
        settings["use_rocm"] = "true"
    return Measurement(
        key=f"rail/{rail}/write_bw",
        unit="Gb/s",
        samples=(row.bw_average_gbps,),
        settings=settings,
        source=TOOL,
    )


PARSERS: dict[str, Callable[[str], object]] = {"ib_write_bw": parse_ib_write_bw}
