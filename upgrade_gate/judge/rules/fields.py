"""`field.unplanned`: any compared snapshot field that changed outside the plan blocks.

The generic "value changed outside the plan" judgement behind the coverage table (`judge.coverage`):
the judge runs it after every other rule, over the same plan-marked diff the `diff` command prints.
Each unexpected change at a field the table marks `compared` blocks, unless a finding already speaks
for it: one of the field's named rule at that path (any severity: a policy that softened the rule is
obeyed), or any blocking finding at that path. Changes at `checked` and `informational` fields are
left to their rules and reasons; a field the table does not know (a new one nobody decided on) is
treated as compared: fail closed.

A named rule switched off by the policy for the node's class is respected: its fields are then not
judged here either. A plan `accept` path (or a planned change) makes the change expected, so it never
reaches this rule; the policy's `ignore_paths` leave it out of the diff altogether.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from upgrade_gate.judge.coverage import UNPLANNED, CoverageKind, coverage_of
from upgrade_gate.judge.identity import canonical_uid
from upgrade_gate.judge.paths import item_names, path_item
from upgrade_gate.judge.plan_partition import planned_item, planned_slots
from upgrade_gate.judge.rules.base import NodeContext, finding, show, spec
from upgrade_gate.model import Change, ChangeOp, Finding, RuleId, Severity

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry


def _overlaps(a: str, b: str) -> bool:
    if a == b:
        return True
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return long.startswith(short) and long[len(short)] in ".["


def _covered(change: Change, rule: str, found: Sequence[Finding]) -> bool:
    # GPU findings name the pair label (`serial=X`), NIC/PCIe ones the bare name or BDF (`ionic_0`); a
    # whole GPU that appeared or vanished may be named by its slot (device.replaced).
    names = item_names(change.path)
    for side in (change.baseline, change.candidate):
        if isinstance(side, dict) and isinstance(side.get("bdf"), str):
            names.add(side["bdf"])
    for f in found:
        at_path = f.path is not None and _overlaps(f.path, change.path)
        same_device = f.device is not None and f.device in names
        if f.rule == rule and (at_path or f.device is None or same_device):
            return True
        if f.severity is Severity.BLOCK and (at_path or same_device):
            return True
    return False


CANONICAL: dict[str, Callable[[str | None], str | None]] = {"unique_id": canonical_uid}
"""Field name -> its canonical form: values equal there are one value printed by two tools."""


def same_value(change: Change) -> bool:
    """True when the baseline and candidate values of `change` are one value in two printed forms."""
    canonical = CANONICAL.get(change.path.rsplit(".", 1)[-1])
    if canonical is None or not isinstance(change.baseline, str) or not isinstance(change.candidate, str):
        return False
    before = canonical(change.baseline)
    return before is not None and before == canonical(change.candidate)


def _partition_only(ctx: NodeContext, change: Change, planned: frozenset[tuple[int, int, int]]) -> bool:
    """A whole-section change (`gpus`, `gpu_links`) whose every item is a planned partition change's."""
    if change.path not in ("gpus", "gpu_links"):
        return False
    bdf_of = {p.label: gpu.bdf for p in ctx.pairs if (gpu := p.candidate or p.baseline) is not None}
    items = [
        (key, value)
        for side in (change.baseline, change.candidate)
        if isinstance(side, dict)
        for key, value in side.items()
    ]
    return bool(items) and all(planned_item(change.path, str(k), v, planned, bdf_of) for k, v in items)


def _short(value: object) -> str:
    text = show(value)
    return text if len(text) <= 80 else text[:77] + "..."


def unplanned_findings(
    ctx: NodeContext, entry: RuleEntry, changes: Iterable[Change], found: Sequence[Finding]
) -> Iterable[Finding]:
    """Blocking findings for the unexpected changes at compared fields nothing else spoke for."""
    change_of = ctx.plan.change.partition if ctx.plan is not None else None
    planned = planned_slots(change_of, ctx.baseline, ctx.candidate) if change_of is not None else frozenset()
    for change in changes:
        if change.expected or same_value(change) or (planned and _partition_only(ctx, change, planned)):
            continue
        covered = coverage_of(change.path)
        rule = UNPLANNED
        field = change.path
        if covered is not None:
            field, cov = covered
            if cov.kind is not CoverageKind.COMPARED:
                continue
            rule = cov.rule or UNPLANNED
        if rule != UNPLANNED:
            named = ctx.policy.rule_for(RuleId(rule), ctx.node_class)
            if named is None or not named.enabled:
                continue  # the policy switched the field's own rule off for this class
            if _covered(change, rule, found):
                continue
        if change.op is ChangeOp.ADDED:
            what = f"appeared ({_short(change.candidate)})"
        elif change.op is ChangeOp.REMOVED:
            what = f"vanished (was {_short(change.baseline)})"
        else:
            what = f"changed: {_short(change.baseline)} -> {_short(change.candidate)}"
        yield finding(
            ctx,
            entry,
            f"{change.path} {what} outside the plan ({field})",
            device=path_item(change.path),
            path=change.path,
            expected=change.baseline,
            actual=change.candidate,
            evidence="diff",
        )


SPECS = (
    spec(
        UNPLANNED,
        "a compared snapshot field (see judge.coverage) changed outside the plan and no other rule spoke for it",
        None,
        needs_baseline=True,
    ),
)
