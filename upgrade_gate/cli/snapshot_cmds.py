"""`upgrade-gate snapshot`: a bundle (or this host, live) to a schema-valid snapshot document."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from upgrade_gate.errors import ExitCode, UsageError
from upgrade_gate.report.printable import json_printable


def register(app: typer.Typer) -> None:
    """Add the `snapshot` command."""

    @app.command("snapshot")
    def snapshot_cmd(
        bundle: Path | None = typer.Argument(None, help="Capture bundle: a directory or .tar.gz."),
        local: bool = typer.Option(False, "--local", help="Capture this host now instead of reading a bundle."),
        out: Path | None = typer.Option(None, "--out", "-o", help="Write the snapshot here (default: stdout)."),
        node: str | None = typer.Option(None, "--node", help="Node name with --local (default: the hostname)."),
        node_class: str | None = typer.Option(None, "--class", help="Node class, e.g. mi300x-8gpu."),
        host_root: Path = typer.Option(Path("/"), "--host-root", help="Root of the host's sysfs/opt (--local)."),
        timeout: float | None = typer.Option(None, "--timeout", help="Per-probe timeout in seconds (--local)."),
    ) -> ExitCode:
        """Build a node snapshot from a capture bundle, or from this host with --local."""
        from upgrade_gate.snapshot.build import build_snapshot, snapshot_from_bundle
        from upgrade_gate.snapshot.io import CAPTURE_VERSION, dumps_snapshot, write_snapshot

        if local == (bundle is not None):
            raise UsageError("give either a BUNDLE or --local, not both and not neither")
        if bundle is not None:
            snap = snapshot_from_bundle(bundle, node_class=node_class)
        else:
            import socket

            from upgrade_gate.cli.collect_cmds import parser_check
            from upgrade_gate.collect.capture import capture, check_node_name
            from upgrade_gate.collect.runner import LocalRunner

            name = check_node_name(node or socket.gethostname().split(".")[0].lower())
            captured = capture(
                LocalRunner(env=dict(os.environ)),
                node=name,
                host_root=host_root,
                timeout=timeout,
                output_check=parser_check(),
            )
            snap = build_snapshot(captured, node_class=node_class)
        if out is None:
            typer.echo(json_printable(dumps_snapshot(snap, version=CAPTURE_VERSION)), nl=False)
        else:
            write_snapshot(snap, out, version=CAPTURE_VERSION)
            failed = [p.name for p in snap.probes if not p.ok]
            typer.echo(
                f"wrote {out}: node {snap.node.name}, {len(snap.gpus)} GPU(s), {len(snap.nics)} NIC(s), "
                f"{len(failed)} failed probe(s)" + (f" ({', '.join(failed)})" if failed else ""),
                err=True,
            )
        return ExitCode.PASS
