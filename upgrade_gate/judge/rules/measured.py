"""What the bandwidth rules share: a snapshot's measurements merged by key (cached per snapshot), which
of them have usable samples, how two settings differ, and `bandwidth.regression`'s statistics
parameters (`curve_params`), which the floors and the phases' re-measure hook read as well.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from upgrade_gate.judge import curves, table
from upgrade_gate.judge.idcache import IdCache
from upgrade_gate.judge.plan import glob_match
from upgrade_gate.judge.rules.base import NodeContext
from upgrade_gate.model import Measurement, Snapshot, measurements_of
from upgrade_gate.model.columnar import layout_of

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry

REGRESSION = "bandwidth.regression"
THERMAL_PREFIX = "thermal/"
"""Measurements under this prefix (phase 2's temperatures and power) are judged by `rules.thermal` only."""
WORKLOAD_PREFIXES = ("workload/", "perturbation/", "latency/")
"""Measurements of the workload phases 6-7 and phase 2's all_reduce latencies: `rules.workload` judges them."""


def bandwidth_key(key: str) -> bool:
    """True for a measurement the bandwidth rules judge (everything but the thermal and workload ones)."""
    return not key.startswith((THERMAL_PREFIX, *WORKLOAD_PREFIXES))


# Several rules read the merged measurements of the same snapshot; a judge run builds them once per
# snapshot. An entry: ((merged, broken), usable keys, the bandwidth keys sorted, the thermal keys); the
# snapshot's sample table (`judge.table`) is cached beside it.
_Entry = tuple[tuple[dict[str, Measurement], dict[str, str]], frozenset[str], tuple[str, ...], tuple[str, ...]]
_MERGED: IdCache[Snapshot, _Entry] = IdCache(256)  # a judge batch (judge.BATCH nodes): two snapshots a node


# Two rules (`bandwidth.not_comparable`, `bandwidth.regression`) ask which keys of a (baseline, candidate)
# pair compare; computed once per pair: candidate id -> (candidate, baseline, ignore, the keys, as a set).
_PAIRS: dict[int, tuple[Snapshot, Snapshot, tuple[str, ...], tuple[str, ...], frozenset[str]]] = {}
_PAIRS_KEPT = 128


def forget() -> None:
    """Drop the cached merges (the judge calls it after each batch: the cache holds the snapshots)."""
    _MERGED.clear()
    _PAIRS.clear()
    _TABLES.clear()


def sample_table(snapshot: Snapshot) -> table.SampleTable:
    """`merged_measurements(snapshot)`'s samples as arrays (`judge.table`), built once per snapshot and batch."""
    return _TABLES.get(snapshot, _build_table)


def prime_tables(snapshots: Sequence[Snapshot]) -> None:
    """Merge the measurements of a batch's snapshots and build their sample tables together
    (`judge.table.build_many`: one array and one summary for the batch, not one per snapshot)."""
    todo = [s for s in snapshots if _MERGED.peek(s) is None]
    merged = [_merge(s) for s in todo]
    keys = [tuple(m[0]) for m in merged]
    tables = table.build_many([(k, tuple(m[0].values())) for k, m in zip(keys, merged, strict=True)])
    for snapshot, m, k, samples in zip(todo, merged, keys, tables, strict=True):
        _TABLES.put(snapshot, samples)
        _MERGED.put(snapshot, _entry(m, k, samples))


def _build_table(snapshot: Snapshot) -> table.SampleTable:
    merged = merged_measurements(snapshot)[0]  # builds the table with the entry
    hit = _TABLES.peek(snapshot)
    return hit if hit is not None else table.build(tuple(merged), tuple(merged.values()))


_TABLES: IdCache[Snapshot, table.SampleTable] = IdCache(256)  # as _MERGED: two snapshots a node of a batch


def comparable_keys(baseline: Snapshot, candidate: Snapshot, ignore: tuple[str, ...]) -> tuple[str, ...]:
    """The bandwidth keys of `baseline` (sorted) that `candidate` compares on: usable samples on both sides,
    merged on both sides, the same unit, and the same settings but for those in `ignore`."""
    return _pair(baseline, candidate, ignore)[0]


def comparable_set(baseline: Snapshot, candidate: Snapshot, ignore: tuple[str, ...]) -> frozenset[str]:
    """`comparable_keys` as a set."""
    return _pair(baseline, candidate, ignore)[1]


def _pair(baseline: Snapshot, candidate: Snapshot, ignore: tuple[str, ...]) -> tuple[tuple[str, ...], frozenset[str]]:
    hit = _PAIRS.get(id(candidate))
    if hit is not None and hit[0] is candidate and hit[1] is baseline and hit[2] == ignore:
        return hit[3], hit[4]
    base, base_broken = merged_measurements(baseline)
    cand, cand_broken = merged_measurements(candidate)
    usable = usable_keys(baseline) & usable_keys(candidate)
    broken = base_broken.keys() | cand_broken.keys()
    every = bandwidth_keys(baseline)
    lb, lc = layout_of(baseline), layout_of(candidate)
    if not broken and lb is not None and lc is not None and lb.parts == lc.parts:
        # v2 decodes of one layout: every key at the same place in the same unit and settings (`_alike`'s
        # test, decided by comparing a few shared objects)
        kept = every if usable.issuperset(every) else tuple(k for k in every if k in usable)
        found: tuple[tuple[str, ...], frozenset[str]] | None = (kept, frozenset(kept))
    else:
        found = _alike(every, base, cand, usable) if not broken else None
    if found is None:
        keys = []
        for key in every:
            if key not in usable or (broken and key in broken):
                continue
            b, c = base[key], cand[key]
            if b.unit == c.unit and (b.settings == c.settings or not settings_diff(b.settings, c.settings, ignore)):
                keys.append(key)
        found = (tuple(keys), frozenset(keys))
    if len(_PAIRS) >= _PAIRS_KEPT:
        _PAIRS.clear()
    _PAIRS[id(candidate)] = (candidate, baseline, ignore, *found)
    return found


def _alike(
    every: tuple[str, ...], base: dict[str, Measurement], cand: dict[str, Measurement], usable: frozenset[str]
) -> tuple[tuple[str, ...], frozenset[str]] | None:
    """`_pair`'s answer for the usual pair, decided with C-level list comparisons: every bandwidth key of the
    baseline measured now in the same unit with the same settings (then only `usable` decides). None: some
    key differs, and the per-key loop must say which."""
    if not cand.keys() >= set(every):
        return None
    b = list(map(base.__getitem__, every))
    c = list(map(cand.__getitem__, every))
    if list(map(_UNIT, b)) != list(map(_UNIT, c)) or list(map(_SETTINGS, b)) != list(map(_SETTINGS, c)):
        return None
    keys = every if usable.issuperset(every) else tuple(k for k in every if k in usable)
    return keys, frozenset(keys)


_UNIT, _SETTINGS = operator.attrgetter("unit"), operator.attrgetter("settings")


def merged_measurements(snapshot: Snapshot) -> tuple[dict[str, Measurement], dict[str, str]]:
    """Measurements by key, and keys that could not be merged -> why (do not mutate): a key recorded twice, in
    one list or in two (the snapshot's and a phase's, or two phases'), is broken evidence, never pooled."""
    return _merged_entry(snapshot)[0]


def usable_keys(snapshot: Snapshot) -> frozenset[str]:
    """Keys of `merged_measurements(snapshot)` with usable samples (some, all finite)."""
    return _merged_entry(snapshot)[1]


def bandwidth_keys(snapshot: Snapshot) -> tuple[str, ...]:
    """Keys of `merged_measurements(snapshot)` the bandwidth rules judge (not thermal), sorted."""
    return _merged_entry(snapshot)[2]


def thermal_keys(snapshot: Snapshot) -> tuple[str, ...]:
    """Keys of `merged_measurements(snapshot)` under `thermal/` (phase 2's temperatures and power)."""
    return _merged_entry(snapshot)[3]


def keys_under(snapshot: Snapshot, prefix: str) -> tuple[str, ...]:
    """Keys of `merged_measurements(snapshot)` that start with `prefix`, sorted: a function of the keys,
    found once per key layout (`judge.table`), which a fleet's snapshots share."""
    memo = sample_table(snapshot).layout.memo
    found = cast("tuple[str, ...] | None", memo.get("under:" + prefix))
    if found is None:
        found = tuple(sorted(k for k in merged_measurements(snapshot)[0] if k.startswith(prefix)))
        memo["under:" + prefix] = found
    return found


def _merged_entry(snapshot: Snapshot) -> _Entry:
    return _MERGED.get(snapshot, _build_entry)


def _build_entry(snapshot: Snapshot) -> _Entry:
    merged = _merge(snapshot)
    keys = tuple(merged[0])
    samples = table.build(keys, tuple(merged[0].values()))
    _TABLES.put(snapshot, samples)
    return _entry(merged, keys, samples)


def _entry(
    merged: tuple[dict[str, Measurement], dict[str, str]], keys: tuple[str, ...], samples: table.SampleTable
) -> _Entry:
    values = merged[0]
    # `usable` for every key at once: a row the table vouches for (some samples, all finite and far from
    # overflowing a sum) is usable; any other row is asked `usable`'s own question (the sum of its samples).
    every = samples.all_summable
    vouched = samples.summable()
    if every if every is not None else vouched.all():
        ok = frozenset(values)
    else:
        finite = math.isfinite
        ok = frozenset(
            [
                k
                for k, m, good in zip(keys, values.values(), vouched.tolist(), strict=True)
                if good or (m.samples and finite(sum(m.samples)))
            ]
        )
    memo = samples.layout.memo  # the key split is a function of the layout: no hashing of the keys again
    split = cast("tuple[tuple[str, ...], tuple[str, ...]] | None", memo.get("split"))
    if split is None:
        split = _split_keys(keys)
        memo["split"] = split
    return (merged, ok, *split)


_SAMPLES, _KEY = operator.attrgetter("samples"), operator.attrgetter("key")


@functools.lru_cache(maxsize=64)
def _split_keys(keys: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A snapshot's keys as (the bandwidth ones sorted, the thermal ones in order): a pure function of the
    keys, shared by every snapshot that measured the same ones (a fleet's nodes mostly do)."""
    thermal = [k for k in keys if k.startswith(THERMAL_PREFIX)]
    own = [k for k in keys if k.startswith(WORKLOAD_PREFIXES)]
    bandwidth = sorted(set(keys) - set(thermal) - set(own)) if thermal or own else sorted(keys)
    return tuple(bandwidth), tuple(thermal)


def _merge(snapshot: Snapshot) -> tuple[dict[str, Measurement], dict[str, str]]:
    every = measurements_of(snapshot)
    out = dict(zip(map(_KEY, every), every, strict=True))  # {m.key: m for m in every}, in C
    broken: dict[str, str] = {}
    if len(out) == len(every):
        return out, broken  # the usual snapshot: every key once
    out = {}
    for m in every:
        have = out.get(m.key)
        if have is None:
            out[m.key] = m
        elif have.unit == m.unit and have.settings == m.settings:
            out[m.key] = Measurement(
                key=m.key,
                unit=m.unit,
                samples=have.samples + m.samples,
                settings=dict(m.settings),
                source=have.source,
                higher_is_better=have.higher_is_better,
            )
        else:
            broken[m.key] = f"measured twice with different settings ({have.settings} vs {m.settings})"
    lists = [("the snapshot's measurements", snapshot.measurements)]
    lists += [(f"phase {p.phase}", p.measurements) for p in snapshot.phases]
    first: dict[str, str] = {}
    for where, measured in lists:  # a phase merges its runs into one measurement a key (`merge_samples`)
        seen: set[str] = set()
        for m in measured:
            if m.key in seen:
                broken.setdefault(
                    m.key, f"recorded twice in {where}: a run's samples are one measurement, never pooled from two"
                )
            elif m.key in first:  # break test 2026-12-07: samples added in another list outvoted phase 2's -20%
                broken.setdefault(
                    m.key, f"recorded in {first[m.key]} and in {where}: one measurement has one source, never pooled"
                )
            seen.add(m.key)
        for key in seen:
            first.setdefault(key, where)
    return out, broken


def settings_diff(a: Mapping[str, str], b: Mapping[str, str], ignore: tuple[str, ...]) -> list[str]:
    """`k a -> b` for every setting that differs, `ignore`d ones left out."""
    if a == b:
        return []
    keys = sorted((set(a) | set(b)) - set(ignore))
    return [f"{k} {a.get(k, 'unset')} -> {b.get(k, 'unset')}" for k in keys if a.get(k) != b.get(k)]


def selected(entry: RuleEntry, key: str) -> bool:
    """True when `key` is a bandwidth metric matching the entry's `metrics` globs."""
    if not bandwidth_key(key):
        return False
    globs = entry.strings("metrics")
    return "**" in globs or any(glob_match(g, key) for g in globs)


def regression_entry(ctx: NodeContext, fallback: RuleEntry) -> RuleEntry:
    """`bandwidth.regression`'s entry for the node's class (its parameters are shared), else `fallback`."""
    return ctx.policy.rule_for(REGRESSION, ctx.node_class) or fallback


def usable(samples: tuple[float, ...]) -> bool:
    """Some samples, all finite."""
    # A NaN or an infinity anywhere makes the sum non-finite (bandwidths never overflow a float).
    return bool(samples) and math.isfinite(sum(samples))


def curve_params(entry: RuleEntry) -> curves.Params:
    """`judge.curves.Params` from `bandwidth.regression`'s policy parameters (built once per entry)."""
    return _PARAMS.get(entry, _curve_params)


def _curve_params(entry: RuleEntry) -> curves.Params:
    return curves.Params(
        tolerance=entry.number("tolerance"),
        curve_tolerance=entry.number("curve_tolerance"),
        alpha=entry.number("alpha"),
        node_false_block=entry.number("node_false_block"),
        detect_drop=entry.number("detect_drop"),
        miss_rate=entry.number("miss_rate"),
        min_effect=entry.number("min_effect"),
        max_samples=entry.integer("max_samples"),
        min_samples=entry.integer("min_samples"),
        tolerance_few_samples=entry.number("tolerance_few_samples"),
        noise_floor=entry.number("noise_floor"),
        resolution=entry.number("print_resolution"),
    )


_PARAMS: IdCache[RuleEntry, curves.Params] = IdCache(64)  # a policy's entries live for the run
