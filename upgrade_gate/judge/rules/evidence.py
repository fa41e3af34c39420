"""Evidence rules: fail closed on anything missing, failed phases, fatal kernel events, impossible times.

Design decisions:
- `evidence.missing` blocks when a node cannot be judged completely:
  - a probe that failed (timed out, binary missing, non-zero exit, unparseable output) unless a
    fallback that ran stood in for it (`fallback_for`); an optional probe's failure only warns;
  - a probe the baseline ran that the candidate lacks (a dependency that vanished with the upgrade
    is exactly what to catch), and any probe of `required_probes` that is absent;
  - a required CVF phase (`required_phases`, default 1-5) whose result is absent, skipped, errored or
    not run, unless the policy says the phase does not apply to the node's class
    (`phases.not_applicable`). CVF passes a node it skipped; upgrade-gate does not. When a CVF
    `SKIP_*` flag switched the phase off, the message names the flag;
  - a node with neither a baseline nor a class reference: there is nothing to judge it against. A
    node without a baseline of its own, judged against its class reference only, is said too: a
    warning (the per-node rules did not run), a block when the reference holds fewer than
    `class_min_nodes` nodes (too thin to stand in for the node's own baseline);
  - a required phase the *baseline* did not pass (absent, skipped, errored, not run, failed), when the
    baseline holds phase results at all: its measurements are no reference, and the candidate's results
    of that phase are judged against nothing (a baseline without phase 2 turned `bandwidth.regression`
    off without a word). A baseline with no phase result is a configuration snapshot (`snapshot`,
    `fleet snapshot`: the change window's usual baseline); `bandwidth.not_comparable` says, as info,
    that the candidate's measurements are then judged by the CVF floors and the class only;
  - a phase reported more than once: which result counts would depend on the order;
  - a probe that says it is ok and also that it timed out or that its binary was missing;
  - every `evidence_issues` entry of the candidate: sources that answered and disagree (driver
    version, NIC port state), a fact whose only answers were error texts, a device one source lists
    and another does not. The snapshot builder records them (`snapshot.crosscheck`).
  - on a class the policy declares without RDMA NICs (`nics.expected_count: 0`), the NIC probes
    (`nic_probes`: ibv_devinfo, rdma link, sysfs infiniband) failing or absent is reported at info
    level: a host without an RDMA device makes them "fail" on empty output, and nic.missing blocks if
    a NIC shows up anyway.
- `evidence.taken_at` (issue 26): time is evidence. A candidate taken after the wall clock (`clock`, read
  by the caller just before judging - `read_clock` - and passed in: the judge has no clock, and forked
  `gate` workers judge against the same instant) or before its own baseline, by more than
  `clock_skew_s` (default 300 s), blocks, with both times named: a snapshot dated 2099 or 1970, or older
  than the baseline it is compared with, says nothing about the node after the change. Not acceptable
  by a plan. The wall clock, not the report's `now`: `--now` and `UPGRADE_GATE_NOW` set the report's
  time for replays and tests, while snapshots are taken by real clocks. Without a baseline only the
  first half applies (a 1970 candidate judged against a class reference alone is not caught here).
- `phase.failed`: any phase result `failed` blocks, with the phase's reasons.
- `dmesg.fatal`: kernel events are grouped per (pattern, BDF), one finding each with the count and
  the first line; each is graded by the fatal-error map (the shipped pattern file under the policy's
  `kernel_events`, see `judge.kernel_events` and `rules.kernel`), and the rule maps `fatal` to block
  and `error` to warn by default.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple

from upgrade_gate.judge.plan_partition import slot_of
from upgrade_gate.judge.rules.base import NodeContext, ParamSpec, finding, softer, spec
from upgrade_gate.judge.rules.standalone import peer_phase_waived
from upgrade_gate.model import Finding, PhaseStatus, ProbeStatus, Severity
from upgrade_gate.validate.cvf import PHASE_NAMES
from upgrade_gate.vendors.registry import VENDORS, vendor_of

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry


def check_evidence(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Failed/absent probes, absent or not-passed required phases, nothing to compare with."""
    if ctx.baseline is None and ctx.reference is None:
        yield finding(
            ctx,
            entry,
            f"no baseline for {ctx.node} and no reference for its class ({ctx.node_class or 'no class'}): "
            "nothing to judge it against",
            path="baseline",
            expected="a baseline or a class reference",
            actual=None,
            evidence="baseline store",
        )
    elif ctx.baseline is None and ctx.reference is not None:
        yield _class_only(ctx, entry, ctx.reference.nodes)
    if ctx.baseline is not None:
        yield from _class_moved(ctx, entry, ctx.baseline.node.node_class, ctx.candidate.node.node_class)
    yield from _probes(ctx, entry)
    yield from _issues(ctx, entry)
    yield from _unreported(ctx, entry)
    yield from _phases(ctx, entry)
    if ctx.baseline is not None and ctx.baseline.phases:  # none at all: a configuration snapshot (below)
        yield from _baseline_phases(ctx, entry)


def _class_moved(ctx: NodeContext, entry: RuleEntry, before: str | None, after: str | None) -> Iterable[Finding]:
    """A candidate that names another class than its baseline: the class picks the policy's rules and
    thresholds and the reference the node is held to, so a node does not change it by itself (new hardware
    changes its GPUs too). A candidate without a class takes its baseline's."""
    if before is not None and after is not None and before != after:
        yield finding(
            ctx,
            entry,
            f"node class changed: {before} -> {after}; the class picks the rules, thresholds and reference the "
            "node is judged by (save a baseline under the new class to move it)",
            path="node.node_class",
            expected=before,
            actual=after,
            evidence="candidate node, baseline store",
        )


def _class_only(ctx: NodeContext, entry: RuleEntry, nodes: tuple[str, ...]) -> Finding:
    """A node judged against its class reference only: the per-node rules (order, identity, firmware,
    links, regression) had nothing to compare with."""
    least = entry.integer("class_min_nodes")
    thin = len(nodes) < least
    # A canary the plan names is the node the change is proven on: its own baseline is the proof's other half,
    # and a class reference does not compare GPU models, memory, links, host or NIC settings (break test
    # 2026-12-07: a named canary without a baseline passed with a warning).
    canary = ctx.plan is not None and ctx.node in ctx.plan.canaries.nodes
    why = "; the plan names it as a canary, which is judged against its own baseline" if canary else ""
    return finding(
        ctx,
        entry,
        f"no baseline for {ctx.node}: judged against the reference of class {ctx.node_class} "
        f"({len(nodes)} node(s){', fewer than ' + str(least) + ': too few to stand in for its own' if thin else ''})"
        f"; the rules that compare a node with its own baseline did not run (save one before a change){why}",
        path="baseline",
        expected="a baseline of this node",
        actual=None,
        evidence="baseline store",
        severity=None if thin or canary else softer(entry.severity),
    )


def _baseline_phases(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Required phases the baseline did not pass: the candidate's results of them have no reference."""
    assert ctx.baseline is not None
    results: dict[int, list[PhaseStatus]] = {}
    for r in ctx.baseline.phases:
        results.setdefault(r.phase, []).append(r.status)
    for number in sorted(set(entry.integers("required_phases"))):
        if not ctx.policy.phase_applies(number, ctx.node_class) or peer_phase_waived(ctx, number):
            continue
        statuses = results.get(number, [])
        if statuses and all(s is PhaseStatus.PASSED for s in statuses):
            continue
        name = PHASE_NAMES.get(number, f"phase {number}")
        had = "/".join(s.value for s in statuses) if statuses else "no result"
        yield finding(
            ctx,
            entry,
            f"the baseline's phase {number} ({name}): {had}; the candidate's phase {number} results have "
            "nothing to be compared with (save a baseline whose phases passed)",
            device=name,
            path=f"baseline.phases[phase={number}]",
            expected=PhaseStatus.PASSED.value,
            actual=had,
            evidence="baseline store",
        )


_NEVER_PRINTED = {"vbios": re.compile(r"\bMI300A\b")}
"""GPU models whose tool prints a watched field as N/A on every run, by design: the MI300A APU has no discrete
VBIOS (amd-smi static prints `VBIOS: VERSION: N/A`, corpus amd-smi/static-mi300a-doc-example-driver6.9.0-rc5-
elided.txt). Its N/A on both sides is not judged, as its board serial and partition modes are not."""


def _unreported(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """GPU fields the gate watches (`unreported_gpu_fields`: VBIOS and firmware by default) that the candidate
    could not read on some GPU (absent, with the snapshot's reason) and that its baseline did not hold on that
    GPU either: the diff sees an absence only against a value, so nothing judged them. Where the baseline had
    the value, the diff reports its loss and this says nothing (break test 2026-12-07: VBIOS or every firmware
    version N/A on all GPUs, at the baseline and again after the change, passed with nothing to report)."""
    fields = entry.strings("unreported_gpu_fields")
    if not fields or not ctx.candidate.gpus:
        return
    gpus = ctx.candidate.gpus
    older = ctx.baseline.gpus if ctx.baseline is not None else ()
    for name in fields:
        never = _NEVER_PRINTED.get(name)
        unread = [
            (g, why)
            for g in gpus
            if (why := g.na_reasons.get(name)) is not None
            and not getattr(g, name, None)
            and not (never is not None and never.search(g.product_name or ""))
        ]
        if not unread:
            continue  # the usual node: every GPU gave it
        # per physical device (a partitioned GPU's secondary partitions may print N/A where its first prints the
        # value), on either side: a device whose value the baseline held is the diff's to judge
        held = {slot_of(g.bdf) for g in (*gpus, *older) if getattr(g, name, None) and g.bdf is not None}
        missing = [(g, why) for g, why in unread if g.bdf is None or slot_of(g.bdf) not in held]
        if not missing:
            continue
        first, why = missing[0]
        where = " nor in the baseline" if ctx.baseline is not None else ""
        yield finding(
            ctx,
            entry,
            f"{name} not reported on {len(missing)} of {len(gpus)} GPU(s){where} ({why}"
            + (f"; and on {len(missing) - 1} more GPU(s)" if len(missing) > 1 else "")
            + "): nothing to judge it by, missing evidence",
            device=f"gpu[{first.index}]" if len(missing) == 1 else None,
            path=f"gpus[{first.index}].{name}" if len(missing) == 1 else f"gpus[].{name}",
            expected=f"{name} of every GPU",
            actual=None,
            evidence=None,  # the reason in the message names its source
        )


def _device_of(subject: str) -> str | None:
    """'nics[name=ionic_0].ports[1]' -> 'ionic_0'; 'gpus[3].serial' -> 'gpu[3]'; software -> None."""
    nic = re.match(r"^nics\[name=([^\]]+)\]", subject)
    if nic is not None:
        return nic.group(1)
    gpu = re.match(r"^gpus\[(\d+)\]", subject)
    return f"gpu[{gpu.group(1)}]" if gpu is not None else None


def _issues(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Evidence the snapshot builder could not trust: sources that disagree, error texts, absences."""
    for issue in ctx.candidate.evidence_issues:
        yield finding(
            ctx,
            entry,
            f"evidence {issue.kind.value}: {issue.message}",
            device=_device_of(issue.subject),
            path=issue.subject,
            expected="one trustworthy answer from every source",
            actual=dict(issue.values) or None,
            evidence=", ".join(sorted(issue.values)) or None,
        )


class _Catalogue(NamedTuple):
    """What the probe catalogue of one vendor says, for judging a snapshot's own probe flags."""

    required: frozenset[str]  # a failure blocks, whatever the snapshot's `required` flag says
    stands_in: dict[str, frozenset[str]]  # fallback -> the probes it may stand in for
    commands: frozenset[str]  # command probes: only a file-read probe can be `skipped` (no file matched)


@functools.cache
def _catalogue(vendor: str) -> _Catalogue:
    from upgrade_gate.collect.probes import catalogue
    from upgrade_gate.vendors.base import CommandSpec

    specs = catalogue(next(v for v in VENDORS if v.name == vendor))
    return _Catalogue(
        required=frozenset(s.name for s in specs if s.required),
        stands_in={s.name: frozenset(s.fallback_for) for s in specs if isinstance(s, CommandSpec) and s.fallback_for},
        commands=frozenset(s.name for s in specs if isinstance(s, CommandSpec)),
    )


def stands_in(user: ProbeStatus, target: str, probes: Iterable[str]) -> bool:
    """True when probe `user` ran fine and stood in for probe `target`, as the catalogue of the vendor of the
    node whose probes are named by `probes` allows (a snapshot's own `fallback_for` claims no more)."""
    known = _catalogue(vendor_of(probes).name)
    return (
        user.ok
        and target in user.fallback_for
        and target in known.stands_in.get(user.name, ())
        and _contradiction(user, known) is None
    )


def _contradiction(p: ProbeStatus, known: _Catalogue) -> tuple[str, str] | None:
    """What a probe marked ok also says that no ok probe can (the snapshot contradicts itself), and what was
    expected; None when nothing does. `capture` marks a probe ok only when it exited 0 (or, a file-read
    probe, matched no file and did not run)."""
    if p.timed_out or p.missing:
        return f"{'timed out' if p.timed_out else 'binary missing'}", "ok, neither timed out nor missing"
    if p.exit_code not in (None, 0):
        return f"exited {p.exit_code}", "ok, exit code 0"
    if p.skipped and p.name in known.commands:
        return "skipped, which only a file-read probe can be", "ok, run"
    return None


def _probes(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Failed, absent and self-contradicting probes. Which probes are required, and which may stand in for
    which, is read from the catalogue of the node's vendor (`collect.probes`), never taken from the
    candidate's own flags: a snapshot that marks a failed `dmesg` not required, or names `kernel` a
    fallback for it, still blocks (the flags only make a probe stricter)."""
    probes = {p.name: p for p in ctx.candidate.probes}
    known = _catalogue(vendor_of(probes).name)
    covered = {name for p in ctx.candidate.probes for name in p.fallback_for if stands_in(p, name, probes)}
    nic_less = ctx.policy.nic_less(ctx.node_class)
    nic_probes = set(entry.strings("nic_probes")) if nic_less else set()
    for p in ctx.candidate.probes:
        contradiction = _contradiction(p, known) if p.ok else None
        if contradiction is not None:
            said, expected = contradiction
            yield finding(
                ctx,
                entry,
                f"probe {p.name} is marked ok but also {said}: the snapshot contradicts itself",
                device=p.name,
                path=f"probes[name={p.name}]",
                expected=expected,
                actual=p.reason,
                evidence=p.name,
            )
            continue
        if p.ok or p.name in covered:
            continue
        if p.timed_out:
            how = "timed out"
        elif p.missing:
            how = "binary missing"
        else:
            how = "failed"
        yield finding(
            ctx,
            entry,
            f"probe {p.name} {how}: {p.reason or 'no reason recorded'}",
            device=p.name,
            path=f"probes[name={p.name}]",
            expected="ok",
            actual=p.reason,
            evidence=p.name,
            severity=Severity.INFO
            if p.name in nic_probes
            else (None if p.required or p.name in known.required else softer(entry.severity)),
        )
    wanted = _for_vendor(set(entry.strings("required_probes")), probes)
    if ctx.baseline is not None:  # failed there too: still wanted now (a failed baseline is no excuse)
        wanted |= {p.name for p in ctx.baseline.probes if not p.skipped}
    for name in sorted(wanted - set(probes) - covered - nic_probes):
        ran_before = ctx.baseline is not None and any(p.name == name for p in ctx.baseline.probes)
        yield finding(
            ctx,
            entry,
            f"probe {name} is absent from the candidate" + (" (it ran in the baseline)" if ran_before else ""),
            device=name,
            path=f"probes[name={name}]",
            expected="ok",
            actual=None,
            evidence=name,
        )


def _phases(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    results = {r.phase: r for r in ctx.candidate.phases}
    if len(results) != len(ctx.candidate.phases):
        seen: dict[int, list[str]] = {}
        for r in ctx.candidate.phases:
            seen.setdefault(r.phase, []).append(r.status.value)
        for number, statuses in sorted(seen.items()):
            if len(statuses) > 1:
                yield finding(
                    ctx,
                    entry,
                    f"phase {number} is reported {len(statuses)} times ({', '.join(statuses)}): one result per "
                    "phase is expected, and which one counts would depend on their order",
                    device=PHASE_NAMES.get(number, f"phase {number}"),
                    path=f"phases[phase={number}]",
                    expected="one result",
                    actual=statuses,
                    evidence=f"phase {number}",
                )
    skips = ctx.policy.thresholds.cvf_skip_flags
    for number in sorted(set(entry.integers("required_phases"))):
        if not ctx.policy.phase_applies(number, ctx.node_class):
            continue
        name = PHASE_NAMES.get(number, f"phase {number}")
        result = results.get(number)
        path = f"phases[phase={number}]"
        if peer_phase_waived(ctx, number):  # README workflow 1: validated alone, before and after
            yield finding(
                ctx,
                entry,
                f"phase {number} ({name}) not required: it needs a peer node, and neither the baseline nor "
                "the candidate ran it (a stand-alone node)",
                device=name,
                path=path,
                actual=None,
                evidence=f"phase {number}",
                severity=Severity.INFO,
            )
            continue
        if result is None:
            why = f"phase {number} ({name}) has no result: not run"
            if number in skips:
                why += f" ({skips[number]} is set in the CVF config)"
        elif result.status in (PhaseStatus.PASSED, PhaseStatus.FAILED):
            continue  # failed: phase.failed
        else:
            why = f"phase {number} ({name}) {result.status.value}: {result.reason or 'no reason recorded'}"
            if result.status is PhaseStatus.SKIPPED:
                why += "; a skipped phase is not a pass"
        yield finding(
            ctx,
            entry,
            why,
            device=name,
            path=path,
            expected=PhaseStatus.PASSED.value,
            actual=result.status.value if result is not None else None,
            evidence=f"phase {number}",
        )


_FAILED_WORDS = frozenset({"failed", "fail", "error"})


def check_phase_failed(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Every failed phase result, and every passed one whose own labels or annotations say it failed."""
    for result in sorted(ctx.candidate.phases, key=lambda r: r.phase):
        if result.status is PhaseStatus.PASSED and not _FAILED_WORDS.isdisjoint(
            v.lower() for v in (*result.labels.values(), *result.annotations.values())
        ):
            said = sorted(
                k for k, v in (*result.labels.items(), *result.annotations.items()) if v.lower() in _FAILED_WORDS
            )
            if said:
                yield finding(
                    ctx,
                    entry,
                    f"phase {result.phase} ({result.name}) is marked passed, but {', '.join(said)} says "
                    f"{(result.labels | result.annotations)[said[0]]}: the result contradicts itself",
                    device=result.name,
                    path=f"phases[phase={result.phase}]",
                    expected="labels and annotations that agree with the status",
                    actual={k: (result.labels | result.annotations)[k] for k in said},
                    evidence=f"phase {result.phase}",
                )
        if result.status is not PhaseStatus.FAILED:
            continue
        reasons = "; ".join(result.reasons) or result.reason or "no reason recorded"
        yield finding(
            ctx,
            entry,
            f"phase {result.phase} ({result.name}) failed: {reasons}",
            device=result.name,
            path=f"phases[phase={result.phase}]",
            expected=PhaseStatus.PASSED.value,
            actual=PhaseStatus.FAILED.value,
            evidence=f"phase {result.phase}",
        )


def check_taken_at(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """A candidate taken after the wall clock, or before its own baseline, beyond the clock skew."""
    skew = timedelta(seconds=entry.integer("clock_skew_s"))
    taken = _instant(ctx.candidate.taken_at)
    if ctx.clock is not None and taken - _instant(ctx.clock) > skew:
        yield finding(
            ctx,
            entry,
            f"candidate taken at {ctx.candidate.taken_at}, after this host's clock ({ctx.clock}) by "
            f"{_span(taken - _instant(ctx.clock))}: more than the allowed clock skew ({_span(skew)}); "
            "a snapshot from the future is no evidence of the node now",
            path="taken_at",
            expected=f"at most {ctx.clock} + {_span(skew)}",
            actual=ctx.candidate.taken_at,
            evidence="candidate taken_at, this host's clock",
        )
    if ctx.baseline is not None and _instant(ctx.baseline.taken_at) - taken > skew:
        yield finding(
            ctx,
            entry,
            f"candidate taken at {ctx.candidate.taken_at}, before its baseline (taken at "
            f"{ctx.baseline.taken_at}) by {_span(_instant(ctx.baseline.taken_at) - taken)}: more than the "
            f"allowed clock skew ({_span(skew)}); a candidate older than its baseline is no evidence of the change",
            path="taken_at",
            expected=f"at least {ctx.baseline.taken_at} - {_span(skew)}",
            actual=ctx.candidate.taken_at,
            evidence="candidate and baseline taken_at",
        )


def read_clock() -> str:
    """The wall clock now, for a caller to pass to the judge as `clock` (the judge itself never reads it)."""
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _instant(text: str) -> datetime:
    """A snapshot's or the run's time (the schema checked the snapshot's; --now is ISO 8601); naive is UTC."""
    text = text.upper().replace("Z", "+00:00")
    leap = _LEAP.match(text)
    if leap is not None:  # 23:59:60, a leap second the schema accepts and datetime cannot hold: its next instant
        value = datetime.fromisoformat(f"{leap['head']}59{leap['tail']}") + timedelta(seconds=1)
    else:
        value = datetime.fromisoformat(text)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


_LEAP = re.compile(r"(?P<head>.*T\d\d:\d\d:)60(?P<tail>(?:[.,]\d+)?(?:[+-]\d\d:?\d\d)?)$")


def _span(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds >= 2 * 86400:
        return f"{seconds // 86400} days"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min" if seconds >= 3600 else f"{seconds} s"


SPECS = (
    spec(
        "evidence.taken_at",
        "a candidate taken after this host's clock, or before its baseline, beyond the allowed clock skew",
        check_taken_at,
        plan_can_accept=False,
        params={
            "clock_skew_s": ParamSpec(
                kind="integer",
                default=300,
                doc="seconds a candidate may be ahead of this host's clock or behind its baseline (at most a day)",
                minimum=0,
                maximum=86400,
            ),
        },
    ),
    spec(
        "evidence.missing",
        "a probe failed or is absent, a required phase did not pass or run, or nothing to compare with",
        check_evidence,
        plan_can_accept=False,
        params={
            "required_phases": ParamSpec(kind="integers", default=(1, 2, 3, 4, 5), doc="CVF phases required"),
            "required_probes": ParamSpec(
                kind="strings",
                default=("rocminfo", "lspci", "kernel", "driver_version", "rocm_version", "dmesg"),
                doc=(
                    "probes that must be present even without a baseline "
                    "(another vendor's probes read as the node's vendor's anchors)"
                ),
            ),
            "nic_probes": ParamSpec(
                kind="strings",
                default=("ibv_devinfo", "rdma_link", "sysfs_ib"),
                doc="probes a class declared without RDMA NICs (policy nics.expected_count: 0) may fail",
            ),
            "class_min_nodes": ParamSpec(
                kind="integer",
                default=3,
                doc="a node without a baseline judged against a class reference of fewer nodes blocks (else warns)",
            ),
            "unreported_gpu_fields": ParamSpec(
                kind="strings",
                default=("vbios", "firmware"),
                doc="GPU fields whose absence (a reason recorded) on both sides is missing evidence, not a pass",
            ),
        },
    ),
    spec(
        "phase.failed",
        "a CVF phase failed, or one marked passed says in its labels that it failed",
        check_phase_failed,
        plan_can_accept=False,
    ),
)


def _for_vendor(wanted: set[str], probes: Iterable[str]) -> set[str]:
    """`required_probes` for this node's vendor (issue 30, mixed fleets): a probe only another vendor has
    (rocminfo on an NVIDIA node) is replaced by the node's vendor's own anchors (nvidia_smi ...), so one
    policy serves a mixed fleet and an NVIDIA node must still show its own tools (fail closed)."""
    vendor = vendor_of(probes)
    own = {p.name for p in (*vendor.gpu_probes, *vendor.stack_probes, *vendor.tail_probes)} | set(vendor.anchor_probes)
    theirs = {p.name for v in VENDORS if v is not vendor for p in (*v.gpu_probes, *v.stack_probes, *v.tail_probes)} | {
        a for v in VENDORS if v is not vendor for a in v.anchor_probes
    }
    foreign = {name for name in wanted if name in theirs and name not in own}
    return (wanted - foreign) | set(vendor.anchor_probes) if foreign else wanted
