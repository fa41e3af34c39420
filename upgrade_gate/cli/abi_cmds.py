"""`upgrade-gate abi` (binary compatibility before a ROCm bump) and `upgrade-gate abi-list` (the probe).

`abi --running DIR --candidate DIR [--consumer PATH_OR_GLOB ...] [--plan PLAN] [--report FORMAT:PATH ...]`
compares the two library trees and checks the consumers against the candidate; it prints the
console report and writes the requested reports. Exit 0 PASS, 1 BLOCK, 2 bad flags, 3 bad input
(not a directory, no library in a tree, a consumer that names nothing, a corrupt ELF, a bad plan).

`abi-list DIR...` prints the JSON listing (`upgrade_gate.abi.listing`) that the `rocm_libs` probe
records for the snapshot.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer

from upgrade_gate.errors import ExitCode


def register(app: typer.Typer) -> None:
    """Add the `abi` and `abi-list` commands."""
    app.command("abi")(abi_cmd)
    app.command("abi-list")(abi_list_cmd)


def _cache(no_cache: bool, cache_dir: Path | None) -> Path | None:
    """The cache folder to use, or None; says on stderr when this user's cache key is refused (the cache
    is then off: every file is read, which costs time, never the verdict)."""
    from upgrade_gate import cachekey
    from upgrade_gate.abi.tree import default_cache_dir

    if no_cache:
        return None
    refused = cachekey.refusal()
    if refused is not None:
        typer.echo(f"warning: {refused}", err=True)
    return cache_dir or default_cache_dir()


def abi_cmd(
    running: Path = typer.Option(..., "--running", help="The library folder in use now (e.g. /opt/rocm-6.1.3/lib)."),
    candidate: Path = typer.Option(
        ..., "--candidate", help="The candidate's library folder (installed prefix or unpacked packages)."
    ),
    consumers: list[str] = typer.Option(
        [], "--consumer", help="A binary, folder or glob that loads ROCm libraries (e.g. torch/lib); repeatable."
    ),
    plan: Path | None = typer.Option(None, "--plan", help="Change plan: its change.sonames bumps are accepted."),
    reports: list[str] = typer.Option(
        [], "--report", help="Also write a report: FORMAT:PATH (console, json, junit, markdown, html); repeatable."
    ),
    cache_dir: Path | None = typer.Option(
        None,
        "--cache-dir",
        help="Symbol-table cache, keyed by file hash, each entry sealed with this user's key"
        " (default ~/.cache/upgrade-gate/abi; may be shared: other users' entries are not read).",
    ),
    no_cache: bool = typer.Option(False, "--no-cache", help="Read every file, write no cache."),
    workers: int | None = typer.Option(None, "--workers", min=1, help="Reader processes (default: one per CPU)."),
    now: str | None = typer.Option(None, "--now", help="Report timestamp, ISO 8601 (default: the current time)."),
    causes: bool = typer.Option(False, "--causes", help="Console: one line per cause instead of every finding."),
    summary: bool = typer.Option(False, "--summary", help="Console: the verdict and one line per subject (CI logs)."),
) -> ExitCode:
    """Check binary compatibility of a candidate ROCm library tree: exit 0 PASS, 1 BLOCK, 3 bad input."""
    from upgrade_gate.abi.verdict import check_abi
    from upgrade_gate.cli.judge_cmds import (
        _timestamp,
        console_width,
        parse_reports,
        refuse_overwriting_inputs,
        write_reports,
    )
    from upgrade_gate.errors import UsageError
    from upgrade_gate.judge.plan import load_plan
    from upgrade_gate.model import Verdict
    from upgrade_gate.report.interface import ConsoleDetail, ReportContext, ReportFormat
    from upgrade_gate.report.registry import render

    if causes and summary:
        raise UsageError("--causes and --summary: choose one")
    # Every finding by default: each one already names the consumer, the library and the symbol.
    detail = ConsoleDetail.CAUSES if causes else ConsoleDetail.SUMMARY if summary else ConsoleDetail.VERBOSE
    outputs = parse_reports(reports)
    refuse_overwriting_inputs(outputs, (plan,))
    timestamp = _timestamp(now)
    loaded = load_plan(plan) if plan is not None else None
    expected = {c.from_soname: c.to_soname for c in loaded.change.sonames} if loaded is not None else {}
    result = check_abi(
        running,
        candidate,
        consumers,
        expected=expected,
        plan_id=loaded.id if loaded is not None else None,
        cache_dir=_cache(no_cache, cache_dir),
        workers=workers,
        now=timestamp,
    )
    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    ctx = ReportContext(report=result.report, color=color, detail=detail, width=console_width())
    typer.echo(render(ReportFormat.CONSOLE, ctx), nl=False)
    typer.echo(
        f"read {result.running.files} running + {result.candidate.files} candidate library files "
        f"({result.running.cache_hits + result.candidate.cache_hits} from cache), {result.consumers} consumer(s)",
        err=True,
    )
    write_reports(outputs, result.report, baselines={}, candidates={})
    return ExitCode.BLOCK if result.report.verdict is Verdict.BLOCK else ExitCode.PASS


def abi_list_cmd(
    roots: list[Path] = typer.Argument(..., help="Library folders to list (e.g. /opt/rocm/lib)."),
    cache_dir: Path | None = typer.Option(None, "--cache-dir", help="Symbol-table cache, keyed by file hash."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Read every file, write no cache."),
    workers: int | None = typer.Option(None, "--workers", min=1, help="Reader processes (default: one per CPU)."),
) -> None:
    """Print the JSON listing of a node's ROCm libraries (soname, path, symbol-set hash): the snapshot probe."""
    from upgrade_gate.abi.listing import list_libraries

    doc = list_libraries(roots, cache_dir=_cache(no_cache, cache_dir), workers=workers)
    typer.echo(json.dumps(doc, indent=1))
