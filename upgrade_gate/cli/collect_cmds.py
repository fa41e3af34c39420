"""The collect commands: `capture` (run every probe, write a bundle) and `parse` (one parser, as JSON).

`capture` exits 0 even when probes failed: a failed probe is evidence recorded in the bundle, and
the snapshot and the judge turn it into a blocking finding. It exits 3 for a node name that is not a
DNS-1123 name and 4 when the bundle cannot be written (checked before the probes run, and again on
write). The `snapshot` command lives with the snapshot stage.

`--out -` writes the bundle as a `.tar.gz` to stdout (progress and the summary go to stderr): that is
how a capture Job on Kubernetes returns it, wrapped in a result frame in the pod log
(`fleet.resultframe`). The tarball is the same reproducible one `--out FILE.tar.gz` writes.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from upgrade_gate.errors import ExitCode, InputError, ParseError, UsageError
from upgrade_gate.report.printable import json_printable, one_line

if TYPE_CHECKING:  # the collect stage is imported by the commands that run it, not at start-up
    from upgrade_gate.collect.bundle import Bundle, ProbeRecord
    from upgrade_gate.collect.capture import OutputCheck
    from upgrade_gate.collect.probes import Probe
    from upgrade_gate.collect.runner import CommandResult


def register(app: typer.Typer) -> None:
    """Add `capture` and `parse` to the app."""
    app.command("capture")(capture_cmd)
    app.command("parse")(parse_cmd)


def capture_cmd(
    out: Path = typer.Option(
        ..., "--out", help="Bundle to write: a folder, FILE.tar.gz / FILE.tgz, or '-' (a .tar.gz on stdout)."
    ),
    node: str | None = typer.Option(
        None, "--node", help="Node name (DNS-1123); default: this host's name, lower-cased."
    ),
    timeout: float | None = typer.Option(
        None, "--timeout", help="Seconds each probe may run (default: the catalogue's, 30)."
    ),
    host_root: Path = typer.Option(
        Path("/"), "--host-root", help="Read /sys and /opt under this prefix (e.g. a hostPath mount)."
    ),
    vendor: str = typer.Option("amd", "--vendor", help="The GPU vendor's probes: amd (default) or nvidia."),
) -> ExitCode:
    """Run every probe on this host and write a capture bundle (exit 0 even if probes failed)."""
    from upgrade_gate.collect.bundle import check_bundle_target, write_bundle
    from upgrade_gate.collect.capture import capture, check_node_name
    from upgrade_gate.collect.probes import probe_catalogue
    from upgrade_gate.collect.runner import LocalRunner
    from upgrade_gate.vendors import vendor_named

    gpu_vendor = vendor_named(vendor)  # exit 2 for an unknown vendor
    if timeout is not None and not timeout > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {timeout}")
    if not host_root.is_dir():
        raise UsageError(f"--host-root {host_root}: not a folder")
    hostname = socket.gethostname()
    node_name = check_node_name(node if node is not None else hostname.lower())
    to_stdout = str(out) == "-"
    if not to_stdout:
        check_bundle_target(out)
    bundle = capture(
        LocalRunner(),
        node=node_name,
        host_root=host_root,
        timeout=timeout,
        hostname=hostname,
        output_check=parser_check(),
        progress=_print_record_stderr if to_stdout else _print_record,
        probes=probe_catalogue(host_root, vendor=gpu_vendor),
    )
    if to_stdout:
        _write_stdout(bundle)
    else:
        write_bundle(bundle, out)
    failed = sum(1 for r in bundle.records if not r.ok)
    typer.echo(
        f"wrote {'the bundle (.tar.gz) to stdout' if to_stdout else out}: {len(bundle.records)} probes, "
        f"{failed} failed" + (" (recorded as evidence; the snapshot and the gate judge them)" if failed else ""),
        err=to_stdout,
    )
    return ExitCode.PASS


def _write_stdout(bundle: Bundle) -> None:
    """The bundle as the reproducible tarball `write_bundle` makes, copied to stdout."""
    import tempfile

    from upgrade_gate.collect.bundle import write_bundle
    from upgrade_gate.errors import EnvironmentFailure

    with tempfile.TemporaryDirectory(prefix="upgrade-gate-capture-") as tmp:
        path = write_bundle(bundle, Path(tmp) / "bundle.tar.gz")
        data = path.read_bytes()
    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except OSError as exc:
        raise EnvironmentFailure(f"stdout: cannot write the bundle: {exc.strerror or exc}") from exc


def _record_line(record: ProbeRecord) -> str:
    status = "ok" if record.ok else "FAILED"
    detail = record.result.failure_reason() or record.note or f"{record.result.duration_s:.2f}s"
    if record.fallback_for and not record.ok:
        detail += f" (fallback for {', '.join(record.fallback_for)})"
    return one_line(f"{status:<7} {record.name:<16} {detail}")


def _print_record(record: ProbeRecord) -> None:
    typer.echo(_record_line(record))


def _print_record_stderr(record: ProbeRecord) -> None:
    typer.echo(_record_line(record), err=True)


def parser_check() -> OutputCheck:
    """An OutputCheck that runs the probe's parser, so unparseable output triggers the fallback."""
    from upgrade_gate.parse.registry import all_parsers

    parsers = all_parsers()

    def check(probe: Probe, result: CommandResult) -> str | None:
        parse = parsers.get(probe.parser)
        if parse is None:
            return None  # parser not available: only the command's own status counts
        try:
            parse(result.stdout)
        except ParseError as exc:
            return str(exc)
        except Exception as exc:  # a parser bug must not cost the node its evidence
            return f"{probe.parser} parser failed: {type(exc).__name__}: {exc}"
        return None

    return check


def parse_cmd(
    file: Path = typer.Argument(..., help="Raw tool output to parse ('-' reads stdin)."),
    tool: str = typer.Option(..., "--tool", help="Parser name, e.g. rocminfo, amd-smi-static, lspci."),
) -> ExitCode:
    """Run one parser on FILE and print its result as JSON (for debugging and fixtures)."""
    from upgrade_gate import codec
    from upgrade_gate.parse.registry import all_parsers

    parsers = all_parsers()
    parse = parsers.get(tool)
    if parse is None:
        known = ", ".join(sorted(parsers)) or "(none installed)"
        raise UsageError(f"unknown tool {tool!r}; known tools: {known}")
    text = _read_text(file)
    try:
        value = parse(text)
    except ParseError as exc:
        raise ParseError(exc.tool, exc.line_no, exc.excerpt, f"{file}: {exc.message}") from exc
    text = json.dumps(codec.to_jsonable(value), indent=2, sort_keys=True, ensure_ascii=False)
    typer.echo(json_printable(text))  # the tool's text: no terminal escape passes
    return ExitCode.PASS


MAX_PARSE_BYTES = 32 * 1024 * 1024
"""Largest input `parse` reads: what a bundle member may hold (`collect.members.BundleLimits`)."""


def _read_text(file: Path) -> str:
    """FILE (or stdin for '-'), at most MAX_PARSE_BYTES: /dev/zero or a huge file is exit 3 naming it."""
    from upgrade_gate.docio import read_bytes

    if str(file) == "-":
        data = sys.stdin.buffer.read(MAX_PARSE_BYTES + 1)
        if len(data) > MAX_PARSE_BYTES:
            raise InputError(f"-: standard input is over the {MAX_PARSE_BYTES >> 20} MiB `parse` reads; refused")
        return data.decode("utf-8", errors="replace")
    return read_bytes(file, limit=MAX_PARSE_BYTES).decode("utf-8", errors="replace")
