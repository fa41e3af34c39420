"""The gated CVF pipeline: phases in order, a node enters phase N+1 only if phase N let it through.

`run_pipeline(nodes, phases=..., config=..., launcher=...)` returns every node's PhaseResults, one per
requested phase, in phase order. The executor (local or Kubernetes) only supplies the launcher, the
snapshots and, in cluster mode, the node labels.

Gating rules (CVF's `filter_passed_nodes`, made fail-closed):
- A node continues after a phase only when its result is `passed`. Every later phase records
  `not-run` for it, with the reason naming the phase that stopped it.
- A phase switched off by its CVF `SKIP_*` flag is recorded as `skipped` (reason: the flag) and the
  node continues: the flag is the operator declaring the phase skippable, which is CVF's semantics
  (CVF labels the node `passed`). A `skipped` result is never a pass for the judge or for `validate`'s
  exit code. A phase that skips itself (phase 1 with every stage `Skip: true`) is not the flag: it is a
  `skipped` result that stops the node, exactly as CVF's aggregate `skipped` label does.
- Budgets: `UPGRADE_GATE_PHASE<N>_TIMEOUT_S`, else the phase's own default (derived from CVF's wait
  times). Tools are clamped to it (see phase.TimedRunner); a phase still running `WATCHDOG_GRACE_S`
  after its budget is abandoned and recorded as `error` (timed out); a phase that raises is `error`
  with the exception named. Neither stops the other nodes.
- An environment failure is not a phase result: when a phase raises an `EnvironmentFailure` other
  than `LauncherError` (the Kubernetes API or the store does not answer, refuses the credentials or a
  verb), the run stops and the error propagates, so the caller exits 4, writes no labels and leaves
  the run resumable. Only `LauncherError` (this node cannot be reached, or vanished) is the node's own
  failure (issue 11, defect 2: an API server outage used to become `failed` labels on healthy nodes).
- Node phases run concurrently for every node entering them (`parallel` caps it); group phases once.
- `duration_s` is the wall time of the phase call (of the whole group for phases 4-5) and
  `tool_duration_s` the time spent inside tools, so the gate's own overhead is their difference.

Progress: `progress(ProgressEvent)` is called when a phase starts, for each node result, and when a
phase ends; the CLI renders these with rich (this module never imports rich).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TypeVar

from upgrade_gate.errors import EnvironmentFailure
from upgrade_gate.model import NodeName, PhaseResult, PhaseStatus, Snapshot, replace
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.launcher import Launcher, LauncherError
from upgrade_gate.validate.phase import GroupContext, GroupPhase, NodePhase, PhaseContext, ToolClock, make_result
from upgrade_gate.validate.remeasure import Resampling

WATCHDOG_GRACE_S = 5.0
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgressEvent:
    """One step of the pipeline: `phase-start`, `node-done` (with its result) or `phase-done`."""

    kind: str
    phase: int
    name: str
    nodes: tuple[NodeName, ...] = ()
    node: NodeName | None = None
    result: PhaseResult | None = None
    budget_s: float | None = None


Progress = Callable[[ProgressEvent], None]


def run_pipeline(
    nodes: Sequence[str],
    *,
    phases: Sequence[NodePhase | GroupPhase],
    config: CvfConfig,
    launcher: Launcher,
    snapshots: Mapping[str, Snapshot] | None = None,
    node_labels: Mapping[str, Mapping[str, str]] | None = None,
    peers: Sequence[str] = (),
    samples: int | None = None,
    progress: Progress | None = None,
    watchdog_grace_s: float = WATCHDOG_GRACE_S,
    parallel: int | None = None,
    resampling: Resampling | None = None,
) -> dict[NodeName, tuple[PhaseResult, ...]]:
    """Run `phases` over `nodes` with CVF gating; `peers` are spare partners for phases 4-5 (not reported).

    Node phases run for up to `parallel` nodes at once (default: every node entering the phase, as CVF
    runs phases 1-3 independently per node). `resampling`: re-measure an inconclusive metric up to
    its `max_samples` (validate.remeasure); the phase budgets are sized for that many runs.
    """
    if parallel is not None and parallel < 1:
        raise ValueError(f"parallel must be >= 1, got {parallel}")
    ordered = sorted(phases, key=lambda p: p.number)
    numbers = [p.number for p in ordered]
    if len(set(numbers)) != len(numbers):
        raise ValueError(f"phases given twice: {numbers}")
    names = list(dict.fromkeys(NodeName(n) for n in nodes))
    snaps = {NodeName(k): v for k, v in (snapshots or {}).items()}
    labels = {NodeName(k): v for k, v in node_labels.items()} if node_labels is not None else None
    count = samples if samples is not None else config.samples
    resample = resampling if resampling is not None else Resampling()
    requested = frozenset(numbers)
    results: dict[NodeName, list[PhaseResult]] = {n: [] for n in names}
    stopped: dict[NodeName, str] = {}
    for phase in ordered:
        entering = tuple(n for n in names if n not in stopped)
        for node in names:
            if node in stopped:
                results[node].append(make_result(phase, config, PhaseStatus.NOT_RUN, (stopped[node],)))
        if not entering:
            continue
        budget = config.phase_timeouts_s.get(phase.number) or phase.budget_s(
            config, samples=resample.limit(count), nodes=len(entering)
        )
        _emit(
            progress,
            ProgressEvent(kind="phase-start", phase=phase.number, name=phase.name, nodes=entering, budget_s=budget),
        )
        if phase.number in config.skip:
            flag = config.skip_flags.get(phase.number, "SKIP_*")
            why = f"skipped by {flag}=true in {config.source} (CVF would label the node passed without testing it)"
            outcome = {n: make_result(phase, config, PhaseStatus.SKIPPED, (why,)) for n in entering}
        elif isinstance(phase, GroupPhase):
            group = GroupContext(
                nodes=entering,
                config=config,
                launcher=launcher,
                peers=tuple(NodeName(p) for p in peers),
                snapshots=snaps,
                samples=count,
                resampling=resample,
                deadline=time.monotonic() + budget,
            )
            outcome = _run_group(phase, group, budget + watchdog_grace_s)
            for node in entering:
                _emit(progress, _done(phase, node, outcome[node]))
        else:
            contexts = [
                PhaseContext(
                    node=node,
                    config=config,
                    launcher=launcher,
                    snapshot=snaps.get(node),
                    node_labels=labels.get(node, {}) if labels is not None else None,
                    requested=requested,
                    samples=count,
                    resampling=resample,
                    deadline=time.monotonic() + budget,
                )
                for node in entering
            ]
            outcome = _run_nodes(phase, contexts, budget + watchdog_grace_s, parallel, progress)
        for node in entering:
            result = outcome[node]
            results[node].append(result)
            if phase.number in config.skip and result.status is PhaseStatus.SKIPPED:
                continue
            if result.status is not PhaseStatus.PASSED:
                stopped[node] = f"phase {phase.number} ({phase.name}) {result.status}: {result.reason or 'no reason'}"
        _emit(progress, ProgressEvent(kind="phase-done", phase=phase.number, name=phase.name, nodes=entering))
    return {n: tuple(r) for n, r in results.items()}


def all_passed(results: Mapping[NodeName, Sequence[PhaseResult]]) -> bool:
    """True when every result of every node is `passed` (skipped, not-run, failed, error are not)."""
    return bool(results) and all(r.status is PhaseStatus.PASSED for rs in results.values() for r in rs)


def _run_nodes(
    phase: NodePhase, contexts: list[PhaseContext], limit: float, parallel: int | None, progress: Progress | None
) -> dict[NodeName, PhaseResult]:
    """Run a node phase on every context, `parallel` at a time; progress as each node finishes."""
    out: dict[NodeName, PhaseResult] = {}
    workers = min(parallel or len(contexts), len(contexts))
    if workers <= 1:
        for ctx in contexts:
            out[ctx.node] = _timed(phase, ctx.config, ctx.clock, limit, _bind(phase, ctx))
            _emit(progress, _done(phase, ctx.node, out[ctx.node]))
        return out
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"upgrade-gate-phase{phase.number}") as pool:
        futures = {
            pool.submit(_timed, phase, ctx.config, ctx.clock, limit, _bind(phase, ctx)): ctx.node for ctx in contexts
        }
        for future in as_completed(futures):
            node = futures[future]
            out[node] = future.result()
            _emit(progress, _done(phase, node, out[node]))
    return out


def _run_group(phase: GroupPhase, ctx: GroupContext, limit: float) -> dict[NodeName, PhaseResult]:
    start = time.monotonic()
    value, problem = _guarded(lambda: dict(phase.run_group(ctx)), limit)
    wall = time.monotonic() - start
    out: dict[NodeName, PhaseResult] = {}
    for node in ctx.nodes:
        result = value.get(node) if value is not None else None
        if result is None:
            why = problem or "returned no result for this node"
            result = make_result(phase, ctx.config, PhaseStatus.ERROR, (f"phase {phase.number} ({phase.name}): {why}",))
        out[node] = _with_times(result, wall, ctx.clock)
    return out


def _timed(
    phase: NodePhase, config: CvfConfig, clock: ToolClock, budget: float, call: Callable[[], PhaseResult]
) -> PhaseResult:
    start = time.monotonic()
    value, problem = _guarded(call, budget)
    if value is None:
        value = make_result(phase, config, PhaseStatus.ERROR, (f"phase {phase.number} ({phase.name}): {problem}",))
    return _with_times(value, time.monotonic() - start, clock)


def _bind(phase: NodePhase, ctx: PhaseContext) -> Callable[[], PhaseResult]:
    return lambda: phase.run(ctx)


def _with_times(result: PhaseResult, wall: float, clock: ToolClock) -> PhaseResult:
    return replace(result, duration_s=round(wall, 6), tool_duration_s=round(min(clock.seconds, wall), 6))


def _guarded(call: Callable[[], T], limit: float) -> tuple[T | None, str | None]:
    """Run `call` in a watchdog thread for at most `limit` s: (value, None), or (None, why it has no value)."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except Exception as exc:  # a phase bug must cost the node its pass, not the run
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name="upgrade-gate-phase")
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        return None, f"still running after {limit:g}s (budget and watchdog grace): abandoned"
    if "error" in box:
        exc = box["error"]
        if isinstance(exc, EnvironmentFailure) and aborts_run(exc):
            raise exc
        return None, f"crashed: {type(exc).__name__}: {exc}"
    return box["value"], None  # type: ignore[return-value]


def aborts_run(exc: object) -> bool:
    """True for an error that is the environment's, not the node's: it stops the whole run."""
    return isinstance(exc, EnvironmentFailure) and not isinstance(exc, LauncherError)


def _done(phase: NodePhase | GroupPhase, node: NodeName, result: PhaseResult) -> ProgressEvent:
    return ProgressEvent(kind="node-done", phase=phase.number, name=phase.name, node=node, result=result)


def _emit(progress: Progress | None, event: ProgressEvent) -> None:
    if progress is not None:
        progress(event)
