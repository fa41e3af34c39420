"""The site-owned fatal-error map: the shipped kernel-log patterns, extended or overridden by policy.

A policy's `kernel_events.patterns` entries (schema: policy.schema.json) are laid over the shipped
table (`upgrade_gate/data/dmesg_patterns.yaml`):

    kernel_events:
      patterns:
        # a new pattern: regex and severity required; families say which GPU families it applies to
        - {id: site.xgmi_link_down, regex: 'XGMI link \\d+ is down', severity: fatal, families: [mi300]}
        # an override of a shipped id: for these families only, re-grade it and/or tolerate a burst the
        # baseline shows at the same rate (a reset every healthy boot of this family prints)
        - {id: amdgpu.asic_reset, families: [mi200], baseline_rate: tolerate}
        - {id: amdgpu.ras_correctable, severity: fatal}

Design decisions:
- Two jobs, kept apart. *Classification* (which kernel message is which event) happens when a snapshot
  is built from its bundle, with `table`: the shipped patterns plus the site's new ones (placed first,
  so a site's specific pattern wins over a shipped general one) and any regex a site replaced.
  *Grading* (fatal / error / warn, and whether the baseline's rate excuses it) happens in the judge,
  per event, from the current table and the site's overrides, so a stricter shipped severity or a
  site's re-grade applies to snapshots captured earlier too.
- A snapshot records the digest of the table that classified its events (`Snapshot.event_patterns`).
  When the policy adds or changes a regex, a candidate classified with another table cannot show the
  site's events: the dmesg rule blocks and asks for the snapshot to be rebuilt from its bundle (`gate`
  does that for bundle candidates itself), rather than pass a log it never scanned for them.
- An override applies to the families it names (default every family): the first override of the
  event's id whose families include the event's GPU family (from its BDF, else the node's only family)
  decides; else the table's pattern does. A new pattern whose families exclude the event's family
  does not apply to it.
- `baseline_rate: tolerate` excuses an event only when the baseline shows the same kind on the same
  device at least as often; no baseline, or more events than the baseline, still blocks.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from upgrade_gate.errors import ConfigError
from upgrade_gate.parse.dmesg import (
    ALL_FAMILIES,
    SEVERITIES,
    DmesgPattern,
    PatternTable,
    load_default_patterns,
)

BASELINE_RATES = ("block", "tolerate")
_KEYS = frozenset({"id", "regex", "severity", "families", "baseline_rate", "driver", "source"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Override:
    """A site's re-grade of one event id for some GPU families."""

    id: str
    families: tuple[str, ...] = (ALL_FAMILIES,)
    severity: str | None = None
    baseline_rate: str | None = None
    where: str = ""

    def applies_to(self, family: str | None) -> bool:
        """True for every family when it names `all`, else only for the families it names."""
        return ALL_FAMILIES in self.families or (family is not None and family in self.families)


@dataclass(frozen=True, slots=True, kw_only=True)
class Grade:
    """How one event is judged: its severity (None: not applicable here) and whether a baseline excuses it."""

    severity: str | None
    tolerate_baseline_rate: bool
    by: str  # "shipped pattern <id>" or the policy entry that decided


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelEventPolicy:
    """The classification table and the site's overrides."""

    table: PatternTable
    overrides: tuple[Override, ...] = ()
    site_regex: bool = False  # the site added or replaced a regex: snapshots must be classified with `table`

    def grade(self, kind: str, family: str | None, recorded: str) -> Grade:
        """Severity and baseline tolerance of an event of `kind` on a GPU of `family`."""
        for o in self.overrides:
            if o.id == kind and o.applies_to(family):
                base = self._pattern(kind)
                severity = o.severity or (base.severity if base is not None else recorded)
                return Grade(severity=severity, tolerate_baseline_rate=o.baseline_rate == "tolerate", by=o.where)
        pattern = self._pattern(kind)
        if pattern is None:
            return Grade(severity=recorded, tolerate_baseline_rate=False, by=f"recorded severity of {kind}")
        if family is not None and not pattern.applies_to(family):
            return Grade(severity=None, tolerate_baseline_rate=False, by=f"pattern {kind} (not for {family})")
        return Grade(severity=pattern.severity, tolerate_baseline_rate=False, by=f"pattern {kind}")

    def _pattern(self, kind: str) -> DmesgPattern | None:
        return next((p for p in self.table.patterns if p.id == kind), None)


@functools.cache
def shipped_kernel_events() -> KernelEventPolicy:
    """The map with no site entries: the shipped table as it is."""
    return KernelEventPolicy(table=load_default_patterns())


def build_kernel_events(entries: Sequence[tuple[str, Mapping[str, Any]]]) -> KernelEventPolicy:
    """The map from (where, entry) pairs in policy order; ConfigError naming the entry at fault."""
    if not entries:
        return shipped_kernel_events()
    shipped = load_default_patterns()
    by_id = {p.id: p for p in shipped.patterns}
    added: list[DmesgPattern] = []
    overrides: list[Override] = []
    site_regex = False
    for where, raw in entries:
        unknown = sorted(set(raw) - _KEYS)
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}: unknown field")
        pid = raw.get("id")
        if not isinstance(pid, str) or not pid:
            raise ConfigError(f"{where}.id: expected a non-empty string")
        severity = raw.get("severity")
        if severity is not None and severity not in SEVERITIES:
            raise ConfigError(f"{where}.severity: {severity!r} is not one of {list(SEVERITIES)}")
        rate = raw.get("baseline_rate")
        if rate is not None and rate not in BASELINE_RATES:
            raise ConfigError(f"{where}.baseline_rate: {rate!r} is not one of {list(BASELINE_RATES)}")
        families = tuple(raw.get("families") or (ALL_FAMILIES,))
        regex = _compile(raw.get("regex"), f"{where}.regex")
        known = by_id.get(pid) or next((p for p in added if p.id == pid), None)
        if known is None:
            if regex is None or severity is None:
                raise ConfigError(f"{where}: {pid!r} is not a shipped pattern id, so it needs regex and severity")
            pattern = DmesgPattern(
                id=pid,
                regex=regex,
                severity=severity,
                driver=str(raw.get("driver") or "site"),
                families=families,
                source=str(raw.get("source") or where),
            )
            added.append(pattern)
            site_regex = True
            if rate is not None:
                overrides.append(Override(id=pid, families=families, baseline_rate=rate, where=where))
            continue
        if regex is not None:
            replaced = DmesgPattern(
                id=pid,
                regex=regex,
                severity=known.severity,
                driver=known.driver,
                families=known.families,
                source=str(raw.get("source") or where),
            )
            if pid in by_id:
                by_id[pid] = replaced
            else:
                added = [replaced if p.id == pid else p for p in added]
            site_regex = True
        if severity is not None or rate is not None:
            overrides.append(Override(id=pid, families=families, severity=severity, baseline_rate=rate, where=where))
    table = PatternTable(version=shipped.version, patterns=(*added, *(by_id[p.id] for p in shipped.patterns)))
    return KernelEventPolicy(table=table, overrides=tuple(overrides), site_regex=site_regex)


def _compile(raw: object, where: str) -> re.Pattern[str] | None:
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw:
        raise ConfigError(f"{where}: expected a non-empty regular expression")
    try:
        return re.compile(raw)
    except re.error as exc:
        raise ConfigError(f"{where}: bad regex: {exc}") from None
