"""Parser for rccl-tests / nccl-tests output (`all_reduce_perf` and friends), text and `-Z json`.

Design decisions:
- Column positions come from the table's own header lines: the banner (`out-of-place  in-place`) says
  how many groups there are, the names line (`size count type redop root time algbw busbw #wrong ...`)
  says which column is which. Rows are whitespace-split and must have exactly that many cells, so the
  old nccl-tests layout (no `root`, `error` instead of `#wrong`) and future extra columns both work.
- Inside the table, NCCL/RCCL `INFO`/`WARN` log lines and `#` comments are skipped; any other line
  (e.g. `host: Test NCCL failure ...`) is a ParseError, never silently dropped.
- A run is complete only with its `# Avg bus bandwidth` footer; without it the output is a ParseError.
- `-Z json` writes to a file (`-X FILE`), not stdout, and carries no sweep header; `merge_json()`
  takes the sweep settings from the text and the full-precision numbers from the JSON.
  `to_measurements()` needs the settings, so it refuses a JSON-only result.

Tool quirks (dated notes):
- nccl-tests (2020, superbench fixture) prints `[0x00]` as the bus id and `N/A` errors with
  `validation: 0`; bdf is None there. rccl-tests prints `[0000:05:00]` (develop:a7809b3) or
  `[0000:05:00.0]` (develop:448c4c7); both normalise to `0000:05:00.0`.
- 2025 rccl-tests (develop:448c4c7 and later) print an unprefixed `RCCL version : ...` block.
- 2026 rccl-tests source (rocm-systems) prints "On gfx942 architecture, using FNUZ FP8 types" without a
  newline, so the header may not start the line: it is searched for, not anchored.
- Old error column values are floats (`0e+00`); a trailing `*` flags an error over threshold.
- The JSON reader and `merge_json` live in `rccl_tests_json`, the result types in `rccl_tests_types`;
  both are re-exported here, so callers import only this module.
- 2026 MI355X quick-start (oracle-quickstart/oci-gpu-quickstarts) shows a 512K..16G sweep with only
  its last two rows and an average (273.9) below both: hand-trimmed. rccl-tests prints exactly one row
  per `for (size = minBytes; size <= maxBytes; size = factor > 1 ? size * factor : size + stepBytes)`
  step (common.cu `TimeTest`), per datatype/op, repeated per cycle (`-N`), so a table whose rows per
  (cycle, type, op) are not a whole number of sweeps is a ParseError, never a shorter sweep.

Footer and device lines are checked against the table (black-box findings brk15 01-06, 2026-12):
- `# Avg bus bandwidth` is `bw[0] / bw_count[0]`: every `BenchTime` (out-of-place and in-place, every
  row, every cycle/type/op, zero-size rows too) adds its busbw (NVIDIA/nccl-tests src/common.cu @a0b82b2
  and ROCm/rccl-tests src/common.cu @ae3e635). The footer must equal the mean of the printed busbw
  within their printed rounding (half a unit of each row's last digit, on average, plus half a unit of
  the footer's 6th significant digit, `%g`); every corpus output agrees to 0.0007 GB/s. Otherwise the
  output is a ParseError.
- `#wrong` is `%5g`/`%6g` of the wrong-element count whenever the check ran, `N/A` only where it did not:
  `validation: 0` (`-c 0`), or the in-place half of alltoall/alltoallv/sendrecv, whose tests set
  `args->reportErrors = in_place ? 0 : 1`. With validation on, an out-of-place `N/A`, an in-place `N/A`
  of another collective, or (collective not printed) a mix of `N/A` and counts in the in-place half is
  a ParseError: the tool never prints it. A `*` belongs to the old `error` column only (rccl-tests 2019
  `%5.0le%s`, `*` when the error exceeds the threshold); on `#wrong` it is a ParseError.
- `# Out of bounds values : N OK|FAILED` prints FAILED exactly when N > 0; anything else is a ParseError.
- Device lines are printed in rank order, `nThread * nGpus` per process (`rank = proc*nThreads*nGpus+i`,
  one host and pid per process): ranks not exactly 0..N-1, a process block that changes host or pid
  mid-way, or one host and pid printing more rank lines than nThread x nGpus is a ParseError. (Two
  processes with one hostname and one pid would need separate pid namespaces with host networking;
  no real run in the corpus or fixtures does that.)
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Measurement, replace
from upgrade_gate.parse.common import digits, is_na, normalize_bdf
from upgrade_gate.parse.preamble import parse_after_preamble, split_preamble
from upgrade_gate.parse.rccl_tests_json import merge_json, parse_rccl_tests_json
from upgrade_gate.parse.rccl_tests_types import (
    IN_PLACE_UNCHECKED,
    TOOL,
    RcclDevice,
    RcclRow,
    RcclSample,
    RcclTestsResult,
    SweepSettings,
)

_HEADER_RE = re.compile(
    r"#\s*nThread\s+(?P<threads>\d+)\s+nGpus\s+(?P<gpus>\d+)\s+minBytes\s+(?P<min>\d+)\s+"
    r"maxBytes\s+(?P<max>\d+)\s+step:\s*(?P<step>\d+)\((?P<kind>factor|bytes)\)\s+"
    r"warmup iters:\s*(?P<warmup>\d+)\s+iters:\s*(?P<iters>\d+)"
    r"(?:\s+agg iters:\s*(?P<agg>\d+))?(?:\s+validation:\s*(?P<validation>\d+))?"
    r"(?:\s+graph:\s*(?P<graph>\d+))?"
)
_DEVICE_RE = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)\s+"
    r"device\s+(?P<dev>\d+)\s+\[(?P<bus>[^\]]*)\]\s+(?P<name>.*?)\s*$"
)
_VERSION_RE = re.compile(r"^([A-Z][A-Za-z]* version|Hostname|Lib\w+ path)\s*:\s*(.*?)\s*$")
_LOG_RE = re.compile(r"\b(?:NCCL|RCCL)\s+(?:INFO|WARN)\b|\bUCX\s+(?:WARN|INFO)\b")
_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<v>\S+)(?:\s+(?P<verdict>OK|FAILED))?\s*$")
_OOB_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<n>\d+)\s+(?P<verdict>OK|FAILED)\s*$")


def _num(raw: str, conv: Callable[[str], Any], no: int, line: str, what: str) -> Any:
    try:
        value = conv(raw)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value):
        raise ParseError(TOOL, no, line, f"bad {what} value {raw!r}")
    return value


def _count(raw: str) -> int:
    """A `%g`-printed count (`#wrong`): `3`, or `1.23457e+06` for a large one."""
    value = float(raw)
    if not math.isfinite(value) or value < 0 or value != int(value):
        raise ValueError(raw)
    return int(value)


def half_unit(raw: str) -> float:
    """Half a unit in the last printed digit of `raw` (`126.83` -> 0.005, `1.2e+04` -> 500): its rounding."""
    try:
        exponent = Decimal(raw).as_tuple().exponent
    except InvalidOperation:
        return math.inf
    return 0.5 * 10.0**exponent if isinstance(exponent, int) else math.inf


def _sample(cells: dict[str, str], no: int, line: str) -> RcclSample:
    missing = {"time", "algbw", "busbw"} - cells.keys()
    if missing:
        raise ParseError(TOOL, no, line, f"table group lacks {sorted(missing)}")
    wrong: int | None = None
    error: float | None = None
    flagged = False
    raw = cells.get("#wrong", cells.get("error"))
    if raw is not None and not is_na(raw):
        flagged = raw.endswith("*")
        raw = raw.removesuffix("*")
        if "#wrong" in cells:
            if flagged:
                raise ParseError(TOOL, no, line, "'*' after a #wrong count: only the old error column carries it")
            wrong = _num(raw, _count, no, line, "#wrong")
        else:
            error = _num(raw, float, no, line, "error")
    return RcclSample(
        time_us=_num(cells["time"], float, no, line, "time"),
        algbw_gbs=_num(cells["algbw"], float, no, line, "algbw"),
        busbw_gbs=_num(cells["busbw"], float, no, line, "busbw"),
        wrong=wrong,
        max_error=error,
        flagged=flagged,
    )


class _Table:
    """Column layout derived from the banner and names lines of one table header."""

    def __init__(self, banner: str, names: str, no: int) -> None:
        groups = re.findall(r"out-of-place|in-place", banner)
        tokens = names.lstrip("#").split()
        starts = [i for i, t in enumerate(tokens) if t == "time"]
        if not groups or len(starts) != len(groups) or tokens[:1] != ["size"]:
            raise ParseError(TOOL, no, names, "table header does not match its out-of-place/in-place banner")
        self.width = len(tokens)
        self.lead = {t: i for i, t in enumerate(tokens[: starts[0]])}
        bounds = [*starts, len(tokens)]
        self.groups = [(g, {tokens[i]: i for i in range(bounds[k], bounds[k + 1])}) for k, g in enumerate(groups)]
        self.busbw_texts: list[str] = []  # every printed busbw, for the footer's average
        self.unchecked: dict[str, list[tuple[int, str]]] = {}  # half -> (line no, line) printed #wrong N/A
        self.checked: dict[str, int] = {}  # half -> results printed with a #wrong/error value

    def row(self, line: str, no: int, cycle: int) -> RcclRow:
        cells = line.split()
        if len(cells) != self.width:
            raise ParseError(TOOL, no, line, f"row has {len(cells)} cells, header has {self.width}")
        if "type" not in self.lead or "redop" not in self.lead:
            raise ParseError(TOOL, no, line, "table header lacks type/redop")
        halves = {g: _sample({k: cells[i] for k, i in cols.items()}, no, line) for g, cols in self.groups}
        for g, cols in self.groups:
            self.busbw_texts.append(cells[cols["busbw"]])
            check = cols.get("#wrong", cols.get("error"))
            if check is not None and is_na(cells[check]):
                self.unchecked.setdefault(g, []).append((no, line))
            elif check is not None:
                self.checked[g] = self.checked.get(g, 0) + 1
        lead = {k: cells[i] for k, i in self.lead.items()}
        return RcclRow(
            size=_num(lead["size"], int, no, line, "size"),
            count=_num(lead["count"], int, no, line, "count") if "count" in lead else None,
            type=lead["type"],
            redop=lead["redop"],
            root=_num(lead["root"], int, no, line, "root") if "root" in lead else None,
            out_of_place=halves.get("out-of-place"),
            in_place=halves.get("in-place"),
            cycle=cycle,
            line_no=no,
        )


def _device(m: re.Match[str], no: int) -> RcclDevice:
    bus = m.group("bus").strip()
    bdf = None
    if not re.fullmatch(r"0x[0-9A-Fa-f]+", bus):
        bdf = normalize_bdf(bus, tool=TOOL, line_no=no, allow_missing_function=True)
    return RcclDevice(
        rank=int(m.group("rank")),
        group=int(m.group("group")) if m.group("group") else None,
        pid=int(m.group("pid")),
        host=m.group("host"),
        device=int(m.group("dev")),
        bus_id=bus,
        bdf=bdf,
        name=m.group("name"),
    )


def _settings(m: re.Match[str]) -> SweepSettings:
    def opt(name: str) -> int | None:
        return int(m.group(name)) if m.group(name) is not None else None

    return SweepSettings(
        n_threads=int(m.group("threads")),
        n_gpus=int(m.group("gpus")),
        min_bytes=int(m.group("min")),
        max_bytes=int(m.group("max")),
        step=int(m.group("step")),
        step_kind=m.group("kind"),
        warmup_iters=int(m.group("warmup")),
        iters=int(m.group("iters")),
        agg_iters=opt("agg"),
        validation=opt("validation"),
        graph=opt("graph"),
    )


def sweep_steps(settings: SweepSettings) -> int | None:
    """Rows one pass of the sweep prints (rccl-tests' size loop), or None when the header cannot say."""
    top = settings.max_bytes_reduced_to if settings.max_bytes_reduced_to is not None else settings.max_bytes
    if settings.step_kind == "factor" and settings.step > 1:
        if settings.min_bytes <= 0:
            return None  # size * factor never grows from 0: the loop bound is not the header's
        steps, size = 0, settings.min_bytes
        while size <= top:
            steps, size = steps + 1, size * settings.step
        return steps
    if settings.step <= 0:
        return None
    return max(0, (top - settings.min_bytes) // settings.step + 1)


def _check_sweep(settings: SweepSettings, rows: list[RcclRow]) -> None:
    steps = sweep_steps(settings)
    if steps is None:
        return
    groups: dict[tuple[int, str, str], list[RcclRow]] = {}
    for row in rows:
        groups.setdefault((row.cycle, row.type, row.redop), []).append(row)
    for (_, dtype, redop), members in groups.items():
        if steps == 0 or len(members) % steps:
            raise ParseError(
                TOOL,
                members[-1].line_no,
                f"{dtype} {redop}: {len(members)} rows",
                f"table has {len(members)} rows for {dtype}/{redop}; the header's sweep "
                f"{settings.min_bytes}..{settings.max_bytes_reduced_to or settings.max_bytes} "
                f"step {settings.step}({settings.step_kind}) prints {steps} per pass: rows missing or edited",
            )


def _check_validated(settings: SweepSettings, table: _Table, collective: str | None) -> None:
    """With validation on, `N/A` only where the tool skips the check (see the module docstring)."""
    if not settings.validation:
        return
    if "out-of-place" in table.unchecked:
        no, line = table.unchecked["out-of-place"][0]
        raise ParseError(
            TOOL, no, line, f"out-of-place #wrong N/A in {len(table.unchecked['out-of-place'])} row(s) while the "
            f"header says validation: {settings.validation}: rccl-tests/nccl-tests print a count whenever they "
            "check, so these results are unchecked (edited output?)",
        )  # fmt: skip
    if "in-place" not in table.unchecked:
        return
    no, line = table.unchecked["in-place"][0]
    name = collective.rsplit("/", 1)[-1].removesuffix("_perf") if collective else None
    if name in IN_PLACE_UNCHECKED or (name is None and not table.checked.get("in-place")):
        return
    why = (
        f"{collective} checks its in-place results"
        if name is not None
        else "the output names no collective, and its in-place half mixes N/A with counts"
    )
    raise ParseError(
        TOOL, no, line, f"in-place #wrong N/A in {len(table.unchecked['in-place'])} row(s) while the header says "
        f"validation: {settings.validation}: {why} (only alltoall/alltoallv/sendrecv skip it)",
    )  # fmt: skip


def _check_avg(avg_text: str, avg: float, table: _Table, no: int, line: str) -> None:
    """The footer must be the mean busbw of the table, within the printed rounding (`%g`: 6 significant
    digits, trailing zeros dropped, so `19.17` is 19.1700 +- 0.000005, not +- 0.005)."""
    texts = table.busbw_texts
    mean = math.fsum(float(t) for t in texts) / len(texts)
    footer = 0.5 * 10.0 ** (math.floor(math.log10(abs(avg))) - 5) if avg else 0.0
    slack = math.fsum(half_unit(t) for t in texts) / len(texts) + footer + 1e-9
    if not abs(avg - mean) <= slack:
        raise ParseError(
            TOOL, no, line, f"'# Avg bus bandwidth' {avg_text} disagrees with its own table: the mean busbw of "
            f"its {len(texts)} results (out-of-place and in-place, every row, as rccl-tests/nccl-tests average "
            f"them) is {mean:.4f} GB/s, allowed {slack:.4f} for printed rounding (edited or mixed output?)",
        )  # fmt: skip


def _check_devices(settings: SweepSettings, devices: list[RcclDevice], lines: dict[int, tuple[int, str]]) -> None:
    """Ranks 0..N-1 once each, in order, `nThread * nGpus` per process on one host and pid."""
    if not devices:
        return
    ranks = [d.rank for d in devices]
    if ranks != list(range(len(devices))):
        dup = sorted({r for r in ranks if ranks.count(r) > 1})
        gone = sorted(set(range(max(len(devices), max(ranks) + 1))) - set(ranks))
        at = next(i for i, r in enumerate(ranks) if r != i)
        raise ParseError(
            TOOL, *lines[at], f"device lines are not ranks 0..{len(devices) - 1} in order"
            + (f"; rank(s) {', '.join(map(str, dup))} printed twice" if dup else "")
            + (f"; rank(s) {', '.join(map(str, gone))} missing" if gone else ""),
        )  # fmt: skip
    per = settings.n_threads * settings.n_gpus
    if per <= 0 or len(devices) % per:
        raise ParseError(
            TOOL, *lines[len(devices) - 1], f"{len(devices)} rank lines, not a multiple of the header's "
            f"nThread {settings.n_threads} x nGpus {settings.n_gpus} ranks per process",
        )  # fmt: skip
    for start in range(0, len(devices), per):
        block = devices[start : start + per]
        if len({(d.host, d.pid) for d in block}) != 1:
            raise ParseError(
                TOOL, *lines[start], f"ranks {start}..{start + per - 1} are one process (nThread x nGpus = {per}) "
                "but their lines name different hosts or pids",
            )  # fmt: skip
    procs: dict[tuple[str, int], int] = {}
    for d in devices:
        procs[d.host, d.pid] = procs.get((d.host, d.pid), 0) + 1
    (host, pid), most = max(procs.items(), key=lambda kv: kv[1])
    if most != per:
        first = next(i for i, d in enumerate(devices) if (d.host, d.pid) == (host, pid))
        raise ParseError(
            TOOL, *lines[first], f"pid {pid} on {host} printed {most} rank lines but the header's nThread "
            f"{settings.n_threads} x nGpus {settings.n_gpus} gives {per} ranks per process (header edited?)",
        )  # fmt: skip


def _parse_text(text: str) -> RcclTestsResult:
    settings: SweepSettings | None = None
    devices: list[RcclDevice] = []
    versions: dict[str, str] = {}
    rows: list[RcclRow] = []
    info: dict[str, Any] = {}
    table: _Table | None = None
    banner: tuple[str, int] | None = None
    cycle = 0
    device_lines: dict[int, tuple[int, str]] = {}
    lines = text.splitlines()
    for no, line in enumerate(lines, 1):
        stripped = line.strip()
        if "avg" in info:
            break
        if table is None and (m := re.match(r"^#?\s*rccl-tests(?::| version)\s*(?:Version\s+)?(.*?)\s*$", line)):
            info["version"] = m.group(1)
        elif table is None and (m := re.match(r"^#\s*Collective test starting:\s*(\S+)", line)):
            info["collective"] = m.group(1)
        elif settings is None:
            hm = _HEADER_RE.search(line)
            if hm is not None:
                settings = _settings(hm)
            continue
        if not stripped or settings is None:
            continue
        if table is None:
            dm = _DEVICE_RE.match(line)
            if dm is not None:
                device_lines[len(devices)] = (no, line)
                devices.append(_device(dm, no))
            elif m := re.match(r"^#\s*Reducing maxBytes to (\d+)", line):
                settings = replace(settings, max_bytes_reduced_to=int(m.group(1)))
            elif re.match(r"^#.*\b(?:out-of-place|in-place)\b", line):
                banner = (line, no)
            elif banner is not None and re.match(r"^#\s*size\b", line):
                table = _Table(banner[0], line, no)
            elif m := _VERSION_RE.match(line):
                versions[m.group(1)] = m.group(2)
            continue
        if digits(stripped[0]):
            rows.append(table.row(stripped, no, cycle))
        elif stripped.startswith("#"):
            if m := _AVG_RE.match(stripped):
                info["avg"] = _num(m.group("v"), float, no, line, "avg busbw")
                info["avg_verdict"] = m.group("verdict")
                info["avg_at"] = (m.group("v"), no, line)
            elif m := _OOB_RE.match(stripped):
                if (int(m.group("n")) > 0) != (m.group("verdict") == "FAILED"):
                    raise ParseError(TOOL, no, line, "the tool prints FAILED exactly when out-of-bounds values > 0")
                info["oob"] = (int(m.group("n")), m.group("verdict") == "OK")
            elif m := re.match(r"^#\s*Testing (\d+) cycle", stripped):
                cycle = int(m.group(1)) - 1
        elif not _LOG_RE.search(line):
            raise ParseError(TOOL, no, line, "unexpected line inside the results table")
    if settings is None:
        raise ParseError(TOOL, 0, text[:80], "no '# nThread ... nGpus ...' header")
    if table is None or not rows:
        raise ParseError(TOOL, 0, text[-80:], "no results table")
    if "avg" not in info:
        raise ParseError(TOOL, 0, text[-80:], "no '# Avg bus bandwidth' footer (run incomplete)")
    for m in re.finditer(r"#\s*Collective test concluded:\s*(\S+)", text):
        info.setdefault("collective", m.group(1))
    _check_sweep(settings, rows)
    _check_validated(settings, table, info.get("collective"))
    avg_text, avg_no, avg_line = info["avg_at"]
    _check_avg(avg_text, info["avg"], table, avg_no, avg_line)
    _check_devices(settings, devices, device_lines)
    oob = info.get("oob")
    return RcclTestsResult(
        source_format="text",
        settings=settings,
        rows=tuple(rows),
        devices=tuple(devices),
        ranks=len(devices) or None,
        tests_version=info.get("version"),
        collective=info.get("collective"),
        versions=versions,
        out_of_bounds=oob[0] if oob else None,
        out_of_bounds_ok=oob[1] if oob else None,
        avg_busbw_gbs=info["avg"],
        avg_busbw_verdict=info.get("avg_verdict"),
    )


def parse_rccl_tests(text: str) -> RcclTestsResult:
    """Parse rccl-tests/nccl-tests stdout, or its `-Z json` file (detected by a leading `[` / `{`).

    MPI launcher preambles (UCX log lines, Open MPI help blocks) are skipped first: a UCX line starts
    with `[<timestamp>]`, which is not the start of a JSON array.
    """
    _, body = split_preamble(text)
    if body.lstrip()[:1] in ("[", "{"):
        return parse_after_preamble(text, parse_rccl_tests_json)
    return parse_after_preamble(text, _parse_text)


def to_measurements(
    result: RcclTestsResult, *, prefix: str = "mesh", op: str = "all_reduce", env: Mapping[str, str] | None = None
) -> tuple[Measurement, ...]:
    """Measurements `<prefix>/<op>/busbw/<bytes>` (out-of-place, GB/s), `<prefix>/<op>/busbw_inplace/<bytes>`
    (in-place, GB/s; issue 10: both halves of the table are recorded) and `<prefix>/<op>/avg_busbw`.

    Zero-byte rows (alltoall rounds small sizes down to 0) carry no bandwidth and are skipped; rows of
    several cycles (`-N`) become several samples of one measurement. A half the tool did not print
    (`-z`-style runs, a JSON record without it) is simply absent.
    """
    s = result.settings
    if s is None:
        raise ParseError(TOOL, 0, "", "no sweep settings (JSON-only result): merge_json() with the text first")
    combos = {(r.type, r.redop) for r in result.rows}
    if len(combos) != 1:
        raise ParseError(TOOL, 0, str(sorted(combos))[:80], "sweep mixes datatypes/ops; one measurement set each")
    dtype, redop = combos.pop()
    settings = {
        "min_bytes": str(s.min_bytes),
        "max_bytes": str(s.max_bytes_reduced_to if s.max_bytes_reduced_to is not None else s.max_bytes),
        "step_factor" if s.step_kind == "factor" else "step_bytes": str(s.step),
        "iters": str(s.iters),
        "warmup_iters": str(s.warmup_iters),
        "ranks": str(result.ranks if result.ranks is not None else s.n_threads * s.n_gpus),
        "datatype": dtype,
        "op": redop,
    }
    settings.update({k: v for k, v in (env or {}).items() if k.startswith(("NCCL_", "RCCL_"))})
    per_size: dict[int, list[float]] = {}
    in_place: dict[int, list[float]] = {}
    for row in result.rows:
        if row.size > 0 and row.out_of_place is not None:
            per_size.setdefault(row.size, []).append(row.out_of_place.busbw_gbs)
        if row.size > 0 and row.in_place is not None:
            in_place.setdefault(row.size, []).append(row.in_place.busbw_gbs)
    out = [
        Measurement(
            key=f"{prefix}/{op}/{metric}/{size}",
            unit="GB/s",
            samples=tuple(vals),
            settings=dict(settings),
            source=TOOL,
        )
        for metric, values in (("busbw", per_size), ("busbw_inplace", in_place))
        for size, vals in values.items()
    ]
    if result.avg_busbw_gbs is not None:
        out.append(
            Measurement(
                key=f"{prefix}/{op}/avg_busbw",
                unit="GB/s",
                samples=(result.avg_busbw_gbs,),
                settings=dict(settings),
                source=TOOL,
            )
        )
    return tuple(out)


PARSERS: dict[str, Callable[[str], object]] = {"rccl-tests": parse_rccl_tests}

__all__ = [
    "IN_PLACE_UNCHECKED",
    "PARSERS",
    "TOOL",
    "RcclDevice",
    "RcclRow",
    "RcclSample",
    "RcclTestsResult",
    "SweepSettings",
    "half_unit",
    "merge_json",
    "parse_rccl_tests",
    "parse_rccl_tests_json",
    "sweep_steps",
    "to_measurements",
]
