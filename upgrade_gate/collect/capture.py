"""Run every probe of the catalogue through one `CommandRunner` and record what happened as a Bundle.

Design decisions:
- Never raises for a failing probe: a missing binary, a timeout, a non-zero exit, even a binary the
  kernel refuses to execute, becomes a recorded result with a reason. Failures are evidence; the judge
  blocks on them.
- Fallbacks are explicit. A probe with `fallback_for` (the rocm-smi probes) runs only when one of the
  probes it stands in for is unusable, and its record says which ones (`fallback_for`) and why
  (`note`). "Unusable" means the command failed, or, when an `output_check` is given, that the check
  rejects its output (the CLI passes one that runs the probe's parser, so an amd-smi that exits 0 but
  prints something no parser reads still triggers rocm-smi). The check is injected rather than imported
  because `collect` must not depend on the parsers.
- Probes whose globs matched nothing (`Probe.skip_reason`) are not run; they are recorded as ok with
  empty output and the reason as the note.
- Node names follow Kubernetes (DNS-1123 subdomain), because bundles, snapshots and the baseline store
  are keyed by the Kubernetes node name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from upgrade_gate import __version__
from upgrade_gate.collect.bundle import Bundle, ProbeRecord
from upgrade_gate.collect.probes import Probe, probe_catalogue
from upgrade_gate.collect.runner import CommandResult, CommandRunner
from upgrade_gate.errors import InputError
from upgrade_gate.model import NodeName, replace

OutputCheck = Callable[[Probe, CommandResult], str | None]
"""Returns why a successful probe's output is unusable (e.g. a ParseError message), or None."""

ProgressCallback = Callable[[ProbeRecord], None]
"""Called with each record as soon as its probe has finished."""

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")


def check_node_name(name: str) -> NodeName:
    """Return `name` as a NodeName if it is a DNS-1123 subdomain, else raise InputError naming it."""
    if len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
        raise InputError(
            f"node name {name!r} is not a DNS-1123 name (lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit, at most 253 characters)"
        )
    return NodeName(name)


def format_taken_at(moment: datetime) -> str:
    """ISO 8601 UTC with a `Z`, to the second: the form every document of upgrade-gate uses."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def capture(
    runner: CommandRunner,
    *,
    node: str,
    host_root: Path = Path("/"),
    timeout: float | None = None,
    hostname: str | None = None,
    probes: Sequence[Probe] | None = None,
    output_check: OutputCheck | None = None,
    taken_at: datetime | None = None,
    progress: ProgressCallback | None = None,
) -> Bundle:
    """Run every probe (the catalogue under `host_root`, or `probes`) and return the bundle.

    `timeout`, when given, replaces every probe's own timeout.
    """
    node_name = check_node_name(node)
    plan = tuple(probes) if probes is not None else probe_catalogue(host_root)
    if timeout is not None:
        plan = tuple(replace(p, timeout_s=timeout) for p in plan)
    names = [p.name for p in plan]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate probe names in {names}")
    started = format_taken_at(taken_at or datetime.now(UTC))
    targets = {t for p in plan for t in p.fallback_for}
    unusable: dict[str, str] = {}  # probe name -> why a fallback is needed
    records: list[ProbeRecord] = []
    for probe in plan:
        stood_in_for = tuple(t for t in probe.fallback_for if t in unusable)
        if probe.fallback_for and not stood_in_for:
            continue  # every probe it stands in for is fine: not needed
        note: str | None = None
        if stood_in_for:
            note = "stands in for " + "; ".join(f"{t} ({unusable[t]})" for t in stood_in_for)
        if probe.skip_reason is not None:
            result = CommandResult(argv=probe.argv, returncode=0, stdout="", stderr="", duration_s=0.0)
            note = probe.skip_reason
        else:
            result = _run(runner, probe)
        if probe.name in targets:
            problem = result.failure_reason()
            if problem is None and output_check is not None:
                problem = output_check(probe, result)
                if problem is not None:
                    note = f"output unusable: {problem}"
            if problem is not None:
                unusable[probe.name] = problem
        record = ProbeRecord(
            name=probe.name,
            parser=probe.parser,
            required=probe.required,
            timeout_s=probe.timeout_s,
            result=result,
            fallback_for=stood_in_for,
            note=note,
            skipped=probe.skip_reason is not None,
        )
        records.append(record)
        if progress is not None:
            progress(record)
    return Bundle(
        node=node_name,
        hostname=hostname,
        taken_at=started,
        tool_version=__version__,
        host_root=os.path.abspath(host_root),
        records=tuple(records),
    )


def _run(runner: CommandRunner, probe: Probe) -> CommandResult:
    # Runners record missing/unexecutable binaries and timeouts as values (LocalRunner catches OSError).
    return runner.run(probe.argv, timeout=probe.timeout_s)
