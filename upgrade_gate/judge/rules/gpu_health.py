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
- `compute_mode` Prohibited (no process can create a context), or another mode than the baseline GPU's
  (Exclusive_Process admits one process a GPU): neither was recorded before (break test 2026-12-07).
- `ecc_mode_pending` (the mode the next GPU reset brings) other than the current mode and the baseline's: ECC
  switched off for the next reset passed before (break test 2026-12-07).
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
"not captured") gets no finding; docs/vendors.md says why. Within the block, also missing evidence:
- an uncorrectable ECC counter printed N/A (or no counter at all under `<volatile>` / `<aggregate>`) while
  ECC is Enabled: with ECC on, every generation prints its counters (the A100 and T4 captures do), so N/A
  there is a counter the tool could not read, not "no errors" (the snapshot names each N/A counter in
  `health.na_reasons` as `ecc_<scope>_uncorrectable.<counter>`);
- any judged value (ECC mode, a repair or reset state, an uncorrectable count) the baseline's GPU had and the
  candidate's lacks, N/A or absent: a counter the candidate cannot give is no evidence of no errors. ECC
  counters the candidate lacks because ECC is now Disabled are left to the ECC mode change, which blocks.
A value N/A on both sides (a mechanism the GPU does not have: Turing prints remapped rows N/A, Ampere and later
retired pages; counters with ECC Disabled) is not judged, on purpose. Without a baseline value, a repair
mechanism printed N/A is not judged either: the real A100 capture (MIG Enabled, ECC Enabled) prints
`<remapped_rows>N/A` although Ampere remaps rows, so the generation alone does not say the GPU must print it.
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
_ECC_SCOPES = frozenset({"ecc_volatile_uncorrectable", "ecc_aggregate_uncorrectable"})
_COUNTED = frozenset({"remapped_rows_uncorrectable", "retired_pages_double_bit"})
# Every value of the block `gpu.health` judges (the rest, correctable counts, is informational: judge/coverage).
_JUDGED = ("ecc_mode", "ecc_mode_pending", "compute_mode", *(name for name, _ in _STATES))


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
    yield from _unreadable(ctx, entry, health, base.health if base is not None else None, label, path)
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
    pending = health.ecc_mode_pending
    if pending is not None and pending != health.ecc_mode and pending != (was_mode or health.ecc_mode):
        yield finding(
            ctx,
            entry,
            f"GPU {label}: ECC {health.ecc_mode} now, {pending} after the next GPU reset (pending)"
            + (f"; {was_mode} in the baseline" if was_mode is not None else ""),
            device=label,
            path=f"{path}.ecc_mode_pending",
            expected=was_mode or health.ecc_mode,
            actual=pending,
            evidence=health.source,
        )
    yield from _compute_mode(ctx, entry, health, base.health if base is not None else None, label, path)
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


def _ecc_scope(key: str) -> str | None:
    """'ecc_volatile_uncorrectable.dram_uncorrectable' -> 'ecc_volatile_uncorrectable'; None for other keys."""
    scope = key.split(".", 1)[0]
    return scope if scope in _ECC_SCOPES else None


def _compute_mode(
    ctx: NodeContext, entry: RuleEntry, health: GpuHealth, was: GpuHealth | None, label: str, path: str
) -> Iterator[Finding]:
    """Prohibited: no process can create a context on the GPU, whatever the baseline says. Another mode than the
    baseline GPU's: Exclusive_Process admits one process a GPU, so a job of several (a data loader's, a second
    rank's) fails where it ran. A baseline without the field (taken before it was recorded) compares as nothing."""
    now = health.compute_mode
    before = was.compute_mode if was is not None else None
    if now == "Prohibited" and before != "Prohibited":
        why = "no process can create a context on it"
    elif now is not None and before is not None and now != before:
        why = f"{before} in the baseline"
    else:
        return
    yield finding(
        ctx,
        entry,
        f"GPU {label}: compute mode {now}: {why}",
        device=label,
        path=f"{path}.compute_mode",
        expected=before or "Default",
        actual=now,
        evidence=health.source,
    )


def _unreadable(
    ctx: NodeContext, entry: RuleEntry, health: GpuHealth, was: GpuHealth | None, label: str, path: str
) -> Iterator[Finding]:
    """Counters the candidate cannot give: ECC counters N/A or absent with ECC Enabled, and any judged value
    the baseline GPU had (an N/A or absent element where the baseline printed a value): missing evidence."""
    missing: dict[str, str] = {}
    if health.ecc_mode == "Enabled":
        for key in sorted(health.na_reasons):
            scope = _ecc_scope(key)
            if scope is not None and (key == scope or scope not in health.na_reasons):  # a scope's reason names all
                why = health.na_reasons[key]
                missing[key] = why if "ECC Enabled" in why else f"{why}, with ECC Enabled"
    if was is not None:
        had: dict[str, object] = {n: getattr(was, n) for n in _JUDGED if getattr(was, n) is not None}
        had.update(_counts(was))
        now = _counts(health)
        for key in sorted(had):
            scope = _ecc_scope(key)
            if scope is not None and health.ecc_mode == "Disabled":
                continue  # ECC off: the counters are N/A by design, and the mode change is judged below
            if key in now if "." in key or key in _COUNTED else getattr(health, key) is not None:
                continue
            if key in missing or (scope is not None and scope in missing):
                continue
            why = health.na_reasons.get(key) or health.na_reasons.get(scope or key) or "no reason recorded"
            missing[key] = f"the baseline's GPU had {had[key]}, now {why}"
    for key, why in missing.items():
        yield finding(
            ctx,
            entry,
            f"GPU {label}: {key} cannot be read ({why}): missing evidence",
            device=label,
            path=f"{path}.{key}",
            expected="a value",
            actual=None,
            evidence=health.source,
            severity=entry.severity_param("missing_evidence"),
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
