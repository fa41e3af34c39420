"""The indirection through which phases run commands on nodes: `Launcher`, and `LocalLauncher`.

Phases never start processes themselves and never assume they run on the node they test: they ask the
launcher for a node's `CommandRunner`, for the address a peer reaches a node at (per RDMA device, for
per-rail tests), and to start a long-running server in the background (the `ib_write_bw` server side of
phase 4) that they stop later. The Kubernetes executor implements the same protocol with Jobs (a runner
that runs a command in a pod on the node, a server Job whose pod IP is the address); `LocalLauncher`
maps node names to `LocalRunner`s with a per-node environment, which is how fake nodes (each with its
own PATH) and the local `validate` command run.

Design decisions:
- A node the launcher cannot reach raises `LauncherError` (an environment failure) from `runner_for`
  or `start`; the pipeline turns it into an `error` result naming the node, never a pass.
- A background process that cannot start (missing binary) is not an exception: its `stop()` returns
  the `CommandResult` with `missing=True`, like every other command.
- `tool_env` exposes the NCCL_* / RCCL_* environment the tools of a node run with, because rccl-tests
  measurements carry it in their settings (two runs with different NCCL_ALGO never compare).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from upgrade_gate.collect.runner import (
    CommandResult,
    CommandRunner,
    LocalRunner,
    forget_child,
    spawn_guard,
    track_child,
)
from upgrade_gate.errors import EnvironmentFailure
from upgrade_gate.model import NodeName


class LauncherError(EnvironmentFailure):
    """The launcher cannot run anything on the named node."""


class Background(Protocol):
    """A command started in the background (a server); `stop` ends it and reports what it did."""

    def stop(self, *, timeout: float) -> CommandResult:
        """Wait up to `timeout` seconds for it to exit by itself, then kill it; never raises."""
        ...


class Launcher(Protocol):
    """Runs commands on named nodes."""

    def runner_for(self, node: NodeName) -> CommandRunner:
        """The runner whose commands execute on `node`; LauncherError if unreachable."""
        ...

    def address(self, node: NodeName, *, device: str | None = None) -> str:
        """The address a peer uses to reach `node` (on RDMA `device`, for per-rail tests)."""
        ...

    def start(self, node: NodeName, argv: Sequence[str]) -> Background:
        """Start `argv` on `node` in the background; LauncherError if unreachable."""
        ...

    def tool_env(self, node: NodeName) -> Mapping[str, str]:
        """The NCCL_* / RCCL_* environment the tools on `node` run with."""
        ...


class LocalLauncher:
    """Runs every node's commands on this host, each node with its own environment (e.g. its PATH)."""

    def __init__(
        self,
        envs: Mapping[str, Mapping[str, str] | None],
        *,
        addresses: Mapping[str, str] | None = None,
        device_addresses: Mapping[tuple[str, str], str] | None = None,
        cwd: str | None = None,
    ) -> None:
        """`envs`: node -> environment (None: this process's); addresses default to the node name."""
        self._envs = {NodeName(k): (dict(v) if v is not None else None) for k, v in envs.items()}
        self._addresses = dict(addresses or {})
        self._device_addresses = dict(device_addresses or {})
        self._cwd = cwd

    @property
    def nodes(self) -> tuple[NodeName, ...]:
        """The nodes this launcher can run commands on."""
        return tuple(self._envs)

    def _env(self, node: NodeName) -> dict[str, str] | None:
        if node not in self._envs:
            raise LauncherError(
                f"node {node}: the local executor runs commands on this host only and has no runner for it "
                "(use the Kubernetes executor to reach other nodes)"
            )
        return self._envs[node]

    def runner_for(self, node: NodeName) -> CommandRunner:
        """A LocalRunner with the node's environment."""
        return LocalRunner(env=self._env(node), cwd=self._cwd)

    def address(self, node: NodeName, *, device: str | None = None) -> str:
        """The configured address (per device, then per node), else the node name."""
        if device is not None and (node, device) in self._device_addresses:
            return self._device_addresses[(node, device)]
        return self._addresses.get(node, node)

    def start(self, node: NodeName, argv: Sequence[str]) -> Background:
        """Start `argv` with the node's environment in its own process group."""
        return _LocalBackground(tuple(argv), self._env(node), self._cwd)

    def tool_env(self, node: NodeName) -> Mapping[str, str]:
        """NCCL_* / RCCL_* variables of the node's environment."""
        env = self._env(node)
        source = env if env is not None else os.environ
        return {k: v for k, v in source.items() if k.startswith(("NCCL_", "RCCL_"))}


class _LocalBackground:
    """A subprocess started in its own session; output is collected when it is stopped."""

    def __init__(self, argv: tuple[str, ...], env: Mapping[str, str] | None, cwd: str | None) -> None:
        self._argv = argv
        self._start = time.monotonic()
        self._error: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        try:
            with spawn_guard():  # killed with the gate on SIGINT/SIGTERM (collect.runner.kill_children)
                self._proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=dict(env) if env is not None else None,
                    cwd=cwd,
                    start_new_session=True,
                )
                track_child(self._proc)
        except OSError as exc:  # not found, not executable
            self._error = str(exc)

    def stop(self, *, timeout: float) -> CommandResult:
        """Collect the process: wait up to `timeout`, then kill its group."""
        if self._proc is None:
            return CommandResult(
                argv=self._argv,
                returncode=None,
                stdout="",
                stderr=self._error or "",
                duration_s=time.monotonic() - self._start,
                missing=True,
            )
        proc = self._proc
        timed_out = False
        try:
            out, err = proc.communicate(timeout=max(timeout, 0.0))
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
            out, err = proc.communicate()
        forget_child(proc)
        return CommandResult(
            argv=self._argv,
            returncode=None if timed_out else proc.returncode,
            stdout=(out or b"").decode("utf-8", errors="replace"),
            stderr=(err or b"").decode("utf-8", errors="replace"),
            duration_s=time.monotonic() - self._start,
            timed_out=timed_out,
        )
