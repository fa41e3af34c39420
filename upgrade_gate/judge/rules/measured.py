"""What the bandwidth rules share: a snapshot's measurements merged by key (cached per snapshot), which
of them have usable samples, how two settings differ, and `bandwidth.regression`'s statistics
parameters (`curve_params`), which the floors and the phases' re-measure hook read as well.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Mapping
from typing import TYPE_CHECKING

from upgrade_gate.judge import curves
from upgrade_gate.judge.idcache import IdCache
from upgrade_gate.judge.plan import glob_match
from upgrade_gate.judge.rules.base import NodeContext
from upgrade_gate.model import Measurement, Snapshot, measurements_of

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
# snapshot. An entry: ((merged, broken), usable keys, the bandwidth keys sorted, the thermal keys).
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
    keys = []
    for key in bandwidth_keys(baseline):
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


def merged_measurements(snapshot: Snapshot) -> tuple[dict[str, Measurement], dict[str, str]]:
    """Measurements by key (duplicates pooled), and keys that could not be merged -> why (do not mutate)."""
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


def _merged_entry(snapshot: Snapshot) -> _Entry:
    return _MERGED.get(snapshot, _build_entry)


def _build_entry(snapshot: Snapshot) -> _Entry:
    merged = _merge(snapshot)
    values = merged[0]
    samples = list(map(_SAMPLES, values.values()))
    finite = math.isfinite
    # `usable` for every key at once (C-level loops): when every measurement has samples and their grand
    # sum is finite, each one's sum is (an inf or a NaN anywhere makes the grand sum non-finite); else
    # (an overflow of the grand sum alone included) key by key, as `usable` does.
    if all(samples) and finite(sum(map(sum, samples))):
        ok = frozenset(values)
    else:
        ok = frozenset([k for k, s in zip(values, samples, strict=True) if s and finite(sum(s))])
    bandwidth, thermal = _split_keys(tuple(values))
    return (merged, ok, bandwidth, thermal)


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
