"""Exit codes hold from the first instruction (issue 26, case 5): a SIGINT / SIGTERM at any moment of
a command, start-up included, exits 130 / 143 with one error line and no traceback; 0 and 1 come only
from a verdict.

Two drives, both through the real entry points in a subprocess:

- by position: a copy of the console script (as pip writes it, run with -S and site-packages on
  PYTHONPATH) whose audit hook sends the signal to its own process at the Nth module import since
  `cli.boot`'s handler is live, for N across the whole command: the import window, typer, the command
  modules, the command itself; no timing involved;
- by delay: `python -X importtime -m upgrade_gate` on a command that never finishes by itself (`parse -`
  reading a pipe held open), signalled 0 to 1 s after `cli.boot` was imported (its importtime line is
  the start of the clock).

Before upgrade-gate's first instruction the interpreter's own rules hold, and no program can change
them: a SIGINT while CPython initialises its standard streams or runs `site` (.pth files of editable
installs and proxies took ~150 ms here) is a fatal interpreter error, exit 1; a SIGTERM kills the
process (the shell says 143). What is pinned here is everything from `cli.boot` on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from tests.test_cli_exit_codes import env_with

REPO = Path(__file__).resolve().parent.parent

SIGNALS = [(signal.SIGINT, 130, "interrupted (SIGINT)"), (signal.SIGTERM, 143, "terminated (SIGTERM)")]

CONSOLE_SCRIPT = """\
import os, re, signal, sys
_at = int(os.environ["SIGNAL_AT_IMPORT"])
_sig = int(os.environ["SIGNAL_NUMBER"])
_seen = [-1]  # imports since cli.boot's handler is live (-1: not yet)
def _hook(event, args):
    if event != "import":
        return
    boot = sys.modules.get("upgrade_gate.cli.boot")
    if _seen[0] < 0 and signal.getsignal(_sig) is getattr(boot, "exit_on_signal", 0):
        _seen[0] = 0
    if _seen[0] >= 0:
        _seen[0] += 1
        if _seen[0] == _at:
            os.kill(os.getpid(), _sig)
sys.addaudithook(_hook)
if _at == 0:
    import atexit
    atexit.register(lambda: print("IMPORTS", _seen[0], file=sys.stderr))
from upgrade_gate.cli.main import main
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(main())
"""
"""pip's console script for `upgrade_gate.cli.main:main`, plus an audit hook that signals the process at
the Nth import since `cli.boot`'s handler is live (N = 0: none; it prints how many imports there were).
Before that come `cli.boot`'s own imports: os and sys (loaded by the interpreter) and signal."""


def env_no_site(**extra: str) -> dict[str, str]:
    """The environment for `python -S`: the worktree, then site-packages, on PYTHONPATH."""
    env = dict(os.environ)
    paths = [str(REPO), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.update(extra)
    return env


def check_exit(proc: subprocess.Popen[str], code: int, message: str, label: str) -> None:
    _, stderr = proc.communicate(timeout=120)
    lines = [ln for ln in stderr.splitlines() if not ln.startswith("import time:")]
    assert proc.returncode == code, f"{label}: exit {proc.returncode}\n{stderr}"
    assert "Traceback" not in stderr, f"{label}:\n{stderr}"
    assert lines[-1:] == [f"upgrade-gate: error: {message}"], f"{label}:\n{stderr}"


ARGS = ["parse", "--tool", "rocminfo", "-"]
"""A whole command, start-up to exit (stdin is empty: it ends in a one-line parse error, exit 3)."""


def run_script(script: Path, at: int, sig: signal.Signals) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-S", str(script), *ARGS],
        env=env_no_site(SIGNAL_AT_IMPORT=str(at), SIGNAL_NUMBER=str(int(sig))),
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def positions(total: int) -> list[int]:
    """Import positions to signal at: the first 6 one by one (main's own imports, then typer's), about
    12 spread over the rest, and the last 3 (the command's own, up to `run`'s handlers)."""
    step = max(1, total // 12)
    return sorted({*range(1, min(7, total + 1)), *range(7, total + 1, step), *range(max(1, total - 2), total + 1)})


@pytest.mark.parametrize(("sig", "code", "message"), SIGNALS)
def test_signal_at_every_import_of_start_up_exits_with_its_code(
    tmp_path: Path, sig: signal.Signals, code: int, message: str
) -> None:
    script = tmp_path / "upgrade-gate"
    script.write_text(CONSOLE_SCRIPT, encoding="utf-8")
    counted = run_script(script, 0, sig)
    assert counted.returncode == 3, counted.stderr  # unsignalled: the empty input's parse error
    total = int(next(ln for ln in counted.stderr.splitlines() if ln.startswith("IMPORTS ")).split()[1])
    assert total > 20, counted.stderr  # typer and the command modules are all on the way
    for at in positions(total):
        proc = run_script(script, at, sig)
        label = f"{sig.name} at import {at} of {total}"
        assert proc.returncode == code, f"{label}: exit {proc.returncode}\n{proc.stderr}"
        assert "Traceback" not in proc.stderr, f"{label}:\n{proc.stderr}"
        assert proc.stderr.strip().splitlines()[-1] == f"upgrade-gate: error: {message}", f"{label}:\n{proc.stderr}"


@pytest.mark.parametrize(("sig", "code", "message"), SIGNALS)
def test_signal_at_any_delay_exits_with_its_code_never_0_or_1(sig: signal.Signals, code: int, message: str) -> None:
    for delay in (0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0):
        proc = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "upgrade_gate", "parse", "--tool", "rocminfo", "-"],
            env=env_with(),
            stdin=subprocess.PIPE,  # held open: the command waits for it until the signal
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stderr is not None
            for line in proc.stderr:  # each import's line as it completes: the clock starts at cli.boot's
                if line.rstrip().endswith("| upgrade_gate.cli.boot"):
                    break
                if line.rstrip().endswith(("| upgrade_gate.cli.main", "| typer")):  # boot comes before both
                    raise AssertionError("upgrade_gate.cli.boot was not imported before typer and cli.main")
            else:
                raise AssertionError("upgrade_gate.cli.boot was never imported")
            time.sleep(delay)
            proc.send_signal(sig)
            check_exit(proc, code, message, f"{sig.name} {delay} s after cli.boot")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_boot_handlers_are_not_installed_in_a_program_that_imports_the_cli() -> None:
    from upgrade_gate.cli import boot

    assert not boot.launched_as_cli()  # pytest's __main__
    assert signal.getsignal(signal.SIGTERM) is not boot.exit_on_signal


@pytest.mark.parametrize(("raised", "code"), [("Terminated", 143), ("Interrupted", 130)])
def test_a_signal_wrapped_by_python_during_an_import_keeps_its_code(
    monkeypatch: pytest.MonkeyPatch, raised: str, code: int
) -> None:
    """Python 3.11 wraps an exception raised in a class body's `__set_name__` (a dataclass field, while a module
    is imported) in a RuntimeError: a SIGTERM landing there exited 70, "internal error" (CI, 2026-12-07)."""
    from upgrade_gate.cli import main

    def build() -> None:
        class Field:
            def __set_name__(self, owner: type, name: str) -> None:
                raise getattr(main, raised)()

        class _Node:
            children = Field()

    monkeypatch.setattr(main, "build_app", build)
    assert main.run(["--version"]) == code
