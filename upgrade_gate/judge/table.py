"""One snapshot's samples as numpy arrays: built once per snapshot per judge batch, read by every rule
that looks at many samples (issue 29, round 4).

Rules used to walk the `Measurement` objects one by one, each for itself: `bandwidth.regression`'s batch
statistics copied every comparable metric's samples into an array (`curve_stats.padded`, both sides),
`fleet.odd_one_out` took `min()` of ~140 metrics, and so on. Moving a Python float into numpy costs the
same whoever does it, so it is done once here and the rules share the result.

Design decisions:
- A `SampleTable` holds the merged measurements' samples (`rules.measured.merged_measurements`, in their
  merged key order) as one rows x width float array, NaN-padded where a row is shorter, with each row's
  count and the measurement's `higher_is_better`. The array is read-only; a rule that needs a subset
  takes rows by index (a copy).
- The judge builds the tables of a whole batch (both sides of every node) at once (`build_many`, called
  by `rules.measured.prime_tables`): the snapshots whose rows all have one sample count, the usual ones,
  share one array filled by one `fromiter`, and their row summaries (`low`, `high`, `finite`, `summable`)
  are computed for the batch in one numpy pass each; the tables of one key layout also form a `Batch`
  (tables x rows), on which a rule decides for every node at once (`fleet.odd_one_out`'s worst samples).
  Numpy's cost is per call (~1-3 us on this box) far more than per value, so per node it rarely beats a
  Python loop over ~150 values; per batch of 16 nodes it does.
- The key layout (key -> row, and the rows a rule reads) is a pure function of the key tuple and is
  cached per key tuple: a fleet's nodes measure the same keys, so the dicts and index arrays are built
  once per fleet shape, not once per node.
- A row whose samples are not all finite, or that is shorter than the table's width (NaN padding), has
  `finite` False: a fast path that reads the summaries sends such a row to the rule's own
  per-measurement code, which stays the one source of every finding and of every exception to the
  usual case. Min, max and "all finite" are exact in any order; sums are not, so the tables vouch for
  a finite sum only through bounds (`summable`), never by summing.
- Plain slotted classes, not frozen dataclasses: the summaries are computed lazily or filled in by
  `build_many`, and the objects live for one judge batch (`rules.measured.forget`).
- No I/O and no decisions: which rows matter and what a value means stay in the rules.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from upgrade_gate.model import Measurement

_SAMPLES = operator.attrgetter("samples")
_HUGE = 1e300  # rows of samples under this in size: no sum of fewer than 10^8 of them overflows
_BETTER = operator.attrgetter("higher_is_better")


class Layout:
    """A key tuple's row numbers (shared by every snapshot with the same keys; see the module docstring)."""

    __slots__ = ("__weakref__", "keys", "memo", "row")

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.row: dict[str, int] = {k: i for i, k in enumerate(keys)}
        self.memo: dict[str, object] = {}  # what callers derive from the keys alone (rules.measured)

    def rows(self, wanted: tuple[str, ...]) -> np.ndarray:
        """The row of each of `wanted` (-1 where absent), as a read-only index array (cached per key tuple)."""
        return _rows(self, wanted)


@functools.lru_cache(maxsize=64)
def layout_of(keys: tuple[str, ...]) -> Layout:
    """The layout of a key tuple: one object per distinct tuple while cached."""
    return Layout(keys)


@functools.lru_cache(maxsize=256)
def _rows(layout: Layout, wanted: tuple[str, ...]) -> np.ndarray:
    get = layout.row.get
    out = np.fromiter((get(k, -1) for k in wanted), np.intp, len(wanted))
    out.flags.writeable = False
    return out


class SampleTable:
    """One snapshot's merged samples: `values` (rows x width, NaN-padded), `counts`, `better`."""

    __slots__ = (
        "_better",
        "_counts",
        "_flags",
        "_summable",
        "_summary",
        "all_summable",
        "batch",
        "layout",
        "lengths",
        "measurements",
        "slot",
        "uniform",
        "values",
    )

    def __init__(
        self,
        layout: Layout,
        values: np.ndarray,
        lengths: list[int],
        measurements: Sequence[Measurement],
        uniform: bool,
    ) -> None:
        self.layout = layout
        self.values = values
        self.lengths = lengths  # each row's sample count
        self.measurements = measurements  # row i's measurement
        self.uniform = uniform  # every row has `width` samples (no padding)
        self.all_summable: bool | None = None  # set by `build_many`: every row `summable`
        self.batch: Batch | None = None  # set by `build_many`: the tables summarised with it
        self.slot = 0  # this table's row in the batch's arrays
        self._summary: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._summable: np.ndarray | None = None
        self._better: np.ndarray | None = None
        self._counts: np.ndarray | None = None
        self._flags: list[bool] | None = None

    @property
    def flags(self) -> list[bool]:
        """Each row's `higher_is_better` (read from the measurements when first asked)."""
        if self._flags is None:
            self._flags = list(map(_BETTER, self.measurements))
        return self._flags

    @property
    def better(self) -> np.ndarray:
        """Each row's `higher_is_better`, as a bool array."""
        if self._better is None:
            batch = self.batch
            self._better = batch.better[self.slot] if batch is not None else np.array(self.flags, dtype=bool)
        return self._better

    @property
    def counts(self) -> np.ndarray:
        """Each row's sample count, as an array."""
        if self._counts is None:
            self._counts = np.array(self.lengths, dtype=np.intp)
        return self._counts

    @property
    def width(self) -> int:
        """The longest row's sample count."""
        return int(self.values.shape[1])

    def summary(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(low, high, finite) per row: the smallest and largest sample, and whether the row's samples are
        all finite and the row is full width (False: the caller must read the measurement itself)."""
        if self._summary is None:
            v = self.values
            if v.shape[1] == 0:
                empty = np.full(len(v), np.nan)
                self._summary = (empty, empty, np.zeros(len(v), dtype=bool))
            else:
                # Reduced over the samples of the transposed copy: numpy reduces a short inner axis row by
                # row (~9 us for 186 rows of 5), a leading one vector-wise (~1 us). Min, max and `all` are
                # exact in any order.
                t = np.ascontiguousarray(v.T)
                with np.errstate(invalid="ignore"):
                    self._summary = (t.min(axis=0), t.max(axis=0), np.isfinite(t).all(axis=0))
        return self._summary

    def summable(self) -> np.ndarray:
        """Per row: some samples, all finite, none above 1e300 in size, so that their sum is finite in any
        order (what `rules.measured.usable` asks of a measurement). False says nothing: ask the samples."""
        if self._summable is not None:
            return self._summable
        v = self.values
        if self.uniform and v.size and float(np.abs(v).max()) < _HUGE:  # the usual table (NaN compares False)
            return np.ones(len(v), dtype=bool)
        low, high, finite = self.summary()
        with np.errstate(invalid="ignore"):
            out: np.ndarray = finite & (np.maximum(-low, high) < _HUGE)
        return out

    def block(self, rows: np.ndarray) -> np.ndarray:
        """The samples of `rows` (every one present), NaN-padded to exactly their longest row: what
        `curve_stats.padded` makes of the same rows' sample tuples."""
        out: np.ndarray = self.values[rows]
        if self.uniform or not len(rows):
            return out
        width = int(self.counts[rows].max())
        return out[:, :width] if width < out.shape[1] else out


def build(keys: tuple[str, ...], measurements: Sequence[Measurement]) -> SampleTable:
    """The table of `measurements` (one per key of `keys`, in order)."""
    samples = list(map(_SAMPLES, measurements))
    lengths = list(map(len, samples))
    n = len(samples)
    width = max(lengths, default=0)
    uniform = min(lengths, default=0) == width
    if uniform:  # the usual snapshot: one C-level pass over the chained samples
        values = np.fromiter(itertools.chain.from_iterable(samples), float, n * width).reshape(n, width)
    else:
        values = np.full((n, width), np.nan)
        for i, s in enumerate(samples):
            values[i, : len(s)] = s
    values.flags.writeable = False
    return SampleTable(layout_of(keys), values, lengths, measurements, uniform)


class Batch:
    """The summaries of several tables of one layout and shape, stacked (tables x rows): `low`, `high`,
    `finite`, `better`. A rule computes its batch-wide answer once (`memo`, keyed by what it depends on)
    and each node reads its row (`SampleTable.slot`)."""

    __slots__ = ("_better", "_measurements", "finite", "high", "low", "memo")

    def __init__(self, tables: Sequence[SampleTable], low: np.ndarray, high: np.ndarray, finite: np.ndarray) -> None:
        # Not the tables themselves: each table points at its batch, and a batch pointing back would make a
        # reference cycle, which only the cyclic collector frees; under `fleet_gc`'s thresholds most batches
        # reach the oldest generation first, so every batch of a fleet stayed alive (measured 2026-12-06:
        # gate's peak PSS at 1,024 nodes 92 -> 154 MiB with the cycle, 285 MiB at 8,192 nodes).
        self._measurements = [t.measurements for t in tables]
        self.low, self.high, self.finite = low, high, finite
        self.memo: dict[object, object] = {}
        self._better: np.ndarray | None = None

    @property
    def better(self) -> np.ndarray:
        """Each table's rows' `higher_is_better` (tables x rows)."""
        if self._better is None:
            flags = itertools.chain.from_iterable(map(_BETTER, ms) for ms in self._measurements)
            self._better = np.fromiter(flags, bool, self.low.size).reshape(self.low.shape)
        return self._better


def build_many(items: Sequence[tuple[tuple[str, ...], Sequence[Measurement]]]) -> list[SampleTable]:
    """`build` of each (keys, measurements), done together: the tables whose rows all have one sample count
    (the usual snapshot) share one array, filled by one C-level pass, and are summarised together (their
    `summary()`, `summable()` and `better` are views of the batch's arrays; the tables of one layout form a
    `Batch`). Any other table is built on its own."""
    out: list[SampleTable | None] = [None] * len(items)
    samples = [list(map(_SAMPLES, ms)) for _, ms in items]
    groups: dict[int, list[int]] = {}  # width -> the items whose rows all have it
    for j, rows in enumerate(samples):
        lengths = set(map(len, rows))
        if len(lengths) == 1 and 0 not in lengths:
            groups.setdefault(lengths.pop(), []).append(j)
        else:
            out[j] = build(*items[j])
    for width, members in groups.items():
        layout = {j: layout_of(items[j][0]) for j in members}
        chosen = sorted(members, key=lambda j: id(layout[j]))  # the tables of one layout side by side
        total = sum(len(samples[j]) for j in chosen)
        chained = itertools.chain.from_iterable(itertools.chain.from_iterable(samples[j] for j in chosen))
        values = np.fromiter(chained, float, total * width).reshape(total, width)
        values.flags.writeable = False
        t = np.ascontiguousarray(values.T)  # see `summary`: reduced over the leading axis
        with np.errstate(invalid="ignore"):
            low, high, finite = t.min(axis=0), t.max(axis=0), np.isfinite(t).all(axis=0)
            summable = finite & (np.maximum(-low, high) < _HUGE)
        spans: dict[int, list[SampleTable]] = {}  # layout id -> its tables, in `values` order
        starts: dict[int, int] = {}
        at = 0
        for j in chosen:
            n = len(samples[j])
            table = SampleTable(layout[j], values[at : at + n], [width] * n, items[j][1], True)
            table._summary = (low[at : at + n], high[at : at + n], finite[at : at + n])
            table._summable = summable[at : at + n]
            starts.setdefault(id(layout[j]), at)
            spans.setdefault(id(layout[j]), []).append(table)
            out[j] = table
            at += n
        for key, tables in spans.items():
            k, size, a = len(tables), len(tables[0].values), starts[key]
            batch = Batch(tables, *(x[a : a + k * size].reshape(k, size) for x in (low, high, finite)))
            every = summable[a : a + k * size].reshape(k, size).all(axis=1).tolist()
            for slot, table in enumerate(tables):
                table.batch, table.slot, table.all_summable = batch, slot, every[slot]
    return [t for t in out if t is not None]
