"""`gpu.health`: a GPU whose memory repair is pending or failed, that needs a reset, or whose uncorrectable
error counts grew since the baseline (issue 30; the snapshot's `Gpu.health`, docs/vendors.md).

What blocks (at the rule's severity, default block), on the candidate's own values:
- `remap_pending`: a row remap waits for a GPU reset. Until then the bad row is still in use, and NVIDIA
  says to reset the GPU (or reboot) before running work on it.
- `remap_failure`: a remap failed: the bank is out of spare rows and the GPU needs service.
- `retirement_pending`: pages wait for a reset to be retired (the pre-Ampere form of the same repair).
- `reset_required`: the tool says the GPU needs a reset.
- `ecc_mode` other than the baseline GPU's (ECC switched off by the change, or on: either changes the memory
  the workload gets and the errors it is protected from).
- An uncorrectable count (an ECC counter, volatile or aggregate, by the tool's name; uncorrectable remapped
  rows; double-bit retired pages) higher than the same GPU's in the baseline: new uncorrectable errors
  since the baseline was taken. The baseline's value is the reference.

What warns (`nonzero_unchanged`, default warn): an uncorrectable count that is non-zero but not higher than
the baseline's, or with no baseline value to compare with. An aggregate count is the GPU's lifetime total:
an old error that the GPU already repaired (the row remapped, the page retired: judged above) is history,
not something the change did, and blocking on it would block that GPU forever. Silence would hide it, so it
warns, naming the count and the reference. (A volatile count restarts with the driver: after the change's
reboot it can only be lower, so a lower value is no evidence either way.)

Fail closed: a GPU without the block, on a node that ran a probe which fills it (`reported_by`, default
`nvidia_smi`), or whose baseline GPU had one, is missing evidence at `missing_evidence` (default block), with
the snapshot's reason. A node whose vendor's probes do not report the block (AMD today: the reason says
"not captured") gets no finding; docs/vendors.md says why. A value the tool printed N/A (a mechanism the GPU
does not have: Turing has no row remapping, Ampere no page retirement) is not judged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from upgrade_gate.judge.identity import GpuKey, candidate_labels
from upgrade_gate.judge.rules.base import NodeContext, ParamSpec, finding, spec
from upgrade_gate.model import Finding, Gpu, GpuHealth

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry

_STATES = (
    ("remap_pending", "a row remap is pending: reset the GPU (or reboot) before it runs work"),
    ("remap_failure", "a row remap failed: the GPU is out of spare rows and needs service"),
    ("retirement_pending", "page retirement is pending: reset the GPU (or reboot) before it runs work"),
    ("reset_required", "the GPU requires a reset"),
)


def _counts(health: GpuHealth) -> dict[str, int]:
    """Every uncorrectable count of the block, by its path under `health`."""
    out = {f"ecc_volatile_uncorrectable.{k}": v for k, v in health.ecc_volatile_uncorrectable.items()}
    out.update({f"ecc_aggregate_uncorrectable.{k}": v for k, v in health.ecc_aggregate_uncorrectable.items()})
    for name in ("remapped_rows_uncorrectable", "retired_pages_double_bit"):
        value = getattr(health, name)
        if value is not None:
            out[name] = value
    return out


def check_gpu_health(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Pending or failed memory repair, reset required, grown uncorrectable counts; missing evidence."""
    before = {id(p.candidate): p.baseline for p in ctx.pairs if p.candidate is not None}
    labels = candidate_labels(ctx.pairs)
    reporters = set(entry.strings("reported_by"))
    reported = sorted(reporters & {p.name for p in ctx.candidate.probes})
    for gpu in ctx.candidate.gpus:
        label = labels.get(id(gpu)) or str(GpuKey.of_slot(gpu))
        base = before.get(id(gpu))
        yield from _one(ctx, entry, gpu, base, label, reported)


def _one(
    ctx: NodeContext, entry: RuleEntry, gpu: Gpu, base: Gpu | None, label: str, reported: list[str]
) -> Iterator[Finding]:
    path = f"gpus[{label}].health"
    health = gpu.health
    if health is None:
        had = base is not None and base.health is not None
        if reported or had:
            why = gpu.na_reasons.get("health", "no reason recorded")
            where = "the baseline's GPU had them" if had else f"probe {', '.join(reported)} reports it"
            yield finding(
                ctx,
                entry,
                f"GPU {label}: no health counters ({why}; {where}): missing evidence",
                device=label,
                path=path,
                expected="health counters",
                actual=None,
                evidence=", ".join(reported) or None,
                severity=entry.severity_param("missing_evidence"),
            )
        return
    was_mode = base.health.ecc_mode if base is not None and base.health is not None else None
    if was_mode is not None and health.ecc_mode is not None and was_mode != health.ecc_mode:
        yield finding(
            ctx,
            entry,
            f"GPU {label}: ECC {was_mode} in the baseline, {health.ecc_mode} now",
            device=label,
            path=f"{path}.ecc_mode",
            expected=was_mode,
            actual=health.ecc_mode,
            evidence=health.source,
        )
    for name, what in _STATES:
        if getattr(health, name) is True:
            yield finding(
                ctx,
                entry,
                f"GPU {label}: {what} ({health.source}: {name})",
                device=label,
                path=f"{path}.{name}",
                expected=False,
                actual=True,
                evidence=health.source,
            )
    reference = _counts(base.health) if base is not None and base.health is not None else {}
    for key, count in sorted(_counts(health).items()):
        was = reference.get(key)
        if was is not None and count > was:
            yield finding(
                ctx,
                entry,
                f"GPU {label}: {key} grew from {was} (baseline) to {count}: new uncorrectable errors",
                device=label,
                path=f"{path}.{key}",
                expected=was,
                actual=count,
                evidence=health.source,
            )
        elif count > 0:
            if was is None:
                ref = "no baseline value to compare with"
            elif was == count:
                ref = "unchanged since the baseline: errors counted before"
            else:
                ref = f"below the baseline's {was}: the counter restarted"
            yield finding(
                ctx,
                entry,
                f"GPU {label}: {key} is {count} ({ref})",
                device=label,
                path=f"{path}.{key}",
                expected=was,
                actual=count,
                evidence=health.source,
                severity=entry.severity_param("nonzero_unchanged"),
            )


SPECS = (
    spec(
        "gpu.health",
        "a GPU with a pending or failed row remap or page retirement, that requires a reset, or whose ECC mode "
        "changed or uncorrectable error counts grew since the baseline",
        check_gpu_health,
        plan_can_accept=False,
        params={
            "missing_evidence": ParamSpec(
                kind="string",
                default="block",
                doc="severity when a GPU lacks the health counters its node's probe reports: block, warn or info "
                "(anything else blocks)",
            ),
            "nonzero_unchanged": ParamSpec(
                kind="string",
                default="warn",
                doc="severity of a non-zero uncorrectable count not above the baseline's (or with no baseline): "
                "block, warn or info (anything else blocks)",
            ),
            "reported_by": ParamSpec(
                kind="strings",
                default=("nvidia_smi",),
                doc="probes whose output fills a GPU's health counters: on a node that ran one, a GPU without "
                "them is missing evidence",
            ),
        },
    ),
)
"""Registered in `rules.__init__`; defaults in the shipped policy."""
