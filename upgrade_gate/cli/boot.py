"""Exit codes from the first instruction: signal handlers live before anything heavy is imported.

`cli.main.run` installs the handlers that turn SIGINT / SIGTERM into 130 / 143 (killing started
tools first), but only once typer and the command modules are imported. Before that (issue 26: the
first ~0.7 s on a loaded machine) Python's own SIGINT handler raised KeyboardInterrupt inside an
import, which printed a traceback and exited 1: it read as BLOCK. And after `run` returned, its
handlers were restored to Python's, so a signal during the exit did the same.

This module is imported first by both entry points (`upgrade_gate.__main__` and, through
`cli.main`, the `upgrade-gate` console script) and imports only the standard library. When the
process is the CLI it installs `exit_on_signal` for both signals: nothing has been started yet, so
there is nothing to clean up: one error line (and the JSON error document where the command prints
JSON) and `SystemExit(130 / 143)`, which flushes what was printed. `run` replaces it while a command
runs and restores it afterwards. Imported by a test or another program, it changes nothing.

A signal that lands before Python runs this module (interpreter start-up) meets the interpreter's
own dispositions: SIGTERM kills the process, SIGINT at that point kills it too (Python's handler is
not installed yet) or raises KeyboardInterrupt in `site`; the shell sees 143 / 130 either way.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

EXITS = {signal.SIGINT: (130, "interrupted (SIGINT)"), signal.SIGTERM: (143, "terminated (SIGTERM)")}
"""Each handled signal's exit code and error message (the CLI's `ExitCode.INTERRUPTED` / `TERMINATED`)."""


def wants_json(args: list[str]) -> bool:
    """True when the command prints JSON: `--json`, or a `--report json:...` output."""
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--json" or arg.startswith("--report=json:"):
            return True
        if arg == "--report" and i + 1 < len(args) and args[i + 1].startswith("json:"):
            return True
    return False


def exit_on_signal(signum: int, frame: FrameType | None) -> None:
    """Leave now with the signal's exit code and one error line (no command is running)."""
    for sig in EXITS:  # a repeat must not cut the exit short
        signal.signal(sig, signal.SIG_IGN)
    code, message = EXITS[signal.Signals(signum)]
    try:  # os.write: the signal may have landed inside a print to the same stream
        if wants_json(sys.argv[1:]):
            import json  # not at the top: before `install`, every import is time without a handler

            doc = json.dumps({"error": message, "exit_code": code, "type": message.split()[0].title()}, sort_keys=True)
            os.write(1, f"{doc}\n".encode())
        os.write(2, f"upgrade-gate: error: {message}\n".encode())
    except OSError:
        pass  # stderr is gone: the exit code still says what happened
    raise SystemExit(code)


def install() -> None:
    """Make `exit_on_signal` the handler of SIGINT and SIGTERM (one started ignored stays ignored)."""
    for sig in EXITS:
        try:
            if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup, a background job: keep it so
                signal.signal(sig, exit_on_signal)
        except ValueError:  # not the main thread: signals are not ours to handle
            return


def launched_as_cli() -> bool:
    """True in a process started as `upgrade-gate ...` or `python -m upgrade_gate ...`."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name in ("upgrade_gate.__main__", "upgrade_gate"):
        return True
    return os.path.basename(sys.argv[0] if sys.argv else "") == "upgrade-gate"


if launched_as_cli():
    install()
