"""After the canary: the soak, rollout waves and the class-wide disruption cap, as pure functions.

Everything here reads and writes the window's record (`windows/<id>.json`, a plain dict checked by
`schemas/window.schema.json`) and takes the time as an argument, so the commands in `fleet.window`
decide with one injected clock and the tests run a 72-hour soak in seconds.

Design decisions
- The soak begins at the PASS of `validate` (state `soaking`), with the plan's `soak` settings copied
  into the record: a plan edited later does not shorten a soak in progress.
- An observation is one round over the current canaries: a verdict per node and the causes that
  blocked it (the headlines, not every finding), plus a few key metrics for the report's time series.
  A BLOCK moves the window to `blocked`, as `validate` does; a PASS keeps it `soaking`.
- `promote` from `soaking` needs all of: the soak's duration elapsed since its start, at least
  `min_observations` observations (the reliability write-up's "run twice and settle"), and every
  observation PASS. `--skip-soak --reason` overrides the first two (never a failed observation, which
  has already moved the window to `blocked`) and is recorded in the history and in `soak.skipped`.
- Waves: `plan.waves` are cumulative shares of each class (`[0.10, 0.25, 1.0]`). `expand` takes the
  next nodes of each class up to the current wave's share, but never more than the class's disruption
  cap minus what every open window of the class already holds; a wave larger than the cap is taken in
  several expands. Nodes changed in earlier waves are listed in `rollout.completed`.
- The cap counts nodes of windows in `planned`, `started`, `validated`, `soaking` and `blocked`: a
  planned window has reserved its nodes, a blocked one still has them cordoned.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from upgrade_gate.codec import parse_date_time
from upgrade_gate.errors import InputError
from upgrade_gate.judge.plan import ChangePlan, SoakSettings, format_duration
from upgrade_gate.model import NodeName

OPEN_STATES = frozenset({"planned", "started", "validated", "soaking", "blocked"})
"""States in which a window holds (or has reserved) its nodes."""


def parse_time(text: str, *, where: str = "time") -> datetime:
    """An RFC 3339 date-time as the schemas accept it (a leap second folds into the next second),
    timezone-aware; anything else is InputError naming `where` (the one rule: `codec.parse_date_time`)."""
    return parse_date_time(text, where=where)


# --------------------------------------------------------------------------- soak


def soak_enabled(plan: ChangePlan) -> bool:
    """True when the plan asks canaries to soak after their PASS."""
    return plan.soak.duration_s > 0


def begin_soak(doc: dict[str, Any], settings: SoakSettings, *, at: str) -> None:
    """Record the start of the soak (the PASS of `validate`) with the plan's settings."""
    doc["soak"] = {
        "started_at": at,
        "duration_s": settings.duration_s,
        "every_s": settings.every_s,
        "min_observations": settings.min_observations,
        "mesh": settings.mesh,
        "observations": [],
    }
    if settings.workload_every_s > 0:  # phase 6 in the observations (fleet.soak_workload)
        doc["soak"]["workload_every_s"] = settings.workload_every_s


def add_observation(
    doc: dict[str, Any],
    *,
    at: str,
    by: str,
    nodes: Mapping[str, tuple[bool, Sequence[str]]],
    metrics: Mapping[str, Mapping[str, float]] | None = None,
) -> bool:
    """Append one observation (node -> (passed, blocking causes)); True when every node passed."""
    passed = all(ok for ok, _ in nodes.values()) and bool(nodes)
    entry: dict[str, Any] = {
        "at": at,
        "by": by,
        "verdict": "PASS" if passed else "BLOCK",
        "nodes": {
            name: {"verdict": "PASS" if ok else "BLOCK", "causes": [c[:4000] for c in causes][:50]}
            for name, (ok, causes) in sorted(nodes.items())
        },
    }
    if metrics:
        entry["metrics"] = {n: {k: float(v) for k, v in sorted(m.items())} for n, m in sorted(metrics.items())}
    doc["soak"]["observations"].append(entry)
    return passed


@dataclass(frozen=True, slots=True, kw_only=True)
class SoakStatus:
    """Where a soak stands at `now`."""

    elapsed_s: float
    duration_s: float
    observations: int
    min_observations: int
    failed: int
    next_due: datetime
    skipped: bool

    @property
    def remaining_s(self) -> float:
        """Seconds until the soak's duration has elapsed (0 once it has)."""
        return max(0.0, self.duration_s - self.elapsed_s)

    def blockers(self) -> tuple[str, ...]:
        """Why `promote` must wait (empty: it may go ahead)."""
        out: list[str] = []
        if self.failed:
            out.append(f"{self.failed} observation(s) blocked")
        if self.skipped:
            return tuple(out)
        if self.remaining_s > 0:
            out.append(
                f"soak has run {format_duration(round(self.elapsed_s))} of {format_duration(self.duration_s)} "
                f"({format_duration(round(self.remaining_s))} to go)"
            )
        if self.observations < self.min_observations:
            out.append(f"{self.observations} of at least {self.min_observations} observations taken")
        return tuple(out)

    def summary(self) -> str:
        """One line for `window status`."""
        text = (
            f"soak {format_duration(round(self.elapsed_s))} of {format_duration(self.duration_s)}, "
            f"{self.observations} observation(s)"
        )
        if self.failed:
            text += f", {self.failed} blocked"
        if self.skipped:
            text += ", skipped by operator"
        elif self.remaining_s > 0:
            text += f", next due {self.next_due.strftime('%Y-%m-%dT%H:%M:%SZ')}"
        return text


def soak_status(doc: Mapping[str, Any], now: datetime) -> SoakStatus | None:
    """The soak's status at `now`, or None when the window has no soak recorded."""
    soak = doc.get("soak")
    if not soak:
        return None
    record = f"windows/{doc.get('id')}.json"
    start = parse_time(soak["started_at"], where=f"{record}: soak.started_at")
    observations = soak["observations"]
    n = len(observations)
    last = parse_time(observations[-1]["at"], where=f"{record}: soak.observations[{n - 1}].at") if n else start
    every = float(soak["every_s"])
    try:
        next_due = (last + timedelta(seconds=every)).astimezone(UTC)
    except OverflowError:  # a time at the edge of year 1 or 9999: no next observation can be named
        raise InputError(f"{record}: soak: no observation can follow {last.isoformat()}") from None
    return SoakStatus(
        elapsed_s=max(0.0, (now - start).total_seconds()),
        duration_s=float(soak["duration_s"]),
        observations=n,
        min_observations=int(soak["min_observations"]),
        failed=sum(1 for o in observations if o["verdict"] != "PASS"),
        next_due=next_due,
        skipped="skipped" in soak,
    )


def observation_due(doc: Mapping[str, Any], now: datetime) -> bool:
    """True when the last observation (or the soak's start) is at least `every` ago."""
    status = soak_status(doc, now)
    return status is not None and now >= status.next_due


def skip_soak(doc: dict[str, Any], *, by: str, at: str, reason: str) -> None:
    """Record that an operator promoted before the soak completed, and why."""
    doc["soak"]["skipped"] = {"by": by, "at": at, "reason": reason}


# --------------------------------------------------------------------------- waves and the cap


def held_nodes(
    windows: Iterable[Mapping[str, Any]], node_class: str | None, *, exclude: str | None = None
) -> dict[str, str]:
    """Nodes of `node_class` (None: of any class) held by open windows (node -> window id), but `exclude`'s."""
    held: dict[str, str] = {}
    for doc in windows:
        if doc["id"] == exclude or doc["state"] not in OPEN_STATES:
            continue
        for canary in doc["canaries"]:
            if node_class is None or canary["class"] == node_class:
                held[canary["node"]] = doc["id"]
    return held


@dataclass(frozen=True, slots=True, kw_only=True)
class WaveChoice:
    """What `expand` takes from one class, and why not more."""

    node_class: str
    wave: int
    share: float
    nodes: tuple[NodeName, ...]
    target: int
    done: int
    cap: int
    held_elsewhere: int
    note: str


def choose_wave(
    *,
    node_class: str,
    members: Sequence[NodeName],
    eligible: Sequence[NodeName],
    completed: Iterable[str],
    waves: Sequence[float],
    cap: int,
    held_elsewhere: Mapping[str, str],
) -> WaveChoice:
    """The next nodes of one class: up to the current wave's share, within the class-wide cap."""
    done = {n for n in completed if n in set(members)}
    size = len(members)
    wave = 0
    while wave < len(waves) and math.ceil(waves[wave] * size) <= len(done):
        wave += 1
    if wave >= len(waves):
        return WaveChoice(
            node_class=node_class, wave=len(waves), share=1.0, nodes=(), target=size, done=len(done), cap=cap,
            held_elsewhere=len(held_elsewhere), note=f"class {node_class}: every node changed",
        )  # fmt: skip
    share = waves[wave]
    target = math.ceil(share * size)
    room = cap - len(held_elsewhere)
    pool = [n for n in eligible if n not in done and n not in held_elsewhere]
    take = max(0, min(target - len(done), room, len(pool)))
    picked = tuple(sorted(pool)[:take])
    if room <= 0:
        owners = sorted(set(held_elsewhere.values()))
        note = (
            f"class {node_class}: disruption cap {cap} reached by open window(s) {', '.join(owners)} "
            f"holding {len(held_elsewhere)} node(s)"
        )
    elif take < target - len(done):
        note = (
            f"class {node_class}: wave {wave + 1} ({share:.0%}) needs {target - len(done)} more node(s); "
            f"{take} taken now (cap {cap}, {len(held_elsewhere)} held elsewhere, {len(pool)} eligible)"
        )
    else:
        note = f"class {node_class}: wave {wave + 1} ({share:.0%}): {take} node(s)"
    return WaveChoice(
        node_class=node_class, wave=wave + 1, share=share, nodes=picked, target=target, done=len(done), cap=cap,
        held_elsewhere=len(held_elsewhere), note=note,
    )  # fmt: skip


def record_wave_done(doc: dict[str, Any], plan: ChangePlan, *, at: str) -> None:
    """On promote: the current canaries join `rollout.completed`, with the wave's tag and soak."""
    rollout = doc.setdefault("rollout", {"waves": list(plan.waves), "wave": 0, "completed": [], "done": []})
    nodes = [c["node"] for c in doc["canaries"]]
    entry: dict[str, Any] = {"wave": rollout["wave"], "nodes": nodes, "tag": doc["baseline"]["tag"], "at": at}
    if doc.get("soak"):
        soak = doc["soak"]
        entry["soak"] = {
            "observations": len(soak["observations"]),
            "started_at": soak["started_at"],
            **({"skipped": soak["skipped"]} if "skipped" in soak else {}),
        }
    rollout["done"].append(entry)
    rollout["completed"] = sorted(set(rollout["completed"]) | set(nodes))
