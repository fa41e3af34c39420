"""GPU identity rules: enumeration order, missing / added / replaced devices, unverified identity,
denylisted serials.

Design decisions:
- `device.order_changed` compares both index -> immutable id and index -> BDF with the baseline. The
  message lists every index whose device moved ("index 0 was 0000:05:00.0 (serial X), now
  0000:f5:00.0 (serial Y)") and the hint gives a pin the operator can apply at once: the baseline
  order as `ROCR_VISIBLE_DEVICES=GPU-<uuid>,...`. ROCR_VISIBLE_DEVICES accepts UUIDs (the `GPU-<hex>`
  form rocminfo prints, from the unique id); HIP_VISIBLE_DEVICES takes indices only (ROCm docs, "GPU
  isolation techniques"), so an index list is offered only when no UUID is known. A plan cannot
  accept an order change: the incident is exactly an order change nobody planned for.
- A replaced device is a baseline GPU and a candidate GPU in the same slot (BDF) whose immutable ids
  both exist and differ; it is reported once as `device.replaced`, not as missing plus added.
- The denylist is keyed by serial; a GPU whose serial or unique id is listed blocks wherever it turns
  up, with the reason recorded when it was denied.
- A GPU is its serial AND its unique id (`judge.identity`): a matched GPU whose other id changed, or
  stopped being reported, is `device.identity_changed` (a board swap behind the same ASIC, a re-flashed
  FRU, a corrupted identity: exactly what the denylist relies on). Two devices printing the same
  serial or unique id (partitions of one device excepted) are `device.duplicate_id`, baseline or not.
- A planned partition change (`change.partition`, `judge.plan_partition`) is judged per physical
  device: the partitions that appeared or vanished on a device that moved as planned are the change,
  and the order compares the physical devices (each once, in enumeration order), which must not move.
- Every lookup is a dictionary built once per node: the rules stay O(n log n) in the GPU count.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from upgrade_gate.judge.identity import (
    GpuKey,
    GpuPair,
    MatchKind,
    canonical_uid,
    duplicate_ids,
    normalise_id,
    rocr_uuid,
)
from upgrade_gate.judge.order_table import order_data
from upgrade_gate.judge.plan_partition import changed_slots, physical_order, planned_slots, slot_of
from upgrade_gate.judge.rules.base import NodeContext, finding, spec
from upgrade_gate.model import Finding, Gpu, GpuSerial, Severity
from upgrade_gate.vendors import vendor_of

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry


def _describe(gpu: Gpu) -> str:
    ident = normalise_id(gpu.serial)
    if ident is not None:
        return f"{gpu.bdf or 'unknown BDF'} (serial {ident})"
    uid = normalise_id(gpu.unique_id)
    if uid is not None:
        return f"{gpu.bdf or 'unknown BDF'} (unique id {uid})"
    return f"{gpu.bdf or 'unknown BDF'} (no serial)"


def check_order(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """index -> id and index -> BDF must match the baseline."""
    assert ctx.baseline is not None
    if _partitions_as_planned(ctx):
        return
    base_by_index = {g.index: g for g in ctx.baseline.gpus}
    cand_by_index = {g.index: g for g in ctx.candidate.gpus}
    replaced = _replaced_slots(ctx.pairs)
    pair_of = _pairs_by_baseline(ctx.pairs)
    moved: dict[int, str] = {}
    for index in sorted(base_by_index):
        was = base_by_index[index]
        now = cand_by_index.get(index)
        if now is None:
            continue  # missing devices are device.missing's business
        if was.bdf == now.bdf and was.bdf in replaced:
            continue  # same index, same slot, new board: device.replaced's business
        pair = pair_of.get(id(was))
        same_device = pair is not None and pair.candidate is now
        if not same_device or was.bdf != now.bdf:
            moved[index] = f"index {index} was {_describe(was)}, now {_describe(now)}"
    if not moved:
        return
    base_order = [str(base_by_index[i].bdf) for i in sorted(base_by_index)]
    cand_order = [str(cand_by_index[i].bdf) for i in sorted(cand_by_index)]
    yield finding(
        ctx,
        entry,
        "GPU enumeration order changed: " + "; ".join(moved.values()),
        path="gpus.order",
        expected=base_order,
        actual=cand_order,
        evidence="rocminfo",
        hint=_order_pin(ctx),
        data=order_data(base_by_index, cand_by_index, set(moved)),
    )


def _planned(ctx: NodeContext) -> frozenset[tuple[int, int, int]]:
    change = ctx.plan.change.partition if ctx.plan is not None else None
    return planned_slots(change, ctx.baseline, ctx.candidate)


def _partitions_as_planned(ctx: NodeContext) -> bool:
    """Every partition layout that changed did so as planned, and the physical devices kept their order."""
    assert ctx.baseline is not None
    planned = _planned(ctx)
    if not planned or not set(changed_slots(ctx.baseline, ctx.candidate)) <= planned:
        return False
    return physical_order(ctx.baseline.gpus) == physical_order(ctx.candidate.gpus)


def _pairs_by_baseline(pairs: tuple[GpuPair, ...]) -> dict[int, GpuPair]:
    return {id(p.baseline): p for p in pairs if p.baseline is not None}


def _order_pin(ctx: NodeContext) -> str:
    """ROCR_VISIBLE_DEVICES by UUID in baseline order (or HIP_VISIBLE_DEVICES by index as fallback); NVIDIA:
    CUDA_DEVICE_ORDER=PCI_BUS_ID with CUDA_VISIBLE_DEVICES."""
    assert ctx.baseline is not None
    uuids: list[str] = []
    indices: list[str] = []
    pair_of = _pairs_by_baseline(ctx.pairs)
    for gpu in sorted(ctx.baseline.gpus, key=lambda g: g.index):
        pair = pair_of.get(id(gpu))
        now = pair.candidate if pair is not None else None
        if now is None:
            continue
        uuid = rocr_uuid(now) or rocr_uuid(gpu)
        if uuid is not None:
            uuids.append(uuid)
        indices.append(str(now.index))
    pin = vendor_of(p.name for p in ctx.candidate.probes).pin  # the pin in the node's vendor's words
    if uuids and len(uuids) == len(indices):
        return (
            f"pin the baseline order by UUID: {pin.by_uuid(uuids)} ({pin.note}); "
            "then fix the enumeration or re-baseline deliberately"
        )
    return (
        f"no UUIDs known; pin by today's indices: {pin.by_index(indices)} "
        "(indices move again on the next re-enumeration: fix the identity probes)"
    )


def _unpaired(ctx: NodeContext, entry: RuleEntry, *, baseline_side: bool) -> Iterable[Finding]:
    """GPUs present on one side only (and not a replacement in their slot): missing or new."""
    replaced = _replaced_slots(ctx.pairs)
    planned = _planned(ctx) if ctx.plan is not None and ctx.plan.change.partition is not None else frozenset()
    was, now = ("present", "absent") if baseline_side else ("absent", "present")
    for pair in ctx.pairs:
        gpu, other = (pair.baseline, pair.candidate) if baseline_side else (pair.candidate, pair.baseline)
        if gpu is not None and planned and slot_of(gpu.bdf) in planned:
            continue  # a partition of a device whose partition mode moved as planned
        if other is None and gpu is not None and gpu.bdf not in replaced:
            yield finding(
                ctx,
                entry,
                f"GPU {pair.label} (index {gpu.index}, {_describe(gpu)}) is {'missing' if baseline_side else 'new'}",
                device=pair.label,
                path=f"gpus[{pair.label}]",
                expected=was,
                actual=now,
                evidence="amdsmi_list",
            )


def check_missing(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """A baseline GPU no longer present (and not replaced in its slot)."""
    return _unpaired(ctx, entry, baseline_side=True)


def check_added(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """A candidate GPU the baseline did not have (and that does not replace one)."""
    return _unpaired(ctx, entry, baseline_side=False)


def _replaced_slots(pairs: tuple[GpuPair, ...]) -> dict[object, tuple[Gpu, Gpu]]:
    gone = {p.baseline.bdf: p.baseline for p in pairs if p.candidate is None and p.baseline and p.baseline.bdf}
    new = {p.candidate.bdf: p.candidate for p in pairs if p.baseline is None and p.candidate and p.candidate.bdf}
    return {bdf: (gone[bdf], new[bdf]) for bdf in gone.keys() & new.keys()}


def check_replaced(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Same slot, different device."""
    for bdf, (was, now) in sorted(_replaced_slots(ctx.pairs).items(), key=lambda kv: str(kv[0])):
        yield finding(
            ctx,
            entry,
            f"GPU in slot {bdf} was replaced: was {_describe(was)}, now {_describe(now)}",
            device=str(bdf),
            path=f"gpus[bdf={bdf}].serial",
            expected=was.serial or was.unique_id,
            actual=now.serial or now.unique_id,
            evidence="amdsmi_static",
        )


def check_identity_changed(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """A matched GPU whose serial or unique id differs from the baseline, or is no longer reported."""
    for pair in ctx.pairs:
        was, now = pair.baseline, pair.candidate
        if was is None or now is None or not pair.kind.verified:
            continue
        if was.serial == now.serial and was.unique_id == now.unique_id:
            continue  # the usual GPU: the same texts normalise alike (pure functions), nothing changed
        for field, before, after in (
            ("serial", normalise_id(was.serial), normalise_id(now.serial)),
            ("unique_id", canonical_uid(was.unique_id), canonical_uid(now.unique_id)),
        ):
            if before is None or before == after:
                continue
            what = "is no longer reported" if after is None else f"changed: {before} -> {after}"
            yield finding(
                ctx,
                entry,
                f"GPU {pair.label} (index {now.index}, {now.bdf or 'unknown BDF'}): {field} {what}; a GPU is its "
                "serial and unique id together (board swap, re-flashed FRU or corrupted identity)",
                device=pair.label,
                path=f"gpus[{pair.label}].{field}",
                expected=before,
                actual=after,
                evidence="amdsmi_static",
            )


def check_duplicate_ids(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Two devices of the candidate print the same serial or unique id."""
    for kind, value, gpus in duplicate_ids(ctx.candidate.gpus):
        where = ", ".join(f"index {g.index} ({g.bdf or 'unknown BDF'})" for g in gpus)
        yield finding(
            ctx,
            entry,
            f"{kind} {value} is printed by {len(gpus)} GPUs that are not partitions of one device: {where}",
            device=f"{kind}={value}",
            path=f"gpus[{kind}={value}]",
            expected="one device per id",
            actual=[str(g.bdf) for g in gpus],
            evidence="amdsmi_static",
        )


def check_unverified(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """GPUs matched only by slot or index, or with no immutable id at all."""
    if ctx.baseline is not None:
        for pair in ctx.pairs:
            if pair.baseline is not None and pair.candidate is not None and not pair.kind.verified:
                yield finding(
                    ctx,
                    entry,
                    f"GPU {pair.label}: identity unverified, matched to the baseline by {pair.kind.value} only "
                    "(no usable serial or unique id on one side)",
                    device=pair.label,
                    path=f"gpus[{pair.label}].serial",
                    expected="serial or unique id",
                    actual=pair.candidate.serial,
                    evidence="amdsmi_static",
                )
        return
    for gpu in ctx.candidate.gpus:
        if normalise_id(gpu.serial) is None and normalise_id(gpu.unique_id) is None:
            yield finding(
                ctx,
                entry,
                f"GPU index {gpu.index} ({gpu.bdf}): no serial or unique id; identity unverified",
                device=f"gpu[{gpu.index}]",
                path=f"gpus[bdf={gpu.bdf}].serial",
                expected="serial or unique id",
                actual=None,
                evidence="amdsmi_static",
            )


def check_denylisted(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """A GPU whose serial (or unique id) is on the store's denylist."""
    uids = {canonical_uid(s): s for s in ctx.denylist if canonical_uid(s) is not None}
    for gpu in ctx.candidate.gpus:
        uid = canonical_uid(gpu.unique_id)
        for ident in (normalise_id(gpu.serial), uids.get(uid) if uid is not None else None):
            if ident is not None and GpuSerial(ident) in ctx.denylist:
                yield finding(
                    ctx,
                    entry,
                    f"GPU {ident} (index {gpu.index}, {gpu.bdf}) is on the denylist: {ctx.denylist[GpuSerial(ident)]}",
                    device=ident,
                    path=f"gpus[{GpuKey(kind=MatchKind.SERIAL, value=ident)}]",
                    expected="not denylisted",
                    actual=ctx.denylist[GpuSerial(ident)],
                    evidence="denylist",
                )
                break


SPECS = (
    spec(
        "device.order_changed",
        "GPU index -> serial / BDF mapping differs from the baseline",
        check_order,
        plan_can_accept=False,
        needs_baseline=True,
    ),
    spec("device.missing", "a baseline GPU is absent", check_missing, needs_baseline=True),
    spec("device.added", "a GPU the baseline did not have", check_added, needs_baseline=True),
    spec("device.replaced", "same slot (BDF), different serial", check_replaced, needs_baseline=True),
    spec(
        "device.identity_changed",
        "a matched GPU's serial or unique id changed or is no longer reported (a GPU is both)",
        check_identity_changed,
        needs_baseline=True,
    ),
    spec(
        "device.duplicate_id",
        "two GPUs that are not partitions of one device print the same serial or unique id",
        check_duplicate_ids,
        plan_can_accept=False,
    ),
    spec(
        "identity.unverified",
        "a GPU matched by BDF/index only, or without any immutable id",
        check_unverified,
        severity=Severity.WARN,
    ),
    spec(
        "device.denylisted",
        "a GPU whose serial is on the store's denylist",
        check_denylisted,
        plan_can_accept=False,
    ),
)
