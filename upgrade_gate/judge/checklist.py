"""Checklists as data: the incident's pre-change / canary / observation items, filled in by the gate.

Shipped checklists live in the top-level `checklists/<name>.yaml` (schema `checklist`; found by
`upgrade_gate.shipped` in a checkout and in a wheel); `--checklist` takes a shipped name, a file, or a
folder of the site's own checklists (every *.yaml, *.yml and *.json in it, by file name). Each item is
either:

- automatic: it names `rules` (optionally narrowed by `paths`: rule -> finding path globs, for a rule
  such as `fleet.odd_one_out` that speaks of several things), `phases` and/or `evidence` (`baseline`:
  every candidate has one;
  `plan`: a change plan was given; `candidates`: there is at least one). It passes iff none of its
  rules produced a BLOCK finding on any node, every rule ran on every candidate it applies to (a
  rule switched off or skipped for want of a baseline is evidence missing, not a pass), every listed
  phase passed on every candidate it applies to, and its evidence is present. `max_canary_fraction`
  checks the plan's canary share.
- manual (`attest: true`): it passes when attested with `--attest ITEM=NAME`; the name becomes the
  row's owner.

An automatic item whose evidence is missing (a listed phase with no result, or errored, skipped, not
run; a rule that did not run; no baseline, plan or candidates) reads `unverified`, never `pass`; one
with evidence against it (a failed phase, a blocking finding) reads `fail`. A named person may attest
an `unverified` item (`--attest ITEM=NAME`: the evidence is missing, someone checked it by hand): it
reads `attested`, naming the person and the evidence that was missing. An attestation never turns a
`fail` into anything else: the row says it was attested and the evidence still fails.

Rows carry item, pass criterion, actual result and owner (the incident's table). A failed automatic
item adds a `checklist.unverified` finding and an unattested manual one `checklist.unattested`; both
block for required items (at the policy's severity) and only warn for optional ones. An attestation
naming no loaded item is bad input: a typo must not leave an item silently unattested.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from upgrade_gate import docio, schemas, shipped
from upgrade_gate.errors import ConfigError, InputError, NotFoundError, SchemaError
from upgrade_gate.judge.plan import ChangePlan, glob_match
from upgrade_gate.judge.policy import Policy
from upgrade_gate.judge.policy_loosened import PLAN_JUDGED, plan_loosened
from upgrade_gate.judge.rules.base import softer
from upgrade_gate.model import (
    ChecklistRow,
    Finding,
    NodeName,
    NodeReport,
    PhaseStatus,
    RuleId,
    Severity,
    Snapshot,
)

FLEET = NodeName("fleet")
SHIPPED = ("pre-change", "canary", "observe")


@dataclass(frozen=True, slots=True, kw_only=True)
class ChecklistItem:
    """One checklist item (automatic when it names rules/phases/evidence, manual when `attest`)."""

    id: str
    item: str
    criterion: str
    owner: str
    required: bool = True
    attest: bool = False
    rules: tuple[RuleId, ...] = ()
    paths: Mapping[RuleId, tuple[str, ...]] = field(default_factory=dict)  # rule -> path globs it counts
    phases: tuple[int, ...] = ()
    evidence: tuple[str, ...] = ()
    max_canary_fraction: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Checklist:
    """A named checklist."""

    name: str
    title: str
    items: tuple[ChecklistItem, ...]
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ChecklistInputs:
    """What the evaluation reads: the judged nodes and the documents behind them."""

    node_reports: Sequence[NodeReport]
    candidates: Mapping[NodeName, Snapshot]
    baselines: Mapping[NodeName, Snapshot]
    evaluated: Mapping[NodeName, frozenset[RuleId]]  # rules that ran per candidate
    plan: ChangePlan | None
    policy: Policy


_SUFFIXES = (".yaml", ".yml", ".json")
MAX_CHECKLIST_FILES = 1024
"""Most checklist files one `--checklist FOLDER` may hold (each at most `docio.MAX_YAML_BYTES`; issue 26)."""


def load_checklist(name_or_path: str) -> Checklist:
    """A shipped checklist by name (`pre-change`, `canary`, `observe`) or a checklist file."""
    if name_or_path in SHIPPED:
        ref = shipped.folder("checklists") / f"{name_or_path}.yaml"
        return checklist_from_dict(docio.load_yaml(ref.read_text(encoding="utf-8")), source=f"{name_or_path} (shipped)")
    path = Path(name_or_path)
    if not path.exists():
        raise NotFoundError(f"{name_or_path}: no such checklist (shipped: {', '.join(SHIPPED)}), file or folder")
    return checklist_from_dict(docio.read_yaml(path), source=str(path))


def load_checklists(names_or_paths: Sequence[str]) -> list[Checklist]:
    """Every `--checklist` argument: a shipped name, a file, or a folder of checklist files (by file name)."""
    out: list[Checklist] = []
    for arg in names_or_paths:
        path = Path(arg)
        if arg not in SHIPPED and path.is_dir():
            files: list[Path] = []
            for p in path.iterdir():  # counted as found: a folder of a million files is refused early
                if p.suffix in _SUFFIXES:
                    if not p.is_file():  # a FIFO, a device, a dangling link: named, never skipped without a word
                        raise InputError(f"{p}: a checklist name, but not a regular file; refused")
                    files.append(p)
                    if len(files) > MAX_CHECKLIST_FILES:
                        raise InputError(f"{arg}: over the {MAX_CHECKLIST_FILES} checklists a folder may hold; refused")
            files.sort()
            if not files:
                raise NotFoundError(f"{arg}: a folder without checklists (*.yaml, *.yml, *.json)")
            out.extend(load_checklist(str(p)) for p in files)
        else:
            out.append(load_checklist(arg))
    return out


def checklist_from_dict(data: object, *, source: str) -> Checklist:
    """Validate and build a checklist document; rule ids must be registered."""
    from upgrade_gate.judge.rules import REGISTRY

    try:
        schemas.validate("checklist", data, source=source)
    except SchemaError as exc:
        raise ConfigError(str(exc)) from None
    assert isinstance(data, dict)
    items = []
    for i, raw in enumerate(data["items"]):
        unknown = [r for r in raw.get("rules", ()) if r not in REGISTRY]
        if unknown:
            raise ConfigError(f"{source}: checklist: $.items[{i}].rules: unknown rule {unknown[0]!r}")
        scoped = {RuleId(r): tuple(globs) for r, globs in raw.get("paths", {}).items()}
        stray = sorted(set(scoped) - set(raw.get("rules", ())))
        if stray:
            raise ConfigError(f"{source}: checklist: $.items[{i}].paths: {stray[0]!r} is not one of the item's rules")
        attest = bool(raw.get("attest", False))
        automatic = raw.get("rules") or raw.get("phases") or raw.get("evidence") or "max_canary_fraction" in raw
        if attest == bool(automatic):
            what = "both attest and rules/phases/evidence" if attest else "neither attest nor rules/phases/evidence"
            raise ConfigError(f"{source}: checklist: $.items[{i}]: item {raw['id']} has {what}")
        items.append(
            ChecklistItem(
                id=raw["id"],
                item=raw["item"],
                criterion=raw["criterion"],
                owner=raw["owner"],
                required=bool(raw.get("required", True)),
                attest=attest,
                rules=tuple(RuleId(r) for r in raw.get("rules", ())),
                paths=scoped,
                phases=tuple(raw.get("phases", ())),
                evidence=tuple(raw.get("evidence", ())),
                max_canary_fraction=raw.get("max_canary_fraction"),
            )
        )
    ids = [it.id for it in items]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ConfigError(f"{source}: checklist: item id {twice[0]!r} is used twice")
    return Checklist(name=data["name"], title=data["title"], items=tuple(items), source=source)


def evaluate_checklists(
    checklists: Sequence[Checklist],
    inputs: ChecklistInputs,
    attestations: Mapping[str, str],
) -> tuple[tuple[ChecklistRow, ...], tuple[Finding, ...]]:
    """The report rows of every item, and the findings failed or unattested items raise."""
    known = {it.id for cl in checklists for it in cl.items}
    stray = sorted(set(attestations) - known)
    if stray:
        raise InputError(f"--attest {stray[0]}: no such item in the checklists {[c.name for c in checklists]}")
    rows: list[ChecklistRow] = []
    findings: list[Finding] = []
    for cl in checklists:
        for it in cl.items:
            if it.attest:
                row, problem = _manual(cl, it, attestations.get(it.id))
                rule = RuleId("checklist.unattested")
            else:
                row, problem = _attested(cl, it, *_automatic(cl, it, inputs), attestations.get(it.id))
                rule = RuleId("checklist.unverified")
            rows.append(row)
            entry = inputs.policy.rule_for(rule, None)
            if problem is not None and entry is not None and entry.enabled:
                findings.append(
                    Finding(
                        rule=rule,
                        severity=entry.severity if it.required else softer(entry.severity),
                        node=FLEET,
                        message=f"checklist {cl.name}: {it.id} ({it.item}): {problem}",
                        device=it.id,
                        path=f"checklist[{cl.name}].{it.id}",
                        expected=it.criterion,
                        actual=row.actual,
                        evidence=cl.source,
                    )
                )
    return tuple(rows), tuple(findings)


def _manual(cl: Checklist, it: ChecklistItem, who: str | None) -> tuple[ChecklistRow, str | None]:
    if who:
        return _row(cl, it, f"attested by {who}", who, "attested"), None
    return _row(cl, it, "not attested", it.owner, "unattested"), f"not attested (--attest {it.id}=NAME)"


def _attested(
    cl: Checklist, it: ChecklistItem, row: ChecklistRow, problem: str | None, who: str | None
) -> tuple[ChecklistRow, str | None]:
    """An automatic item's row with its attestation applied: `unverified` becomes `attested` (the missing
    evidence named), `fail` stays `fail` (said so), `pass` stays `pass`."""
    if not who or problem is None:
        return row, problem
    if row.status == "unverified":
        return _row(cl, it, f"attested by {who} (no evidence: {problem})", who, "attested"), None
    return _row(cl, it, f"{row.actual} (attested by {who}: an attestation does not override failing evidence)",
                it.owner, row.status), problem  # fmt: skip


def _automatic(cl: Checklist, it: ChecklistItem, inputs: ChecklistInputs) -> tuple[ChecklistRow, str | None]:
    problems: list[str] = []
    missing: list[str] = []  # evidence that is not there: the row reads `unverified`, never `pass`
    candidates = inputs.candidates
    if "candidates" in it.evidence and not candidates:
        missing.append("no candidate nodes")
    if "plan" in it.evidence and inputs.plan is None:
        missing.append("no change plan given")
    if "baseline" in it.evidence:
        lacking = sorted(n for n in candidates if n not in inputs.baselines)
        if lacking:
            missing.append(f"no baseline for {', '.join(lacking)}")
    if it.max_canary_fraction is not None and inputs.plan is not None:
        share = inputs.plan.canaries.max_fraction
        if share > it.max_canary_fraction:
            problems.append(f"plan canaries.max_fraction is {share:.0%}, above {it.max_canary_fraction:.0%}")
    for name, snap in sorted(candidates.items()):
        cls = snap.node.node_class
        ran = inputs.evaluated.get(name, frozenset())
        for rule in it.rules:
            entry = inputs.policy.rule_for(rule, cls)
            if entry is not None and entry.enabled and rule not in ran:
                missing.append(f"{name}: rule {rule} did not run (no baseline to compare with)")
            elif entry is None or not entry.enabled:
                missing.append(f"{name}: rule {rule} is switched off by the policy")
            elif loose := inputs.policy.loosened(rule, cls):
                missing.append(
                    f"{name}: rule {rule} judged more leniently than the shipped default ({', '.join(loose)})"
                )
            elif _measures(it, rule) and (wide := plan_loosened(inputs.plan, inputs.policy, cls)):
                missing.append(f"{name}: rule {rule} judges what the plan accepts more leniently ({'; '.join(wide)})")
        results = {r.phase: r for r in snap.phases}
        for phase in it.phases:
            if not inputs.policy.phase_applies(phase, cls):
                continue
            result = results.get(phase)
            if result is None:
                missing.append(f"{name}: phase {phase} has no result (it did not run)")
            elif result.status in (PhaseStatus.PASSED, PhaseStatus.FAILED):
                if result.status is PhaseStatus.FAILED:
                    problems.append(f"{name}: phase {phase} failed")
            else:
                missing.append(f"{name}: phase {phase} {result.status.value}")
    blocking: dict[str, int] = {}
    quieted: set[str] = set()  # a rule the policy lowered so that it cannot block, which spoke: not a pass
    for nr in inputs.node_reports:
        for f in nr.findings:
            if not counts_under(it, f):
                continue
            if f.severity is Severity.BLOCK:
                where = f"{f.node}: {f.rule}"
                blocking[where] = blocking.get(where, 0) + 1
            elif (held := candidates.get(f.node)) is not None and inputs.policy.lowered(f.rule, held.node.node_class):
                quieted.add(f"{f.node}: rule {f.rule} found something, but the policy lowered it to {f.severity.value}")
    for where, count in sorted(blocking.items()):
        problems.append(f"{where} ({count} blocking finding{'s' if count > 1 else ''})")
    missing.extend(sorted(quieted))
    if problems or missing:
        every = problems + missing
        status = "fail" if problems else "unverified"
        return _row(cl, it, f"{status}: " + "; ".join(every), it.owner, status), "; ".join(every)
    parts = []
    if it.rules:
        parts.append(f"no blocking findings from {', '.join(it.rules)}")
    if it.phases:
        parts.append(f"phase(s) {', '.join(map(str, it.phases))} passed where they apply")
    if it.evidence or it.max_canary_fraction is not None:
        parts.append("evidence present")
    return _row(cl, it, f"pass: {'; '.join(parts)} on {len(candidates)} node(s)", it.owner, "pass"), None


def _measures(item: ChecklistItem, rule: str) -> bool:
    """True when `item` counts `rule`'s findings on measurements (a rule that judges plan-accepted metrics)."""
    globs = item.paths.get(RuleId(rule))
    return rule in PLAN_JUDGED and (globs is None or any(g.startswith("measurements") for g in globs))


def counts_under(item: ChecklistItem, finding: Finding) -> bool:
    """True when `finding` belongs to `item`: its rule is listed, and its path matches the rule's globs if any.

    `fleet.odd_one_out` speaks of GPU order, firmware, VF counts and bandwidth alike; the device-order
    item counts only its order findings, the AllReduce item only its bandwidth ones.
    """
    if finding.rule not in item.rules:
        return False
    globs = item.paths.get(finding.rule)
    return globs is None or (finding.path is not None and any(glob_match(g, finding.path) for g in globs))


def _row(cl: Checklist, it: ChecklistItem, actual: str, owner: str, status: str) -> ChecklistRow:
    return ChecklistRow(
        checklist=cl.name,
        item_id=it.id,
        item=it.item,
        criterion=it.criterion,
        actual=actual,
        owner=owner,
        status=status,
        required=it.required,
    )
