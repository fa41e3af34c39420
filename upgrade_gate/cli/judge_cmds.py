"""The judge's commands: `diff` (what changed, expected or not) and `gate` (PASS / BLOCK).

`upgrade-gate diff BASELINE CANDIDATE [--plan PLAN] [--policy POLICY] [--json]` prints every change
between two snapshots with its path and both values, marked expected (by the plan), UNEXPECTED, or
left to the rule that judges the candidate's value / informational, as the coverage table
(`judge.coverage`) says; exit 0 when no change is UNEXPECTED, 1 when any is, 3 for a bad document.
`gate` reads the same table and blocks on every change `diff` calls UNEXPECTED.

`upgrade-gate gate --store DIR [--ref REF] (--candidate SNAPSHOT|BUNDLE... | --candidates DIR|LISTFILE...) [--plan PLAN]
[--policy POLICY] [--cvf-config FILE] [--checklist NAME...] [--attest ITEM=NAME...]
[--report FORMAT:PATH...]` judges candidates against their baselines in the store, prints the
console report and writes the requested reports; exit 0 PASS, 1 BLOCK, 2 bad flags, 3 a bad
document, 4 the store cannot be read.

Candidates: a path ending in `.json` is a snapshot; a directory or `.tar.gz`/`.tgz` is a capture
bundle, turned into a snapshot by the snapshot builder. `--candidates` takes a directory of them or a
list file (one path a line), so a fleet needs no argv. Without `--checklist`, candidates are streamed
through forked workers (`cli.gate_stream`: load, judge, release); above 64 nodes the console prints a
summary and the full report goes to `--report json:PATH`. Class references for nodes without a baseline
(and for the odd-node-out rule) come from the store: a saved `classes/<class>.json` at the ref when
there is one, else an aggregate of the store's baselines of that class. The denylist is always read
at the store's HEAD, whatever `--ref` says: `--ref` picks the baselines to compare with, while a GPU
denied yesterday must block today even when the reference tag is older than the deny. Heavy modules (the store's
gitpython, the reporters' rich, deepdiff, scipy) are imported inside the command bodies.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from upgrade_gate.errors import ExitCode, InputError, NotFoundError, StoreError, UsageError
from upgrade_gate.report.printable import json_printable, one_line
from upgrade_gate.store.layout import DEFAULT_STORE, STORE_ENV, STORE_HELP

if TYPE_CHECKING:
    from upgrade_gate.judge.plan import ChangePlan
    from upgrade_gate.judge.policy import Policy
    from upgrade_gate.model import GateReport, NodeName, Snapshot
    from upgrade_gate.parse.dmesg import PatternTable
    from upgrade_gate.report.interface import ConsoleDetail, ReportFormat
    from upgrade_gate.store.gitstore import BaselineStore


def register(app: typer.Typer) -> None:
    """Add `diff` and `gate` to the app."""
    app.command("diff")(diff_cmd)
    app.command("gate")(gate_cmd)


# --------------------------------------------------------------------------- inputs


def load_candidate(path: Path, patterns: PatternTable | None = None) -> Snapshot:
    """A snapshot file (`.json`) or a capture bundle (directory, `.tar.gz`, `.tgz`; its kernel log
    classified with `patterns`, the policy's fatal-error map)."""
    name = path.name.lower()
    if name.endswith(".json"):
        from upgrade_gate.snapshot.io import load_snapshot

        return load_snapshot(path)
    if path.is_dir() or name.endswith((".tar.gz", ".tgz")):
        if not path.exists():
            raise NotFoundError(f"{path}: no such file")
        from upgrade_gate.snapshot.build import snapshot_from_bundle

        return snapshot_from_bundle(path, patterns=patterns)
    if not path.exists():
        raise NotFoundError(f"{path}: no such file or directory")
    raise InputError(f"{path}: expected a snapshot (.json) or a capture bundle (directory, .tar.gz)")


def read_cvf_config(path: Path) -> dict[str, Any]:
    """The KEY: value mapping of `--cvf-config` (values checked by the policy): `validate --config`'s reader."""
    from upgrade_gate.validate.config import read_cvf_values

    return read_cvf_values(path)


def attested_against(attestations: Mapping[str, str], checklists: Sequence[object]) -> None:
    """An attestation with no checklist to hold its item would be a silent no-op: a usage error."""
    if attestations and not checklists:
        raise UsageError("--attest needs a --checklist that holds the item; none was given")


def parse_attestations(values: Sequence[str]) -> dict[str, str]:
    """`ITEM=NAME` pairs; a malformed one is a usage error."""
    out: dict[str, str] = {}
    for value in values:
        item, sep, name = value.partition("=")
        if not sep or not item.strip() or not name.strip():
            raise UsageError(f"--attest {value!r}: expected ITEM=NAME, e.g. pre.rollback-plan=alice")
        out[item.strip()] = name.strip()
    return out


def parse_reports(values: Sequence[str]) -> list[tuple[ReportFormat, Path]]:
    """`FORMAT:PATH` pairs; an unknown format is a usage error."""
    from upgrade_gate.report.interface import ReportFormat

    out: list[tuple[ReportFormat, Path]] = []
    for value in values:
        fmt, sep, path = value.partition(":")
        try:
            chosen = ReportFormat(fmt.strip().lower())
        except ValueError:
            chosen = None
        if not sep or not path or chosen is None:
            known = ", ".join(f.value for f in ReportFormat)
            raise UsageError(f"--report {value!r}: expected FORMAT:PATH with FORMAT one of {known}")
        out.append((chosen, Path(path)))
    seen: dict[str, str] = {}
    for fmt, target in out:
        where = os.path.abspath(target)
        if where in seen:
            raise UsageError(
                f"--report {target}: named twice ({seen[where]} and {fmt.value}): one would overwrite the other"
            )
        seen[where] = fmt.value
    return out


def refuse_overwriting_inputs(
    outputs: Sequence[tuple[ReportFormat, Path]], inputs: Iterable[Path | None], *, store: Path | None = None
) -> None:
    """UsageError when a `--report` path is one of the command's inputs (`--report json:plan.yaml` wrote the
    report over the plan): the same path, or the same file by another name; or lies in the baseline store's
    folder, which only the store writes (`--report json:store/nodes/N.json` dirtied its checkout)."""
    if not outputs:
        return
    if store is not None:
        _refuse_inside(outputs, store, f"inside the baseline store {store}; only baseline save writes there")
    by_path = {os.path.abspath(path): (fmt, path) for fmt, path in outputs}
    by_file = {}  # the report files that exist already: an input may name one by another path (a link)
    for fmt, path in outputs:
        with contextlib.suppress(OSError):
            st = os.stat(path)
            by_file[(st.st_dev, st.st_ino)] = (fmt, path)
    for given in inputs:
        if given is None:
            continue
        if os.path.isdir(given):  # a capture bundle's folder: a report inside it overwrote its manifest
            _refuse_inside(outputs, given, f"inside the input {given}; the report would change it")
        hit = by_path.get(os.path.abspath(given))
        if hit is None and by_file:
            with contextlib.suppress(OSError):
                st = os.stat(given)
                hit = by_file.get((st.st_dev, st.st_ino))
        if hit is not None:
            raise UsageError(
                f"--report {hit[0].value}:{hit[1]}: that is the input {given}; the report would overwrite it"
            )


def _refuse_inside(outputs: Sequence[tuple[ReportFormat, Path]], folder: Path, why: str) -> None:
    """UsageError naming the first `--report` path that lies in `folder` (links resolved)."""
    inside = os.path.realpath(folder)
    for fmt, path in outputs:
        if os.path.commonpath([inside, os.path.realpath(path)]) == inside:
            raise UsageError(f"--report {fmt.value}:{path}: {why}")


# --------------------------------------------------------------------------- diff


def diff_cmd(
    baseline: Path = typer.Argument(..., help="Baseline snapshot (.json) or capture bundle."),
    candidate: Path = typer.Argument(..., help="Candidate snapshot (.json) or capture bundle."),
    plan: Path | None = typer.Option(None, "--plan", help="Change plan: its changes are marked expected."),
    policy: Path | None = typer.Option(None, "--policy", help="Policy: its ignore_paths are left out."),
    as_json: bool = typer.Option(False, "--json", help="Print the changes as JSON."),
) -> ExitCode:
    """Show what changed between two snapshots, each change marked expected or unexpected."""
    from upgrade_gate.judge.coverage import CoverageKind, coverage_of
    from upgrade_gate.judge.diff import diff_snapshots
    from upgrade_gate.judge.judge import plan_marked
    from upgrade_gate.judge.plan import glob_match, load_plan
    from upgrade_gate.judge.policy import load_policy

    loaded_plan = load_plan(plan) if plan is not None else None
    ignore = load_policy(policy).ignore_paths if policy is not None else ()
    before, after = load_candidate(baseline), load_candidate(candidate)
    changes = [
        c
        for c in plan_marked(diff_snapshots(before, after), loaded_plan)
        if not any(glob_match(g, c.path) for g in ignore)
    ]
    marks: list[str] = []
    for c in changes:
        found = coverage_of(c.path)
        if c.expected:
            marks.append(f"expected ({c.expected_by})")
        elif found is None or found[1].kind is CoverageKind.COMPARED:
            rule = found[1].rule if found is not None else "field.unplanned"
            marks.append(f"UNEXPECTED, {rule}")
        elif found[1].kind is CoverageKind.CHECKED:
            marks.append(f"judged on the candidate by {found[1].rule}")
        else:
            marks.append(f"informational: {found[1].reason}")
    unexpected = sum(1 for m in marks if m.startswith("UNEXPECTED"))
    if as_json:
        from upgrade_gate import codec
        from upgrade_gate.snapshot.io import canonical_json

        doc: dict[str, Any] = {
            "baseline": {"node": before.node.name, "taken_at": before.taken_at},
            "candidate": {"node": after.node.name, "taken_at": after.taken_at},
            "plan": loaded_plan.id if loaded_plan is not None else None,
            "changes": [{**codec.to_jsonable(c), "judged": mark} for c, mark in zip(changes, marks, strict=True)],
            "unexpected": unexpected,
        }
        typer.echo(json_printable(canonical_json(doc)), nl=False)
    else:
        title = f"{before.node.name} ({before.taken_at}) -> {after.node.name} ({after.taken_at})"
        typer.echo(one_line(title + (f", plan {loaded_plan.id}" if loaded_plan is not None else "")))
        for c, mark in zip(changes, marks, strict=True):
            typer.echo(one_line(f"  {c.op.value:8} {c.path}: {_show(c.baseline)} -> {_show(c.candidate)}  [{mark}]"))
        typer.echo(f"{len(changes)} change(s), {unexpected} unexpected")
    return ExitCode.BLOCK if unexpected else ExitCode.PASS


def _show(value: object) -> str:
    if value is None:
        return "absent"
    if isinstance(value, dict | list):
        from upgrade_gate.snapshot.io import canonical_json

        text = canonical_json(value).replace("\n", " ").replace("  ", "")
        return text if len(text) <= 120 else text[:117] + "..."
    return repr(value) if isinstance(value, str) else str(value)


# --------------------------------------------------------------------------- gate


def gate_cmd(
    store: Path = typer.Option(DEFAULT_STORE, "--store", envvar=STORE_ENV, help=STORE_HELP, show_default=False),
    ref: str | None = typer.Option(None, "--ref", help="Baselines at this commit, tag or branch (default HEAD)."),
    candidates: list[Path] = typer.Option(
        [], "--candidate", help="Candidate snapshot (.json) or capture bundle (dir, .tar.gz); repeatable."
    ),
    candidate_sources: list[Path] = typer.Option(
        [],
        "--candidates",
        help="A directory of candidates (*.json, *.tar.gz, bundle dirs) or a list file (one path a line); "
        "repeatable. No argv limit at fleet scale.",
    ),
    plan: Path | None = typer.Option(None, "--plan", help="Change plan (YAML/JSON)."),
    policy: Path | None = typer.Option(None, "--policy", help="Policy laid over the shipped default."),
    cvf_config: Path | None = typer.Option(
        None, "--cvf-config", help="CVF cluster-validation-config ConfigMap (or KEY: value YAML) for thresholds."
    ),
    checklists: list[str] = typer.Option(
        [], "--checklist", help="Checklist: pre-change, canary, observe, a file, or a folder of them; repeatable."
    ),
    attest: list[str] = typer.Option([], "--attest", help="Attest a manual checklist item: ITEM=NAME; repeatable."),
    reports: list[str] = typer.Option(
        [], "--report", help="Also write a report: FORMAT:PATH (console, json, junit, markdown, html); repeatable."
    ),
    now: str | None = typer.Option(None, "--now", help="Report timestamp, ISO 8601 (default: the current time)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Console: every finding under its cause."),
    summary: bool = typer.Option(False, "--summary", help="Console: the verdict and one line per node (CI logs)."),
) -> ExitCode:
    """Judge candidates against their baselines under a plan and a policy: exit 0 PASS, 1 BLOCK."""
    from upgrade_gate.judge.checklist import load_checklists
    from upgrade_gate.judge.judge import judge
    from upgrade_gate.judge.plan import load_plan
    from upgrade_gate.judge.policy import load_policy
    from upgrade_gate.judge.rules.evidence import read_clock
    from upgrade_gate.model import replace
    from upgrade_gate.report.interface import ReportContext, ReportFormat
    from upgrade_gate.report.registry import render

    attestations = parse_attestations(attest)
    outputs = parse_reports(reports)
    named = (plan, policy, cvf_config, *candidates, *candidate_sources, *map(Path, checklists))
    refuse_overwriting_inputs(outputs, named, store=store)  # before anything is read
    detail = console_detail(verbose=verbose, summary=summary)
    timestamp = _timestamp(now)
    loaded_plan = load_plan(plan) if plan is not None else None
    cvf = read_cvf_config(cvf_config) if cvf_config is not None else None
    loaded_policy = load_policy(policy, cvf, cvf_source=str(cvf_config))
    loaded_checklists = load_checklists(checklists)
    attested_against(attestations, loaded_checklists)
    from upgrade_gate.cli.gate_stream import SUMMARY_FROM_NODES, candidate_paths, console_summary, gate_streaming

    paths = candidate_paths(candidates, candidate_sources)
    refuse_overwriting_inputs(outputs, paths[len(candidates) :])  # what the --candidates folders and lists name
    _warn_if_caches_off()
    _warn_if_rules_off(loaded_policy, loaded_plan)
    patterns = loaded_policy.kernel_events.table
    baselines: Mapping[NodeName, Snapshot] = {}
    by_name: Mapping[NodeName, Snapshot] = {}
    spoolable = all(fmt is ReportFormat.JSON for fmt, _ in outputs)
    if not loaded_checklists and not verbose and len(paths) > SUMMARY_FROM_NODES and spoolable:
        return _gate_spooled(store, ref, paths, outputs, plan=loaded_plan, policy=loaded_policy, now=timestamp)
    if not loaded_checklists:  # streaming: a node is loaded, judged and released (cli.gate_stream)
        with _open_store(store) as st:
            report = gate_streaming(
                st, ref, paths, plan=loaded_plan, policy=loaded_policy, now=timestamp, patterns=patterns
            )
    else:  # checklists read every candidate and baseline at once
        from upgrade_gate.store.inputs import load_judge_inputs

        snaps = [load_candidate(p, patterns) for p in paths]
        with _open_store(store) as st:
            inputs = load_judge_inputs(st, ref, snaps, nodes=loaded_plan.canaries.nodes if loaded_plan else ())
        baselines = inputs.baselines
        report = judge(
            baselines=baselines,
            candidates=snaps,
            plan=loaded_plan,
            policy=loaded_policy,
            references=inputs.references,
            denylist=inputs.denylist,
            attestations=attestations,
            checklists=loaded_checklists,
            now=timestamp,
            clock=read_clock(),
        )
        by_name = {s.node.name: s for s in snaps}
    ctx = ReportContext(
        report=report,
        baselines=baselines,
        candidates=by_name,
        color=sys.stdout.isatty() and "NO_COLOR" not in os.environ,
    )
    if len(report.nodes) > SUMMARY_FROM_NODES and not verbose:  # a fleet: a summary, not megabytes
        typer.echo(console_summary(report, reports=[f"{fmt.value}:{path}" for fmt, path in outputs]), nl=False)
    else:
        typer.echo(render(ReportFormat.CONSOLE, replace(ctx, detail=detail, width=console_width())), nl=False)
    write_reports(outputs, report, baselines=baselines, candidates=by_name)
    return _exit(report)


def _warn_if_rules_off(policy: Policy, plan: ChangePlan | None = None) -> None:
    """Say on stderr which rules the policy switches off or loosens, and which measurements the plan accepts
    more leniently than the policy judges them: a PASS without them is not the default's PASS."""
    from upgrade_gate.judge.policy_loosened import plan_loosened  # the judge stays out of the CLI's start-up

    notice = policy.switched_off()
    if notice is not None:
        typer.echo(f"warning: {one_line(notice)}", err=True)
    wide = plan_loosened(plan, policy, None)  # the general entry's tolerance; the checklist reads each class's
    if wide:
        typer.echo(
            f"warning: {one_line('the plan accepts measurements more leniently than the policy: ' + '; '.join(wide))}",
            err=True,
        )


def _warn_if_caches_off() -> None:
    """Say on stderr when this user's cache key is refused: the decoded-baseline cache is then off, which
    costs time, never the verdict (docs/caches.md). Not a silent no-op."""
    from upgrade_gate import cachekey

    refused = cachekey.refusal()
    if refused is not None:
        typer.echo(f"warning: {one_line(refused)}", err=True)


def _gate_spooled(
    store: Path,
    ref: str | None,
    paths: Sequence[Path],
    outputs: Sequence[tuple[ReportFormat, Path]],
    *,
    plan: ChangePlan | None,
    policy: Policy,
    now: str,
) -> ExitCode:
    """A fleet whose outputs are the console summary and JSON reports: the nodes' texts are spooled to a
    temporary file as the workers send them and the reports written from it (`gate_stream.gate_spooled`):
    the parent holds a summary line per node, not the fleet's node reports."""
    from upgrade_gate.cli.gate_stream import Spool, gate_spooled, summary_text
    from upgrade_gate.model import Verdict
    from upgrade_gate.report.json_report import write_json_texts

    with _open_store(store) as st, Spool() as spool:
        fleet = gate_spooled(
            st, ref, paths, spool, plan=plan, policy=policy, now=now, patterns=policy.kernel_events.table
        )
        lines = [line for line, _ in fleet.lines]
        typer.echo(summary_text(fleet.report, lines, reports=[f"{f.value}:{p}" for f, p in outputs]), nl=False)
        for fmt, path in outputs:
            write_json_texts(fleet.report, fleet.texts(), path)
            typer.echo(one_line(f"wrote {fmt.value} report to {path}"), err=True)
    return ExitCode.BLOCK if fleet.report.verdict is Verdict.BLOCK else ExitCode.PASS


def write_reports(
    outputs: Sequence[tuple[ReportFormat, Path]],
    report: GateReport,
    *,
    baselines: Mapping[NodeName, Snapshot],
    candidates: Mapping[NodeName, Snapshot],
) -> None:
    """Write each `--report FORMAT:PATH` (no colour), saying so on stderr."""
    from upgrade_gate.docio import write_text_atomic
    from upgrade_gate.report.interface import ReportContext, ReportFormat
    from upgrade_gate.report.registry import render

    ctx = ReportContext(report=report, baselines=baselines, candidates=candidates)
    for fmt, path in outputs:
        if fmt is ReportFormat.JSON:  # streamed node by node (a fleet's report is never held whole)
            from upgrade_gate.report.json_report import write_json

            write_json(ctx, path)
        else:
            write_text_atomic(path, render(fmt, ctx))
        typer.echo(one_line(f"wrote {fmt.value} report to {path}"), err=True)


def console_detail(*, verbose: bool, summary: bool) -> ConsoleDetail:
    """--verbose / --summary as a console level; both at once is a usage error."""
    from upgrade_gate.report.interface import ConsoleDetail

    if verbose and summary:
        raise UsageError("--verbose and --summary: choose one")
    return ConsoleDetail.VERBOSE if verbose else ConsoleDetail.SUMMARY if summary else ConsoleDetail.CAUSES


def console_width() -> int:
    """The terminal's width (COLUMNS overrides; 120 when stdout is no terminal), at least 60."""
    import shutil

    return max(60, shutil.get_terminal_size((120, 24)).columns)


def _exit(report: GateReport) -> ExitCode:
    from upgrade_gate.model import Verdict

    return ExitCode.BLOCK if report.verdict is Verdict.BLOCK else ExitCode.PASS


def _timestamp(now: str | None) -> str:
    if now is None:
        return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    try:
        datetime.fromisoformat(now.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--now {now!r}: expected an ISO 8601 date-time, e.g. 2026-11-30T12:00:00Z") from None
    return now


def _open_store(path: Path) -> BaselineStore:
    if not path.is_dir():
        raise StoreError(f"{path}: no baseline store here (create one with `upgrade-gate baseline save`)")
    try:
        from upgrade_gate.store.gitstore import BaselineStore
    except ImportError as exc:  # gitpython refuses to import without a git binary
        raise StoreError(f"{path}: the baseline store needs the git binary: {exc}") from exc
    return BaselineStore(path)
