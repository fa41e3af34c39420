"""The one seam through which every external command runs: `CommandRunner`.

Implementations: `LocalRunner` (subprocess, argv only, never a shell, a timeout per call, the whole
process group killed on timeout), bundle replay (`collect.bundle.ReplayRunner`) and a command inside
a Kubernetes pod (`fleet`). Probes, phases and the capture command take a runner as a constructor
argument; tests pass a real `LocalRunner` with fake tools first on PATH instead of monkeypatching.
A missing binary or a timeout is a value (`missing`, `timed_out`), never an exception, so that the
caller records it as evidence and fails closed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from upgrade_gate.collect.causes import known_cause


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandResult:
    """What one command did: the evidence behind a probe or a phase."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    missing: bool = False

    @property
    def ok(self) -> bool:
        """True when the command ran to completion and exited 0."""
        return self.returncode == 0 and not self.timed_out and not self.missing

    def failure_reason(self) -> str | None:
        """One-line reason this result is not usable, or None if it is."""
        if self.missing:
            return f"{self.argv[0]}: missing binary"
        if self.timed_out:
            return f"{self.argv[0]}: timed out after {self.duration_s:.1f}s"
        if self.returncode != 0:
            # The cause the tool stated (wherever it printed it) beats the last stderr line, which is
            # often a library's noise (see collect/causes.py).
            tail = (self.stderr.strip().splitlines() or self.stdout.strip().splitlines() or [""])[-1]
            tail = known_cause(self.stdout, self.stderr) or tail
            detail = f": {tail[:160]}" if tail else ""
            return f"{self.argv[0]}: exit code {self.returncode}{detail}"
        return None


class CommandRunner(Protocol):
    """Runs one argv with a timeout and reports what happened."""

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """Run `argv`; never raises for missing binaries, timeouts or non-zero exits."""
        ...


class LocalRunner:
    """Runs commands on this host with subprocess (no shell)."""

    def __init__(self, *, env: Mapping[str, str] | None = None, cwd: str | None = None) -> None:
        self._env = dict(env) if env is not None else None
        self._cwd = cwd

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """Run `argv` in its own process group; kill the group on timeout."""
        args = tuple(argv)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._env,
                cwd=self._cwd,
                start_new_session=True,
            )
        except OSError as exc:  # not found, not executable, exec format error
            return CommandResult(
                argv=args,
                returncode=None,
                stdout="",
                stderr=str(exc),
                duration_s=time.monotonic() - start,
                missing=True,
            )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            return CommandResult(
                argv=args,
                returncode=None,
                stdout=_decode(out),
                stderr=_decode(err),
                duration_s=time.monotonic() - start,
                timed_out=True,
            )
        return CommandResult(
            argv=args,
            returncode=proc.returncode,
            stdout=_decode(out),
            stderr=_decode(err),
            duration_s=time.monotonic() - start,
        )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _decode(data: bytes | None) -> str:
    # Tools print UTF-8 (degree signs, box drawing); never fail on a stray byte.
    return (data or b"").decode("utf-8", errors="replace")
