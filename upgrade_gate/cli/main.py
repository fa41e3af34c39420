"""Entry point: builds the Typer app and maps every outcome to an exit code in one place.

Commands return an `ExitCode` (or None for PASS); errors derive from `GateError` and carry their
own exit code. Nothing else in the package calls `sys.exit`, except `fleet.resultframe`, which is its
own entry point inside a Kubernetes pod (`python -m upgrade_gate.fleet.resultframe -- ARGV`). Each
command group lives in its own module with a `register(app)` function; heavy libraries are imported
inside command bodies so that `upgrade-gate --help` stays fast.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer
from typer.exceptions import TyperException

from upgrade_gate import __version__
from upgrade_gate.errors import ExitCode, GateError

COMMAND_MODULES = (
    "upgrade_gate.cli.collect_cmds",
    "upgrade_gate.cli.snapshot_cmds",
    "upgrade_gate.cli.baseline_cmds",
    "upgrade_gate.cli.judge_cmds",
    "upgrade_gate.cli.validate_cmds",
    "upgrade_gate.cli.fleet_cmds",
    "upgrade_gate.cli.demo_cmd",
    "upgrade_gate.cli.abi_cmds",
)

_state: dict[str, bool] = {"debug": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"upgrade-gate {__version__}")
        raise typer.Exit(0)


def build_app() -> typer.Typer:
    """Create the app with every command group registered."""
    app = typer.Typer(
        name="upgrade-gate",
        help=(
            "Keep GPU clusters safe through driver, ROCm and firmware changes: snapshot nodes, validate "
            "canaries with the CVF phases, and gate the change (exit 0 PASS, 1 BLOCK, 2 usage, 3 bad "
            "input, 4 environment)."
        ),
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )

    @app.callback()
    def _root(
        debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
        version: bool = typer.Option(
            False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ) -> None:
        _state["debug"] = debug

    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)
    return app


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return the exit code instead of exiting (used by tests and `main`)."""
    app = build_app()
    try:
        result: Any = app(args=argv, prog_name="upgrade-gate", standalone_mode=False)
    except GateError as exc:
        if _state["debug"]:
            import traceback

            traceback.print_exc()
        print(f"upgrade-gate: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        print("upgrade-gate: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except TyperException as exc:  # typer >= 0.28 vendors click: usage errors, bad parameters
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            print(f"upgrade-gate: error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    except KeyboardInterrupt:
        print("upgrade-gate: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    if result is None:
        return int(ExitCode.PASS)
    return int(result)


def main() -> None:
    """Console-script entry point."""
    sys.exit(run(sys.argv[1:]))
