"""`workload.utilisation_spread`: the GPU utilisation jitter of phase 6's reference run against the node's
baseline (issue 25 item 1; the incident: 4% -> 12% after the bad upgrade). Part of the workload family
(`rules.workload`), split off for size.

The spread is `workload/gfx_util_spread_pct` (`validate.phases.workload_util`): the largest, over the
node's GPUs, standard deviation over time of a GPU's GFX% while the job trains, in percentage points.
- It blocks (by default) when the candidate's is above `max_ratio` (2) times the baseline's AND at least
  `min_increase_pct` (5) points more: both, because a healthy node's spread is a few points and moves by
  a point or two between runs (a ratio alone would block 1 -> 2.5), while the incident's 4 -> 12 is x3
  and +8. Block, not warn: jitter that triples is a node that trains in fits, which the throughput of a
  short reference run can miss (its mean hides the stalls) and a long job pays for.
- Missing evidence (phase 6 ran, but no spread: amd-smi missing or failing, too few samples while
  training) is a finding at `missing_evidence` (default block), with the phase's `utilisation: ...`
  reason; never a pass. A phase 6 that errored, was skipped or not run is `workload.evidence`'s.
- A baseline without a spread (taken before the sampling existed, or without amd-smi) cannot be
  compared: a finding one step softer than the rule's severity names the candidate's value, so the
  site re-baselines rather than reading silence as a pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from upgrade_gate.judge.rules.base import NodeContext, ParamSpec, finding, softer, spec
from upgrade_gate.judge.rules.workload import _measures, _median, _path, _phase
from upgrade_gate.model import Finding, Measurement, PhaseStatus

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry

SPREAD = "workload/gfx_util_spread_pct"
NOTE = "utilisation: "


def check_utilisation_spread(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Phase 6's utilisation spread against the baseline's; missing evidence says why."""
    six = _phase(ctx.candidate, 6)
    if six is None or six.status in (PhaseStatus.ERROR, PhaseStatus.SKIPPED, PhaseStatus.NOT_RUN):
        return  # workload.evidence names it
    cand = _measures(ctx.candidate).get(SPREAD)
    if cand is None or not cand.samples:
        why = next((r[len(NOTE) :] for r in six.reasons if r.startswith(NOTE)), "no samples recorded")
        yield finding(
            ctx,
            entry,
            f"{SPREAD}: phase 6 sampled no GPU utilisation spread ({why}): missing evidence",
            device=SPREAD,
            path=_path(SPREAD),
            expected="a spread",
            actual=None,
            evidence="phase 6",
            severity=entry.severity_param("missing_evidence"),
        )
        return
    for side, m in (("candidate", cand), ("baseline", _measures(ctx.baseline).get(SPREAD) if ctx.baseline else None)):
        odd = _impossible(m)
        if odd is not None:  # break test 2026-12-07: a spread of -50, or three values whose median hid a 40
            yield finding(
                ctx,
                entry,
                f"{SPREAD} in the {side}: {odd}: no run records that; missing evidence",
                device=SPREAD,
                path=_path(SPREAD),
                expected="one standard deviation of GPU%, 0 to 100 points",
                actual=list(m.samples[:8]) if m is not None else None,
                evidence="phase 6" if side == "candidate" else "baseline store",
            )
            return
    now = _median(cand)
    worst = cand.settings.get("worst", "?")
    base = _measures(ctx.baseline).get(SPREAD) if ctx.baseline is not None else None
    if base is None or not base.samples:
        yield finding(
            ctx,
            entry,
            f"{SPREAD}: baseline not measured, candidate {now:.1f} points (worst {worst}): nothing to compare with",
            device=SPREAD,
            path=_path(SPREAD),
            expected=None,
            actual=now,
            evidence="phase 6",
            severity=softer(entry.severity),
        )
        return
    before = _median(base)
    ratio, more = entry.number("max_ratio"), entry.number("min_increase_pct")
    if now > before * ratio and now - before >= more:
        times = f"x{now / before:.1f}" if before > 0 else "from 0"
        yield finding(
            ctx,
            entry,
            f"{SPREAD}: baseline {before:.1f} points, candidate {now:.1f} points ({times}; allowed x{ratio:g} "
            f"or +{more:g} points; worst {worst})",
            device=SPREAD,
            path=_path(SPREAD),
            expected=round(before, 3),
            actual=round(now, 3),
            evidence="phase 6",
        )


def _impossible(m: Measurement | None) -> str | None:
    """Why a recorded spread is one no run gives (phase 6 records one value: the largest per-GPU standard
    deviation of GFX%, 0 to 100 points), or None."""
    if m is None or not m.samples:
        return None
    if len(m.samples) != 1:
        return f"{len(m.samples)} values, where a run records one"
    value = m.samples[0]
    if not 0.0 <= value <= 100.0:
        return f"{value!r} points, outside 0-100"
    return None


SPECS = (
    spec(
        "workload.utilisation_spread",
        "the GPU utilisation jitter of the reference run well above its baseline's, or not sampled",
        check_utilisation_spread,
        params={
            "max_ratio": ParamSpec(kind="number", default=2.0, doc="candidate / baseline spread allowed", minimum=1),
            "min_increase_pct": ParamSpec(
                kind="number", default=5.0, doc="percentage points more that always pass", minimum=0
            ),
            "missing_evidence": ParamSpec(
                kind="string",
                default="block",
                doc="severity when phase 6 ran without a spread: block, warn or info (anything else blocks)",
            ),
        },
    ),
)
"""Registered in `rules.__init__`; defaults in the shipped policy."""
