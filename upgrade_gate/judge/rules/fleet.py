"""Fleet consistency: a node must agree with the prevailing state of its class, baseline or not.

The `ClassReference` (built by the store's `aggregate_class` from the class's baselines) gives the
prevailing GPU order (BDF per index), firmware (`gpu/<block>`, `gpu/vbios`, `nic/<part>/fw_ver` or
`nic/fw_ver`), software, VF counts per PF and metric medians with their spread. This rule reads only
that model type (the judge stays independent of the store).

Design decisions:
- Differences the plan explains (a canary already on the planned ROCm or firmware while its class
  reference is still the old one) are not odd; everything else is, one finding per differing item.
- Metrics: a candidate median below the class median by more than `metric_tolerance` (default 10%)
  AND by more than `metric_spread_k` (default 3) robust sigmas of the class (1.4826 x MAD of the
  per-node medians) is odd. Only like with like: a metric whose unit or settings differ from the
  class's prevailing ones is skipped here (the baseline comparison reports comparability). The plan's
  accepted metric shifts apply. A class metric measured on fewer than `metric_min_nodes` (default 3)
  nodes is not compared: the median of one or two nodes is no class.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from upgrade_gate.judge.idcache import IdCache
from upgrade_gate.judge.plan import explain, metric_expectation
from upgrade_gate.judge.rules.base import NodeContext, ParamSpec, finding, show, spec
from upgrade_gate.judge.rules.facts import vf_map
from upgrade_gate.judge.rules.measured import bandwidth_key, merged_measurements, sample_table
from upgrade_gate.model import ClassReference, Finding, Measurement, MetricSummary, Nic

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry

_MAD_TO_SIGMA = 1.4826


def _nic_key(nic: Nic) -> str:
    return f"nic/{nic.vendor_part_id}/fw_ver" if nic.vendor_part_id else "nic/fw_ver"


def check_odd_one_out(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Where the node departs from its class reference (order, firmware, software, VFs, metrics)."""
    ref = ctx.reference
    if ref is None:
        return
    cls = ref.node_class
    order = tuple(str(g.bdf) if g.bdf is not None else None for g in sorted(ctx.candidate.gpus, key=lambda g: g.index))
    if len(order) != len(ref.gpu_order):
        yield finding(
            ctx,
            entry,
            f"{len(order)} GPUs, class {cls} prevails with {len(ref.gpu_order)}",
            path="gpus",
            expected=len(ref.gpu_order),
            actual=len(order),
            evidence="class reference",
        )
    moved = [
        f"index {i} at {show(now)}, class {cls} has {show(want)}"
        for i, (now, want) in enumerate(zip(order, ref.gpu_order, strict=False))
        if now != want
    ]
    if moved:
        yield finding(
            ctx,
            entry,
            f"GPU order departs from class {cls}: " + "; ".join(moved),
            path="gpus.order",
            expected=list(ref.gpu_order),
            actual=list(order),
            evidence="class reference",
        )
    prevailing = _GPU_FIRMWARE.get(ref, _gpu_firmware)
    gpu_keys = prevailing.keys
    for gpu in sorted(ctx.candidate.gpus, key=lambda g: g.index):
        if gpu.firmware == prevailing.blocks and (not prevailing.has_vbios or gpu.vbios == prevailing.vbios):
            continue  # the usual GPU: every block (and the VBIOS) as its class has it; the loop finds nothing
        values = {f"gpu/{block}": version for block, version in gpu.firmware.items()}
        if gpu.vbios is not None:
            values["gpu/vbios"] = gpu.vbios
        for key in gpu_keys:
            now = values.get(key)
            if now == ref.firmware[key]:
                continue
            field = "vbios" if key == "gpu/vbios" else f"firmware.{key.removeprefix('gpu/')}"
            path = f"gpus[bdf={gpu.bdf}].{field}"
            if now == ref.firmware[key] or explain(ctx.plan, path, ref.firmware[key], now) is not None:
                continue
            yield finding(
                ctx,
                entry,
                f"GPU index {gpu.index} ({gpu.bdf}): {key} is {show(now)}, class {cls} prevails with "
                f"{ref.firmware[key]}",
                device=str(gpu.bdf),
                path=path,
                expected=ref.firmware[key],
                actual=now,
                evidence="class reference",
            )
    for nic in sorted(ctx.candidate.nics, key=lambda n: n.name):
        key = _nic_key(nic)
        want = ref.firmware.get(key)
        path = f"nics[name={nic.name}].fw_ver"
        if want is None or nic.fw_ver == want or explain(ctx.plan, path, want, nic.fw_ver) is not None:
            continue
        yield finding(
            ctx,
            entry,
            f"NIC {nic.name}: firmware {show(nic.fw_ver)}, class {cls} prevails with {want}",
            device=nic.name,
            path=path,
            expected=want,
            actual=nic.fw_ver,
            evidence="class reference",
        )
    for field, want in sorted(ref.software.items()):
        now = getattr(ctx.candidate.software, field, None)
        path = f"software.{field}"
        if now == want or explain(ctx.plan, path, want, now) is not None:
            continue
        yield finding(
            ctx,
            entry,
            f"{field} is {show(now)}, class {cls} prevails with {want}",
            path=path,
            expected=want,
            actual=now,
            evidence="class reference",
        )
    vfs = vf_map(ctx.candidate)
    for pf, want_vfs in sorted(ref.sriov.items()):
        if vfs.get(pf) != want_vfs:
            yield finding(
                ctx,
                entry,
                f"PF {pf}: {show(vfs.get(pf))} VFs, class {cls} prevails with {want_vfs}",
                device=pf,
                path=f"sriov[bdf={pf}].numvfs",
                expected=want_vfs,
                actual=vfs.get(pf),
                evidence="class reference",
            )
    if entry.flag("check_metrics"):
        yield from _metrics(ctx, entry)


class _GpuFirmware(NamedTuple):
    """A class reference's GPU firmware: its `gpu/` keys in order, and what a GPU that matches it has."""

    keys: tuple[str, ...]
    blocks: dict[str, str]  # firmware block -> version (the keys but `gpu/vbios`)
    has_vbios: bool
    vbios: str | None


def _gpu_firmware(ref: ClassReference) -> _GpuFirmware:
    keys = tuple(sorted(k for k in ref.firmware if k.startswith("gpu/")))
    blocks = {k.removeprefix("gpu/"): ref.firmware[k] for k in keys if k != "gpu/vbios"}
    return _GpuFirmware(keys, blocks, "gpu/vbios" in ref.firmware, ref.firmware.get("gpu/vbios"))


_GPU_FIRMWARE: IdCache[ClassReference, _GpuFirmware] = IdCache(8)  # one reference serves a run


def _comparable_summaries(ref: ClassReference) -> tuple[MetricSummary, ...]:
    """The reference's metrics a node's are compared with: not temperatures (rules.thermal compares them
    with the class), a positive median."""
    return tuple(s for s in ref.metrics if bandwidth_key(s.key) and s.median > 0)


_SUMMARIES: IdCache[ClassReference, tuple[MetricSummary, ...]] = IdCache(8)  # one reference serves a run


class _Item(NamedTuple):
    """One class metric a node is compared on: its summary, centre (the plan's shift applied), tolerance, and
    the worst sample at least `low` (higher is better) or at most `high` (lower is better) that is within
    the tolerance beyond doubt (the margin covers the rounding of `_metric`'s division)."""

    summary: MetricSummary
    centre: float
    tolerance: float
    low: float
    high: float


_MARGIN = 1e-9
_PREPARED: dict[tuple[int, int, int], tuple[object, object, object, tuple[_Item, ...]]] = {}


def _prepared(ctx: NodeContext, entry: RuleEntry) -> tuple[_Item, ...]:
    """The class metrics compared under (reference, policy entry, plan): a pure function of the three,
    built once per run instead of once per node."""
    ref, plan = ctx.reference, ctx.plan
    assert ref is not None
    hit = _PREPARED.get((id(ref), id(entry), id(plan)))
    if hit is not None and hit[0] is ref and hit[1] is entry and hit[2] is plan:
        return hit[3]
    min_nodes, base_tolerance = entry.integer("metric_min_nodes"), entry.number("metric_tolerance")
    accepts = plan is not None and bool(plan.accept_metrics)
    items = []
    for summary in _SUMMARIES.get(ref, _comparable_summaries):
        if summary.n_nodes < min_nodes:
            continue  # a class "median" of one or two nodes is no reference for the odd one out
        tolerance, shift = base_tolerance, 0.0
        expectation = metric_expectation(plan, summary.key) if accepts else None
        if expectation is not None:
            tolerance, shift = expectation[0].tolerance, expectation[0].shift
        c = summary.median * (1.0 + shift)
        low, high = (
            (c * (1.0 - tolerance) + _MARGIN * c, c * (1.0 + tolerance) - _MARGIN * c) if c > 0 else (_INF, -_INF)
        )
        items.append(_Item(summary, c, tolerance, low, high))
    if len(_PREPARED) >= 16:
        _PREPARED.clear()
    _PREPARED[(id(ref), id(entry), id(plan))] = (ref, entry, plan, tuple(items))
    return tuple(items)


_INF = float("inf")


class _Bounds(NamedTuple):
    """The prepared items' keys and worst-sample bounds as arrays (the table's fast path)."""

    keys: tuple[str, ...]
    low: np.ndarray
    high: np.ndarray
    direction: np.ndarray  # the class's higher_is_better per item: 1, 0, or -1 where the reference has none


_BOUNDS: IdCache[tuple[_Item, ...], _Bounds] = IdCache(16)


def _bounds(items: tuple[_Item, ...]) -> _Bounds:
    return _Bounds(
        tuple(i.summary.key for i in items),
        np.array([i.low for i in items], dtype=float),
        np.array([i.high for i in items], dtype=float),
        np.array([-1 if i.summary.higher_is_better is None else int(i.summary.higher_is_better) for i in items]),
    )


def _unsure(ctx: NodeContext, items: tuple[_Item, ...]) -> list[_Item]:
    """The items the per-metric loop must look at: all but those the candidate's sample table shows absent
    or with every sample finite and its worst one within the item's bound (what the loop would skip).
    Decided for the whole batch at once where the candidate's table was summarised with its batch."""
    if not items:
        return []
    bounds = _BOUNDS.get(items, _bounds)
    samples = sample_table(ctx.candidate)
    rows = samples.layout.rows(bounds.keys)
    batch = samples.batch
    if batch is not None:
        hit = batch.memo.get(_RULE)
        if not (isinstance(hit, tuple) and hit[0] is bounds):
            hit = (bounds, _unsure_rows(batch.low, batch.high, batch.finite, batch.better, rows, bounds))
            batch.memo[_RULE] = hit
        todo = hit[1][samples.slot]
    else:
        low, high, finite = samples.summary()
        if not len(finite):
            return []  # no measurements: every item is absent
        todo = _unsure_rows(low[None], high[None], finite[None], samples.better[None], rows, bounds)[0]
    return [items[i] for i in np.flatnonzero(todo).tolist()]


_RULE = "fleet.odd_one_out"


def _unsure_rows(
    low: np.ndarray, high: np.ndarray, finite: np.ndarray, better: np.ndarray, rows: np.ndarray, bounds: _Bounds
) -> np.ndarray:
    """Per table (a row of the summaries) and item: True where the per-metric loop must look."""
    present = rows >= 0
    at = np.where(present, rows, 0)
    with np.errstate(invalid="ignore"):
        within = np.where(better[:, at], low[:, at] >= bounds.low, high[:, at] <= bounds.high)
    reversed_ = (bounds.direction >= 0) & (better[:, at] != (bounds.direction == 1))
    out: np.ndarray = present & (~(finite[:, at] & within) | reversed_)
    return out


def _metrics(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    assert ctx.reference is not None
    cand, _ = merged_measurements(ctx.candidate)
    ignore = set(entry.strings("ignore_settings"))
    spread_k = entry.number("metric_spread_k")
    get = cand.get
    for item in _unsure(ctx, _prepared(ctx, entry)):
        m = get(item.summary.key)
        if m is None or not m.samples:
            continue
        direction = item.summary.higher_is_better
        if direction is not None and m.higher_is_better is not direction:
            # the class's direction, not the candidate's claim: a flipped flag hid a -20% (break test 2026-12-07)
            yield _reversed(ctx, entry, item.summary, m)
            continue
        if (min(m.samples) >= item.low) if m.higher_is_better else (max(m.samples) <= item.high):
            continue  # the usual metric: even the worst sample is within the tolerance, beyond rounding
        if m.unit != item.summary.unit:
            continue
        found = _metric(ctx, entry, item.summary, m, item.centre, item.tolerance, ignore, spread_k)
        if found is not None:
            yield found


def _reversed(ctx: NodeContext, entry: RuleEntry, summary: MetricSummary, m: Measurement) -> Finding:
    assert ctx.reference is not None
    said = "higher" if m.higher_is_better else "lower"
    meant = "higher" if summary.higher_is_better else "lower"
    return finding(
        ctx,
        entry,
        f"{summary.key}: the candidate says {said} is better, class {ctx.reference.node_class}'s baselines say "
        f"{meant}: not comparable with the class",
        device=summary.key,
        path=f"measurements[key={summary.key}]",
        expected=summary.higher_is_better,
        actual=m.higher_is_better,
        evidence="class reference",
    )


def _metric(
    ctx: NodeContext,
    entry: RuleEntry,
    summary: MetricSummary,
    m: Measurement,
    centre: float,
    tolerance: float,
    ignore: set[str],
    spread_k: float,
) -> Finding | None:
    """The node's median of one class metric against the class (the one source of this finding)."""
    assert ctx.reference is not None
    # The drop is monotone in the median, which lies between the extremes: when even the worst
    # sample is within the tolerance, so is the median (the usual node; no sort needed).
    worst = min(m.samples) if m.higher_is_better else max(m.samples)
    if worst == worst and ((centre - worst) / centre if m.higher_is_better else (worst - centre) / centre) <= tolerance:
        return None
    if m.settings != summary.settings:
        keys = (m.settings.keys() | summary.settings.keys()) - ignore
        if any(m.settings.get(k) != summary.settings.get(k) for k in keys):
            return None
    ordered = sorted(m.samples)
    mid = len(ordered) // 2
    value = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0
    drop = (centre - value) / centre if m.higher_is_better else (value - centre) / centre
    if drop <= tolerance:
        return None
    sigma = _MAD_TO_SIGMA * summary.spread / centre
    if drop <= spread_k * sigma:
        return None
    return finding(
        ctx,
        entry,
        f"{summary.key}: median {value:.2f} {m.unit} is {drop:.1%} below class {ctx.reference.node_class} "
        f"({summary.median:.2f} over {summary.n_nodes} nodes, robust sigma {sigma:.1%})",
        device=summary.key,
        path=f"measurements[key={summary.key}]",
        expected=summary.median,
        actual=value,
        evidence="class reference",
    )


SPECS = (
    spec(
        "fleet.odd_one_out",
        "the node departs from its class reference (GPU order, firmware, software, VF counts, metrics)",
        check_odd_one_out,
        params={
            "check_metrics": ParamSpec(kind="boolean", default=True, doc="compare metric medians with the class"),
            "metric_tolerance": ParamSpec(
                kind="number", default=0.10, doc="relative drop below the class median", minimum=0, maximum=1
            ),
            "metric_spread_k": ParamSpec(kind="number", default=3.0, doc="robust sigmas of the class", minimum=0),
            "metric_min_nodes": ParamSpec(
                kind="integer", default=3, doc="class nodes a metric needs before it is compared", minimum=1
            ),
            "ignore_settings": ParamSpec(kind="strings", default=("peer",), doc="settings not compared"),
        },
    ),
)
