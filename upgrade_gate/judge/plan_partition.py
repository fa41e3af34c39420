"""A planned compute/memory partition change (`change.partition`) and the physical devices it applies to.

    change:
      partition: {from: {compute: SPX, memory: NPS1}, to: {compute: CPX, memory: NPS4}}

Modes are the words amd-smi prints (`compute_partition` SPX/DPX/TPX/QPX/CPX, `memory_partition`
NPS1/NPS4...; corpus amd-smi/static-partition-*, rocm-smi/mi300a-tpx-*); either side may leave one out
("whatever it was", "whatever it becomes").

What the plan makes expected, judged per physical device (PCI domain, bus, device; the partitions of
one device differ only in the function of their BDF, `judge.identity`): a device present on both sides
whose partition layout moved from the plan's `from` to its `to` modes, and each of whose partitions
carries that device's own serial or unique id. For such a device, the partitions that appeared or
vanished (`rules.devices`), the links of its partitions beyond the first (`rules.topology`), the order
of the logical GPUs as long as the physical devices keep their order (`rules.devices`), and its GPUs'
partition modes, VRAM and compute units (a partition holds a share of the device; `judge.plan.explain`)
are the change, not findings. A device that moved elsewhere, a partition with a foreign serial, a
physical device missing or reordered still block.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from upgrade_gate.judge.identity import canonical_uid, normalise_id
from upgrade_gate.model import Gpu, Snapshot
from upgrade_gate.parse.bdf import address_of

Slot = tuple[int, int, int]
_SHARE_FIELDS = frozenset({"vram_total_mib", "compute_units"})
_FIELD = re.compile(r"gpus\[[^\]]*\]\.(?P<field>compute_partition|memory_partition|vram_total_mib|compute_units)")


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionMode:
    """Compute and memory partition modes; None: any."""

    compute: str | None = None
    memory: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionChange:
    """A planned partition mode move of the node's GPUs."""

    from_mode: PartitionMode
    to_mode: PartitionMode


def partition_from_dict(raw: Mapping[str, Any] | None) -> PartitionChange | None:
    """`change.partition` of a schema-valid plan document."""
    if raw is None:
        return None

    def mode(side: Mapping[str, Any] | None) -> PartitionMode:
        side = side or {}
        return PartitionMode(compute=side.get("compute"), memory=side.get("memory"))

    return PartitionChange(from_mode=mode(raw.get("from")), to_mode=mode(raw.get("to")))


def explain_partition(change: PartitionChange | None, path: str, before: object, after: object) -> bool:
    """True when the planned partition change explains the difference at `path` (a GPU's mode or share)."""
    match = _FIELD.fullmatch(path)
    if change is None or match is None or after is None:
        return False
    field = match["field"]
    if field in _SHARE_FIELDS:
        return True
    planned_from = getattr(change.from_mode, field.split("_")[0])
    planned_to = getattr(change.to_mode, field.split("_")[0])
    return (planned_from is None or before == planned_from) and (planned_to is None or after == planned_to)


@dataclass(frozen=True, slots=True)
class Layout:
    """One physical device's partitions: how many logical GPUs, in which compute and memory modes."""

    count: int
    compute: tuple[str, ...]
    memory: tuple[str, ...]


def layouts(gpus: Iterable[Gpu]) -> dict[Slot, Layout]:
    """Physical device -> its partition layout (GPUs without a BDF are left out)."""
    by_slot: dict[Slot, list[Gpu]] = {}
    for gpu in gpus:
        slot = slot_of(gpu.bdf)
        if slot is not None:
            by_slot.setdefault(slot, []).append(gpu)
    return {
        slot: Layout(
            count=len(found),
            compute=tuple(sorted({g.compute_partition for g in found if g.compute_partition})),
            memory=tuple(sorted({g.memory_partition for g in found if g.memory_partition})),
        )
        for slot, found in by_slot.items()
    }


def changed_slots(baseline: Snapshot, candidate: Snapshot) -> dict[Slot, tuple[Layout, Layout]]:
    """Physical devices on both sides whose partition layout differs."""
    before, after = layouts(baseline.gpus), layouts(candidate.gpus)
    return {s: (before[s], after[s]) for s in sorted(before.keys() & after.keys()) if before[s] != after[s]}


def slot_of(bdf: object) -> Slot | None:
    """(domain, bus, device) of a BDF: the physical device whatever the partition."""
    address = address_of(str(bdf)) if bdf is not None else None
    return address.slot if address is not None else None


def function_of(bdf: object) -> int | None:
    """The BDF's function: a partition's number."""
    address = address_of(str(bdf)) if bdf is not None else None
    return address.function if address is not None else None


def _by_slot(gpus: Iterable[Gpu]) -> dict[Slot, list[Gpu]]:
    out: dict[Slot, list[Gpu]] = {}
    for gpu in gpus:
        slot = slot_of(gpu.bdf)
        if slot is not None:
            out.setdefault(slot, []).append(gpu)
    return out


def _ids(gpu: Gpu) -> set[str]:
    return {i for i in (normalise_id(gpu.serial), canonical_uid(gpu.unique_id)) if i is not None}


def _modes_match(gpus: list[Gpu], mode: PartitionMode) -> bool:
    compute = {g.compute_partition for g in gpus}
    memory = {g.memory_partition for g in gpus}
    return (mode.compute is None or compute == {mode.compute}) and (mode.memory is None or memory == {mode.memory})


def planned_slots(change: PartitionChange | None, baseline: Snapshot | None, candidate: Snapshot) -> frozenset[Slot]:
    """Physical devices whose partitions moved as planned, each partition carrying the device's own id."""
    if change is None or baseline is None:
        return frozenset()
    before, after = _by_slot(baseline.gpus), _by_slot(candidate.gpus)
    out = set()
    for slot in before.keys() & after.keys():
        was, now = before[slot], after[slot]
        if not (_modes_match(was, change.from_mode) and _modes_match(now, change.to_mode)):
            continue
        device = set.union(*(_ids(g) for g in was))
        if device and all(_ids(g) & device for g in now):
            out.add(slot)
    return frozenset(out)


def physical_order(gpus: Iterable[Gpu]) -> list[Slot | None]:
    """The physical devices in enumeration order, each once (its first partition's place)."""
    seen: list[Slot | None] = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        slot = slot_of(gpu.bdf)
        if slot is None or slot not in seen:
            seen.append(slot)
    return seen


_LINK_KEY = re.compile(r"^a=(?P<a>[^,]+),b=(?P<b>.+)$")


def planned_item(section: str, key: str, value: object, planned: frozenset[Slot], bdf_of: Mapping[str, object]) -> bool:
    """True when an item of a whole-section diff (`gpus`, `gpu_links`) belongs to a planned partition change:
    a GPU (by its pair label, `bdf_of`) on a device whose partitions moved as planned, or a link with a
    partition end (function > 0) there."""
    if section == "gpus":
        bdf = value.get("bdf") if isinstance(value, dict) and isinstance(value.get("bdf"), str) else bdf_of.get(key)
        return slot_of(bdf) in planned
    link = _LINK_KEY.match(key) if section == "gpu_links" else None
    if link is None:
        return False
    return any(slot_of(end) in planned and function_of(end) != 0 for end in (link["a"], link["b"]))
