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
- JSON form (rocm-systems projects/rccl-tests/src/common.cu @491c996, `Reporter::writeFile`): a JSON
  array of flat records; older ROCm/rccl-tests common.cu @c0eac93 wrote one record per line (no
  `numCycle`). Numbers come from std::to_string; `wrong` is a quoted string ("0" / "N/A").
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Bdf, Measurement
from upgrade_gate.parse.common import is_na, normalize_bdf

TOOL = "rccl-tests"

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


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepSettings:
    """The `# nThread ... graph: 0` header: what was swept and how."""

    n_threads: int
    n_gpus: int  # GPUs per thread (-g)
    min_bytes: int
    max_bytes: int
    step: int
    step_kind: str  # "factor" / "bytes"
    warmup_iters: int
    iters: int
    agg_iters: int | None = None  # absent in old nccl-tests
    validation: int | None = None
    graph: int | None = None
    max_bytes_reduced_to: int | None = None  # "# Reducing maxBytes to N due to memory limitation"


@dataclass(frozen=True, slots=True, kw_only=True)
class RcclDevice:
    """One `#  Rank  N [Group G] Pid P on HOST device D [BUS] NAME` line."""

    rank: int
    group: int | None
    pid: int
    host: str
    device: int
    bus_id: str  # as printed
    bdf: Bdf | None  # None where the tool printed no PCI address (old nccl-tests "[0x00]")
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RcclSample:
    """One half (out-of-place or in-place) of a result row."""

    time_us: float
    algbw_gbs: float
    busbw_gbs: float
    wrong: int | None = None  # "#wrong"; None when printed N/A (validation off)
    max_error: float | None = None  # old nccl-tests "error" column
    flagged: bool = False  # value printed with "*": errors over the threshold


@dataclass(frozen=True, slots=True, kw_only=True)
class RcclRow:
    """One message size of the results table."""

    size: int
    count: int | None
    type: str
    redop: str
    root: int | None
    out_of_place: RcclSample | None
    in_place: RcclSample | None
    cycle: int = 0
    line_no: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RcclTestsResult:
    """A whole rccl-tests run: sweep settings, ranks, rows and the footer."""

    source_format: str  # "text", "json" or "text+json"
    settings: SweepSettings | None  # None for a JSON-only result
    rows: tuple[RcclRow, ...]
    devices: tuple[RcclDevice, ...] = ()
    ranks: int | None = None
    tests_version: str | None = None
    collective: str | None = None
    versions: dict[str, str] = field(default_factory=dict)  # "RCCL version", "HIP version", ...
    out_of_bounds: int | None = None
    out_of_bounds_ok: bool | None = None
    avg_busbw_gbs: float | None = None
    avg_busbw_verdict: str | None = None  # "OK"/"FAILED" when NCCL_TESTS_MIN_BW was set

    @property
    def wrong_total(self) -> int | None:
        """Sum of #wrong over every row and half; None when no value was validated."""
        vals = [s.wrong for r in self.rows for s in (r.out_of_place, r.in_place) if s and s.wrong is not None]
        return sum(vals) if vals else None

    def busbw_at(self, size: int) -> float | None:
        """Out-of-place bus bandwidth (GB/s) of the first row of that size."""
        for row in self.rows:
            if row.size == size and row.out_of_place is not None:
                return row.out_of_place.busbw_gbs
        return None


def _num(raw: str, conv: Callable[[str], Any], no: int, line: str, what: str) -> Any:
    try:
        value = conv(raw)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value):
        raise ParseError(TOOL, no, line, f"bad {what} value {raw!r}")
    return value


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
        raw = raw.rstrip("*")
        if "#wrong" in cells:
            wrong = _num(raw, int, no, line, "#wrong")
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

    def row(self, line: str, no: int, cycle: int) -> RcclRow:
        cells = line.split()
        if len(cells) != self.width:
            raise ParseError(TOOL, no, line, f"row has {len(cells)} cells, header has {self.width}")
        if "type" not in self.lead or "redop" not in self.lead:
            raise ParseError(TOOL, no, line, "table header lacks type/redop")
        halves = {g: _sample({k: cells[i] for k, i in cols.items()}, no, line) for g, cols in self.groups}
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


def _parse_text(text: str) -> RcclTestsResult:
    settings: SweepSettings | None = None
    devices: list[RcclDevice] = []
    versions: dict[str, str] = {}
    rows: list[RcclRow] = []
    info: dict[str, Any] = {}
    table: _Table | None = None
    banner: tuple[str, int] | None = None
    cycle = 0
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
        if stripped[0].isdigit():
            rows.append(table.row(stripped, no, cycle))
        elif stripped.startswith("#"):
            if m := _AVG_RE.match(stripped):
                info["avg"] = _num(m.group("v"), float, no, line, "avg busbw")
                info["avg_verdict"] = m.group("verdict")
            elif m := _OOB_RE.match(stripped):
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


def _finite(value: Any) -> float:
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"non-finite number {value!r}")
    return out


def _json_records(text: str) -> list[tuple[int, dict[str, Any]]]:
    stripped = text.lstrip()
    try:
        if stripped.startswith("["):
            data = json.loads(text)
            if not isinstance(data, list):
                raise ParseError(TOOL, 0, text[:80], "JSON is not an array of records")
            return [(0, r) for r in data]
        return [(no, json.loads(line)) for no, line in enumerate(text.splitlines(), 1) if line.strip()]
    except (ValueError, RecursionError) as exc:
        raise ParseError(TOOL, getattr(exc, "lineno", 0), text[:80], f"invalid JSON: {exc}") from None


def _parse_json(text: str) -> RcclTestsResult:
    rows: dict[tuple[int, int, str, str], dict[str, Any]] = {}
    names: set[str] = set()
    ranks: set[int] = set()
    for no, rec in _json_records(text):
        if not isinstance(rec, dict):
            raise ParseError(TOOL, no, str(rec)[:80], "JSON record is not an object")
        try:
            key = (int(rec.get("numCycle", 0)), int(rec["size"]), str(rec["type"]), str(rec["redop"]))
            half = "in_place" if int(rec["inPlace"]) else "out_of_place"
            wrong = str(rec["wrong"])
            sample = RcclSample(
                time_us=_finite(rec["time"]),
                algbw_gbs=_finite(rec["algBw"]),
                busbw_gbs=_finite(rec["busBw"]),
                wrong=None if is_na(wrong) else int(wrong),
            )
            ranks.add(int(rec["ranks"] if "ranks" in rec else rec["gpus"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ParseError(TOOL, no, json.dumps(rec)[:80], f"bad rccl-tests JSON record: {exc!r}") from None
        names.add(str(rec.get("name", "")))
        slot = rows.setdefault(key, {"no": no})
        if half in slot:
            raise ParseError(TOOL, no, json.dumps(rec)[:80], "duplicate record for size/type/redop/inPlace")
        slot[half] = sample
    if not rows:
        raise ParseError(TOOL, 0, text[:80], "no JSON records")
    if len(ranks) != 1 or len(names) != 1:
        raise ParseError(TOOL, 0, text[:80], "JSON records disagree on ranks or collective name")
    out = tuple(
        RcclRow(
            size=size,
            count=None,
            type=dtype,
            redop=redop,
            root=None,
            out_of_place=slot.get("out_of_place"),
            in_place=slot.get("in_place"),
            cycle=cyc,
            line_no=slot["no"],
        )
        for (cyc, size, dtype, redop), slot in rows.items()
    )
    return RcclTestsResult(
        source_format="json", settings=None, rows=out, ranks=ranks.pop(), collective=names.pop() or None
    )


def parse_rccl_tests(text: str) -> RcclTestsResult:
    """Parse rccl-tests/nccl-tests stdout, or its `-Z json` file (detected by a leading `[` / `{`)."""
    if text.lstrip()[:1] in ("[", "{"):
        return _parse_json(text)
    return _parse_text(text)


def merge_json(text_result: RcclTestsResult, json_result: RcclTestsResult) -> RcclTestsResult:
    """The text run with its rows' numbers replaced by the JSON file's full-precision values."""
    if text_result.settings is None or json_result.source_format != "json":
        raise ParseError(TOOL, 0, "", "merge_json needs a text result and a JSON result")
    keys = [(r.cycle, r.size, r.type, r.redop) for r in text_result.rows]
    by_key = {(r.cycle, r.size, r.type, r.redop): r for r in json_result.rows}
    if len(by_key) != len(json_result.rows) or set(keys) != set(by_key) or len(set(keys)) != len(keys):
        raise ParseError(TOOL, 0, "", "JSON records do not match the text table's rows")
    for row, k in zip(text_result.rows, keys, strict=True):
        for mine, theirs in ((row.out_of_place, by_key[k].out_of_place), (row.in_place, by_key[k].in_place)):
            # The table prints bandwidths with 2 decimals: the JSON must round to the same values.
            if (mine is None) != (theirs is None) or (
                mine is not None
                and theirs is not None
                and max(abs(mine.busbw_gbs - theirs.busbw_gbs), abs(mine.algbw_gbs - theirs.algbw_gbs)) > 0.0051
            ):
                raise ParseError(TOOL, row.line_no, str(row.size), "JSON record disagrees with the text table")
    rows = tuple(
        replace(r, out_of_place=by_key[k].out_of_place, in_place=by_key[k].in_place)
        for r, k in zip(text_result.rows, keys, strict=True)
    )
    return replace(text_result, rows=rows, source_format="text+json")


def to_measurements(
    result: RcclTestsResult, *, prefix: str = "mesh", op: str = "all_reduce", env: Mapping[str, str] | None = None
) -> tuple[Measurement, ...]:
    """Measurements `<prefix>/<op>/busbw/<bytes>` (out-of-place, GB/s) and `<prefix>/<op>/avg_busbw`.

    Zero-byte rows (alltoall rounds small sizes down to 0) carry no bandwidth and are skipped; rows of
    several cycles (`-N`) become several samples of one measurement.
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
    for row in result.rows:
        if row.size > 0 and row.out_of_place is not None:
            per_size.setdefault(row.size, []).append(row.out_of_place.busbw_gbs)
    out = [
        Measurement(
            key=f"{prefix}/{op}/busbw/{size}",
            unit="GB/s",
            samples=tuple(vals),
            settings=dict(settings),
            source=TOOL,
        )
        for size, vals in per_size.items()
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
