"""The node agent's loop: a monotonic-clock cadence with jitter, Prometheus metrics, a clean stop.

Design decisions
- Cadence (`Cadence`): slot k is due at `start + k * interval + jitter * u` (u uniform in [0, 1), drawn
  per slot), on the monotonic clock, so a wall-clock step (NTP) neither bunches nor stalls cycles, and the
  fleet's agents, started together by a rollout, spread their API calls over `jitter` seconds. A cycle
  that overruns its slot skips the slots it missed (counted in `upgrade_gate_agent_skipped_cycles_total`)
  instead of running them back to back. Interval 5 s - 1 h (default 30 s), jitter 0 - interval/2.
- Metrics: a small HTTP endpoint (`/metrics`, text format 0.0.4; `--metrics-port`, default 9847, on the
  host network the agent shares with the node) rather than the node_exporter textfile collector, which
  would need a writable host mount; `--textfile` writes the same text to a file for sites that want it.
  The series are `report.prometheus`'s for the node plus the agent's own: the condition (one-hot over
  True/False/Unknown), cycle seconds and CPU seconds, cycles, failed cycles, skipped slots. `/healthz`
  answers 503 once no cycle has finished for three intervals (plus the probes' time): a livenessProbe
  restarts a hung agent.
- A failed cycle (the API unreachable, refusing, or a bug-free GateError) is counted and logged on one
  line; the loop goes on, because the next slot may succeed and a crash-looping agent vouches for nothing
  either. The condition is Unknown in the metrics (nothing could be written to the Node).
- Stop: SIGTERM raises in the main thread (`cli.main`'s handler), the wait ends at once, and `finally`
  sets the condition Unknown (AgentStopped) and closes the endpoint; the CLI exits 143.
"""

from __future__ import annotations

import http.server
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from upgrade_gate.errors import ConfigError, GateError
from upgrade_gate.model import GateReport, Verdict
from upgrade_gate.report.prometheus import render_metrics

if TYPE_CHECKING:
    from upgrade_gate.fleet.agent import Agent, CycleResult

MIN_INTERVAL_S = 5.0
MAX_INTERVAL_S = 3600.0
DEFAULT_PORT = 9847


@dataclass(frozen=True, slots=True, kw_only=True)
class Cadence:
    """When the agent's cycles are due (see the module docstring)."""

    interval_s: float = 30.0
    jitter_s: float = 3.0

    def __post_init__(self) -> None:
        if not MIN_INTERVAL_S <= self.interval_s <= MAX_INTERVAL_S:
            raise ConfigError(f"agent interval {self.interval_s:g}s: must be {MIN_INTERVAL_S:g}-{MAX_INTERVAL_S:g}s")
        if not 0 <= self.jitter_s <= self.interval_s / 2:
            raise ConfigError(
                f"agent jitter {self.jitter_s:g}s: must be 0-{self.interval_s / 2:g}s (half the interval)"
            )

    def next_slot(self, start: float, now: float, last: int, u: float) -> tuple[int, float, int]:
        """The next slot after `last` whose start is not past `now`: (slot, due time, slots skipped)."""
        slot = last + 1
        if start + slot * self.interval_s < now:  # overran: the first slot that has not begun yet
            slot = max(slot, int((now - start) // self.interval_s) + 1)
        return slot, start + slot * self.interval_s + self.jitter_s * u, slot - last - 1


@dataclass
class AgentStats:
    """Counters across cycles (mutable: the loop's own)."""

    cycles: int = 0
    failed: int = 0
    skipped: int = 0
    last: CycleResult | None = None
    last_error: str = ""
    last_end: float | None = None  # monotonic


def _series(name: str, help_text: str, rows: list[tuple[str, str]]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *(f"{name}{{{lbl}}} {val}" for lbl, val in rows)]


def render_agent_metrics(node: str, stats: AgentStats, *, now: datetime, tool_version: str = "") -> str:
    """The node's gate series (from the last cycle's report) and the agent's own."""
    last = stats.last
    text = ""
    if last is not None:
        report = GateReport(verdict=last.report.verdict, generated_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                            tool_version=tool_version, policy_name="node agent", nodes=(last.report,))  # fmt: skip
        text = render_metrics(report, now=now, taken_at={node: last.taken_at} if last.taken_at else None)
    status = last.status if last is not None and not stats.last_error else "Unknown"
    n = f'node="{node}"'
    onehot = [(f'{n},status="{s}"', "1" if s == status else "0") for s in ("True", "False", "Unknown")]
    lines = _series(
        "upgrade_gate_drift_condition", "The UpgradeGateDrift condition (1 for the current status).", onehot
    )
    if last is not None:
        lines += _series("upgrade_gate_agent_cycle_seconds", "Wall seconds of the last cycle.",
                         [(n, f"{last.duration_s:.3f}")])  # fmt: skip
        cpu_help = "CPU seconds of the last cycle: the agent and its probes, user and system."
        lines += _series("upgrade_gate_agent_cycle_cpu_seconds", cpu_help, [(n, f"{last.cpu_s:.3f}")])
    for name, help_text, value in (
        ("upgrade_gate_agent_cycles_total", "Cycles run since the agent started.", stats.cycles),
        ("upgrade_gate_agent_failed_cycles_total", "Cycles that ended without a judgement.", stats.failed),
        ("upgrade_gate_agent_skipped_cycles_total", "Slots skipped because a cycle overran.", stats.skipped),
    ):
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter", f"{name}{{{n}}} {value}"]
    return text + "\n".join(lines) + "\n"


class MetricsEndpoint:
    """`/metrics` and `/healthz` on a port, served from a daemon thread; `publish` swaps the text."""

    def __init__(self, port: int, *, stale_after_s: float, address: str = "") -> None:
        endpoint = self
        self._text = b""
        self._stale_after_s = stale_after_s
        self._last_end = time.monotonic()  # a fresh agent is healthy until its first slot is late

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/metrics":
                    body, code, kind = endpoint._text, 200, "text/plain; version=0.0.4; charset=utf-8"
                elif self.path == "/healthz":
                    fresh = time.monotonic() - endpoint._last_end <= endpoint._stale_after_s
                    body, code, kind = (b"ok\n", 200, "text/plain") if fresh else (b"stale\n", 503, "text/plain")
                else:
                    body, code, kind = b"not found\n", 404, "text/plain"
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = http.server.ThreadingHTTPServer((address, port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        threading.Thread(target=self._server.serve_forever, daemon=True, name="agent-metrics").start()

    def publish(self, text: str, *, cycle_end: float | None) -> None:
        """Serve `text` from now on; `cycle_end` (monotonic) is when the last cycle finished."""
        self._text = text.encode("utf-8")
        if cycle_end is not None:
            self._last_end = cycle_end

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


def run_agent(
    agent: Agent,
    cadence: Cadence,
    *,
    wall: Callable[[], datetime],
    stop: threading.Event | None = None,
    endpoint: MetricsEndpoint | None = None,
    textfile: Path | None = None,
    max_cycles: int | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    rand: Callable[[], float] = random.random,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> AgentStats:
    """Run cycles on the cadence until `stop` is set, `max_cycles` ran, or a signal raises; always leaves
    the condition Unknown (AgentStopped) when it ends (the Node is no longer watched)."""
    from upgrade_gate import __version__
    from upgrade_gate.docio import write_text_atomic

    stop = stop or threading.Event()
    stats = AgentStats()
    start, slot, why = monotonic(), -1, "stopped"
    node = agent.settings.node
    try:
        while max_cycles is None or stats.cycles < max_cycles:
            slot, due, skipped = cadence.next_slot(start, monotonic(), slot, rand())
            stats.skipped += skipped
            if stop.wait(max(0.0, due - monotonic())):
                break
            now = wall()
            previous = stats.last.status if stats.last is not None else None
            try:
                stats.last, stats.last_error = agent.cycle(now), ""
            except GateError as exc:  # the API failed or refused: counted, logged, tried again next slot
                stats.failed += 1
                stats.last_error = str(exc)
                log(f"upgrade-gate agent: node {node}: cycle failed: {exc}")
            stats.cycles += 1
            stats.last_end = monotonic()
            if stats.last is not None and not stats.last_error and stats.last.status != previous:
                c = stats.last.condition
                log(f"upgrade-gate agent: node {node}: UpgradeGateDrift={c['status']} {c['reason']}: {c['message']}")
            text = render_agent_metrics(node, stats, now=now, tool_version=__version__)
            if endpoint is not None:
                endpoint.publish(text, cycle_end=stats.last_end)
            if textfile is not None:
                write_text_atomic(textfile, text)
        why = f"after {stats.cycles} cycles" if max_cycles is not None and stats.cycles >= max_cycles else "stopped"
    except BaseException as exc:  # SIGTERM / SIGINT (cli.main raises them here), or a bug: say so, then go
        why = "terminated (SIGTERM)" if type(exc).__name__ == "Terminated" else f"{type(exc).__name__}"
        raise
    finally:
        agent.stop(wall(), why)
        if endpoint is not None:
            endpoint.close()
    return stats


def once_verdict(result: CycleResult) -> Verdict:
    """A `--once` run's verdict: PASS only for a False condition (Unknown is missing evidence: BLOCK)."""
    return Verdict.PASS if result.status == "False" else Verdict.BLOCK
