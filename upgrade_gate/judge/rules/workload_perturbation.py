"""`workload.index_dependent`: the perturbation run (phase 7) against the reference run (phase 6) of the
same candidate. Part of the workload family (`rules.workload`), split off for size; the docstring there
says what it judges and why its throughput check has its own tolerance.
"""

from __future__ import annotations

from collections.abc import Iterable
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
from upgrade_gate.model import Finding, PhaseStatus

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry

UUID_PIN = (
    "pin ranks to GPUs by UUID or PCIe bus id, not by index: pick the device whose "
    "torch.cuda.get_device_properties(i).uuid / pci_bus_id is the rank's (`upgrade-gate` prints the "
    "index -> BDF -> UUID table of the node), or set HIP_VISIBLE_DEVICES/ROCR_VISIBLE_DEVICES to UUIDs"
)


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
    reference = {d.rank: d.uuid for d in first.device_map}
    runs: dict[str, dict[int, str | None]] = {}
    for d in perturbed.device_map:
        runs.setdefault(d.visible or "?", {})[d.rank] = d.uuid
    for visible, mapping in runs.items():
        moved = sorted(r for r, u in mapping.items() if reference.get(r) != u)
        if moved:
            r = moved[0]
            yield finding(
                ctx,
                entry,
                f"rank -> GPU map under {visible}: rank {r} baseline-order GPU {reference.get(r)}, now {mapping[r]} "
                f"({len(moved)} of {len(mapping)} ranks moved): the workload binds GPUs by index",
                device=f"rank {r}",
                path=f"phases[phase=7].device_map[rank={r}]",
                expected={k: reference.get(k) for k in sorted(mapping)},
                actual=dict(sorted(mapping.items())),
                evidence="phase 7",
                hint=UUID_PIN,
            )
    yield from _perturbed_numbers(ctx, entry)


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
                    hint=UUID_PIN,
                )
        if base_loss is not None and loss is not None:
            worst = _loss_departure(base_loss.samples, loss.samples, floor)
            if worst is not None and worst[1] > _loss_tolerance(ctx):
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
                    hint=UUID_PIN,
                )


def _loss_tolerance(ctx: NodeContext) -> float:
    entry = ctx.policy.rule_for("workload.loss_curve", ctx.node_class)
    return entry.number("tolerance") if entry is not None else 0.05


SPECS = (
    spec(
        "workload.index_dependent",
        "the perturbation run moved ranks to other GPUs or changed the numbers: the workload binds by index",
        check_index_dependent,
        params={
            "throughput_tolerance": ParamSpec(
                kind="number", default=0.15, doc="a permuted run slower than phase 6's by more blocks", minimum=0
            ),
        },
    ),
)
