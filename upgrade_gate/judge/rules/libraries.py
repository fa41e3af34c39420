"""ROCm library rule: a library that changed outside the plan blocks, like firmware does.

Each snapshot records the node's ROCm libraries (probe `rocm_libs`: soname, real path, a hash of the
exported symbol set, the file hash). `library.unplanned` compares them with the baseline by soname.

Design decisions:
- Without a ROCm change in the plan (`change.rocm`), nothing may move: a symbol-set change, a
  rebuilt file with the same symbols (behaviour can change behind an unchanged ABI: the incident's
  "minor" version), a library that appeared or disappeared, each blocks.
- With a ROCm change, the libraries ship with it: new symbols, new builds and new libraries are
  expected. A soname that disappears still blocks unless the plan names its successor
  (`change.sonames: [{from: libamdhip64.so.5, to: libamdhip64.so.6}]`) and the candidate has it;
  binaries linked against the old soname will not load. A declared bump that did not happen blocks.
  The symbol-level verdict before the bump is `upgrade-gate abi`'s job (the snapshot holds hashes).
- Fail closed: a baseline that recorded libraries and a candidate that did not (probe failed or
  absent) blocks, quoting the probe's reason. A baseline older than the probe (None) is not judged.
- Paths are `libraries[soname=X].<field>`, so a plan's `accept` entry can accept one on purpose.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from upgrade_gate.judge.rules.base import NodeContext, finding, spec
from upgrade_gate.model import Finding, RocmLibrary

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry

_EVIDENCE = "rocm_libs"


def _path(soname: str, field: str = "soname") -> str:
    return f"libraries[soname={soname}].{field}"


def check_libraries(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """ROCm libraries vs the baseline and the plan's ROCm change and soname bumps."""
    before_list = ctx.baseline.libraries if ctx.baseline is not None else None
    after_list = ctx.candidate.libraries
    bumps = {c.from_soname: c.to_soname for c in ctx.plan.change.sonames} if ctx.plan is not None else {}
    rocm_planned = ctx.plan is not None and ctx.plan.change.rocm is not None
    if before_list is None:
        return
    if after_list is None:
        probe = next((p for p in ctx.candidate.probes if p.name == _EVIDENCE), None)
        why = probe.reason if probe is not None and probe.reason else "no rocm_libs probe in the capture"
        yield finding(
            ctx,
            entry,
            f"ROCm libraries not recorded ({why}); the baseline has {len(before_list)}: a library change "
            "cannot be ruled out",
            path="libraries",
            expected=len(before_list),
            actual=None,
            evidence=_EVIDENCE,
        )
        return
    before = {lib.soname: lib for lib in before_list}
    after = {lib.soname: lib for lib in after_list}
    for old, new in sorted(bumps.items()):
        if old in after or new not in after:
            state = f"still has {old}" if old in after else f"has no {new}"
            yield finding(
                ctx,
                entry,
                f"the plan moves {old} to {new}, but the node {state}",
                device=old,
                path=_path(old),
                expected=new,
                actual=old if old in after else None,
                evidence=_EVIDENCE,
            )
    for soname, was in sorted(before.items()):
        now = after.get(soname)
        if now is None:
            if bumps.get(soname) in after:
                continue
            yield finding(
                ctx,
                entry,
                f"{soname} is gone ({was.path})" + ("" if rocm_planned else " outside the plan"),
                device=soname,
                path=_path(soname),
                expected=soname,
                actual=None,
                evidence=_EVIDENCE,
                hint="name the successor in the plan (change.sonames) if the bump is meant",
            )
            continue
        if not rocm_planned:
            yield from _moved(ctx, entry, was, now)
    targets = set(bumps.values())
    for soname, now in sorted(after.items()):
        if soname not in before and soname not in targets and not rocm_planned:
            yield finding(
                ctx,
                entry,
                f"{soname} appeared outside the plan ({now.path})",
                device=soname,
                path=_path(soname),
                expected=None,
                actual=soname,
                evidence=_EVIDENCE,
            )


def _moved(ctx: NodeContext, entry: RuleEntry, was: RocmLibrary, now: RocmLibrary) -> Iterable[Finding]:
    soname = was.soname
    if was.symbols_sha256 != now.symbols_sha256:
        yield finding(
            ctx,
            entry,
            f"{soname}: exported symbols changed outside the plan ({was.symbol_count} -> {now.symbol_count} "
            f"symbols, {now.path})",
            device=soname,
            path=_path(soname, "symbols_sha256"),
            expected=was.symbols_sha256,
            actual=now.symbols_sha256,
            evidence=_EVIDENCE,
            hint="run `upgrade-gate abi --running OLD --candidate NEW` for the symbol-level difference",
        )
    elif was.file_sha256 != now.file_sha256:
        yield finding(
            ctx,
            entry,
            f"{soname}: a different build outside the plan, same exported symbols ({was.path} -> {now.path})",
            device=soname,
            path=_path(soname, "file_sha256"),
            expected=was.file_sha256,
            actual=now.file_sha256,
            evidence=_EVIDENCE,
        )


SPECS = (
    spec(
        "library.unplanned",
        "a ROCm library (soname, exported symbols, build) changed outside the plan, or a planned soname bump "
        "did not land",
        check_libraries,
        needs_baseline=True,
    ),
)
