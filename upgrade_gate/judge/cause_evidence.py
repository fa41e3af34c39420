"""Evidence failures are causes: every finding whose evidence failed is folded under that failure.

Part of `judge.causes` (claim 3, before anything reads a value). The rule, for every finding and every
probe or phase, with no case named:

    A finding *depends on* the sources of the values it compares: its path's sources in the snapshot
    builder's order of trust (`snapshot.provenance`), or the probe it names as its evidence. When the
    first-choice source of that value failed on either side (missing, timed out, non-zero exit,
    unparseable output, error text; the value is then absent, or a stand-in's in another format), the
    finding is a consequence of that failure and is folded under it: the failure is the cause, its
    headline names the tool and why, and the finding is listed under it. A phase that could not run
    (not run, error, skipped) is an evidence failure the same way, and its cause is the failure that
    stopped it: the earlier phase that failed, or the probe its preflight could not read.

So a fallback source never reads as a change (rocminfo hangs: the unique ids are amd-smi's `0x...`
instead of rocminfo's `GPU-...`), a missing tool never reads as 30 absent fields, and a failed phase 1
is the cause of phase 2's missing measurements. Folding never hides: folded findings keep their
severity, the cause counts them, `--verbose` and every report file list them.

One cause per failed tool and side (the amd-smi probes are one tool), per stopping phase: keys
`evidence:<tool>` (`probe.fallback:<tool>` when a stand-in answered), `evidence.baseline:<tool>`,
`phase:<n>`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from upgrade_gate.judge.cause_groups import Pool
from upgrade_gate.judge.cause_text import owner_of, plural
from upgrade_gate.judge.rules.evidence import stands_in
from upgrade_gate.model import CauseCategory, Finding, PhaseResult, PhaseStatus, ProbeStatus, Snapshot
from upgrade_gate.snapshot.provenance import sources_of, value_source

_PROBE_PATH = re.compile(r"^(?P<side>baseline\.)?probes\[name=(?P<name>[^\]]+)\]")
_PHASE = re.compile(r"^phase (?P<n>\d+)$")
_NIC_PATH = re.compile(r"^nics\[name=(?P<name>[^\]]+)\]")
_MEASUREMENT = re.compile(r"^measurements\[key=(?P<key>[^\]]+)\]")
_PREFLIGHT = re.compile(r"preflight-failed:(?P<probe>[A-Za-z0-9_]+)=")
_STOPPED = (PhaseStatus.NOT_RUN, PhaseStatus.ERROR, PhaseStatus.SKIPPED)
ROOT_PREFIXES = (
    "evidence:",
    "evidence.baseline:",
    "probe.fallback:",
    "phase:",
    "partition:",
    "bandwidth.broken:",
    "firmware.unreadable",
    "evidence.issue:",
    "evidence.unreported:",
)


@dataclass(slots=True)
class _Root:
    key: str
    probe: ProbeStatus | None = None
    stand_ins: set[str] = field(default_factory=set)
    broken_stand_in: ProbeStatus | None = None  # a failed probe of a stand-in's tool: "used" is not the whole story
    phase: PhaseResult | None = None
    baseline: bool = False
    indexes: list[int] = field(default_factory=list)


def _tool(probe: ProbeStatus) -> str:
    return probe.argv[0] if probe.argv else probe.name


def claim_evidence_failures(pool: Pool, baseline: Snapshot | None, candidate: Snapshot | None) -> None:
    """Fold every finding whose evidence failed under that failure (see the module docstring)."""
    if candidate is None:
        return
    cand = {p.name: p for p in candidate.probes}
    base = {p.name: p for p in baseline.probes} if baseline is not None else {}
    phases = {r.phase: r for r in candidate.phases}
    failed = any(not p.ok for p in (*cand.values(), *base.values()))
    if not failed and all(r.status is PhaseStatus.PASSED for r in phases.values()):
        return  # every source answered: nothing to fold (a fleet's usual node)
    roots: dict[str, _Root] = {}
    for i in sorted(pool.free):
        root = _root_of(pool.findings[i], cand, base, phases, roots)
        if root is not None:
            root.indexes.append(i)
    for root in roots.values():
        if root.indexes:
            pool.free.difference_update(root.indexes)
            _add(pool, root)


def _probe_root(
    roots: dict[str, _Root],
    probe: ProbeStatus,
    probes: Mapping[str, ProbeStatus],
    *,
    baseline: bool,
    stand_in: str | None,
) -> _Root:
    tool = _tool(probe)
    key = f"evidence.baseline:{tool}" if baseline else f"evidence:{tool}"
    first = next((p for p in probes.values() if not p.ok and _tool(p) == tool), probe)  # in capture order
    root = roots.setdefault(key, _Root(key=key, probe=first, baseline=baseline))
    if stand_in is not None:
        root.stand_ins.add(stand_in)
        if root.broken_stand_in is None:
            root.broken_stand_in = next((p for p in probes.values() if not p.ok and _tool(p) == stand_in), None)
    return root


def _root_of(
    f: Finding,
    cand: Mapping[str, ProbeStatus],
    base: Mapping[str, ProbeStatus],
    phases: Mapping[int, PhaseResult],
    roots: dict[str, _Root],
) -> _Root | None:
    path = f.path or ""
    own = _PROBE_PATH.match(path)
    if own is not None:  # the failed probe's own finding
        side, probes = (True, base) if own["side"] else (False, cand)
        probe = probes.get(own["name"])
        if probe is None or probe.ok:
            return None
        return _probe_root(roots, probe, probes, baseline=side, stand_in=_stand_in_for(probe, probes))
    named = cand.get(f.evidence) if f.evidence else None
    if named is not None and not named.ok and f.rule != "evidence.missing":
        return _probe_root(roots, named, cand, baseline=False, stand_in=_stand_in_for(named, cand))
    for probes, is_base in ((cand, False), (base, True)):
        failure = value_source(path, probes) if path else None
        if failure is not None:
            stand_in = _tool(probes[failure.stand_in]) if failure.stand_in else None
            return _probe_root(roots, failure.probe, probes, baseline=is_base, stand_in=stand_in)
    numbers = [int(m["n"]) for s in sources_of(path) if (m := _PHASE.match(s))] if path else []
    for number in numbers:
        return _phase_root(number, f, cand, phases, roots)
    nic = _NIC_PATH.match(path)
    if nic is not None:  # a NIC's finding, when a failed phase names the same NIC: one fault, one cause
        for number, result in sorted(phases.items()):
            if result.status is PhaseStatus.FAILED and _names(result, nic["name"]):
                return roots.setdefault(f"phase:{number}", _Root(key=f"phase:{number}", phase=result))
    return None


def _names(result: PhaseResult, device: str) -> bool:
    """True when a phase's reasons name `device` as a check's subject (`rdma-state:ionic_0=DOWN`)."""
    pattern = re.compile(rf"(?:^|[;\s])[\w.-]+:{re.escape(device)}=")
    return any(pattern.search(reason) for reason in (*result.reasons, result.reason or ""))


def _stand_in_for(probe: ProbeStatus, probes: Mapping[str, ProbeStatus]) -> str | None:
    user = next((p for p in probes.values() if stands_in(p, probe.name, probes)), None)
    return _tool(user) if user is not None else None


def _phase_root(
    number: int,
    f: Finding,
    cand: Mapping[str, ProbeStatus],
    phases: Mapping[int, PhaseResult],
    roots: dict[str, _Root],
) -> _Root | None:
    """The cause of phase `number`'s missing evidence: its failed preflight probe, or the phase that stopped it."""
    result = phases.get(number)
    if result is None:
        return None
    if result.status is PhaseStatus.FAILED or result.status is PhaseStatus.ERROR:
        probe = _preflight_probe(result, cand)
        if probe is not None:
            return _probe_root(roots, probe, cand, baseline=False, stand_in=None)
        if result.status is PhaseStatus.FAILED and f.rule != "phase.failed" and _measured(f, result):
            return None  # a phase that failed on its measurements: the measurements speak (bandwidth)
        # A phase that failed without measuring the finding's metric (its tool exited non-zero) is the cause
        # of every finding on that missing measurement ("not comparable", "no measurement to check").
        return roots.setdefault(f"phase:{number}", _Root(key=f"phase:{number}", phase=result))
    if result.status is PhaseStatus.NOT_RUN:
        earlier = [r for n, r in sorted(phases.items()) if n < number and r.status in (*_STOPPED, PhaseStatus.FAILED)]
        stopper = next((r for r in earlier if r.status is not PhaseStatus.NOT_RUN), None)
        if stopper is None:
            return None
        probe = _preflight_probe(stopper, cand)
        if probe is not None:
            return _probe_root(roots, probe, cand, baseline=False, stand_in=None)
        key = f"phase:{stopper.phase}"
        return roots.setdefault(key, _Root(key=key, phase=stopper))
    return None


def _measured(f: Finding, result: PhaseResult) -> bool:
    """True unless `f` is about a measurement (`measurements[key=K]`) that `result` did not record."""
    match = _MEASUREMENT.match(f.path or "")
    return match is None or any(m.key == match["key"] for m in result.measurements)


def _preflight_probe(result: PhaseResult, cand: Mapping[str, ProbeStatus]) -> ProbeStatus | None:
    """The failed probe a phase's preflight names (`preflight-failed:ibv_devinfo=...`), if it failed."""
    for reason in (*result.reasons, result.reason or ""):
        for match in _PREFLIGHT.finditer(reason):
            probe = cand.get(match["probe"])
            if probe is not None and not probe.ok:
                return probe
    return None


def _add(pool: Pool, root: _Root) -> None:
    found = [pool.findings[i] for i in root.indexes]
    rules = [f.rule for f in found]
    counts: dict[str, int] = {}
    for rule in rules:
        counts[rule] = counts.get(rule, 0) + 1
    folded = ", ".join(f"{r} x{n}" if n > 1 else r for r, n in sorted(counts.items()))
    details = (f"explains {plural(len(found), 'finding')}: {folded}",)
    node = pool.node
    if root.phase is not None:
        phase = root.phase
        own = next((f for f in found if f.rule == "phase.failed" and f.path == f"phases[phase={phase.phase}]"), None)
        why = "; ".join(phase.reasons) or phase.reason or "no reason recorded"
        headline = own.message if own is not None else f"phase {phase.phase} ({phase.name}) {phase.status.value}: {why}"
        step = f"on {node}: upgrade-gate validate --phases {phase.phase} --node {node} --out {node}.json"
        pool.add(root.key, root.indexes, headline, next_step=step, details=details)
        return
    probe = root.probe
    assert probe is not None
    tool = _tool(probe)
    reason = probe.reason or "failed"
    argv = " ".join(probe.argv) or probe.name
    if root.baseline:
        headline = f"the baseline's {tool} was unusable ({reason}): what it reports cannot be compared"
        step = f"re-capture the baseline of {node} with a working {tool}, then save it (upgrade-gate baseline save)"
    else:
        headline = f"{tool} unusable ({reason})"
        if root.stand_ins:
            headline += f"; {', '.join(sorted(root.stand_ins))} used"
            broken = root.broken_stand_in
            if broken is not None:  # the fallback answered in part: what it refused is the next thing to read
                headline += f", but its {broken.name} failed too ({broken.reason or 'failed'})"
        step = f"fix {tool} (`{argv}` failed); then re-capture on {node}: "
        step += f"upgrade-gate capture --node {node} --out {node}.tar.gz"
    key = f"probe.fallback:{tool}" if root.stand_ins and not root.baseline else root.key
    pool.add(
        key,
        root.indexes,
        headline,
        category=CauseCategory.EVIDENCE,
        owner=owner_of("evidence.missing"),
        next_step=step,
        details=details,
    )
