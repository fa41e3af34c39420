"""Entry point: builds the Typer app and maps every outcome to an exit code in one place.

Commands return an `ExitCode` (or None for PASS); errors derive from `GateError` and carry their
own exit code. Nothing else in the package calls `sys.exit`, except the result wrapper a Kubernetes pod
runs (`fleet.framewrapper`, sent as stdlib-only source: `python3 -I -S -c SOURCE -- ARGV`; also
`python -m upgrade_gate.fleet.resultframe`), which is its own entry point. Each
command group lives in its own module with a `register(app)` function; heavy libraries are imported
inside command bodies so that `upgrade-gate --help` stays fast. `cli.boot`, imported first, makes a
signal before `run` installs its handlers (or after it restores them) exit 130/143 as well.
"""

from __future__ import annotations

from upgrade_gate.cli import boot  # first, before typer: a signal from here on exits 130/143 (see boot)

# isort: split

import contextlib
import errno
import importlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
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

TRACEBACK_ENV = "UPGRADE_GATE_TRACEBACK"
"""Set to 1 to print the stack of any error (same as `--traceback`)."""

ALLOW_MOVED_TAG_ENV = "UPGRADE_GATE_ALLOW_MOVED_TAG"
"""Same name as `store.gitstore.ALLOW_MOVED_TAG_ENV` (pinned by a test; not imported: gitpython is slow)."""


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
            "input, 4 environment, 70 internal error, 130 SIGINT, 143 SIGTERM)."
        ),
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )

    @app.callback()
    def _root(
        debug: bool = typer.Option(
            False, "--traceback", "--debug", help=f"Show the stack of any error (or set {TRACEBACK_ENV}=1)."
        ),
        version: bool = typer.Option(
            False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
        allow_moved_tag: bool = typer.Option(
            False,
            "--allow-moved-tag",
            help=f"Read baselines at a tag that was moved or made by hand (or set {ALLOW_MOVED_TAG_ENV}=1).",
        ),
    ) -> None:
        _state["debug"] = debug
        if allow_moved_tag:  # read by store.gitstore (which the CLI imports only when a command needs it)
            os.environ[ALLOW_MOVED_TAG_ENV] = "1"

    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)
    return app


class Terminated(BaseException):
    """Raised in the main thread by the SIGTERM handler, so every `finally` on the way out runs."""


class Interrupted(BaseException):
    """Raised by the SIGINT handler instead of KeyboardInterrupt, which typer turns into a silent Exit(130)."""


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return the exit code instead of exiting (used by tests and `main`).

    Every exception ends in a documented code with a one-line message: GateError its own, OSError 4
    (a file that cannot be written is the environment's fault), SIGINT 130, SIGTERM 143, anything
    else 70 (a bug). On every way out the process groups of started tools are killed. Commands given
    `--json` or `--report json:...` also print the error as a JSON document on stdout.
    """
    from upgrade_gate.collect.runner import kill_children

    args = list(sys.argv[1:] if argv is None else argv)
    json_errors = _wants_json(args)
    previous = _install_handlers()
    allow_moved_tag = os.environ.get(ALLOW_MOVED_TAG_ENV)
    try:
        return _run(args, json_errors)
    finally:
        kill_children()
        _restore_handlers(previous)
        if allow_moved_tag is None:  # the root option sets it for this run only
            os.environ.pop(ALLOW_MOVED_TAG_ENV, None)
        else:
            os.environ[ALLOW_MOVED_TAG_ENV] = allow_moved_tag


def _run(args: list[str], json_errors: bool) -> int:
    _state["debug"] = False
    try:
        app = build_app()  # inside: a signal while the command modules are imported is mapped too
        result: Any = app(args=args, prog_name="upgrade-gate", standalone_mode=False)
    except GateError as exc:
        return _fail(exc, str(exc), int(exc.exit_code), json_errors)
    except typer.Exit as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # typer turns Ctrl-C into a silent Exit(130)
            return _fail(exc, "interrupted (SIGINT)", int(ExitCode.INTERRUPTED), json_errors, kind="Interrupted")
        return int(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt, Interrupted) as exc:
        return _fail(exc, "interrupted (SIGINT)", int(ExitCode.INTERRUPTED), json_errors, kind="Interrupted")
    except Terminated as exc:
        return _fail(exc, "terminated (SIGTERM)", int(ExitCode.TERMINATED), json_errors, kind="Terminated")
    except TyperException as exc:  # typer >= 0.28 vendors click: usage errors, bad parameters
        show = getattr(exc, "show", None)
        if json_errors:
            fmt = getattr(exc, "format_message", None)
            _print_json(fmt() if callable(fmt) else str(exc), "UsageError", int(ExitCode.USAGE))
        if callable(show):
            show(file=_Printable(sys.stderr))  # the usage error quotes the user's words
        else:
            print(f"upgrade-gate: error: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    except SystemExit as exc:  # click's answer to a broken pipe is sys.exit(1): BLOCK's code, without a word
        if _broken_pipe(exc):
            return _stdout_gone(exc)
        if exc.code in (0, 1, None):  # nothing of ours exits so: a verdict is returned, never raised
            return _fail(
                exc,
                f"internal error: SystemExit({exc.code}) inside a command (a bug)",
                int(ExitCode.INTERNAL),
                json_errors,
            )
        raise
    except BrokenPipeError as exc:
        return _stdout_gone(exc)
    except OSError as exc:  # a report, snapshot or bundle that cannot be written; a full disk
        where = f"{exc.filename}: " if exc.filename else ""
        return _fail(exc, f"{where}{exc.strerror or exc}", int(ExitCode.ENVIRONMENT), json_errors)
    except Exception as exc:  # a bug: never let it read as PASS (0) or BLOCK (1)
        signalled = _signal_inside(exc)
        if signalled is not None:  # a signal's exception wrapped by Python (a class body's __set_name__)
            interrupted = not isinstance(signalled, Terminated)
            code = ExitCode.INTERRUPTED if interrupted else ExitCode.TERMINATED
            said = "interrupted (SIGINT)" if interrupted else "terminated (SIGTERM)"
            return _fail(exc, said, int(code), json_errors, kind="Interrupted" if interrupted else "Terminated")
        detail = " ".join(str(exc).split())[:300]
        message = f"internal error: {type(exc).__name__}: {detail} (a bug; rerun with --traceback and report it)"
        return _fail(exc, message, int(ExitCode.INTERNAL), json_errors)
    if result is None:
        return int(ExitCode.PASS)
    return int(result)


_EPIPE = "standard output was closed before everything was written to it (a pipe's reader exited: EPIPE)"


def _stdout_gone(exc: BaseException) -> int:
    """Exit 4 for a closed standard output, said on stderr; what is left to flush goes to /dev/null (the
    interpreter's own flush at exit would fail again, and exit 120)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return _fail(exc, _EPIPE, int(ExitCode.ENVIRONMENT), False)


def _broken_pipe(exc: BaseException) -> bool:
    """True when `exc` was raised while handling a write to a closed pipe."""
    return any(isinstance(c, OSError) and c.errno == errno.EPIPE for c in _chain(exc))


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what it was raised from or while handling, each once."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        yield cause
        cause = cause.__cause__ or cause.__context__


def _signal_inside(exc: BaseException) -> BaseException | None:
    """The SIGINT/SIGTERM exception an exception was raised from, if any: Python 3.11 wraps one raised while
    a class is created (`__set_name__` of a dataclass field, during an import) in a RuntimeError, which
    read as an internal error, exit 70, instead of 143 (tests/test_signals_early.py, 2026-12-07)."""
    return next((c for c in _chain(exc) if isinstance(c, Terminated | Interrupted | KeyboardInterrupt)), None)


def _fail(exc: BaseException, message: str, code: int, json_errors: bool, *, kind: str | None = None) -> int:
    if _state["debug"] or os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
        import traceback

        traceback.print_exception(exc)
    if json_errors:
        _print_json(message, kind or type(exc).__name__, code)
    from upgrade_gate.report.printable import one_line  # paths, node names, tool output: no escapes pass

    print(f"upgrade-gate: error: {one_line(message)}", file=sys.stderr)
    return code


class _Printable:
    """A text stream that writes to `stream` with every control character but newline and tab visible."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        from upgrade_gate.report.printable import printable

        return int(self.stream.write(printable(text)))

    def flush(self) -> None:
        self.stream.flush()


def _print_json(message: str, kind: str, code: int) -> None:
    with contextlib.suppress(OSError):  # stdout itself is gone: the exit code still says what happened
        print(json.dumps({"error": message, "type": kind, "exit_code": code}, sort_keys=True), flush=True)


_wants_json = boot.wants_json


def _on_signal(signum: int, frame: object) -> None:
    from upgrade_gate.collect.runner import defer_signal

    if defer_signal(signum):  # a child is being started: raised again once it is tracked
        return
    # Ignore repeats: a second Ctrl-C or SIGTERM must not cut the cleanup (killing children) short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated() if signum == signal.SIGTERM else Interrupted()


def _install_handlers() -> dict[int, Any] | None:
    if threading.current_thread() is not threading.main_thread():
        return None
    previous: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is signal.SIG_IGN:
            continue  # started with the signal ignored (nohup, a background job): keep it so
        previous[sig] = signal.signal(sig, _on_signal)
    return previous


def _restore_handlers(previous: dict[int, Any] | None) -> None:
    for sig, handler in (previous or {}).items():
        signal.signal(sig, handler)


def main() -> None:
    """Console-script entry point."""
    sys.exit(run(sys.argv[1:]))
