"""A stand-alone node: validated without a peer before and after the change (README workflow 1).

CVF phases 4 (rail bandwidth) and 5 (multi-node RCCL) need a partner node; `validate` on one node runs
phases 0-3. A node whose *validated* baseline (it holds phase results) has no result of phase 4 or 5,
and whose candidate has none either, was judged stand-alone on both sides: requiring those phases would
block every unchanged healthy node that followed workflow 1, and no comparison of them is possible.

Fail closed where it matters:
- a baseline without any phase result (a configuration snapshot: `snapshot`, `fleet snapshot`, the
  change window's baseline) does not make a node stand-alone: the window runs phases 4-5 and requires them;
- one side with a phase 4 or 5 result (any status) is not stand-alone: the phases were run once, so
  the other side lacking them is missing evidence, as before;
- the evidence rule says it, as info, so the report shows that phases 4-5 were not required and why.
"""

from __future__ import annotations

from upgrade_gate.judge.rules.base import NodeContext

PEER_PHASES = frozenset({4, 5})


def stand_alone(ctx: NodeContext) -> bool:
    """True when a validated baseline and the candidate both lack every phase that needs a peer."""
    if ctx.baseline is None or not ctx.baseline.phases:
        return False
    ran = {r.phase for r in ctx.baseline.phases} | {r.phase for r in ctx.candidate.phases}
    return not (ran & PEER_PHASES)


def peer_phase_waived(ctx: NodeContext, number: int) -> bool:
    """Phase `number` needs a peer and the node is stand-alone on both sides (see the module docstring)."""
    return number in PEER_PHASES and stand_alone(ctx)
