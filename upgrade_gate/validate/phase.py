"""The plugin interface of the CVF phases: `NodePhase` / `GroupPhase`, their contexts, result building.

A phase is a plugin with a number, a name and the CVF label key it writes. Phases 0-3 test one node at a
time (`NodePhase.run(ctx) -> PhaseResult`); phases 4 and 5 need several nodes at once (pairing, an
MPI job across hosts), so they are `GroupPhase`s (`run_group(ctx) -> {node: PhaseResult}`). Both get
everything through their context - config, launcher, snapshot, deadline - and nothing else, so the same
phase code runs under the local executor and under the Kubernetes executor.

Design decisions:
- Tool time is measured, not guessed: every command goes through `TimedRunner`, which adds the
  command's own duration to the phase's `ToolClock` (a background server's whole life counts as tool
  time). The pipeline stores `duration_s` (wall time of the phase) and `tool_duration_s`, so the gate's
  own overhead is `duration_s - tool_duration_s`.
- The phase budget is enforced at the source: `TimedRunner` clamps each command's timeout to what is
  left of the phase's deadline, so a hanging tool is killed in time and reported as timed out; the
  pipeline's watchdog only catches a phase stuck in Python.
- `Outcome` collects every reason before a status is decided (phase 3 must report every fault, not
  the first). `fail()` is evidence that the node is bad; `error()` is missing evidence (a tool missing,
  timed out or printing output no parser reads). Any failure makes the result `failed`; errors alone
  make it `error`; the first reason recorded is `reason`, all of them are `reasons`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from upgrade_gate.collect.runner import CommandResult, CommandRunner
from upgrade_gate.model import Measurement, NodeName, PhaseResult, PhaseStatus, Snapshot
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.launcher import Background, Launcher
from upgrade_gate.validate.remeasure import Resampling


class ToolClock:
    """Seconds spent inside tools during one phase run (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds = 0.0

    def add(self, seconds: float) -> None:
        """Count `seconds` of tool time."""
        with self._lock:
            self._seconds += max(seconds, 0.0)

    @property
    def seconds(self) -> float:
        """Tool time so far."""
        with self._lock:
            return self._seconds


class TimedRunner:
    """A CommandRunner that clamps timeouts to a deadline and counts tool time."""

    def __init__(self, inner: CommandRunner, clock: ToolClock, deadline: float) -> None:
        self._inner = inner
        self._clock = clock
        self._deadline = deadline

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """Run `argv` with min(timeout, time left in the phase)."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            return CommandResult(
                argv=tuple(argv),
                returncode=None,
                stdout="",
                stderr="phase budget used up",
                duration_s=0.0,
                timed_out=True,
            )
        try:
            result = self._inner.run(argv, timeout=min(timeout, left))
        except OSError as exc:  # e.g. ENOEXEC: the tool is there but cannot run
            result = CommandResult(
                argv=tuple(argv),
                returncode=None,
                stdout="",
                stderr=f"cannot execute: {exc}",
                duration_s=0.0,
                missing=True,
            )
        self._clock.add(result.duration_s)
        return result


class TimedBackground:
    """A background command whose whole life is counted as tool time when it is stopped."""

    def __init__(self, inner: Background, clock: ToolClock, deadline: float) -> None:
        self._inner = inner
        self._clock = clock
        self._deadline = deadline

    def stop(self, *, timeout: float) -> CommandResult:
        """Stop it (waiting at most until the phase deadline)."""
        result = self._inner.stop(timeout=max(min(timeout, self._deadline - time.monotonic()), 0.0))
        self._clock.add(result.duration_s)
        return result


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseContext:
    """What a node phase may use: one node, its snapshot and labels, the config and the launcher."""

    node: NodeName
    config: CvfConfig
    launcher: Launcher
    snapshot: Snapshot | None = None
    node_labels: Mapping[str, str] | None = None  # cluster mode: the node's labels (NFD)
    requested: frozenset[int] = frozenset()
    samples: int = 5
    resampling: Resampling = field(default_factory=Resampling)  # re-measure when inconclusive (validate.remeasure)
    deadline: float = float("inf")
    clock: ToolClock = field(default_factory=ToolClock)

    def runner(self) -> TimedRunner:
        """The node's runner, timed and clamped to the phase deadline."""
        return TimedRunner(self.launcher.runner_for(self.node), self.clock, self.deadline)

    def left(self) -> float:
        """Seconds left in the phase budget."""
        return self.deadline - time.monotonic()


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupContext:
    """What a group phase may use: the nodes entering it, spare partners, snapshots, config, launcher."""

    nodes: tuple[NodeName, ...]
    config: CvfConfig
    launcher: Launcher
    peers: tuple[NodeName, ...] = ()  # partners outside the run, known to have passed (never reported)
    snapshots: Mapping[NodeName, Snapshot] = field(default_factory=dict)
    samples: int = 5
    resampling: Resampling = field(default_factory=Resampling)  # re-measure when inconclusive (validate.remeasure)
    deadline: float = float("inf")
    clock: ToolClock = field(default_factory=ToolClock)

    def runner_for(self, node: NodeName) -> TimedRunner:
        """A node's runner, timed and clamped to the phase deadline."""
        return TimedRunner(self.launcher.runner_for(node), self.clock, self.deadline)

    def start(self, node: NodeName, argv: Sequence[str]) -> TimedBackground:
        """Start `argv` in the background on `node`."""
        return TimedBackground(self.launcher.start(node, argv), self.clock, self.deadline)

    def left(self) -> float:
        """Seconds left in the phase budget."""
        return self.deadline - time.monotonic()


@runtime_checkable
class PhaseIdentity(Protocol):
    """What every phase says of itself: its CVF number, name and label."""

    @property
    def number(self) -> int:
        """CVF phase number 0-5."""
        ...

    @property
    def name(self) -> str:
        """Short name (`gpu-mesh-validation`, `rail-bandwidth`)."""
        ...

    @property
    def label_key(self) -> str | None:
        """The CVF label the phase writes by default (None: none)."""
        ...


@runtime_checkable
class NodePhase(PhaseIdentity, Protocol):
    """A phase that tests one node at a time."""

    def run(self, ctx: PhaseContext) -> PhaseResult:
        """Test `ctx.node`; never raises for tool failures (they are reasons)."""
        ...

    def budget_s(self, config: CvfConfig, *, samples: int, nodes: int) -> float:
        """Default time budget of the phase for one node."""
        ...

    def plan(self, config: CvfConfig, *, samples: int) -> tuple[str, ...]:
        """What the phase would run and check, one line each (for --dry-run)."""
        ...


@runtime_checkable
class GroupPhase(PhaseIdentity, Protocol):
    """A phase that tests nodes together (pairs, an MPI job)."""

    def run_group(self, ctx: GroupContext) -> Mapping[NodeName, PhaseResult]:
        """Test `ctx.nodes`; a result for every one of them."""
        ...

    def budget_s(self, config: CvfConfig, *, samples: int, nodes: int) -> float:
        """Default time budget of the phase for the whole group."""
        ...

    def plan(self, config: CvfConfig, *, samples: int) -> tuple[str, ...]:
        """What the phase would run and check, one line each (for --dry-run)."""
        ...


Phase = NodePhase | GroupPhase


@dataclass(slots=True)
class Outcome:
    """Reasons and measurements collected while a phase runs; `result()` decides the status."""

    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    samples: dict[str, str] = field(default_factory=dict)  # run unit -> how many samples it took, and why

    def took(self, unit: str, runs: int, why: str | None) -> None:
        """Record that `unit` (a sweep, a rail) ran `runs` times, re-measured because `why` (None: not)."""
        self.samples[unit] = f"{runs}" + (f" (re-measured: {why})" if why else "")

    def fail(self, reason: str) -> None:
        """Evidence says the node is not healthy."""
        self.failures.append(reason)
        self.reasons.append(reason)

    def error(self, reason: str) -> None:
        """Evidence is missing (tool missing, timed out, output unreadable)."""
        self.errors.append(reason)
        self.reasons.append(reason)

    def tool_failure(self, result: CommandResult) -> bool:
        """Record why `result` is unusable (missing/timeout: error; non-zero exit: failure); True if it is."""
        reason = result.failure_reason()
        if reason is None:
            return False
        if result.missing or result.timed_out:
            self.error(reason)
        else:
            self.fail(reason)
        return True

    @property
    def status(self) -> PhaseStatus:
        """failed if any failure, error if only errors, else passed."""
        if self.failures:
            return PhaseStatus.FAILED
        if self.errors:
            return PhaseStatus.ERROR
        return PhaseStatus.PASSED

    def result(
        self,
        phase: NodePhase | GroupPhase,
        config: CvfConfig,
        *,
        measured_bw: float | None = None,
        extra: Mapping[str, str] | None = None,
        peer: str | None = None,
    ) -> PhaseResult:
        """The PhaseResult with its CVF labels and annotations (`<label>-samples`: the units re-measured)."""
        remeasured = {u: t for u, t in self.samples.items() if "re-measured" in t}
        if remeasured:
            extra = {**(extra or {}), "samples": "; ".join(f"{u}: {t}" for u, t in sorted(remeasured.items()))}
        return make_result(
            phase,
            config,
            self.status,
            tuple(self.reasons),
            measurements=tuple(self.measurements),
            measured_bw=measured_bw,
            extra=extra,
            peer=peer,
        )


def make_result(
    phase: NodePhase | GroupPhase,
    config: CvfConfig,
    status: PhaseStatus,
    reasons: tuple[str, ...],
    *,
    measurements: tuple[Measurement, ...] = (),
    measured_bw: float | None = None,
    extra: Mapping[str, str] | None = None,
    peer: str | None = None,
) -> PhaseResult:
    """A PhaseResult for `phase` with labels/annotations as CVF would write them."""
    labels, annotations = cvf.labels_for(
        config.label_keys.get(phase.number, phase.label_key),
        status,
        reasons,
        measured_bw=measured_bw,
        extra=extra,
        failure_suffix=config.failure_reason_suffix,
    )
    return PhaseResult(
        phase=phase.number,
        name=phase.name,
        status=status,
        reason=reasons[0] if reasons else None,
        reasons=reasons,
        measurements=measurements,
        labels=labels,
        annotations=annotations,
        peer=peer,
    )
