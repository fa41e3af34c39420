"""`workload.index_dependent`: the perturbation run (phase 7) against the reference run (phase 6) of the
same candidate. Part of the workload family (`rules.workload`), split off for size; the docstring there
says what it judges and why its throughput check has its own tolerance.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from upgrade_gate.judge.rules.base import NodeContext, ParamSpec, finding, spec
from upgrade_gate.judge.rules.workload import (
    LOSS,
    PERTURBATIONS,
    THROUGHPUT,
    _loss_departure,
    _measures,
    _median,
    _path,
    _phase,
    throughput_decision,
)
from upgrade_gate.model import Finding, PhaseStatus, RankDevice, Snapshot
from upgrade_gate.vendors import vendor_of

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry

UUID_PIN = (
    "pin ranks to GPUs by UUID or PCIe bus id, not by index: pick the device whose "
    "torch.cuda.get_device_properties(i).uuid / pci_bus_id is the rank's (`upgrade-gate` prints the "
    "index -> BDF -> UUID table of the node), or set HIP_VISIBLE_DEVICES/ROCR_VISIBLE_DEVICES to UUIDs"
)
"""The next step on an AMD node; `uuid_pin` words it for the candidate's vendor."""


def uuid_pin(snapshot: Snapshot) -> str:
    """UUID_PIN in the words of the snapshot's vendor: CUDA reads CUDA_VISIBLE_DEVICES only (break test
    2026-12-07: an NVIDIA node was told to set HIP_/ROCR_VISIBLE_DEVICES)."""
    vendor = vendor_of(p.name for p in snapshot.probes)
    if vendor.pin.uuid_var == "ROCR_VISIBLE_DEVICES":
        return UUID_PIN
    return UUID_PIN.replace("HIP_VISIBLE_DEVICES/ROCR_VISIBLE_DEVICES", vendor.pin.uuid_var)


def check_index_dependent(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Phase 7's runs against phase 6's: the same rank -> UUID map, throughput and loss curve."""
    first, perturbed = _phase(ctx.candidate, 6), _phase(ctx.candidate, 7)
    if perturbed is None or perturbed.status is not PhaseStatus.PASSED:
        return  # workload.evidence (errors) or phase.failed (failures) speak for it
    if first is None or first.status is not PhaseStatus.PASSED:
        yield finding(
            ctx,
            entry,
            "phase 7 (perturbation) ran without a passed phase 6 (workload) to compare its runs with",
            device="perturbation",
            path="phases[phase=6]",
            expected="phase 6 passed",
            actual=first.status.value if first is not None else None,
            evidence="phase 7",
        )
        return
    broken = _map_broken("phase 6", None, first.device_map, None)
    if broken is not None:
        yield _broken_map(ctx, entry, broken, 6)
        return
    reference = {d.rank: _identity(d) for d in first.device_map}
    runs: dict[str, list[RankDevice]] = {}
    for d in perturbed.device_map:
        runs.setdefault(d.visible or "?", []).append(d)
    for visible, devices in runs.items():
        broken = _map_broken("phase 7", visible, devices, set(reference))
        if broken is not None:
            yield _broken_map(ctx, entry, broken, 7)
            continue
        mapping = {d.rank: _identity(d) for d in devices}
        moved = sorted(r for r, ident in mapping.items() if not _same(reference[r], ident))
        if moved:
            r = moved[0]
            yield finding(
                ctx,
                entry,
                f"rank -> GPU map under {visible}: rank {r} baseline-order GPU {_show(reference[r])}, now "
                f"{_show(mapping[r])} ({len(moved)} of {len(mapping)} ranks moved): the workload binds GPUs by index",
                device=f"rank {r}",
                path=f"phases[phase=7].device_map[rank={r}]",
                expected={k: _show(reference[k]) for k in sorted(mapping)},
                actual={k: _show(v) for k, v in sorted(mapping.items())},
                evidence="phase 7",
                hint=uuid_pin(ctx.candidate),
            )
    yield from _perturbed_numbers(ctx, entry)


Identity = tuple[str | None, str | None]
"""A rank's GPU as the workload saw it: (PCIe bus id, lower case; UUID as printed)."""


def _identity(d: RankDevice) -> Identity:
    return (str(d.bdf).lower() if d.bdf else None, d.uuid or None)


def _same(a: Identity, b: Identity) -> bool:
    """The same GPU: every part both sides name agrees (a runtime that names no UUID is judged by bus id:
    comparing UUIDs alone passed a run bound by index whose UUIDs were null, break test 2026-12-07)."""
    named = [(x, y) for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    return bool(named) and all(x == y for x, y in named)


def _show(ident: Identity) -> str:
    return " / ".join(part for part in ident if part) or "unnamed"


def _map_broken(what: str, visible: str | None, devices: Sequence[RankDevice], ranks: set[int] | None) -> str | None:
    """Why a run's rank -> GPU map cannot be judged, or None: a rank listed twice, a rank that names no GPU,
    two ranks on one GPU (one bus id, or one UUID: a runtime that prints one UUID for all), or (phase 7)
    other ranks than phase 6's."""
    run = f"{what}{f' under {visible}' if visible else ''}"
    seen = Counter(d.rank for d in devices)  # Counters, not list.count: a map holds up to 4,096 ranks
    twice = sorted(r for r, n in seen.items() if n > 1)
    if twice:
        return f"{run}: rank {twice[0]} listed {seen[twice[0]]} times"
    identities = [_identity(d) for d in devices]
    unnamed = sorted(d.rank for d, ident in zip(devices, identities, strict=True) if ident == (None, None))
    if unnamed:
        return f"{run}: rank {unnamed[0]} names no GPU (no bus id, no UUID)"
    for part, label in ((0, "bus id"), (1, "UUID")):
        on = Counter(ident[part] for ident in identities if ident[part] is not None)
        shared = sorted(v for v, n in on.items() if n > 1 and v is not None)
        if shared:
            return f"{run}: {on[shared[0]]} ranks on one GPU ({label} {shared[0]})"
    if ranks is not None and set(seen) != ranks:
        ran, first = sorted(seen)[:8], sorted(ranks)[:8]
        return f"{run}: ranks {ran}, phase 6 ran ranks {first} (not a permutation of its GPUs)"
    return None


def _broken_map(ctx: NodeContext, entry: RuleEntry, why: str, phase: int) -> Finding:
    return finding(
        ctx,
        entry,
        f"{why}: the device order's effect cannot be judged",
        device="perturbation",
        path=f"phases[phase={phase}].device_map",
        evidence=f"phase {phase}",
    )


def _perturbed_numbers(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    measures = _measures(ctx.candidate)
    base_rate, base_loss = measures.get(THROUGHPUT), measures.get(LOSS)
    floor = 0.1
    for how in PERTURBATIONS:
        rate, loss = measures.get(f"perturbation/{how}/samples_per_s"), measures.get(f"perturbation/{how}/loss")
        if base_rate is not None and rate is not None and base_rate.samples and rate.samples:
            decision = throughput_decision(ctx, base_rate, rate, rate.key)
            bm, cm = _median(base_rate), _median(rate)
            slower = (bm - cm) / bm > entry.number("throughput_tolerance")
            if decision is not None and decision.outcome == "block" and slower:
                yield finding(
                    ctx,
                    entry,
                    f"{rate.key}: unpermuted {bm:.1f} samples/s, {how} {cm:.1f} samples/s ({(cm - bm) / bm:+.1%}): "
                    "the workload's speed depends on the device order",
                    device=rate.key,
                    path=_path(rate.key),
                    expected=round(bm, 3),
                    actual=round(cm, 3),
                    evidence="phase 7",
                    hint=uuid_pin(ctx.candidate),
                )
        if base_loss is not None and loss is not None:
            worst = _loss_departure(base_loss.samples, loss.samples, floor)
            if worst is None:  # break test 2026-12-07: a curve one step short was never compared
                yield finding(
                    ctx,
                    entry,
                    f"{loss.key}: unpermuted {len(base_loss.samples)} steps, {how} {len(loss.samples)}: "
                    "the curves do not compare",
                    device=loss.key,
                    path=_path(loss.key),
                    expected=len(base_loss.samples),
                    actual=len(loss.samples),
                    evidence="phase 7",
                )
            elif worst[1] > _loss_tolerance(ctx):
                step = worst[0]
                yield finding(
                    ctx,
                    entry,
                    f"{loss.key}: step {step}: unpermuted {base_loss.samples[step]:.4f}, {how} "
                    f"{loss.samples[step]:.4f} ({worst[1]:.1%} apart): the result depends on the device order",
                    device=loss.key,
                    path=_path(loss.key),
                    expected=round(base_loss.samples[step], 6),
                    actual=round(loss.samples[step], 6),
                    evidence="phase 7",
                    hint=uuid_pin(ctx.candidate),
                )


def _loss_tolerance(ctx: NodeContext) -> float:
    entry = ctx.policy.rule_for("workload.loss_curve", ctx.node_class)
    return entry.number("tolerance") if entry is not None else 0.05


SPECS = (
    spec(
        "workload.index_dependent",
        "the perturbation run moved ranks to other GPUs or changed the numbers: the workload binds by index",
        check_index_dependent,
        plan_can_accept=False,  # accepting "ranks moved" accepts the incident (break test 2026-12-07)
        params={
            "throughput_tolerance": ParamSpec(
                kind="number",
                default=0.15,
                doc="a permuted run slower than phase 6's by more blocks",
                minimum=0,
                maximum=1,
            ),
        },
    ),
)
