"""Phase 2, intra-node mesh: rccl-tests `all_reduce_perf` across every GPU of the node.

Command (docs/PROBES.md): `all_reduce_perf -b START -e END -f FACTOR -g NGPUS -n ITERS -w WARMUP` with the
sweep from the CVF keys (`PHASE2_START_MSG_SIZE` 1K .. `PHASE2_END_MSG_SIZE` 2G, `PHASE2_STEP_FACTOR`
2, `PHASE2_ITER_COUNT`, `PHASE2_WARMUP_ITER_COUNT`) and NGPUS = the GPUs of the node's snapshot. Each run
gets `PHASE2_JOB_WAIT_TIME` seconds (CVF's per-node Job budget). Measurements:
`mesh/all_reduce/busbw/<bytes>` per size and `mesh/all_reduce/avg_busbw`, with the sweep settings and the
NCCL_* / RCCL_* environment in `settings`. Re-measurement (validate.remeasure, phases.sweeps) re-runs the
whole sweep, or only the range of its sizes in doubt (`-b FIRST -e LAST`). The median `# Avg bus bandwidth`
is compared with `PHASE2_BW_THRESHOLD` (GB/s) and written to the `-measured-bw` annotation. A run whose
printed sweep header differs from the sweep asked for is an error (sweeps.check_requested), never a pass.
The small sizes' times (`latency/all_reduce/time_us/<bytes>`, <= 1 MiB) feed `workload.allreduce_latency`.
Around the sweep each GPU's temperature and power are sampled (`phases.thermal`: `thermal/gpu<i>/...`
measurements, judged by `thermal.outlier`).

Dated notes:
- 2026: CVF itself runs `mpirun --np 8 --host localhost ... all_reduce_perf ... -g 1` (one rank per GPU);
  upgrade-gate runs one process with `-g NGPUS` (docs/PROBES.md). Both report the same bus bandwidth
  definition; the `ranks` setting is the GPU count either way, so their numbers compare.
- `-Z json` is not requested: no real capture of it exists and the fake tools refuse it (the parser
  can merge a `-Z json` file with the text when an executor collects one).
"""

from __future__ import annotations

from collections.abc import Sequence

from upgrade_gate.model import Measurement, PhaseResult
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.phase import Outcome, PhaseContext
from upgrade_gate.validate.phases.sweeps import (
    Span,
    SweepRun,
    check_requested,
    check_sweeps,
    mesh_look,
    requested_sweep,
    run_sweeps,
    sweep_measurements,
    sweep_options,
)
from upgrade_gate.validate.phases.thermal import (
    BUDGET_S,
    Starter,
    plan_line,
    record_thermal,
    sample_thermal,
    start_amd_smi,
)

TOOL = "all_reduce_perf"


def mesh_argv(config: CvfConfig, ngpus: int | str, span: Span = None) -> tuple[str, ...]:
    """The phase-2 command line (`span`: of a range of the sweep's sizes alone, re-measurement)."""
    return (TOOL, *sweep_options(config, ngpus, span))


LATENCY_MAX_BYTES = 1 << 20
"""Sizes up to 1 MiB get a latency measurement (`workload.allreduce_latency` judges those <= its max_bytes)."""


def latency_measurements(runs: Sequence[SweepRun], measured: Sequence[Measurement]) -> list[Measurement]:
    """`latency/all_reduce/time_us/<bytes>`: the out-of-place time of the small sizes, one sample per run.

    The incident's acceptance table asks for RCCL latency under 500 µs; rccl-tests prints it as the
    `time` column (µs). Settings are the size's bus-bandwidth measurement's (like with like).
    """
    times: dict[int, list[float]] = {}
    for run in runs:
        for row in run.result.rows:
            if 0 < row.size <= LATENCY_MAX_BYTES and row.out_of_place is not None:
                times.setdefault(row.size, []).append(row.out_of_place.time_us)
    settings = {m.key: m.settings for m in measured}
    return [
        Measurement(
            key=f"latency/all_reduce/time_us/{size}",
            unit="us",
            samples=tuple(values),
            settings=dict(settings.get(f"mesh/all_reduce/busbw/{size}", {})),
            source=TOOL,
            higher_is_better=False,
        )
        for size, values in sorted(times.items())
    ]


class MeshPhase:
    """Phase 2."""

    number = 2
    name = cvf.PHASE_NAMES[2]
    label_key: str | None = cvf.GPU_MESH_VALIDATION
    thermal_start: Starter = staticmethod(start_amd_smi)  # amd-smi/rocm-smi; NVIDIA's: phases.nvidia_mesh
    thermal_plan: str = plan_line()

    def run(self, ctx: PhaseContext) -> PhaseResult:
        """Run the sweep `ctx.samples` times and judge it."""
        out = Outcome()
        ngpus = len(ctx.snapshot.gpus) if ctx.snapshot is not None else 0
        if ngpus == 0:
            out.error("no GPU count: the node's snapshot lists no GPU, so -g cannot be set")
            return out.result(self, ctx.config)
        env = ctx.launcher.tool_env(ctx.node)
        look = mesh_look(ctx, env)
        reserve = ctx.config.phase2_job_wait_s * ctx.samples
        with sample_thermal(
            ctx, reserve_s=reserve, start=self.thermal_start
        ) as thermal:  # temperature and power under load (phases.thermal)
            results = run_sweeps(
                ctx.runner(),
                lambda span: mesh_argv(ctx.config, ngpus, span),
                samples=ctx.samples,
                timeout=ctx.config.phase2_job_wait_s,
                out=out,
                tool=TOOL,
                asked=requested_sweep(ctx.config),
                look=look,
            )
        check_requested(results, out, tool=TOOL, asked=requested_sweep(ctx.config))
        out.measurements.extend(sweep_measurements(results, out, prefix="mesh", op="all_reduce", env=env))
        out.measurements.extend(latency_measurements(results, out.measurements))
        avg = check_sweeps(
            results,
            out,
            tool=TOOL,
            threshold=ctx.config.phase2_bw_threshold,
            threshold_key="PHASE2_BW_THRESHOLD",
            ranks=ngpus,
            resampling=look.resampling,
            tests=look.tests,
        )
        record_thermal(thermal, out, ctx.snapshot, mesh_argv(ctx.config, ngpus))
        return out.result(self, ctx.config, measured_bw=avg)

    def budget_s(self, config: CvfConfig, *, samples: int, nodes: int) -> float:
        """PHASE2_JOB_WAIT_TIME per run, and the thermal sampling around the sweep."""
        return config.phase2_job_wait_s * samples + BUDGET_S

    def plan(self, config: CvfConfig, *, samples: int) -> tuple[str, ...]:
        """Dry-run description."""
        return (
            f"{' '.join(mesh_argv(config, 'NGPUS'))}  (x{samples}, NGPUS from the snapshot, "
            f"timeout {config.phase2_job_wait_s:g}s per run)",
            f"pass: median Avg bus bandwidth >= PHASE2_BW_THRESHOLD {config.phase2_bw_threshold:g} GB/s, "
            "#wrong == 0 (validated), Out of bounds OK, no '*' error, no FAILED footer, ranks == NGPUS on own GPUs",
            self.thermal_plan,
        )
