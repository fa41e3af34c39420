"""The background sampling loop shared by phase 2's thermal and phase 6's utilisation sampling.

Both sample a node's GPUs while a load runs (the mesh sweep, the training run): a thread calls a tool
every `interval_s` on its own `TimedRunner` (the phase deadline bounds every call; its tool time overlaps
the load's, so it has a clock of its own), and stops when the load returns. What a sample is, where it
goes and how a failed one reads are the caller's (`take`, `failed`); this module holds only the loop.

Design decisions:
- A sample that raises is evidence, not a dead thread: `failed(exc)` records it and the loop goes on.
- `immediately` picks the schedule: thermal samples at once and then every interval (the load is hot
  from the start); utilisation waits one interval first (the run starts with initialisation).
- `limit` caps the calls (thermal: `MAX_DURING`); None leaves the count to the deadline (utilisation
  keeps the latest samples itself).
- The thread is joined for at most `timeout_s + 5` s after the load; a thread still alive then is named
  (`Background.stuck`) so the caller notes that its last sample is lost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from upgrade_gate.validate.phase import PhaseContext, TimedRunner, ToolClock

STUCK = "the sampling thread did not stop in time; its last sample is lost"
"""The note a caller adds when `Background.stuck` is set."""


@dataclass(slots=True)
class Background:
    """The loop's state as the caller sees it: `stuck` is set when the thread outlived its join."""

    stuck: bool = False


@contextmanager
def in_background(
    ctx: PhaseContext,
    take: Callable[[TimedRunner], None],
    failed: Callable[[Exception], None],
    *,
    interval_s: float,
    timeout_s: float,
    name: str,
    immediately: bool,
    limit: int | None = None,
) -> Iterator[Background]:
    """Call `take(runner)` every `interval_s` (at once first when `immediately`, at most `limit` times)
    while the body runs; `failed(exc)` for a call that raised."""
    state = Background()
    stop = threading.Event()
    runner = TimedRunner(ctx.launcher.runner_for(ctx.node), ToolClock(), ctx.deadline)

    def loop() -> None:
        if not immediately and stop.wait(interval_s):
            return
        calls = 0
        while limit is None or calls < limit:
            calls += 1
            try:
                take(runner)
            except Exception as exc:  # a thread must not die silently; the reason is evidence
                failed(exc)
            if stop.wait(interval_s):
                return

    thread = threading.Thread(target=loop, daemon=True, name=f"upgrade-gate-{name}-{ctx.node}")
    thread.start()
    try:
        yield state
    finally:
        stop.set()
        thread.join(timeout_s + 5.0)
        state.stuck = thread.is_alive()
