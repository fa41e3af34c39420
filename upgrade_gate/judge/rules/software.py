"""Software version rules: ROCm, amdgpu driver and kernel against the plan and the baseline.

Design decisions:
- When the plan changes a component, the candidate must land exactly on the plan's `to` (see
  `plan.version_matches`: a build suffix, `-66` or `+build7`, is the only slack; a pre-release `-rc1` or
  an error text glued on, `6.2.0-ERROR`, is not the target). "Changed" is not enough: landing
  on 6.2.1 when the plan says 6.2.0 blocks, and so does not moving at all (the change did not happen,
  yet the canary would be promoted as if it had). A `from` that does not match the baseline blocks
  too: the plan was written for another starting point.
- When the plan does not change a component, any change against the baseline blocks.
- A version no probe could read (None) with a plan target blocks, quoting the recorded reason.
- ROCm compares the release (`rocm_version`, "6.2.0"), not the build (`rocm_build`, "6.2.0-66").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from upgrade_gate.judge.plan import VersionChange, version_matches
from upgrade_gate.judge.rules.base import NodeContext, finding, show, spec
from upgrade_gate.judge.rules.facts import starts_off_plan
from upgrade_gate.model import Finding

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry

_PROBES = {"rocm": "rocm_version", "driver": "driver_version", "kernel": "kernel"}
_NAMES = {"rocm": "ROCm", "driver": "amdgpu driver", "kernel": "kernel"}
_FIELDS = {"rocm": "rocm_version", "driver": "driver_version", "kernel": "kernel"}


def _check(ctx: NodeContext, entry: RuleEntry, component: str) -> Iterable[Finding]:
    field = _FIELDS[component]
    name = _NAMES[component]
    planned: VersionChange | None = getattr(ctx.plan.change, component) if ctx.plan is not None else None
    after: str | None = getattr(ctx.candidate.software, field)
    before: str | None = getattr(ctx.baseline.software, field) if ctx.baseline is not None else None
    path = f"software.{field}"
    evidence = _PROBES[component]
    if planned is not None:
        target = planned.to_version
        if after is None:
            why = ctx.candidate.software.na_reasons.get(field, "no probe reported it")
            yield finding(
                ctx,
                entry,
                f"{name} version unknown ({why}); the plan moves it to {target}",
                path=path,
                expected=target,
                actual=None,
                evidence=evidence,
            )
        elif not version_matches(after, target, release=True):
            if before is not None and after == before:
                message = f"{name} unchanged at {after}; the plan moves it to {target}"
            else:
                message = f"{name} landed on {after}, the plan says {target}"
            yield finding(ctx, entry, message, path=path, expected=target, actual=after, evidence=evidence)
        elif starts_off_plan(before, planned.from_version):
            yield finding(
                ctx,
                entry,
                f"{name} baseline is {before}, the plan starts from {planned.from_version}",
                path=path,
                expected=planned.from_version,
                actual=before,
                evidence=evidence,
            )
        return
    if ctx.baseline is not None and after != before:
        yield finding(
            ctx,
            entry,
            f"{name} changed outside the plan: {show(before)} -> {show(after)}",
            path=path,
            expected=before,
            actual=after,
            evidence=evidence,
        )


def check_rocm(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """ROCm release vs plan / baseline."""
    return _check(ctx, entry, "rocm")


def check_driver(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """amdgpu driver version vs plan / baseline."""
    return _check(ctx, entry, "driver")


def check_kernel(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Kernel release vs plan / baseline."""
    return _check(ctx, entry, "kernel")


SPECS = (
    spec("software.rocm", "ROCm must land exactly on the plan's target, or not move without a plan", check_rocm),
    spec("software.driver", "amdgpu driver must land on the plan's target, or not move", check_driver),
    spec("software.kernel", "kernel must land on the plan's target, or not move", check_kernel),
)
