"""What every rule shares: its spec (id, default severity, parameters), the node context it reads.

A rule is a pure function `check(ctx, entry) -> Iterable[Finding]` registered with a `RuleSpec`.
The set of rules is closed: a policy can enable, disable, re-grade and parameterise registered rules
but never define code. Parameters are declared per rule (`ParamSpec`: a kind from a closed set, a
default, bounds) and checked when the policy is loaded, so a rule reads `entry.number("tolerance")`
knowing it is there and well-typed.
"""

from __future__ import annotations

import operator
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from upgrade_gate.judge.identity import GpuPair
from upgrade_gate.model import (
    ClassReference,
    Finding,
    GpuSerial,
    NodeName,
    RuleId,
    Severity,
    Snapshot,
)

if TYPE_CHECKING:
    from upgrade_gate.judge.plan import ChangePlan
    from upgrade_gate.judge.policy import Policy, RuleEntry

PARAM_KINDS = ("number", "integer", "boolean", "string", "strings", "integers", "number_map", "checks")

OPERATORS: Mapping[str, Callable[[float, float], bool]] = {
    "ge": operator.ge,
    "gt": operator.gt,
    "le": operator.le,
    "lt": operator.lt,
    "eq": operator.eq,
    "ne": operator.ne,
}
"""The closed set of comparison operators a policy may name (`metric.threshold` checks)."""

STATISTICS: Mapping[str, Callable[[Sequence[float]], float]] = {
    "median": statistics.median,
    "mean": statistics.fmean,
    "min": min,
    "max": max,
}
"""The closed set of statistics a policy may apply to a measurement's samples."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ParamSpec:
    """One declared rule parameter: kind (see PARAM_KINDS), default, optional bounds."""

    kind: str
    default: Any
    doc: str
    minimum: float | None = None
    maximum: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeContext:
    """Everything a per-node rule may read; built once per candidate by the judge."""

    node: NodeName
    node_class: str | None
    candidate: Snapshot
    baseline: Snapshot | None
    reference: ClassReference | None
    plan: ChangePlan | None
    policy: Policy
    pairs: tuple[GpuPair, ...] = ()  # baseline/candidate GPU matching (empty without a baseline)
    denylist: Mapping[GpuSerial, str] = field(default_factory=dict)
    clock: str | None = None  # the wall clock, read once by the caller (the judge has none); None: not judged


Check = Callable[[NodeContext, "RuleEntry"], Iterable[Finding]]


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleSpec:
    """A registered rule: the closed set of what a policy can name."""

    id: RuleId
    summary: str
    default_severity: Severity
    check: Check | None  # None: produced by the judge or the checklist, not per node
    params: Mapping[str, ParamSpec] = field(default_factory=dict)
    plan_can_accept: bool = True  # a plan `accept` path may downgrade its findings to info
    needs_baseline: bool = False  # skipped (silently) when the node has no baseline


def spec(
    rule_id: str,
    summary: str,
    check: Check | None,
    *,
    severity: Severity = Severity.BLOCK,
    params: Mapping[str, ParamSpec] | None = None,
    plan_can_accept: bool = True,
    needs_baseline: bool = False,
) -> RuleSpec:
    """Shorthand for declaring a RuleSpec."""
    return RuleSpec(
        id=RuleId(rule_id),
        summary=summary,
        default_severity=severity,
        check=check,
        params=params or {},
        plan_can_accept=plan_can_accept,
        needs_baseline=needs_baseline,
    )


def finding(
    ctx: NodeContext,
    entry: RuleEntry,
    message: str,
    *,
    device: str | None = None,
    path: str | None = None,
    expected: object = None,
    actual: object = None,
    evidence: str | None = None,
    hint: str | None = None,
    severity: Severity | None = None,
    data: object = None,
) -> Finding:
    """A finding of `entry`'s rule on `ctx`'s node, at the entry's severity unless given."""
    return Finding(
        rule=entry.id,
        severity=severity if severity is not None else entry.severity,
        node=ctx.node,
        message=message,
        device=device,
        path=path,
        expected=expected,
        actual=actual,
        evidence=evidence,
        hint=hint,
        data=data,
    )


def softer(severity: Severity) -> Severity:
    """One step down (block -> warn -> info), for secondary findings of a rule."""
    return Severity.WARN if severity is Severity.BLOCK else Severity.INFO


def show(value: object) -> str:
    """A value as a message shows it (None as `absent`)."""
    return "absent" if value is None else str(value)
