"""Firmware and VBIOS rules: every change must be one the plan names, and land where it says.

Design decisions:
- Per GPU (matched by immutable id) and per firmware block, as amd-smi names them (`PLDM_BUNDLE`,
  `CP_MEC1`, `PSP_SOSDRV`...). A block the plan lists (`change.firmware[].block`, a glob) must be at
  the plan's `to` on every GPU that reports it; a block the plan does not list must not move. A block
  that appears or disappears counts as a change (a probe that stopped reporting it is also evidence
  lost). Blocks matching the rule's `ignore_blocks` globs are not judged.
- Without a baseline only the plan targets are checked here; the class reference covers the rest
  (fleet.odd_one_out).
- A planned block that no GPU reports cannot be verified: that blocks too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from upgrade_gate.judge.identity import GpuKey, candidate_labels
from upgrade_gate.judge.plan import FirmwareChange, glob_match, version_matches
from upgrade_gate.judge.rules.base import NodeContext, ParamSpec, finding, show, spec
from upgrade_gate.judge.rules.facts import starts_off_plan
from upgrade_gate.model import Finding, Gpu

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry


def _planned(ctx: NodeContext, block: str) -> FirmwareChange | None:
    if ctx.plan is None:
        return None
    return next((fw for fw in ctx.plan.change.firmware if glob_match(fw.block, block)), None)


def _label(labels: dict[int, str], gpu: Gpu) -> str:
    found = labels.get(id(gpu))
    if found is not None:
        return found
    return str(GpuKey.of_slot(gpu))


def check_firmware(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """GPU firmware blocks vs the baseline and the plan."""
    ignore = entry.strings("ignore_blocks")
    before_of: dict[int, Gpu] = {}
    for pair in ctx.pairs:
        if pair.candidate is not None and pair.baseline is not None:
            before_of[id(pair.candidate)] = pair.baseline
    seen_blocks: set[str] = set()
    labels = candidate_labels(ctx.pairs)
    plans: dict[str, FirmwareChange | None] = {}  # block -> the plan's entry (blocks repeat on every GPU)
    ignored: dict[str, bool] = {}
    planning = ctx.plan is not None and bool(ctx.plan.change.firmware)
    for gpu in sorted(ctx.candidate.gpus, key=lambda g: g.index):
        was = before_of.get(id(gpu))
        if not planning and was is not None and was.firmware == gpu.firmware:
            continue  # the usual GPU: no block moved and none is planned, so no block has anything to say
        label = _label(labels, gpu)
        blocks = set(gpu.firmware) | (set(was.firmware) if was is not None else set())
        seen_blocks |= set(gpu.firmware)
        for block in sorted(blocks):
            skip = ignored.get(block)
            if skip is None:
                skip = ignored[block] = any(glob_match(g, block) for g in ignore)
            if skip:
                continue
            before = was.firmware.get(block) if was is not None else None
            after = gpu.firmware.get(block)
            if block in plans:
                planned = plans[block]
            else:
                planned = plans[block] = _planned(ctx, block)
            if planned is None and (was is None or before == after):
                continue  # the usual block: unchanged, not in the plan
            path = f"gpus[{label}].firmware.{block}"
            if planned is not None:
                if planned.to_version is not None and not version_matches(after, planned.to_version):
                    yield finding(
                        ctx,
                        entry,
                        f"GPU {label}: firmware {block} is {show(after)}, the plan moves it to {planned.to_version}",
                        device=label,
                        path=path,
                        expected=planned.to_version,
                        actual=after,
                        evidence="amdsmi_firmware",
                    )
                elif starts_off_plan(before, planned.from_version):
                    yield finding(
                        ctx,
                        entry,
                        f"GPU {label}: firmware {block} baseline is {before}, the plan expects to start from "
                        f"{planned.from_version}",
                        device=label,
                        path=path,
                        expected=planned.from_version,
                        actual=before,
                        evidence="amdsmi_firmware",
                    )
                continue
            if was is not None and before != after:
                yield finding(
                    ctx,
                    entry,
                    f"GPU {label}: firmware {block} changed outside the plan: {show(before)} -> {show(after)}",
                    device=label,
                    path=path,
                    expected=before,
                    actual=after,
                    evidence="amdsmi_firmware",
                )
    if ctx.plan is not None and ctx.candidate.gpus:
        for fw in ctx.plan.change.firmware:
            if not any(glob_match(fw.block, b) for b in seen_blocks):
                yield finding(
                    ctx,
                    entry,
                    f"the plan changes firmware {fw.block} but no GPU reports that block: the change cannot be "
                    "verified",
                    path=f"gpus[*].firmware.{fw.block}",
                    expected=fw.to_version,
                    actual=None,
                    evidence="amdsmi_firmware",
                )


def check_vbios(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """GPU VBIOS vs the baseline and the plan."""
    planned = ctx.plan.change.vbios if ctx.plan is not None else None
    before_of = {id(p.candidate): p.baseline for p in ctx.pairs if p.candidate is not None}
    labels = candidate_labels(ctx.pairs)
    for gpu in sorted(ctx.candidate.gpus, key=lambda g: g.index):
        label = _label(labels, gpu)
        was = before_of.get(id(gpu))
        before = was.vbios if was is not None else None
        path = f"gpus[{label}].vbios"
        if planned is not None:
            if not version_matches(gpu.vbios, planned.to_version):
                yield finding(
                    ctx,
                    entry,
                    f"GPU {label}: VBIOS is {show(gpu.vbios)}, the plan moves it to {planned.to_version}",
                    device=label,
                    path=path,
                    expected=planned.to_version,
                    actual=gpu.vbios,
                    evidence="amdsmi_static",
                )
        elif was is not None and before != gpu.vbios:
            yield finding(
                ctx,
                entry,
                f"GPU {label}: VBIOS changed outside the plan: {show(before)} -> {show(gpu.vbios)}",
                device=label,
                path=path,
                expected=before,
                actual=gpu.vbios,
                evidence="amdsmi_static",
            )


SPECS = (
    spec(
        "firmware.unplanned",
        "a GPU firmware block moved outside the plan, or missed the plan's target",
        check_firmware,
        params={
            "ignore_blocks": ParamSpec(kind="strings", default=(), doc="firmware block globs not judged"),
        },
    ),
    spec("vbios.unplanned", "a GPU VBIOS moved outside the plan, or missed the plan's target", check_vbios),
)
