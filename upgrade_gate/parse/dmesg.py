"""Parser for `dmesg`: classify kernel messages into `KernelEvent`s with a data file of patterns.

Design notes and tool quirks:
- Which messages matter lives in data (`upgrade_gate/data/dmesg_patterns.yaml`), not code: each
  pattern has an id (the event kind), a regex, a severity (fatal / error / warn), the printing driver
  and the GPU families it applies to. `parse_dmesg(text, patterns)` takes the table as an argument so
  the parser stays pure; `load_default_patterns()` reads the shipped file once (importlib.resources).
- The first pattern that matches classifies a message (the file orders specific before general), so
  one kernel message is never counted twice.
- Timestamps: plain `[ 1234.567890]`, `dmesg -T` `[Sat Jan  7 14:25:56 2023]` (the day is space
  padded), or none (journal pastes, corpus dmesg/rx7600xt-...). Lines that start with blanks and carry
  no timestamp continue the previous message (NVIDIA's multi-line "fallen off the bus" in corpus
  dmesg/nvidia-fallen-off-bus-...); they are joined with one space before matching.
- The event's BDF is the device prefix the driver printed (`amdgpu 0000:e3:00.0: ...`), else the first
  full `dddd:bb:dd.f` in the message; a line without one (`[drm:amdgpu_job_timedout [amdgpu]] ...`)
  takes the device of the nearest lines of the same driver around it when they agree (`_neighbour_device`),
  else None.
- NVIDIA (`NVRM:`) messages are not amdgpu events and the default table has no NVIDIA pattern: an AMD
  gate does not judge Xids. A site that wants them adds patterns to its own table.
- `dmesg: read kernel buffer failed: ...` (dmesg_restrict for non-root) or an empty log is no evidence at
  all: ParseError, never "no events".
- Garbage is not a clean log. util-linux dmesg escapes unprintable bytes itself (`\\x..`), so a NUL,
  another C0 control character (tab, newline, carriage return and ESC excepted) or U+FFFD (a byte that
  was not UTF-8, replaced when the output was decoded) means the bytes are not dmesg's output: a
  truncated or corrupted capture, a binary written over the file. ParseError naming the first such line,
  because a scan that matched nothing in garbage proves nothing.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from upgrade_gate import docio
from upgrade_gate.errors import ConfigError, ParseError
from upgrade_gate.model import Bdf, KernelEvent
from upgrade_gate.parse.common import normalize_bdf, strip_ansi
from upgrade_gate.parse.sanity import error_text

TOOL = "dmesg"
SEVERITIES = ("fatal", "error", "warn")
ALL_FAMILIES = "all"

_MONO_TS_RE = re.compile(r"^\[\s*\d+\.\d+\]\s?")
_CTIME_TS_RE = re.compile(
    r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
    r"[ \d]\d \d\d:\d\d:\d\d \d{4}\]\s?"
)
_DEVICE_PREFIX_RE = re.compile(r"^[\w.-]+ (?P<bdf>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]):")
_ANY_BDF_RE = re.compile(r"(?<![0-9a-fA-F:])(?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\b")
_DMESG_ERROR_RE = re.compile(r"^dmesg: ")
_NEIGHBOURS = 3  # messages either side searched for the device of an event line that names none
_NOT_TEXT_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f\ufffd]")


@dataclass(frozen=True, slots=True, kw_only=True)
class DmesgPattern:
    """One known kernel-log pattern from the data file."""

    id: str
    regex: re.Pattern[str]
    severity: str
    driver: str
    families: tuple[str, ...]
    source: str

    def applies_to(self, family: str | None) -> bool:
        """True when the pattern is meant for this GPU family (or no family was given)."""
        return family is None or ALL_FAMILIES in self.families or family in self.families


@dataclass(frozen=True, slots=True, kw_only=True)
class PatternTable:
    """An ordered table of patterns; the first match classifies a message."""

    version: int
    patterns: tuple[DmesgPattern, ...]

    @property
    def digest(self) -> str:
        """What classified a log: the table version and a hash of every (id, regex) in order.

        Severities and families are left out: the judge re-grades those from the policy, so only a
        change of what matches makes a snapshot's events stale.
        """
        text = "\n".join(f"{p.id}\t{p.regex.pattern}" for p in self.patterns)
        return f"v{self.version}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


# GPU families as the pattern table names them, by the gfx target rocminfo / amd-smi print.
_FAMILIES = {
    "gfx906": "mi50",  # MI50 / MI60 (Vega 20)
    "gfx908": "mi100",
    "gfx90a": "mi200",  # MI210 / MI250 / MI250X
    "gfx940": "mi300",
    "gfx941": "mi300",
    "gfx942": "mi300",  # MI300X / MI300A / MI308X / MI325X
    "gfx950": "mi350",  # MI350X / MI355X
}


def family_of(gfx_target: str | None) -> str | None:
    """The pattern table's family name of a gfx target ("gfx942" -> "mi300"); the target itself if unnamed."""
    if gfx_target is None:
        return None
    target = gfx_target.strip().lower()
    return _FAMILIES.get(target, target or None)


@dataclass(frozen=True, slots=True, kw_only=True)
class DmesgResult:
    """The classified events of one kernel log, in log order."""

    events: tuple[KernelEvent, ...]
    message_count: int
    timestamp_style: str  # "monotonic", "ctime", "none" or "mixed"


# --------------------------------------------------------------------------- pattern table


def _table_error(where: str, message: str) -> ConfigError:
    return ConfigError(f"dmesg patterns {where}: {message}")


def load_patterns(text: str, *, source: str = "dmesg_patterns.yaml") -> PatternTable:
    """Build a pattern table from YAML text; ConfigError naming the entry at fault."""
    try:
        data: Any = docio.load_yaml(text, source=source)
    except yaml.YAMLError as exc:
        raise _table_error(source, f"not YAML ({exc.__class__.__name__})") from exc
    if not isinstance(data, Mapping) or not isinstance(data.get("patterns"), list):
        raise _table_error(source, "expected a mapping with a 'patterns' list")
    version = data.get("version")
    if not isinstance(version, int):
        raise _table_error(source, "'version' must be an integer")
    patterns: list[DmesgPattern] = []
    seen: set[str] = set()
    for i, entry in enumerate(data["patterns"]):
        where = f"{source} patterns[{i}]"
        if not isinstance(entry, Mapping):
            raise _table_error(where, "expected a mapping")
        unknown = set(entry) - {"id", "regex", "severity", "driver", "families", "source"}
        if unknown:
            raise _table_error(where, f"unknown key {sorted(unknown)[0]!r}")
        values = {k: entry.get(k) for k in ("id", "regex", "severity", "driver", "source")}
        for key, value in values.items():
            if not isinstance(value, str) or not value:
                raise _table_error(where, f"{key!r} must be a non-empty string")
        pid = str(values["id"])
        if pid in seen:
            raise _table_error(where, f"duplicate id {pid!r}")
        seen.add(pid)
        if values["severity"] not in SEVERITIES:
            raise _table_error(where, f"severity must be one of {SEVERITIES}")
        families = entry.get("families")
        if not isinstance(families, list) or not families or not all(isinstance(f, str) for f in families):
            raise _table_error(where, "'families' must be a non-empty list of strings")
        try:
            regex = re.compile(str(values["regex"]))
        except re.error as exc:
            raise _table_error(where, f"bad regex: {exc}") from exc
        patterns.append(
            DmesgPattern(
                id=pid,
                regex=regex,
                severity=str(values["severity"]),
                driver=str(values["driver"]),
                families=tuple(families),
                source=str(values["source"]),
            )
        )
    return PatternTable(version=version, patterns=tuple(patterns))


@functools.cache
def load_default_patterns() -> PatternTable:
    """The pattern table shipped in `upgrade_gate/data/dmesg_patterns.yaml`."""
    ref = resources.files("upgrade_gate") / "data" / "dmesg_patterns.yaml"
    return load_patterns(ref.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- parser


def _split_timestamp(line: str) -> tuple[str | None, str]:
    for style, regex in (("monotonic", _MONO_TS_RE), ("ctime", _CTIME_TS_RE)):
        match = regex.match(line)
        if match:
            return style, line[match.end() :]
    return None, line


def _bdf_of(message: str, line_no: int) -> Bdf | None:
    match = _DEVICE_PREFIX_RE.match(message) or _ANY_BDF_RE.search(message)
    if match is None:
        return None
    try:
        return normalize_bdf(match.group("bdf"), tool=TOOL, line_no=line_no)
    except ParseError:
        return None  # free text that only looks like an address (device number above 0x1f)


def _refuse_garbage(text: str) -> None:
    """ParseError at the first line holding bytes that dmesg never prints (see the module docstring)."""
    match = _NOT_TEXT_RE.search(text)
    if match is None:
        return
    line_no = text.count("\n", 0, match.start()) + 1
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.start())
    line = text[start : end if end >= 0 else len(text)]
    bad = sum(1 for _ in _NOT_TEXT_RE.finditer(text))
    char = match.group(0)
    what = "NUL byte" if char == "\x00" else "non-UTF-8 byte" if char == "\ufffd" else f"control byte {char!r}"
    raise ParseError(
        TOOL,
        line_no,
        line.encode("unicode_escape").decode("ascii")[:120],
        f"not a kernel log: {what} ({bad} unprintable character(s) in all); dmesg escapes such bytes itself, "
        "so this output is corrupt or binary",
    )


def _messages(text: str) -> tuple[list[tuple[int, str]], str]:
    """(first line number, message) pairs with continuation lines joined, and the timestamp style."""
    _refuse_garbage(text)
    messages: list[tuple[int, str]] = []
    styles: set[str] = set()
    for no, raw in enumerate(strip_ansi(text).splitlines(), 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if _DMESG_ERROR_RE.match(line):
            raise ParseError(TOOL, no, line, "dmesg could not read the kernel log")
        style, message = _split_timestamp(line)
        if style is None and line[0] in " \t" and messages:
            first, previous = messages[-1]
            messages[-1] = (first, f"{previous} {line.strip()}")
            continue
        styles.add(style or "none")
        messages.append((no, message.strip()))
    if not messages:
        raise ParseError(TOOL, 0, "", "empty kernel log: no evidence to scan")
    if styles == {"none"} and (why := error_text(messages[0][1])) is not None:
        # no line carries a kernel timestamp and the first is an error: a wrapper's or tool's message where the
        # log belongs ("ERROR: amdgpu driver not loaded" with exit 0 read as a clean log: break test 2026-12-07)
        raise ParseError(TOOL, messages[0][0], messages[0][1][:120], f"not a kernel log: {why}")
    style_name = styles.pop() if len(styles) == 1 else "mixed"
    return messages, style_name


def parse_dmesg(text: str, patterns: PatternTable | None = None, *, family: str | None = None) -> DmesgResult:
    """Classify dmesg output with `patterns` (default: the shipped table) into kernel events."""
    table = patterns if patterns is not None else load_default_patterns()
    active = tuple(p for p in table.patterns if p.applies_to(family))
    messages, style = _messages(text)
    devices = [_bdf_of(message, line_no) for line_no, message in messages]
    events: list[KernelEvent] = []
    only: dict[str, Bdf | None] = {}  # driver -> its one device in the whole log, computed once a parse
    for at, (line_no, message) in enumerate(messages):
        pattern = first_match(message, active)
        if pattern is not None:
            events.append(
                KernelEvent(
                    kind=pattern.id,
                    severity=pattern.severity,
                    bdf=devices[at] or _neighbour_device(messages, devices, at, pattern.driver, only),
                    line_no=line_no,
                    text=message,
                )
            )
    return DmesgResult(events=tuple(events), message_count=len(messages), timestamp_style=style)


def first_match(message: str, patterns: Iterable[DmesgPattern]) -> DmesgPattern | None:
    """The pattern that classifies a kernel-log message: the first of `patterns` whose regex finds it."""
    return next((p for p in patterns if p.regex.search(message)), None)


def _neighbour_device(
    messages: list[tuple[int, str]], devices: list[Bdf | None], at: int, driver: str, only: dict[str, Bdf | None]
) -> Bdf | None:
    """The device of the driver instance around message `at`, when that is unambiguous.

    `[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout ...` and
    `[drm:amdgpu_device_ip_early_init [amdgpu]] *ERROR* early_init of IP block <psp> failed -19` carry no
    device, but the driver instance printing them names its device on the lines around them
    (`amdgpu 0000:1b:00.0: Direct firmware load for amdgpu/psp_13_0_6_sos.bin failed ...`). Unambiguous:
    the nearest device-naming messages of the same driver before and after it, within `_NEIGHBOURS`
    messages, name the same device; or the driver names one device in the whole log (a one-GPU host).
    Eight GPUs resetting at once (corpus dmesg/mi300x-8gpu-aca-...: `amdgpu: Failed to restore process
    queues` eight times after one device's lines) stay without a device.

    Bounded: the neighbours are at most `_NEIGHBOURS` messages each side, and the whole-log answer is
    computed once per driver and parse (`only`), not once per event (1 MiB of device-less lines took 18.8 s).
    """

    def nearest(indexes: range) -> Bdf | None:
        for i in indexes:
            if devices[i] is not None and driver in messages[i][1]:
                return devices[i]
        return None

    before = nearest(range(at - 1, max(at - 1 - _NEIGHBOURS, -1), -1))
    after = nearest(range(at + 1, min(at + 1 + _NEIGHBOURS, len(messages))))
    if before is not None and before == after:
        return before
    if driver not in only:
        only[driver] = _one_device(messages, devices, driver)
    return only[driver]


def _one_device(messages: list[tuple[int, str]], devices: list[Bdf | None], driver: str) -> Bdf | None:
    """The one device `driver` names in the whole log, or None (none, or two or more)."""
    seen: Bdf | None = None
    for device, (_, message) in zip(devices, messages, strict=True):
        if device is not None and driver in message:
            if seen is not None and device != seen:
                return None
            seen = device
    return seen


def _parse_dmesg_default(text: str) -> DmesgResult:
    return parse_dmesg(text)


PARSERS: dict[str, Callable[[str], object]] = {"dmesg": _parse_dmesg_default}
