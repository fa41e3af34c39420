"""The one seam through which every external command runs: `CommandRunner`.

Implementations: `LocalRunner` (subprocess, argv only, never a shell, a timeout per call, the whole
process group killed on timeout), bundle replay (`collect.bundle.ReplayRunner`) and a command inside
a Kubernetes pod (`fleet`). Probes, phases and the capture command take a runner as a constructor
argument; tests pass a real `LocalRunner` with fake tools first on PATH instead of monkeypatching.
A missing binary or a timeout is a value (`missing`, `timed_out`), never an exception, so that the
caller records it as evidence and fails closed.

Design decisions (bounded work, no orphans):
- Output is streamed from both pipes with `selectors` in the calling thread, never buffered whole by
  `communicate()`: at most `output_limit` bytes (stdout and stderr together, default
  `DEFAULT_OUTPUT_LIMIT`) are kept. Past the limit the process group is killed and the result says so
  (`output_over`), which makes the probe failed ("output over 16 MiB"): a 1 GB dmesg costs the gate
  16 MiB, the bundle stays under its member limit, and the gate blocks naming the probe.
- Every child runs in its own session (a hung tool's helpers die with it on timeout) and is tracked
  in a process-wide registry until it is reaped. `kill_children()` kills every tracked group; the CLI
  calls it on every way out (SIGINT, SIGTERM, a crash), and `LocalRunner.run` kills its own group in a
  `finally`, so a signal raised while reading never leaves a tool running under PID 1.
- A parent that is SIGKILLed runs none of that: a watchdog process (`_watch`), started with the first
  tracked child, holds the list of live groups and SIGKILLs them when the parent's end of its pipe
  closes. (PR_SET_PDEATHSIG would reach the direct child only, not its grandchildren, and needs a
  `preexec_fn`, which is unsafe in a threaded process.) A tool that calls setsid() itself leaves its
  group and is out of reach of all of this.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
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
    output_over: int | None = None  # set: output passed this many bytes, reading stopped, group killed

    @property
    def ok(self) -> bool:
        """True when the command ran to completion, exited 0 and its output stayed under the limit."""
        return self.returncode == 0 and not self.timed_out and not self.missing and self.output_over is None

    def failure_reason(self) -> str | None:
        """One-line reason this result is not usable, or None if it is."""
        if self.missing:
            return f"{self.argv[0]}: missing binary"
        if self.output_over is not None:
            return f"{self.argv[0]}: output over {_mib(self.output_over)} (stopped reading, process killed)"
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


MiB = 1024 * 1024
DEFAULT_OUTPUT_LIMIT = 16 * MiB
"""Bytes of stdout + stderr one command may print before it is stopped and recorded failed."""

_CHUNK = 64 * 1024


def _mib(n: int) -> str:
    return f"{n // MiB} MiB" if n % MiB == 0 else f"{n} bytes"


# ------------------------------------------------------------------ child registry

_children: dict[int, subprocess.Popen[bytes]] = {}
_children_lock = threading.Lock()


class _SpawnState:
    active = False
    pending: int | None = None


_spawn = _SpawnState()


@contextlib.contextmanager
def spawn_guard() -> Iterator[None]:
    """Hold off SIGINT/SIGTERM (see `defer_signal`) while a child is started and tracked.

    A signal that arrives inside `Popen()` (after the child has exec'd, before Popen returns) would
    otherwise leave a child that nobody tracks, hence nobody kills. The CLI's handler defers it; it is
    re-sent to this process as soon as the child is tracked.
    """
    _spawn.active = True
    try:
        yield
    finally:
        _spawn.active = False
        signum, _spawn.pending = _spawn.pending, None
        if signum is not None:
            os.kill(os.getpid(), signum)


def defer_signal(signum: int) -> bool:
    """Called by a signal handler: True (and the signal is re-sent later) while a child is being started."""
    if _spawn.active:
        _spawn.pending = signum
        return True
    return False


def track_child(proc: subprocess.Popen[bytes]) -> None:
    """Remember a child started with `start_new_session=True` until `forget_child` (and tell the watchdog)."""
    with _children_lock:
        _children[proc.pid] = proc
        _watch(f"+{proc.pid}")


def forget_child(proc: subprocess.Popen[bytes]) -> None:
    """The child has been reaped: stop tracking it."""
    with _children_lock:
        if _children.pop(proc.pid, None) is not None:
            _watch(f"-{proc.pid}")


# The watchdog: a process of its own that outlives a SIGKILLed parent (issue 26: a SIGKILLed `validate` left a
# probe's grandchild that ignores SIGTERM running). It reads "+PGID" / "-PGID" lines on stdin; at end of file
# (the parent has exited, however: nothing else holds the pipe's write end, children are started with
# close_fds) it SIGKILLs every group still listed. Standard library only, no site: ~15 ms, once per process.
_WATCHDOG_SOURCE = """
import os, signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
groups, data = set(), b""
while True:
    chunk = os.read(0, 4096)
    if not chunk:
        break
    *lines, data = (data + chunk).split(b"\\n")
    for line in lines:
        (groups.add if line[:1] == b"+" else groups.discard)(int(line[1:]))
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""


class _Watchdog:
    proc: subprocess.Popen[bytes] | None = None
    pid: int = 0  # the process that started it (a forked child starts its own)


def _watch(line: str) -> None:
    """Send `line` to the watchdog, starting it first if this process has none (called under the lock)."""
    import sys

    if _Watchdog.proc is None or _Watchdog.pid != os.getpid():
        if line.startswith("-"):
            return
        try:
            _Watchdog.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG_SOURCE],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # not in the terminal's process group: a Ctrl-C meant for us is not its
            )
        except OSError:  # no interpreter to start: the in-process cleanup (kill_children) still holds
            return
        _Watchdog.pid = os.getpid()
        atexit.register(_stop_watchdog)
    assert _Watchdog.proc.stdin is not None
    with contextlib.suppress(OSError):  # the watchdog is gone: nothing better to do than go on
        os.write(_Watchdog.proc.stdin.fileno(), f"{line}\n".encode())


def _stop_watchdog() -> None:
    """At exit: end of file for the watchdog (it kills any group left, normally none) and reap it."""
    proc = _Watchdog.proc
    if proc is None or _Watchdog.pid != os.getpid():
        return
    _Watchdog.proc = None
    assert proc.stdin is not None
    proc.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def kill_children() -> int:
    """Kill the process group of every tracked child and reap it; returns how many were alive."""
    with _children_lock:
        procs = list(_children.values())
        _children.clear()
    alive = 0
    for proc in procs:
        if proc.poll() is None:
            alive += 1
        _kill_group(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL cannot be ignored; a D-state child can wait
            proc.wait(timeout=5)
    return alive


# ------------------------------------------------------------------ local runner


class LocalRunner:
    """Runs commands on this host with subprocess (no shell), output capped at `output_limit` bytes."""

    def __init__(
        self,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
    ) -> None:
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._limit = output_limit

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """Run `argv` in its own process group; kill the group on timeout, over the limit, or any exit."""
        args = tuple(argv)
        start = time.monotonic()
        try:
            with spawn_guard():
                proc = subprocess.Popen(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=self._env,
                    cwd=self._cwd,
                    start_new_session=True,
                )
                track_child(proc)
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
            out, err, over, timed_out = _stream(proc, start + timeout, self._limit)
            if not timed_out and over is None:
                try:
                    proc.wait(timeout=max(start + timeout - time.monotonic(), 0.0))
                except subprocess.TimeoutExpired:  # closed its pipes but did not exit
                    timed_out = True
        finally:
            # Every way out, a signal raised while reading included: the group dies, the child is reaped.
            _kill_group(proc)
            proc.wait()
            forget_child(proc)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        stopped = timed_out or over is not None
        return CommandResult(
            argv=args,
            returncode=None if stopped else proc.returncode,
            stdout=_decode(bytes(out)),
            stderr=_decode(bytes(err)),
            duration_s=time.monotonic() - start,
            timed_out=timed_out,
            output_over=over,
        )


def _stream(
    proc: subprocess.Popen[bytes], deadline: float, limit: int
) -> tuple[bytearray, bytearray, int | None, bool]:
    """Read both pipes until EOF, the deadline or the limit: (stdout, stderr, over, timed_out)."""
    buffers = {"stdout": bytearray(), "stderr": bytearray()}
    with selectors.DefaultSelector() as sel:
        for name in buffers:
            pipe = getattr(proc, name)
            assert pipe is not None
            sel.register(pipe, selectors.EVENT_READ, name)
        kept = 0
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return buffers["stdout"], buffers["stderr"], None, True
            for key, _ in sel.select(timeout=left):
                chunk = os.read(key.fd, _CHUNK)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                room = limit - kept
                buffers[key.data] += chunk[:room]
                kept += min(len(chunk), room)
                if len(chunk) > room:
                    return buffers["stdout"], buffers["stderr"], limit, False
    return buffers["stdout"], buffers["stderr"], None, False


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        if proc.returncode is None:
            proc.kill()


def _decode(data: bytes | None) -> str:
    # Tools print UTF-8 (degree signs, box drawing); never fail on a stray byte.
    return (data or b"").decode("utf-8", errors="replace")
