"""A compute/memory partition change is one cause: "compute partition SPX -> CPX, memory NPS1 -> NPS4 on 8 GPUs".

Part of `judge.causes` (claim 1, after the evidence failures). An MI300X switched from SPX to CPX shows
every one of its 8 partitions as a logical GPU sharing the device's serial and UUID, told apart by the
function of its BDF (05:00.0 ... 05:00.7, see `judge.identity`); the XGMI matrix grows from 28 pairs
to 2,016. Read one finding at a time that is 56 "new GPUs" and 1,988 "GPU link absent -> XGMI" lines,
or, the other way round, 56 "missing" GPUs with a denylist command each, for 8 healthy devices.

The rule: a physical device (PCI domain, bus, device) present on both sides whose partition layout
differs (compute or memory partition mode, or the number of logical GPUs on it) has had its partition
mode changed. Its consequences are folded under one cause: the partitions that appeared or vanished on
those devices, GPU links with an end on them, the enumeration order and the class's GPU count and
order (the list of logical GPUs changed), the partition mode, VRAM and compute-unit fields of their
GPUs (a partition holds a share of the device), and bandwidth "not comparable" only by its rank count.
No denylist advice: nothing is broken. A plan that declares the change (`change.partition`) makes these
findings expected in the first place (`judge.plan`); this cause is what an undeclared one reads as.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from upgrade_gate.judge.cause_groups import Pool
from upgrade_gate.judge.cause_text import plural
from upgrade_gate.judge.plan_partition import Layout, changed_slots, slot_of
from upgrade_gate.model import CauseCategory, Finding, Snapshot

_FOLLOWERS = frozenset({"device.added", "device.missing", "device.replaced", "xgmi.link_changed", "field.unplanned"})
_PARTITION_FIELDS = re.compile(r"^gpus\[[^\]]+\]\.(compute_partition|memory_partition|vram_total_mib|compute_units)$")


def _modes(values: Iterable[tuple[str, ...]]) -> str:
    found = sorted({v for vs in values for v in vs})
    return "/".join(found) if found else "unknown"


def claim_partition_change(pool: Pool, baseline: Snapshot | None, candidate: Snapshot | None) -> None:
    """One cause for a partition mode change and everything it explains (see the module docstring)."""
    if baseline is None or candidate is None or not any(pool.findings[i].rule in _FOLLOWERS for i in pool.free):
        return  # nothing a partition change could explain: no layouts to compute (a fleet's usual node)
    # a mode that moved: the same mode with more logical GPUs at a slot is a GPU listed twice, not a partition
    # change ("SPX -> SPX (1 -> 2 logical GPUs)" led a node whose GPU was duplicated; device.duplicate_id says it)
    changed = {s: (b, a) for s, (b, a) in changed_slots(baseline, candidate).items() if _mode(b) != _mode(a)}
    if not changed:
        return

    def on_changed(bdf: object) -> bool:
        return slot_of(bdf) in changed

    def follows(f: Finding) -> bool:
        if f.rule in ("device.added", "device.missing", "device.replaced"):
            gpu = pool.gpu_of(f)
            return gpu is not None and on_changed(gpu.bdf)
        if f.rule == "xgmi.link_changed":
            return f.device is not None and any(on_changed(b) for b in f.device.split("~"))
        if f.rule == "device.order_changed" or (f.rule == "fleet.odd_one_out" and f.path in ("gpus", "gpus.order")):
            return True
        if f.path is not None and _PARTITION_FIELDS.match(f.path):
            gpu = pool.gpu_of(f)
            return gpu is not None and on_changed(gpu.bdf)
        if f.rule == "bandwidth.not_comparable":
            return _ranks_only(f.expected, f.actual)
        return False

    taken = pool.take(follows)
    if not taken:
        return  # planned (change.partition): nothing to explain
    before = [b for b, _ in changed.values()]
    after = [a for _, a in changed.values()]
    text = f"compute partition {_modes(b.compute for b in before)} -> {_modes(a.compute for a in after)}"
    if _modes(b.memory for b in before) != _modes(a.memory for a in after):
        text += f", memory {_modes(b.memory for b in before)} -> {_modes(a.memory for a in after)}"
    counts = f"{sum(b.count for b in before)} -> {sum(a.count for a in after)} logical GPUs"
    headline = f"{text} on {plural(len(changed), 'GPU')} ({counts})"
    declare = (
        f"if intended, declare it in the change plan: change: partition: {{from: "
        f"{_plan_side(before)}, to: {_plan_side(after)}}}; if not, set the partition mode back on {pool.node}"
    )
    pool.add(
        "partition:change",
        taken,
        headline,
        category=CauseCategory.CONFIGURATION,
        next_step=declare,
        details=(f"explains {plural(len(taken), 'finding')}: partitions appearing or vanishing, their links, order",)
        if taken
        else (),
    )


def _plan_side(layouts_: list[Layout]) -> str:
    compute, memory = _modes(x.compute for x in layouts_), _modes(x.memory for x in layouts_)
    return f"{{compute: {compute}, memory: {memory}}}"


def _ranks_only(expected: object, actual: object) -> bool:
    if not isinstance(expected, dict) or not isinstance(actual, dict):
        return False
    differ = {k for k in expected.keys() | actual.keys() if expected.get(k) != actual.get(k)}
    return differ == {"ranks"}


def _mode(layout: Layout) -> tuple[frozenset[str], frozenset[str]]:
    """The compute and memory modes a device's logical GPUs report, whatever their number."""
    return frozenset(layout.compute), frozenset(layout.memory)
