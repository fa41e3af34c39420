"""`upgrade-gate demo`: the whole story offline, in a work folder it names at the end.

`--scenario workload-regression` and `--scenario index-pinned` are the workload stories (demo.workload),
blocked as expected (exit 1).

Exit codes follow docs/architecture.md: the default (blocked) story exits 1 - BLOCK is its expected outcome and
the last lines say so - and `--healthy` exits 0 after promoting new baselines. 2 for bad flags (a
`--workdir` that is not empty), 4 when the demo cannot run (no git for the store, a fleet that is
not healthy before the change).
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from pathlib import Path

import typer

from upgrade_gate.errors import ExitCode


def register(app: typer.Typer) -> None:
    """Add `demo` to the app."""
    app.command("demo")(demo_cmd)


def demo_cmd(
    healthy: bool = typer.Option(
        False, "--healthy", help="Run the clean variant: the change passes and new baselines are promoted (exit 0)."
    ),
    workdir: Path | None = typer.Option(
        None, "--workdir", help="Work folder (created; must be empty). Default: a new temporary folder."
    ),
    keep: bool = typer.Option(
        False, "--keep", help="Also keep the fake nodes (their tools and host trees) in the work folder."
    ),
    scenario: str | None = typer.Option(
        None,
        "--scenario",
        help="A workload story: workload-regression (slower, timeouts, slow init) or index-pinned (exit 1).",
    ),
    vendor: str = typer.Option(
        "amd", "--vendor", help="amd (ROCm on MI300X, the default) or nvidia (driver 550 -> 570 on 8x H100)."
    ),
) -> ExitCode:
    """Gate a ROCm 6.1.3 -> 6.2.0 change on an 8-node fake MI300X fleet, offline (exit 1: blocked, as expected)."""
    from upgrade_gate.cli.collect_cmds import parser_check
    from upgrade_gate.demo import run_demo
    from upgrade_gate.demo.workload import SCENARIOS
    from upgrade_gate.errors import UsageError
    from upgrade_gate.model import Severity, Verdict

    if vendor not in ("amd", "nvidia") or (vendor == "nvidia" and scenario is not None):
        why = "takes no --scenario (the workload stories are AMD's)" if vendor == "nvidia" else "expected amd or nvidia"
        raise UsageError(f"--vendor {vendor}: {why}")
    if scenario is not None and (scenario not in SCENARIOS or healthy):
        why = "takes no --healthy" if scenario in SCENARIOS else f"expected one of {', '.join(SCENARIOS)}"
        raise UsageError(f"--scenario {scenario}: {why}")
    if scenario is not None:
        from upgrade_gate.demo.workload import torch_missing
        from upgrade_gate.errors import EnvironmentFailure

        if torch_missing():  # the story is the workload's: without PyTorch it would read as a clean change
            raise EnvironmentFailure(
                f"--scenario {scenario}: runs the reference training workload, which needs PyTorch "
                "(pip install 'upgrade-gate[workload]')"
            )
    folder = workdir if workdir is not None else Path(tempfile.mkdtemp(prefix="upgrade-gate-demo-"))
    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    if vendor == "nvidia":
        from upgrade_gate.demo.nvidia import run_nvidia_demo

        outcome = run_nvidia_demo(
            folder, healthy=healthy, say=typer.echo, output_check=parser_check(), color=color, keep_nodes=keep
        )
    else:
        outcome = run_demo(
            folder,
            healthy=healthy,
            say=typer.echo,
            output_check=parser_check(),
            color=color,
            keep_nodes=keep,
            scenario=scenario,
        )
    typer.echo("")
    if outcome.verdict is Verdict.BLOCK:
        nodes = [n.node for n in outcome.report.nodes if any(c.severity is Severity.BLOCK for c in n.causes)]
        typer.echo(
            f"Verdict: BLOCK (exit code {int(ExitCode.BLOCK)}). This is the expected outcome of the demo: the gate"
        )
        typer.echo(
            f"stopped the change on its canaries ({', '.join(nodes)}, one cause each) before it reached the others."
        )
        if scenario is None:
            again = (
                "upgrade-gate demo --vendor nvidia --healthy" if vendor == "nvidia" else "upgrade-gate demo --healthy"
            )
            typer.echo(f"Run `{again}` to see the same change pass and promote new baselines.")
    else:
        typer.echo(
            f"Verdict: PASS (exit code {int(ExitCode.PASS)}): the canaries match their baselines except for what "
            f"the plan changes; new baselines are tagged {outcome.promoted_tag}."
        )
    typer.echo("Replay the verdict yourself with the same gate, from the files the demo left:")
    for line in replay_lines(outcome.workdir, outcome.replay_argv):
        typer.echo(line)
    typer.echo(f"Everything is in {outcome.workdir} ({outcome.seconds:.1f}s).")
    return ExitCode.PASS if outcome.verdict is Verdict.PASS else ExitCode.BLOCK


def replay_lines(workdir: Path, argv: tuple[str, ...], width: int = 100) -> list[str]:
    """`cd WORKDIR && upgrade-gate gate ...` with paths relative to the work folder, as shell lines
    joined by backslash continuations, each within `width`."""
    root = str(workdir) + os.sep
    words = [shlex.quote(a.removeprefix(root)) for a in ("upgrade-gate", *argv)]
    lines = [f"  cd {shlex.quote(str(workdir))} &&"]
    current = "   "
    for i, word in enumerate(words):
        option = word.startswith("--") and i + 1 < len(words)
        piece = f"{word} {words[i + 1]}" if option else word
        if i > 0 and words[i - 1].startswith("--"):
            continue  # printed with its option
        if len(current) + 1 + len(piece) > width and current.strip():
            lines.append(current + " \\")
            current = "     "
        current += " " + piece
    lines.append(current)
    return lines
