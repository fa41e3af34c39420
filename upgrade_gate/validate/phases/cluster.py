"""Phase 5, multi-node RCCL: all_reduce and all_gather sweeps across the nodes through `mpirun`.

Command (locally; the Kubernetes executor runs the same rccl-tests through an MPIJob):
    mpirun -np N -H host1:S1,host2:S2,... --allow-run-as-root \
        all_reduce_perf -b START -e END -f FACTOR -g 1 -n ITERS -w WARMUP
    (and all_gather_perf), started on the first node, one rank per GPU: S = the node's GPUs from its
    snapshot (SLOTS_PER_WORKER without one), N = sum of S. The sweep is the phase-2 one (CVF's
    MPI_LAUNCHER_ENV_VARS mirror PHASE2_*), repeated `samples` times, MPIJOB_WAIT_TIME per run, and
    re-run while its threshold or a node's baseline comparison is inconclusive (validate.remeasure):
    the whole sweep, or only the range of its sizes in doubt (`-b FIRST -e LAST`, phases.sweeps).
Measurements `cluster/<op>/busbw/<bytes>` and `cluster/<op>/avg_busbw` are recorded for every node of
the run. A threshold applies where CVF's `TESTS_JSON` names the test (all_reduce_perf: 5 GB/s by default).

Where CVF passes a node it did not test, upgrade-gate does not: fewer workers than `PHASE5_MIN_WORKERS`
(the nodes of the run plus spare partners) fails every node with "too few workers", never passes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from upgrade_gate.model import NodeName, PhaseResult, PhaseStatus
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.launcher import LauncherError
from upgrade_gate.validate.phase import GroupContext, Outcome, make_result
from upgrade_gate.validate.phases.sweeps import (
    Span,
    SweepLook,
    check_requested,
    check_sweeps,
    requested_sweep,
    run_sweeps,
    sweep_measurements,
    sweep_options,
)

OPS = (("all_reduce", "all_reduce_perf"), ("all_gather", "all_gather_perf"))


def cluster_argv(config: CvfConfig, tool: str, hosts: str, ranks: int | str, span: Span = None) -> tuple[str, ...]:
    """The phase-5 mpirun command line for one rccl-tests program (`span`: a range of the sweep's sizes alone)."""
    return (
        "mpirun",
        "-np",
        str(ranks),
        "-H",
        hosts,
        "--allow-run-as-root",
        tool,
        *sweep_options(config, 1, span),
    )


class ClusterPhase:
    """Phase 5."""

    number = 5
    name = cvf.PHASE_NAMES[5]
    label_key: str | None = cvf.CLUSTER_VALIDATION_STATUS

    def run_group(self, ctx: GroupContext) -> Mapping[NodeName, PhaseResult]:
        """One mpirun per collective across every node (and spare partner)."""
        config = ctx.config
        nodes = tuple(sorted(ctx.nodes))
        workers = nodes + tuple(p for p in ctx.peers if p not in nodes)
        if len(workers) < config.phase5_min_workers:
            why = (
                f"too few workers: {len(workers)} < PHASE5_MIN_WORKERS {config.phase5_min_workers} "
                f"({', '.join(workers) or 'none'})"
            )
            return {n: make_result(self, config, PhaseStatus.FAILED, (why,)) for n in nodes}
        slots = {w: self._slots(ctx, w) for w in workers}
        out = Outcome()
        avg_all_reduce: float | None = None
        try:
            hosts = ",".join(f"{ctx.launcher.address(w)}:{slots[w]}" for w in workers)
            runner = ctx.runner_for(nodes[0])
            env = ctx.launcher.tool_env(nodes[0])
        except LauncherError as exc:
            out.error(f"mpirun: {exc}")
            return self._results(ctx, nodes, workers, out, None)
        ranks = sum(slots.values())
        for op, tool in OPS:
            look = SweepLook(
                resampling=ctx.resampling,
                nodes=nodes,
                prefix="cluster",
                op=op,
                env=env,
                threshold=config.rccl_thresholds.get(tool),
                threshold_key=f"TESTS_JSON {tool}",
                tests=len(OPS),
            )
            results = run_sweeps(
                runner,
                partial(cluster_argv, config, tool, hosts, ranks),
                samples=ctx.samples,
                timeout=config.mpijob_wait_s,
                out=out,
                tool=f"mpirun {tool}",
                asked=requested_sweep(config),
                look=look,
            )
            check_requested(results, out, tool=f"mpirun {tool}", asked=requested_sweep(config))
            out.measurements.extend(sweep_measurements(results, out, prefix="cluster", op=op, env=env))
            avg = check_sweeps(
                results,
                out,
                tool=f"mpirun {tool}",
                threshold=config.rccl_thresholds.get(tool),
                threshold_key=f"TESTS_JSON {tool}",
                ranks=ranks,
                resampling=ctx.resampling,
                tests=len(OPS),
            )
            if op == "all_reduce":
                avg_all_reduce = avg
            if out.reasons:
                break
        return self._results(ctx, nodes, workers, out, avg_all_reduce)

    def _results(
        self,
        ctx: GroupContext,
        nodes: tuple[NodeName, ...],
        workers: tuple[NodeName, ...],
        out: Outcome,
        avg: float | None,
    ) -> dict[NodeName, PhaseResult]:
        return {
            n: out.result(self, ctx.config, measured_bw=avg, peer=",".join(w for w in workers if w != n)) for n in nodes
        }

    @staticmethod
    def _slots(ctx: GroupContext, node: NodeName) -> int:
        snap = ctx.snapshots.get(node)
        return len(snap.gpus) if snap is not None and snap.gpus else ctx.config.slots_per_worker

    def budget_s(self, config: CvfConfig, *, samples: int, nodes: int) -> float:
        """MPIJOB_WAIT_TIME per run of each collective."""
        return config.mpijob_wait_s * len(OPS) * samples

    def plan(self, config: CvfConfig, *, samples: int) -> tuple[str, ...]:
        """Dry-run description."""
        lines = [
            f"{' '.join(cluster_argv(config, tool, 'HOST1:S1,HOST2:S2', 'N'))}  (x{samples}, "
            f"timeout {config.mpijob_wait_s:g}s per run)"
            for _, tool in OPS
        ]
        thresholds = ", ".join(
            f"{t} >= {config.rccl_thresholds[t]:g} GB/s" for _, t in OPS if t in config.rccl_thresholds
        )
        lines.append(
            f"pass: >= PHASE5_MIN_WORKERS {config.phase5_min_workers} workers, #wrong == 0"
            + (f", median Avg bus bandwidth {thresholds}" if thresholds else "")
        )
        return tuple(lines)
