"""The change plan: what a change is meant to alter, what is explicitly accepted, canary settings.

A plan is YAML (or JSON) checked against `schemas/change-plan.schema.json`; any unknown key or bad
value is a `ConfigError` (exit 3) naming the file and the field. Example:

    id: rocm-6.2.0
    change:
      rocm: {from: "6.1.3", to: "6.2.0"}
      firmware: [{block: PLDM_BUNDLE, to: "01.25.17.07"}]
      partition: {from: {compute: SPX, memory: NPS1}, to: {compute: CPX, memory: NPS4}}
    accept:
      - {path: "gpus[*].firmware.RLC", reason: "loaded by the new driver"}
      - {metric: "mesh/all_reduce/busbw/*", shift: -0.03, tolerance: 0.07}
    canaries: {max_fraction: 0.10, min: 1, cap: 4, prefer_idle: true}

Design decisions:
- Versions are strings. A plan target matches a version exactly, or as a prefix up to a build
  suffix that starts with `-` or `+`: `to: "6.2.0"` matches `6.2.0` and `6.2.0-115` (the ROCm
  version file carries the build number) but not `6.2.01` or `6.2.1`. Landing "somewhere new" is not
  landing on the plan.
- Path globs (`accept[].path`, `change.firmware[].block`): `*` matches any run of characters other
  than `[` and `]` (so `gpus[*]` matches every GPU label and `firmware.*` every block), `**` matches
  anything, `?` one character; everything else is literal (brackets are not character classes, so a
  path glob can be written exactly as the diff prints paths).
- A ROCm change also explains `software.rocm_build` (when it lands on the target release) and
  `software.amdsmi_version` / `software.rccl_library`, which ship with ROCm. Nothing else is
  implied: driver-loaded firmware blocks must be listed (`firmware` or `accept`), because "the
  upgrade changed something we did not expect" is exactly what the gate is for.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from upgrade_gate import docio, schemas
from upgrade_gate.errors import ConfigError, SchemaError
from upgrade_gate.judge.plan_partition import PartitionChange, explain_partition, partition_from_dict
from upgrade_gate.model import Change, NodeName, replace
from upgrade_gate.parse.sanity import error_text


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionChange:
    """A planned version move; `from_version` None means "from whatever it was"."""

    to_version: str
    from_version: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FirmwareChange:
    """A planned firmware move of every GPU block matching `block` (a glob)."""

    block: str
    to_version: str | None = None
    from_version: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SonameChange:
    """A planned soname bump of one ROCm library (`libamdhip64.so.5` -> `libamdhip64.so.6`)."""

    from_soname: str
    to_soname: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedChange:
    """Everything the change is meant to alter."""

    rocm: VersionChange | None = None
    driver: VersionChange | None = None
    kernel: VersionChange | None = None
    vbios: VersionChange | None = None
    nic_firmware: VersionChange | None = None
    firmware: tuple[FirmwareChange, ...] = ()
    sonames: tuple[SonameChange, ...] = ()  # expected soname bumps (`abi`, rule library.unplanned)
    partition: PartitionChange | None = None  # compute/memory partition modes (judge.plan_partition)


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptPath:
    """A difference accepted at paths matching `path`, optionally only from/to given values."""

    path: str
    to_value: object = None
    has_to: bool = False
    from_value: object = None
    has_from: bool = False
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptMetric:
    """An accepted metric shift: candidate ~ baseline * (1 + shift), judged with `tolerance`."""

    metric: str
    tolerance: float
    shift: float = 0.0
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CanarySettings:
    """How canaries are chosen (used by the change window): a capped share of each class."""

    max_fraction: float = 0.10
    min_nodes: int = 1
    cap: int | None = None
    prefer_idle: bool = True
    nodes: tuple[NodeName, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SoakSettings:
    """How long canaries are watched after their PASS before `promote` (seconds; 0 = no soak)."""

    duration_s: float = 72 * 3600.0
    every_s: float = 6 * 3600.0
    min_observations: int = 2
    mesh: bool = False
    workload_every_s: float = 0.0  # also run phase 6 this often (fleet.soak_workload); 0: never


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangePlan:
    """A whole change plan."""

    id: str
    change: PlannedChange
    description: str | None = None
    accept_paths: tuple[AcceptPath, ...] = ()
    accept_metrics: tuple[AcceptMetric, ...] = ()
    canaries: CanarySettings = CanarySettings()
    soak: SoakSettings = SoakSettings()
    waves: tuple[float, ...] = (1.0,)
    source: str = "(plan)"


# --------------------------------------------------------------------------- loading

_PATH_KEYS = frozenset({"path", "from", "to", "reason"})
_METRIC_KEYS = frozenset({"metric", "shift", "tolerance", "reason"})


def load_plan(path: Path) -> ChangePlan:
    """Read and validate a plan file; ConfigError names the file and the field."""
    return plan_from_dict(docio.read_yaml(path), source=str(path))


def plan_from_dict(data: Any, *, source: str) -> ChangePlan:
    """Validate and build a plan from its plain document."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: change-plan: expected a mapping at the top level")
    for i, item in enumerate(data.get("accept") or ()):
        if isinstance(item, dict):
            allowed = _METRIC_KEYS if "metric" in item else _PATH_KEYS
            unknown = sorted(set(item) - allowed)
            if unknown:
                raise ConfigError(f"{source}: change-plan: $.accept[{i}].{unknown[0]}: unknown field")
    try:
        schemas.validate("change-plan", data, source=source)
    except SchemaError as exc:
        raise ConfigError(str(exc)) from None
    change = data["change"]
    planned = PlannedChange(
        rocm=_version(change.get("rocm"), source, "change.rocm"),
        driver=_version(change.get("driver"), source, "change.driver"),
        kernel=_version(change.get("kernel"), source, "change.kernel"),
        vbios=_version(change.get("vbios"), source, "change.vbios"),
        nic_firmware=_version(change.get("nic_firmware"), source, "change.nic_firmware"),
        firmware=tuple(
            FirmwareChange(block=f["block"], to_version=f.get("to"), from_version=f.get("from"))
            for f in change.get("firmware", ())
        ),
        sonames=tuple(SonameChange(from_soname=c["from"], to_soname=c["to"]) for c in change.get("sonames", ())),
        partition=partition_from_dict(change.get("partition")),
    )
    for i, fw in enumerate(planned.firmware):
        if _names_nothing(fw.block) and fw.to_version is None:
            raise ConfigError(
                f"{source}: change-plan: $.change.firmware[{i}].block: {fw.block!r} with no `to` accepts any firmware "
                "on any GPU (a flash that landed on 1 of 8 passed); name the blocks, or give the version they land on"
            )
    for i, item in enumerate(data.get("accept", ())):
        glob = item.get("metric", item.get("path"))
        if _names_nothing(glob):
            what = "measurement" if "metric" in item else "field"
            raise ConfigError(
                f"{source}: change-plan: $.accept[{i}].{'metric' if 'metric' in item else 'path'}: {glob!r} names "
                f"no {what}, so it would accept every difference; name the {what}s the change is meant to move"
            )
    blocks = [f.block for f in planned.firmware]
    twice = sorted({b for b in blocks if blocks.count(b) > 1})
    if twice:
        raise ConfigError(f"{source}: change-plan: $.change.firmware: block {twice[0]!r} is listed twice")
    paths: list[AcceptPath] = []
    metrics: list[AcceptMetric] = []
    for item in data.get("accept", ()):
        if "metric" in item:
            metrics.append(
                AcceptMetric(
                    metric=item["metric"],
                    tolerance=float(item["tolerance"]),
                    shift=float(item.get("shift", 0.0)),
                    reason=item.get("reason"),
                )
            )
        else:
            paths.append(
                AcceptPath(
                    path=item["path"],
                    to_value=item.get("to"),
                    has_to="to" in item,
                    from_value=item.get("from"),
                    has_from="from" in item,
                    reason=item.get("reason"),
                )
            )
    raw = data.get("canaries", {})
    canaries = CanarySettings(
        max_fraction=float(raw.get("max_fraction", 0.10)),
        min_nodes=int(raw.get("min", 1)),
        cap=raw.get("cap"),
        prefer_idle=bool(raw.get("prefer_idle", True)),
        nodes=tuple(NodeName(n) for n in raw.get("nodes", ())),
    )
    if canaries.cap is not None and canaries.cap < canaries.min_nodes:
        raise ConfigError(
            f"{source}: change-plan: $.canaries.cap: {canaries.cap} is below canaries.min {canaries.min_nodes}"
        )
    return ChangePlan(
        id=data["id"],
        description=data.get("description"),
        change=planned,
        accept_paths=tuple(paths),
        accept_metrics=tuple(metrics),
        canaries=canaries,
        soak=_soak(data.get("soak", {}), source),
        waves=_waves(data.get("waves", [1.0]), source),
        source=source,
    )


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _names_nothing(glob: str) -> bool:
    """True for a glob made of wildcards and separators alone (`**`, `*`, `*.*`): it matches every path."""
    return not re.search(r"[^*?.\[\]/]", glob)


def parse_duration(text: str) -> float:
    """Seconds in a plan duration such as `72h`, `90m`, `30s`, `1.5d` (the schema checked the shape)."""
    return float(text[:-1]) * _UNITS[text[-1]]


def format_duration(seconds: float) -> str:
    """`72h`, `90m`, `30s`: the largest unit up to hours that divides the value, for messages."""
    for unit in ("h", "m"):
        if seconds and seconds % _UNITS[unit] == 0:
            return f"{int(seconds // _UNITS[unit])}{unit}"
    return f"{seconds:g}s"


def _soak(raw: Mapping[str, Any], source: str) -> SoakSettings:
    soak = SoakSettings(
        duration_s=parse_duration(raw.get("duration", "72h")),
        every_s=parse_duration(raw.get("every", "6h")),
        min_observations=int(raw.get("min_observations", 2)),
        mesh=bool(raw.get("mesh", False)),
        workload_every_s=parse_duration(raw.get("workload_every", "0s")),
    )
    if soak.duration_s > 0 and soak.every_s <= 0:
        raise ConfigError(f"{source}: change-plan: $.soak.every: must be more than 0 when the soak has a duration")
    if soak.duration_s > 0 and soak.every_s > soak.duration_s and soak.min_observations > 1:
        raise ConfigError(
            f"{source}: change-plan: $.soak.every: {format_duration(soak.every_s)} is longer than the soak "
            f"({format_duration(soak.duration_s)}), so {soak.min_observations} observations cannot fit"
        )
    return soak


def _waves(raw: Any, source: str) -> tuple[float, ...]:
    waves = tuple(float(w) for w in raw)
    if any(b <= a for a, b in itertools.pairwise(waves)):
        raise ConfigError(f"{source}: change-plan: $.waves: shares must increase, got {list(waves)}")
    if waves[-1] != 1.0:
        raise ConfigError(f"{source}: change-plan: $.waves: the last wave must be 1.0 (the whole class)")
    return waves


def _version(raw: Mapping[str, str] | None, source: str, field: str) -> VersionChange | None:
    if raw is None:
        return None
    if raw.get("from") == raw["to"]:
        raise ConfigError(f"{source}: change-plan: $.{field}: from and to are both {raw['to']!r}")
    return VersionChange(to_version=raw["to"], from_version=raw.get("from"))


# --------------------------------------------------------------------------- matching


_BUILD_SUFFIX = re.compile(r"(?:-[0-9]|\+[0-9A-Za-z])[0-9A-Za-z.~_+-]*")
"""What may follow the target: a packaging revision (`-66`, `-2009582.24.04`) or build metadata (`+build7`).
A `-` then a letter is a pre-release in SemVer's terms (`6.2.0-rc1`: not the release the plan names), and
words or spaces are an error text glued to a version (`6.2.0-ERROR`, `6.2.0-command not found`)."""


def version_matches(actual: str | None, target: str, *, release: bool = False) -> bool:
    """True when `actual` is `target`, or `target` plus a `-`/`+` suffix: for a `release` (ROCm, the driver,
    the kernel) only a build suffix (`_BUILD_SUFFIX`); for firmware any (`1.117.1-a-63`: vendors spell their
    builds with letters)."""
    if actual is None:
        return False
    a = actual.strip()
    if a == target:
        return True
    if not a.startswith(target):
        return False
    if release:
        return _BUILD_SUFFIX.fullmatch(a, len(target)) is not None
    return a[len(target) : len(target) + 1] in ("-", "+")


class _Glob:
    """A path glob as a bit-parallel automaton: one bit a pattern position, one step a character of the
    text, so a match costs O(len(text)) big-integer operations whatever the pattern. A regular expression
    backtracks: `**` written 1,500 times before a literal that the text lacks ran for minutes (break test,
    2026-12-07), and a plan is input like any other."""

    __slots__ = ("_accept", "_all", "_any", "_lit", "_seg", "_star")

    def __init__(self, pattern: str) -> None:
        lit: dict[str, int] = {}
        anyc = seg = alls = 0
        n = i = 0
        while i < len(pattern):
            bit = 1 << n
            if pattern.startswith("**", i):
                if not alls & (bit >> 1):  # `****` is `**`: runs of stars are one state, not a chain
                    alls |= bit
                    n += 1
                i += 2
                continue
            if pattern[i] == "*":
                seg |= bit
            elif pattern[i] == "?":
                anyc |= bit
            else:
                lit[pattern[i]] = lit.get(pattern[i], 0) | bit
            n += 1
            i += 1
        self._lit, self._any, self._seg, self._all = lit, anyc, seg, alls
        self._star = seg | alls
        self._accept = 1 << n

    def _closure(self, state: int) -> int:
        """Add the positions after every active star (a star may match nothing)."""
        while True:
            more = state | ((state & self._star) << 1)
            if more == state:
                return state
            state = more

    def fullmatch(self, text: str) -> bool:
        """True when the whole of `text` matches."""
        state = self._closure(1)
        lit, anyc, alls, seg = self._lit, self._any, self._all, self._seg
        for ch in text:
            stay = state & (alls if ch in "[]" else alls | seg)
            state = self._closure(((state & (lit.get(ch, 0) | anyc)) << 1) | stay)
            if not state:
                return False
        return bool(state & self._accept)


@functools.lru_cache(maxsize=1024)
def _glob(pattern: str) -> _Glob:
    return _Glob(pattern)


@functools.lru_cache(maxsize=16384)
def glob_match(pattern: str, text: str) -> bool:
    """Match `text` against a path glob (see the module docstring): cached, since a fleet's nodes mostly
    carry the same keys and paths."""
    return _glob(pattern).fullmatch(text)


@functools.lru_cache(maxsize=256)
def glob_select(pattern: str, texts: tuple[str, ...]) -> tuple[str, ...]:
    """The `texts` matching `pattern`, sorted: cached, since a fleet's nodes mostly carry the same keys."""
    return tuple(sorted(t for t in texts if glob_match(pattern, t)))


_FIRMWARE = re.compile(r"gpus\[[^\]]*\]\.firmware\.(?P<block>.+)")
_VBIOS = re.compile(r"gpus\[[^\]]*\]\.vbios")
_NIC_FW = re.compile(r"nics\[[^\]]*\]\.fw_ver")
_SOFTWARE = {
    "software.rocm_version": "rocm",
    "software.rocm_build": "rocm",
    "software.amdsmi_version": "rocm",
    "software.rccl_library": "rocm",
    "software.driver_version": "driver",
    "software.kernel": "kernel",
}


def explain(plan: ChangePlan | None, path: str, before: object, after: object) -> str | None:
    """Which plan entry explains a difference at `path` (`change.rocm`, `accept[2]`...), or None."""
    if plan is None:
        return None
    c = plan.change
    component = _SOFTWARE.get(path)
    if component is not None:
        planned: VersionChange | None = getattr(c, component)
        if planned is not None and (
            _lands(planned, before, after, release=True) if path in _LANDING else not lost(after)
        ):
            return f"change.{component}"
    elif (m := _FIRMWARE.fullmatch(path)) is not None:
        for i, fw in enumerate(c.firmware):
            if glob_match(fw.block, m["block"]) and _lands_fw(fw, before, after):
                return f"change.firmware[{i}]"
    elif _VBIOS.fullmatch(path) and c.vbios is not None and _lands(c.vbios, before, after):
        return "change.vbios"
    elif _NIC_FW.fullmatch(path) and c.nic_firmware is not None and _lands(c.nic_firmware, before, after):
        return "change.nic_firmware"
    elif explain_partition(c.partition, path, before, after):
        return "change.partition"
    return accepted(plan, path, before, after)


_LANDING = frozenset(
    {"software.rocm_version", "software.rocm_build", "software.driver_version", "software.kernel"}
)  # paths whose change must land on the plan's target; the others merely ship with ROCm


def lost(value: object) -> bool:
    """True when a new value is no value: absent (None) or an error text a tool printed instead of one
    (`parse.sanity.error_text`: "N/A", "Error: ...", empty). A plan accepts a change of value, never a
    reading that was lost; only an `accept` entry that names it (`to: "N/A"`, `to: null`) covers that."""
    return value is None or (isinstance(value, str) and error_text(value) is not None)


def accepted(plan: ChangePlan | None, path: str, before: object, after: object) -> str | None:
    """Which `accept` entry (path glob, optional from/to) covers this difference, or None. An entry
    without `to` does not cover a value that was lost (`lost`)."""
    if plan is None:
        return None
    for i, entry in enumerate(plan.accept_paths):
        if not glob_match(entry.path, path):
            continue
        if entry.has_to and entry.to_value != after:
            continue
        if not entry.has_to and lost(after):
            continue
        if entry.has_from and entry.from_value != before:
            continue
        return f"accept[{i}]"
    return None


def _lands(planned: VersionChange, before: object, after: object, *, release: bool = False) -> bool:
    if not isinstance(after, str) or not version_matches(after, planned.to_version, release=release):
        return False
    return planned.from_version is None or (
        isinstance(before, str) and version_matches(before, planned.from_version, release=release)
    )


def _lands_fw(fw: FirmwareChange, before: object, after: object) -> bool:
    if fw.to_version is not None and not (isinstance(after, str) and version_matches(after, fw.to_version)):
        return False
    return fw.from_version is None or (isinstance(before, str) and version_matches(before, fw.from_version))


_MEASURED = re.compile(r"(?:phases\[[^\]]*\]\.)?measurements\[")


def measured_path(path: str) -> bool:
    """True for a measurement's path (`measurements[key=K]`, the diff's `...].median`): a path entry accepts
    a changed field, never a measured cost, which only a `metric` entry accepts, with its shift and tolerance
    (`metric_expectation`). A plan's `{path: "**"}` passed a -20% bus bandwidth (break test, 2026-12-07)."""
    return _MEASURED.match(path) is not None


def mark_expected(changes: tuple[Change, ...], plan: ChangePlan | None) -> tuple[Change, ...]:
    """The changes with `expected`/`expected_by` filled in from the plan."""
    out = []
    for change in changes:
        why = explain(plan, change.path, change.baseline, change.candidate)
        out.append(replace(change, expected=why is not None, expected_by=why))
    return tuple(out)


def metric_expectation(plan: ChangePlan | None, key: str) -> tuple[AcceptMetric, int] | None:
    """The first accepted metric shift whose glob matches `key`, with its index."""
    if plan is None:
        return None
    for i, entry in enumerate(plan.accept_metrics):
        if glob_match(entry.metric, key):
            return entry, i
    return None
