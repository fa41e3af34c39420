"""Phase 4, per-rail RDMA: `ib_write_bw` per rail between node pairs, against PHASE4_BW_THRESHOLD (Gb/s).

Pairing (CVF PHASE4_DRIVER_SCRIPT): nodes sorted by name, paired `n0<->n1`, `n2<->n3`, ...; for each
pair and each rail 0..PHASE4_RAIL_COUNT-1 (serialised, so a NIC never carries two flows) the server runs
on the first node through the launcher, in the background, and the client on the second node connects
to the server's address on that rail:
    server: ib_write_bw -d <dev> -i 1 -F --report_gbits
    client: ib_write_bw -d <dev> -i 1 -F --report_gbits <server address>
The client's `BW average` (largest size) is the rail's bandwidth, recorded for both endpoints as
`rail/<device>/write_bw` (settings: msg_size, qps, peer) and annotated `rail-<i>`; a rail below the
threshold, or whose run failed, fails both nodes of the pair (CVF: `failed-rails:<csv>`).

Where CVF passes a node it did not test, upgrade-gate does not:
- the odd node out is paired again with a node that already passed phase 4 (or a spare partner the
  caller named); only the odd node's result comes from that run (its partner already has one);
- a node with no partner at all (a single node, or every other node failed) is `failed` with the reason
  "no peer", never `passed` with CVF's `unpaired=true`.

Design decisions:
- Rail i of a node is its i-th AINIC (phase 3's selection, sorted by RDMA device name) from its
  snapshot; without a snapshot it is CVF's pod naming `PHASE4_IB_DEV_PREFIX<i>`.
- Tool time of a rail is the server's whole life (the client runs inside it), so the overhead the bench
  reports excludes the deliberate server head start only if `UPGRADE_GATE_PHASE4_SERVER_START_S` is 0.
- CVF runs each rail once; here every rail runs `samples` times and then, while its floor
  (PHASE4_BW_THRESHOLD, judged on the samples' bounds with a sigma pooled over the pair's rails) or a
  baseline comparison is inconclusive, again, up to the policy's `max_samples` (validate.remeasure).
  A rail fails only when its upper bound is below the floor; the `-samples` annotation says how many
  runs each re-measured rail took, and a failure's reason quotes CVF's single-sample decision.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from upgrade_gate.collect.runner import CommandResult
from upgrade_gate.errors import ParseError
from upgrade_gate.model import Measurement, NodeName, PhaseResult, PhaseStatus, replace
from upgrade_gate.parse.perftest import parse_ib_write_bw, to_measurement
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.launcher import LauncherError
from upgrade_gate.validate.phase import GroupContext, Outcome, TimedRunner, ToolClock, make_result
from upgrade_gate.validate.phases.nic import rail_nics
from upgrade_gate.validate.remeasure import FloorDecision, floor_message, in_between, rail_floors

TOOL = "ib_write_bw"
_SERVER_GRACE_S = 10.0
_Ends = tuple[tuple[NodeName, str], tuple[NodeName, str]]  # (server node, device), (client node, device)


def rail_argv(device: str, peer_address: str | None = None) -> tuple[str, ...]:
    """Server (no address) or client command line for one rail."""
    argv = (TOOL, "-d", device, "-i", "1", "-F", "--report_gbits")
    return (*argv, peer_address) if peer_address is not None else argv


def pair_nodes(nodes: tuple[NodeName, ...]) -> tuple[list[tuple[NodeName, NodeName]], NodeName | None]:
    """CVF's pairing: sorted, consecutive pairs, and the odd node out (or None)."""
    ordered = sorted(nodes)
    pairs = [(ordered[i], ordered[i + 1]) for i in range(0, len(ordered) - 1, 2)]
    return pairs, (ordered[-1] if len(ordered) % 2 else None)


@dataclass(slots=True)
class _NodeRails:
    """Per-node results of the rails it took part in."""

    out: Outcome = field(default_factory=Outcome)
    bandwidth: dict[int, float] = field(default_factory=dict)
    failed_rails: list[int] = field(default_factory=list)
    peers: list[str] = field(default_factory=list)


def _device(ctx: GroupContext, node: NodeName, rail: int) -> str | None:
    snap = ctx.snapshots.get(node)
    if snap is None:
        return f"{ctx.config.phase4_ib_dev_prefix}{rail}"
    nics = rail_nics(snap, ctx.config)
    return nics[rail].name if rail < len(nics) else None


class RailPhase:
    """Phase 4."""

    number = 4
    name = cvf.PHASE_NAMES[4]
    label_key: str | None = cvf.RAIL_BANDWIDTH

    def run_group(self, ctx: GroupContext) -> Mapping[NodeName, PhaseResult]:
        """Test every pair, then the odd node out against a node that passed."""
        pairs, odd = pair_nodes(ctx.nodes)
        results: dict[NodeName, PhaseResult] = {}
        for server, client in pairs:
            rails = {server: _NodeRails(), client: _NodeRails()}
            self._test_pair(ctx, server, client, rails)
            results.update({n: self._result(ctx.config, r) for n, r in rails.items()})
        if odd is not None:
            passed = [n for n in sorted(results) if results[n].status is PhaseStatus.PASSED]
            partners = passed + [p for p in ctx.peers if p not in ctx.nodes]
            if not partners:
                why = (
                    "no peer: phase 4 needs a partner node and none was given"
                    if len(ctx.nodes) == 1
                    else "no peer: the odd node out needs a partner that passed phase 4, and none did"
                )
                results[odd] = make_result(self, ctx.config, PhaseStatus.FAILED, (why,))
            else:
                rails = {partners[0]: _NodeRails(), odd: _NodeRails()}
                self._test_pair(ctx, partners[0], odd, rails)
                results[odd] = self._result(ctx.config, rails[odd])
        return results

    def _test_pair(
        self, ctx: GroupContext, server: NodeName, client: NodeName, rails: dict[NodeName, _NodeRails]
    ) -> None:
        for side, other in ((server, client), (client, server)):
            rails[side].peers.append(other)
        ends: dict[int, _Ends] = {}
        for rail in range(ctx.config.phase4_rail_count):
            devices = {n: _device(ctx, n, rail) for n in (server, client)}
            lacking = [n for n, d in devices.items() if d is None]
            if lacking:
                for node in lacking:
                    rails[node].out.fail(
                        f"rail-{rail}: no RDMA device (PHASE4_RAIL_COUNT {ctx.config.phase4_rail_count})"
                    )
                    rails[node].failed_rails.append(rail)
                continue
            dev_s, dev_c = devices[server], devices[client]
            assert dev_s is not None and dev_c is not None
            ends[rail] = ((server, dev_s), (client, dev_c))
        # CVF runs each rail once; the judge's statistics need samples, so every rail runs `samples` times
        # (UPGRADE_GATE_SAMPLES / --samples), then again while its floor (or a baseline comparison) is
        # inconclusive, up to the policy's max_samples (validate.remeasure).
        runs: dict[int, list[Measurement]] = {}
        for rail, end in ends.items():
            got = self._run_rail(ctx, rail, end, rails, ctx.samples)
            if got is not None:
                runs[rail] = got
        why: dict[int, str] = {}
        limit = ctx.resampling.limit(ctx.samples)
        while runs:
            now = {r: w for r, w in self._inconclusive(ctx, ends, runs).items() if len(runs[r]) < limit}
            if not now:
                break
            for rail, reason in sorted(now.items()):
                why[rail] = f"{reason} after {len(runs[rail])} run(s)"
                more = ctx.resampling.next_count(len(runs[rail]), ctx.samples) - len(runs[rail])
                got = self._run_rail(ctx, rail, ends[rail], rails, more)
                if got is None:
                    del runs[rail]  # the failing run is recorded: the rail fails closed
                else:
                    runs[rail].extend(got)
        floors = rail_floors(
            {r: [s for m in ms for s in m.samples] for r, ms in runs.items()},
            ctx.config.phase4_bw_threshold,
            rail_count=ctx.config.phase4_rail_count,
            p=ctx.resampling,
        )
        for rail, measured in sorted(runs.items()):
            for node, _ in ends[rail]:
                rails[node].out.took(f"rail-{rail}", len(measured), why.get(rail))
            self._record(ctx, rail, ends[rail], measured, rails, floors[rail])

    def _inconclusive(
        self, ctx: GroupContext, ends: Mapping[int, _Ends], runs: Mapping[int, list[Measurement]]
    ) -> dict[int, str]:
        """Rails whose floor (or baseline comparison) is neither clearly passed nor clearly failed -> why."""
        values = {r: [s for m in ms for s in m.samples] for r, ms in runs.items()}
        floors = rail_floors(
            values, ctx.config.phase4_bw_threshold, rail_count=ctx.config.phase4_rail_count, p=ctx.resampling
        )
        out = {
            r: f"{d.estimate:.2f} Gb/s not shown above or below PHASE4_BW_THRESHOLD"
            for r, d in floors.items()
            if in_between(d)
        }
        compare = ctx.resampling.compare
        if compare is not None:
            for node in {n for end in ends.values() for n, _ in end}:
                keyed = {
                    f"rail/{dev}/write_bw": r for r, end in ends.items() if r in runs for n, dev in end if n == node
                }
                measured = [replace(runs[r][0], key=k, samples=tuple(values[r])) for k, r in keyed.items()]
                for key in compare(node, measured):
                    rail_of = keyed.get(key)
                    targets = [rail_of] if rail_of is not None else list(keyed.values())  # a group: every rail
                    for r in targets:
                        out.setdefault(r, f"the comparison of {key} with {node}'s baseline is inconclusive")
        return out

    def _run_rail(
        self, ctx: GroupContext, rail: int, end: _Ends, rails: dict[NodeName, _NodeRails], count: int
    ) -> list[Measurement] | None:
        """`count` client runs of one rail (a server each); None after recording why one failed."""
        config = ctx.config
        server, client = end
        both = (rails[server[0]], rails[client[0]])
        where = f"rail-{rail}({server[0]}:{server[1]}<->{client[0]}:{client[1]})"
        runs: list[Measurement] = []
        for _ in range(max(1, count)):
            try:
                background = ctx.start(server[0], rail_argv(server[1]))
                if config.phase4_server_start_s > 0:
                    time.sleep(min(config.phase4_server_start_s, max(ctx.left(), 0.0)))
                address = ctx.launcher.address(server[0], device=server[1])
                # The server's life is the rail's tool time; the client's own time is inside it.
                runner = TimedRunner(ctx.launcher.runner_for(client[0]), ToolClock(), ctx.deadline)
                result = runner.run(rail_argv(client[1], address), timeout=config.phase4_pair_wait_s)
                server_result = background.stop(timeout=min(_SERVER_GRACE_S, config.phase4_pair_wait_s))
            except LauncherError as exc:
                for node in both:
                    node.out.error(f"{where}: {exc}")
                    node.failed_rails.append(rail)
                return None
            run = self._judge(result, server_result, where, both, device=client[1])
            if run is None:
                for side in both:
                    side.failed_rails.append(rail)
                return None
            runs.append(run)
        return runs

    def _record(
        self,
        ctx: GroupContext,
        rail: int,
        end: _Ends,
        runs: list[Measurement],
        rails: dict[NodeName, _NodeRails],
        d: FloorDecision,
    ) -> None:
        """The rail's measurement for both endpoints, and its floor judged on the samples."""
        config = ctx.config
        server, client = end
        both = (rails[server[0]], rails[client[0]])
        where = f"rail-{rail}({server[0]}:{server[1]}<->{client[0]}:{client[1]})"
        bandwidth = replace(runs[0], samples=tuple(s for run in runs for s in run.samples))
        for (name, device), other in ((server, client[0]), (client, server[0])):
            rails[name].out.measurements.append(
                replace(bandwidth, key=f"rail/{device}/write_bw", settings={**bandwidth.settings, "peer": other})
            )
            rails[name].bandwidth[rail] = statistics.median(bandwidth.samples)
        value = statistics.median(bandwidth.samples)
        threshold = config.phase4_bw_threshold
        if d.outcome == "fail":
            for side in both:
                side.out.fail(
                    f"below-threshold:{where}={value:.2f} Gb/s ({floor_message(d)}) "
                    f"< PHASE4_BW_THRESHOLD {threshold:g} Gb/s"
                )
                side.failed_rails.append(rail)

    @staticmethod
    def _judge(
        result: CommandResult, server: CommandResult, where: str, both: tuple[_NodeRails, ...], *, device: str
    ) -> Measurement | None:
        """The client's measurement, or None after recording why there is none."""
        problem = result.failure_reason()
        if problem is not None:
            server_problem = server.failure_reason()
            detail = f"client {problem}" + (f"; server {server_problem}" if server_problem else "")
            for node in both:
                if result.missing or result.timed_out:
                    node.out.error(f"ib-write-bw-crashed:{where}: {detail}")
                else:
                    node.out.fail(f"ib-write-bw-crashed:{where}: {detail}")
            return None
        try:
            parsed = parse_ib_write_bw(result.stdout)
            return to_measurement(parsed, rail=device, peer=None)
        except ParseError as exc:
            for node in both:
                node.out.error(f"parse-failed:{where}: {exc}")
            return None

    def _result(self, config: CvfConfig, rails: _NodeRails) -> PhaseResult:
        extra = {f"rail-{i}": f"{bw:.2f}" for i, bw in sorted(rails.bandwidth.items())}
        if rails.peers:
            extra["peer"] = rails.peers[-1]
        if rails.failed_rails:
            extra["failed-rails"] = ",".join(str(i) for i in sorted(set(rails.failed_rails)))
        measured = min(rails.bandwidth.values()) if rails.bandwidth else None
        return rails.out.result(self, config, measured_bw=measured, extra=extra, peer=",".join(rails.peers) or None)

    def budget_s(self, config: CvfConfig, *, samples: int, nodes: int) -> float:
        """PHASE4_PAIR_WAIT_TIME per rail of every pair, plus the odd node's extra pair."""
        pairs = nodes // 2 + nodes % 2
        per_rail = config.phase4_pair_wait_s + config.phase4_server_start_s + _SERVER_GRACE_S
        return max(pairs, 1) * config.phase4_rail_count * per_rail * max(1, samples)

    def plan(self, config: CvfConfig, *, samples: int) -> tuple[str, ...]:
        """Dry-run description."""
        return (
            "pairs: nodes sorted by name, n0<->n1, n2<->n3, ...; the odd node out is re-paired with a node that passed",
            f"per rail 0..{config.phase4_rail_count - 1}: server `{' '.join(rail_argv('DEV'))}` on the first node,",
            f"  client `{' '.join(rail_argv('DEV', 'SERVER_ADDRESS'))}` on the second, "
            f"timeout {config.phase4_pair_wait_s:g}s per rail, {samples} run(s) per rail",
            f"pass: every rail's median BW average >= PHASE4_BW_THRESHOLD {config.phase4_bw_threshold:g} Gb/s; "
            "a node without a peer fails",
        )
