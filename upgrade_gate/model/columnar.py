"""Snapshot schema v2: the columnar serialised form of a snapshot's measurements (issue 29).

A v1 document writes every measurement as an object that repeats its sweep's settings (8 entries for a
mesh sweep, the same for all 23 of its sizes), its unit and source, with one sample per line. v2 keeps
everything else as v1 writes it and writes each `measurements` list (the snapshot's and each phase's) as
one `MeasurementColumns` object: each distinct settings map once (`sweeps`), then one list per field,
position i of each list being metric i, and its samples as one JSON array of numbers.

Design decisions:
- v2 is a serialised form only: `Snapshot` (and the judge, the decoded cache, the report) stays the one
  in-memory model. `SnapshotV2` and `PhaseResultV2` are generated from `Snapshot` and `PhaseResult`
  (their fields, annotations, defaults and constraints, with the measurements replaced by columns), so a
  field added to the model reaches v2, its generated schema (`schemas/snapshot-v2.schema.json`) and the
  strict decoder at once. `to_wire` / `from_wire` convert; `snapshot.io` reads v1 and v2 and writes
  either; the baseline store writes v2.
- Samples as JSON rows rather than base64 binary (both measured, bench/RESULTS-schema-v2.md): the rows are
  within a few percent of binary once compressed (git compresses every object), decode in the same C
  pass as the rest of the document, stay readable in `git diff`, and float64 bytes would add a byte-order
  and NaN convention that JSON numbers do not need.
- What the schema cannot say is checked here, on every decode: the lists are of equal length and each
  `sweep` index names a sweep (`SchemaError` naming the document and the column, exit 3). Caps are the
  model's: the same `StrMap`/`Text`/`Name` annotations bound each settings map, key, unit and source.
- In memory, the metrics of one sweep share its settings map (they are equal anyway): decoding builds
  one dict per sweep instead of one per metric.
"""

from __future__ import annotations

import itertools
import typing
from collections.abc import Sequence
from typing import Annotated, Any, NamedTuple, TypeVar

import msgspec
from msgspec import Meta

from upgrade_gate.errors import SchemaError
from upgrade_gate.model.snapshot import SNAPSHOT_SCHEMA_VERSION, Measurement, PhaseResult, Samples, Snapshot
from upgrade_gate.model.types import ALWAYS, Name, OptText, Record, StrMap, const

SNAPSHOT_V2 = "2"
"""The `schema_version` of a columnar snapshot document."""

SweepIndex = Annotated[int, Meta(ge=0)]
T = TypeVar("T")


class MeasurementColumns(Record, frozen=True, kw_only=True):
    """Measurements as columns: position i of every list is metric i; `sweep[i]` indexes `sweeps`."""

    sweeps: Annotated[tuple[StrMap, ...], ALWAYS, Meta(description="each distinct settings map once")] = ()
    sweep: Annotated[
        tuple[SweepIndex, ...], ALWAYS, Meta(description="per metric: its settings (index of sweeps)")
    ] = ()
    keys: Annotated[
        tuple[Name, ...], ALWAYS, Meta(description="per metric: its flat key (mesh/all_reduce/busbw/1024)")
    ] = ()
    units: Annotated[tuple[str, ...], ALWAYS, Meta(description='per metric: "GB/s", "Gb/s"')] = ()
    sources: Annotated[
        tuple[OptText, ...], ALWAYS, Meta(description="per metric: probe or phase that produced it")
    ] = ()
    higher_is_better: Annotated[tuple[bool, ...], ALWAYS] = ()
    samples: Annotated[tuple[Samples, ...], ALWAYS, Meta(description="per metric: its samples, one array")] = ()


def _wire(model: type, name: str, doc: str, changed: dict[str, tuple[Any, Any]]) -> Any:
    """`model`'s fields, annotations and defaults as a new record class `name`, with `changed` fields
    (name -> (annotation, default factory)) replaced: the v2 twin of a model class."""
    hints = typing.get_type_hints(model, include_extras=True)
    fields: list[Any] = []
    for f in msgspec.structs.fields(model):
        if f.name in changed:
            annotation, factory = changed[f.name]
            fields.append((f.name, annotation, msgspec.field(default_factory=factory)))
        elif f.required:
            fields.append((f.name, hints[f.name]))
        elif f.default_factory is not msgspec.NODEFAULT:
            fields.append((f.name, hints[f.name], msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, hints[f.name], f.default))
    cls = msgspec.defstruct(name, fields, bases=(Record,), module=__name__, frozen=True, kw_only=True, gc=False)
    cls.__doc__ = doc
    return cls


PhaseResultV2: Any = _wire(
    PhaseResult,
    "PhaseResultV2",
    "Result of one phase on one node (as PhaseResult), its measurements as columns.",
    {"measurements": (Annotated[MeasurementColumns, ALWAYS], MeasurementColumns)},
)

SnapshotV2: Any = _wire(
    Snapshot,
    "SnapshotV2",
    "One node at one time (as Snapshot, schema v1), with every measurement list written as columns.",
    {
        "schema_version": (Annotated[str, const(SNAPSHOT_V2), ALWAYS], lambda: SNAPSHOT_V2),
        "measurements": (Annotated[MeasurementColumns, ALWAYS], MeasurementColumns),
        "phases": (Annotated[tuple[PhaseResultV2, ...], ALWAYS], tuple),
    },
)


def columns(measurements: Sequence[Measurement]) -> MeasurementColumns:
    """The columnar form of `measurements` (order kept; equal settings maps written once)."""
    sweeps: dict[tuple[tuple[str, str], ...], int] = {}
    index = [sweeps.setdefault(tuple(sorted(m.settings.items())), len(sweeps)) for m in measurements]
    return MeasurementColumns(
        sweeps=tuple(dict(settings) for settings in sweeps),
        sweep=tuple(index),
        keys=tuple(m.key for m in measurements),
        units=tuple(m.unit for m in measurements),
        sources=tuple(m.source for m in measurements),
        higher_is_better=tuple(m.higher_is_better for m in measurements),
        samples=tuple(m.samples for m in measurements),
    )


_COLUMNS = ("sweep", "keys", "units", "sources", "higher_is_better", "samples")


def measurements(cols: MeasurementColumns, *, where: str) -> tuple[Measurement, ...]:
    """The measurements `cols` holds; SchemaError naming `where` and the column when the lists disagree
    in length or a metric names a sweep that is not there."""
    return _measured(cols, where, None)[0]


_Part = tuple[tuple[str, ...], tuple[str, ...], tuple[dict[str, str], ...], tuple[int, ...]]


def _measured(cols: MeasurementColumns, where: str, slot: int | None) -> tuple[tuple[Measurement, ...], _Part]:
    """`measurements`, and the list's part of its snapshot's `Layout`: the (shared) keys, units and sweeps
    it was built from, and the sweep index of each metric. `slot` names the list's place in its snapshot
    (-1: the snapshot's own, i: phase i): where the last snapshot's columns are tried first (`_Shared`)."""
    count = len(cols.keys)
    for name in _COLUMNS:
        if len(getattr(cols, name)) != count:
            raise SchemaError(
                f"{where}.{name}: {len(getattr(cols, name))} entries, but keys has {count} (one per metric)"
            )
    sweeps = _SHARED.sweeps(cols.sweeps, slot)
    if cols.sweep and max(cols.sweep) >= len(sweeps):  # the loop that names the culprit runs only then
        for position, sweep in enumerate(cols.sweep):
            if sweep >= len(sweeps):
                raise SchemaError(f"{where}.sweep[{position}]: {sweep} names no sweep (sweeps has {len(sweeps)})")
    shared = _SHARED.column
    keys, units = shared(cols.keys, "keys", slot), shared(cols.units, "units", slot)
    built = tuple(
        Measurement(key=key, unit=unit, samples=samples, settings=sweeps[sweep], source=source, higher_is_better=hib)
        for key, unit, samples, sweep, source, hib in zip(
            keys,
            units,
            cols.samples,
            cols.sweep,
            shared(cols.sources, "sources", slot),
            shared(cols.higher_is_better, "higher_is_better", slot),
            strict=True,
        )
    )
    return built, (keys, units, sweeps, cols.sweep)


class Layout(NamedTuple):
    """What a v2-decoded snapshot's measurements were built from, list by list (its own, then each
    phase's): `parts`, each list's keys, units, sweeps (settings maps) and sweep index per metric; and
    `counts`, each list's sample count per metric. Two snapshots whose `parts` are equal have, at every
    position of `measurements_of`, the same key, unit and settings: where the lists are shared
    (`_Shared`), comparing them is comparing a few objects by identity, instead of ~200 metrics."""

    parts: tuple[_Part, ...]
    counts: tuple[tuple[int, ...], ...]


_LAYOUTS: dict[int, tuple[Snapshot, Layout]] = {}  # id(snapshot) -> (snapshot, its layout)
_LAYOUTS_KEPT = 64  # a judge batch decodes 2 x judge.BATCH snapshots and forgets them after


def layout_of(snapshot: Snapshot) -> Layout | None:
    """The `Layout` of a snapshot `from_wire` made (and not forgotten since); None for any other."""
    hit = _LAYOUTS.get(id(snapshot))
    return hit[1] if hit is not None and hit[0] is snapshot else None


def forget_layouts() -> None:
    """Drop the layouts kept (they hold their snapshots: the judge calls this after each batch)."""
    _LAYOUTS.clear()


class _Shared:
    """Equal layouts, one set of objects: a fleet's snapshots share their key, unit, source and direction
    columns and their sweeps' settings maps (issue 29).

    Every node of a class measures the same metrics under the same settings, so the decode of each
    snapshot built the same ~200 key strings and settings maps again, and the judge then compared them
    by content: baseline against candidate (`diff._unchanged`, `measured._alike`), and each snapshot's key
    tuple against the caches keyed by it (`table.layout_of`, `measured._split_keys`). Shared, each of those
    comparisons meets the same object first, which Python's container equality takes as equal without
    reading it, and a worker frees fewer objects per node (bench/RESULTS-gate-scale.md, round 8).

    Only identity changes: a shared value equals the one it stands for (the tables are keyed by value;
    a settings map by its items in order, so its order is the document's too). Model values are never
    mutated (a snapshot's measurements already shared one map per sweep). Bounded by what is held, not by
    how many: a value costs its entries plus the characters of its texts, one costing more than `LARGEST`
    is not held, and the tables are emptied before they would hold more than `HELD` in all. Whatever a
    fleet's documents hold (a key may be as long as a document), what stays alive here is at most ~`HELD`
    characters and entries: a few MiB. A bench-fleet layout costs ~7,000 (4 columns, ~190 metrics)."""

    HELD = 1 << 18  # entries plus characters held in all before the tables are emptied
    LARGEST = HELD // 8  # a value that costs more is not held (a fleet's layout is far smaller)

    def __init__(self) -> None:
        self._columns: dict[tuple[str, tuple[Any, ...]], Any] = {}
        self._settings: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
        self._last: dict[object, Any] = {}  # (column, slot) -> the shared value handed out there last
        self._held = 0
        self._epoch = 0  # moves when the tables are emptied, and when a value is too large to hold

    def column(self, values: tuple[T, ...], name: str, slot: int | None = None) -> tuple[T, ...]:
        """The shared tuple equal to `values`, of the column `name` (a table per column: 1 == True == 1.0,
        so one table for all could hand a bool column an int one). With a `slot` (the list's place in
        its snapshot), the tuple last handed out there is compared first: equal items compare without
        being hashed (the texts of a fresh decode have no hash yet), and a fleet's snapshots mostly
        repeat the last one's layout."""
        if slot is not None:
            last = self._last.get((name, slot))
            if last is not None and last == values:
                return last  # type: ignore[no-any-return]
        if len(values) > self.LARGEST:
            return values
        found = self._columns.get((name, values))
        if found is None:
            if not self._hold(len(values) + sum(len(v) for v in values if isinstance(v, str))):
                return values
            self._columns[(name, values)] = found = values
        if slot is not None:
            self._last[(name, slot)] = found
        return found

    def sweeps(self, maps: tuple[dict[str, str], ...], slot: int | None = None) -> tuple[dict[str, str], ...]:
        """`settings` of each of a list's sweeps. With a `slot`, the sweeps last handed out there are
        compared first: equal maps (compared in C, no item tuple built and hashed per map) whose keys
        come in the same order."""
        if slot is not None:
            last = self._last.get(("sweeps", slot))
            if last is not None and last[0] == maps and last[1] == list(itertools.chain.from_iterable(maps)):
                return last[0]  # type: ignore[no-any-return]
        epoch = self._epoch
        shared = tuple(self.settings(s) for s in maps)
        if slot is not None and epoch == self._epoch:  # every map held, none emptied away since
            self._last[("sweeps", slot)] = (shared, list(itertools.chain.from_iterable(shared)))
        return shared

    def settings(self, settings: dict[str, str]) -> dict[str, str]:
        """The shared settings map with the same items in the same order as `settings`."""
        if len(settings) > self.LARGEST:
            self._epoch += 1  # not held
            return settings
        items = tuple(settings.items())
        found = self._settings.get(items)
        if found is None:
            if not self._hold(len(items) + sum(len(k) + len(v) for k, v in items)):
                return settings
            self._settings[items] = found = settings
        return found

    def _hold(self, cost: int) -> bool:
        """Make room for a value of `cost`; False when it is too large to hold at all."""
        if cost > self.LARGEST:
            self._epoch += 1
            return False
        if self._held + cost > self.HELD:
            self._columns.clear()
            self._settings.clear()
            self._last.clear()
            self._held = 0
            self._epoch += 1
        self._held += cost
        return True


_SHARED = _Shared()


def shared_epoch() -> int:
    """Moves whenever the shared tables are emptied: a map `shared_settings` gave before may no longer be the
    one a decode hands out (a caller that keeps such maps takes them again)."""
    return _SHARED._epoch


def shared_settings(settings: dict[str, str]) -> dict[str, str]:
    """The settings map a v2 decode hands out for `settings`' items in this order: the very object an equal map
    of a decoded snapshot is, while the tables hold it (else `settings` itself). A reader that keeps its own maps
    this way finds a decoded snapshot's equal ones by identity first (`rules.bandwidth.class_prior`)."""
    return _SHARED.settings(settings)


def without_samples(wire: Any) -> Any:
    """A decoded `SnapshotV2` (or its codec mirror) with every samples column emptied: what the
    duplicate-key count re-encodes (`codec.decode_json`'s `colon_free`). A samples column decodes only
    from arrays of numbers, which hold no `:`; leaving them out halved that encode (~66 -> ~28 us a
    bench-fleet candidate). Sound whatever is left out: every `:` of the re-encoding stands for one of the
    document, so leaving something out can only lower its count, and a document with a key named twice
    already counts more than its re-encoding; what this buys is that a document without one still
    counts equal (no `:` was left out), and is not read again by `dupkeys.check_json_keys`."""
    empty = msgspec.structs.replace
    return empty(
        wire,
        measurements=empty(wire.measurements, samples=()),
        phases=tuple(empty(p, measurements=empty(p.measurements, samples=())) for p in wire.phases),
    )


def to_wire(snapshot: Snapshot) -> Any:
    """The v2 form of `snapshot` (a `SnapshotV2`)."""
    phases = tuple(
        PhaseResultV2(**{**msgspec.structs.asdict(p), "measurements": columns(p.measurements)}) for p in snapshot.phases
    )
    fields = msgspec.structs.asdict(snapshot)
    fields.update(schema_version=SNAPSHOT_V2, measurements=columns(snapshot.measurements), phases=phases)
    return SnapshotV2(**fields)


def from_wire(wire: Any, *, where: str) -> Snapshot:
    """The snapshot a decoded `SnapshotV2` holds (the in-memory model, as a v1 document decodes to); its
    `Layout` is kept for `layout_of`."""
    own, part = _measured(wire.measurements, f"{where}: $.measurements", -1)
    parts, counts = [part], [tuple(map(len, wire.measurements.samples))]
    phases = []
    for i, p in enumerate(wire.phases):
        built, part = _measured(p.measurements, f"{where}: $.phases[{i}].measurements", i)
        parts.append(part)
        counts.append(tuple(map(len, p.measurements.samples)))
        phases.append(PhaseResult(**{**msgspec.structs.asdict(p), "measurements": built}))
    fields = msgspec.structs.asdict(wire)
    fields.update(schema_version=SNAPSHOT_SCHEMA_VERSION, measurements=own, phases=tuple(phases))
    snapshot = Snapshot(**fields)
    if len(_LAYOUTS) >= _LAYOUTS_KEPT:
        _LAYOUTS.clear()
    _LAYOUTS[id(snapshot)] = (snapshot, Layout(tuple(parts), tuple(counts)))
    return snapshot
