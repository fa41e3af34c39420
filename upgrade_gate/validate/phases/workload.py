"""Phases 6 and 7: the workload still works (issue 25). A reference training run, then the same run with
the visible-device list permuted.

Phase 6 `workload` runs a training job on the node's GPUs and phase 7 `perturbation` runs it twice more
with `HIP_VISIBLE_DEVICES` (the config's `UPGRADE_GATE_WORKLOAD_VISIBLE_VAR`: ROCR_VISIBLE_DEVICES, or
CUDA_VISIBLE_DEVICES on NVIDIA, which is also the default on a node whose snapshot is NVIDIA's:
`visible_var`) reversed, then rotated by one. They sit after CVF's 0-5 in the
pipeline's order (`validate --phases 2,6,7`; by name `workload`, `perturbation`) and write
upgrade-gate's own CVF-style labels (`cvf.WORKLOAD_VALIDATION`, `cvf.PERTURBATION_VALIDATION`).

The job (docs/workload.md): by default the shipped `data/workload/reference_train.py` under
`torchrun --standalone --nproc-per-node N` (N = `UPGRADE_GATE_WORKLOAD_NPROC`, default one rank per
GPU of the snapshot); a site's own command (`UPGRADE_GATE_WORKLOAD_COMMAND`, split like a shell line
but never run by one; `{nproc}`, `{steps}`, `{warmup}`, `{batch}` and `{script}` are filled in) must
print the same JSON-lines contract (`parse.workload`). The perturbation sets the variable in the
child's environment only, as `env VAR=LIST command...` through the node's CommandRunner (the same seam
on a real node, a fake node and a Kubernetes pod): the gate's own environment and the node's never
change.

Measurements (unit, settings = the run's `start` record and the rank count):
- phase 6: `workload/samples_per_s` (one sample per step after warm-up; the throughput the judge
  compares with the statistics of bandwidth; with a baseline to compare with, validate --baseline, the
  job is re-run while the comparison is inconclusive, up to MAX_RUNS runs, their steps pooled),
  `workload/step_time_s` (the distribution), `workload/loss` (every step in order: the curve),
  `workload/init_s`, `workload/collective_timeouts`, `workload/collective_errors`,
  `workload/collective_warnings` (counts of NCCL/RCCL lines in the log); the GPU utilisation sampled
  with `amd-smi monitor -u` during the first run, `workload/gpu<i>/gfx_util_pct` and
  `workload/gfx_util_spread_pct` (`phases.workload_util`; its problems are `utilisation: ...` reasons,
  never the phase's status);
- phase 7: `perturbation/<reversed|rotated>/samples_per_s` and `.../loss`; its device map holds both
  runs' ranks (`visible` names the list each ran with), which `workload.index_dependent` compares with
  phase 6's map.

Fail closed (each cause is the result's reason, one line):
- failed: the job exits non-zero or dies by a signal; a non-finite loss; an NCCL/RCCL timeout or error
  in its log; a device map naming a GPU the snapshot does not list, no GPU for a rank, or one GPU twice;
- error (missing evidence): no GPU in the snapshot, the launcher missing, the job past its deadline
  (`UPGRADE_GATE_WORKLOAD_TIMEOUT_S`, clamped to the phase budget), output the contract parser refuses
  (nothing, garbage, a truncated line, no end record);
- phase 7, error: a permutation that cannot reach the runtime or did not. The variable is one the
  node's runtime does not read (`RUNTIME_VARS`: CUDA reads CUDA_VISIBLE_DEVICES only, so ROCR_/HIP_ on
  an NVIDIA node permute nothing), or the site's command sets it itself (`env HIP_VISIBLE_DEVICES=0,...,7
  torchrun ...`: the child's own list wins); and, where the device map gives each rank's enumeration
  `index` (the shipped script does), the runs say the list was not applied (`_not_permuted`: rank r's GPU
  at visible index i ran with list P, so it is device P[i] of the unpermuted enumeration, which the two
  runs must agree on, and which is not simply i everywhere). Break test 2026-12-07: a wrapper that
  pinned the list made phase 7 a no-op, and an index-bound workload passed.
"""

from __future__ import annotations

import math
import re
import shlex
import signal
from importlib import resources
from typing import NamedTuple

from upgrade_gate.collect.runner import CommandResult
from upgrade_gate.errors import ParseError
from upgrade_gate.model import Bdf, Measurement, PhaseResult, RankDevice, Snapshot, replace
from upgrade_gate.parse.common import normalize_bdf
from upgrade_gate.parse.workload import WorkloadRun, parse_workload, scan_collective_log
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.phase import Outcome, PhaseContext
from upgrade_gate.validate.phases import workload_util
from upgrade_gate.vendors import DEFAULT, Vendor, vendor_of

SOURCE_WORKLOAD = "phase 6 workload"
SOURCE_PERTURBATION = "phase 7 perturbation"
PERTURBATIONS = ("reversed", "rotated")
THROUGHPUT = "workload/samples_per_s"
MAX_RUNS = 3
"""Runs of phase 6 at most while its throughput is inconclusive against the baseline (re-measurement)."""
RUNTIME_VARS = {
    "amd": ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),  # HIP also reads CUDA's
    "nvidia": ("CUDA_VISIBLE_DEVICES",),
}
"""The visible-device variables each vendor's runtime reads (the vendor's name: `Vendor.name`)."""


def shipped_script() -> str:
    """The path of the shipped reference training script."""
    return str(resources.files("upgrade_gate") / "data" / "workload" / "reference_train.py")


def workload_argv(config: CvfConfig, nproc: int | str) -> tuple[str, ...]:
    """The job's command line: the site's (UPGRADE_GATE_WORKLOAD_COMMAND) or the shipped script's."""
    values = {
        "nproc": str(nproc),
        "steps": str(config.workload_steps),
        "warmup": str(config.workload_warmup),
        "batch": str(config.workload_batch),
        "script": shipped_script(),
    }
    if config.workload_command:
        return tuple(part.format(**values) for part in shlex.split(config.workload_command))
    return (
        "torchrun",
        "--standalone",
        "--nproc-per-node",
        values["nproc"],
        values["script"],
        "--steps",
        values["steps"],
        "--warmup",
        values["warmup"],
        "--batch-size",
        values["batch"],
    )


def permuted(count: int, how: str) -> str:
    """The visible-device list of a perturbation: `reversed` (N-1..0) or `rotated` (1..N-1, 0)."""
    order = list(range(count))
    order = order[::-1] if how == "reversed" else order[1:] + order[:1]
    return ",".join(map(str, order))


class Run(NamedTuple):
    """One parsed run and its device map (None: no usable evidence; the outcome says why)."""

    run: WorkloadRun
    devices: tuple[RankDevice, ...]


_BANNER = re.compile(r"^[=*\-\s]*$")
_CAUSE = re.compile(r"(Error|error:|Exception|exitcode|Killed|not found|No module named)")


def _cause_line(stderr: str) -> str | None:
    """The line of a failed job's log that says why: torchrun ends with a banner of `=` and a summary,
    so the last line is no cause (2026-12, torch 2.15: `ChildFailedError`, then `exitcode : 1`)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not _BANNER.match(ln)]
    hits = [ln for ln in lines if _CAUSE.search(ln) and "ChildFailedError" not in ln]
    return hits[-1][:200] if hits else None


def _died(result: CommandResult) -> str | None:
    code = result.returncode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"{result.argv[0]}: killed by {name}"
    return None


def run_once(ctx: PhaseContext, out: Outcome, argv: tuple[str, ...], label: str) -> Run | None:
    """Run the job once and check its evidence; None when it gave none (the outcome says why)."""
    result = ctx.runner().run(argv, timeout=ctx.config.workload_timeout_s)
    log = scan_collective_log(result.stderr)
    where = f"{label}: " if label else ""
    if log.timeouts:
        out.fail(f"{where}{len(log.timeouts)} collective timeout(s) in the job's log: {log.timeouts[0]}")
    elif log.errors:
        out.fail(f"{where}{len(log.errors)} collective error(s) in the job's log: {log.errors[0]}")
    died = _died(result)
    if died is not None:
        out.fail(where + died)
        return None
    if out.tool_failure(result):
        detail = _cause_line(result.stderr)
        if detail is not None and detail not in out.reasons[-1]:
            out.reasons[-1] += f" ({detail})"
        if where:
            out.reasons[-1] = where + out.reasons[-1]
        return None
    try:
        run = parse_workload(result.stdout)
    except ParseError as exc:
        out.error(f"{where}no usable workload output: {exc}")
        return None
    bad = [s for s in run.steps if not math.isfinite(s.loss)]
    if bad:
        out.fail(f"{where}loss is {bad[0].loss} at step {bad[0].step} ({len(bad)} of {len(run.steps)} steps)")
    devices = _device_map(ctx.snapshot, run, out, where, visible=label or None)
    if label == "":
        counts = {"timeouts": log.timeouts, "errors": log.errors, "warnings": log.warnings}
        settings = dict(run.settings)
        for name, lines in counts.items():
            out.measurements.append(_measure(f"workload/collective_{name}", "count", [len(lines)], settings, 6))
    return Run(run=run, devices=devices)


def _device_map(
    snapshot: Snapshot | None, run: WorkloadRun, out: Outcome, where: str, *, visible: str | None
) -> tuple[RankDevice, ...]:
    known = {str(g.bdf) for g in snapshot.gpus if g.bdf is not None} if snapshot is not None else set()
    devices = {b.rsplit(".", 1)[0]: b for b in known}  # torch reports no PCI function
    out_map: list[RankDevice] = []
    seen: dict[str, int] = {}
    for d in run.devices:
        if d.bdf is None:
            out.fail(f"{where}rank {d.rank}: the workload's runtime named no GPU for it")
            continue
        try:
            bdf = str(normalize_bdf(d.bdf, tool="workload", line_no=0, allow_missing_function=True))
        except ParseError:
            out.fail(f"{where}rank {d.rank}: device map names {d.bdf!r}, not a PCIe address")
            continue
        match = bdf if bdf in known else devices.get(bdf.rsplit(".", 1)[0])
        if match is None:
            out.fail(f"{where}rank {d.rank}: device map names GPU {bdf} ({d.uuid}), which the snapshot does not list")
            continue
        if match in seen:
            out.fail(f"{where}ranks {seen[match]} and {d.rank} both run on GPU {match}")
        seen[match] = d.rank
        out_map.append(RankDevice(rank=d.rank, bdf=Bdf(match), uuid=d.uuid, visible=visible))
    return tuple(out_map)


def _measure(key: str, unit: str, values: list[float], settings: dict[str, str], phase: int) -> Measurement:
    return Measurement(
        key=key,
        unit=unit,
        samples=tuple(float(v) for v in values),
        settings=settings,
        source=SOURCE_WORKLOAD if phase == 6 else SOURCE_PERTURBATION,
        higher_is_better=unit == "samples/s",
    )


def run_measurements(prefix: str, run: WorkloadRun, phase: int) -> list[Measurement]:
    """A run's throughput, step times and loss curve (the loss only when every step's is finite)."""
    settings = dict(run.settings)
    measured = run.measured
    out = [
        _measure(f"{prefix}/samples_per_s", "samples/s", [s.samples_per_s for s in measured], settings, phase),
        _measure(f"{prefix}/step_time_s", "s", [s.step_time_s for s in measured], settings, phase),
    ]
    if all(math.isfinite(s.loss) for s in run.steps):
        out.append(_measure(f"{prefix}/loss", "loss", [s.loss for s in run.steps], settings, phase))
    return out


def _remeasured(ctx: PhaseContext, out: Outcome, argv: tuple[str, ...], first: list[Measurement]) -> list[Measurement]:
    """Re-run the job while its throughput is inconclusive against the node's baseline (the injected
    comparison of validate.remeasure, as the bandwidth phases do), at most MAX_RUNS runs; the per-step
    samples of every run are pooled, the loss curve and init time stay the first run's."""
    compare = ctx.resampling.compare
    rate = next(m for m in first if m.key == THROUGHPUT)
    runs, why = 1, None
    while compare is not None and runs < MAX_RUNS and ctx.resampling.max_samples > 0:
        doubt = compare(ctx.node, [rate])
        if THROUGHPUT not in doubt:
            break
        why = doubt[THROUGHPUT]
        again = run_once(ctx, out, argv, f"re-measure {runs + 1}")
        if again is None:
            break
        more = next(m for m in run_measurements("workload", again.run, 6) if m.key == THROUGHPUT)
        rate = replace(rate, samples=rate.samples + more.samples)
        runs += 1
    out.took("workload", runs, why)
    return [rate if m.key == THROUGHPUT else m for m in first]


def ranks(ctx: PhaseContext, out: Outcome) -> int | None:
    """How many ranks the job runs (UPGRADE_GATE_WORKLOAD_NPROC, else one per GPU); None: no GPU known."""
    gpus = len(ctx.snapshot.gpus) if ctx.snapshot is not None else 0
    if gpus == 0:
        out.error("no GPU count: the node's snapshot lists no GPU, so the workload cannot be placed")
        return None
    return ctx.config.workload_nproc or gpus


class WorkloadPhase:
    """Phase 6: the reference training run."""

    number = 6
    name = cvf.PHASE_NAMES[6]
    label_key: str | None = cvf.WORKLOAD_VALIDATION

    def __init__(self, vendor: Vendor = DEFAULT) -> None:
        self.vendor = vendor  # the dry-run plan names its utilisation tool; a run reads the snapshot's vendor

    def run(self, ctx: PhaseContext) -> PhaseResult:
        """Run the job once; its throughput, loss curve, init time, log and device map are the evidence."""
        out = Outcome()
        nproc = ranks(ctx, out)
        if nproc is None:
            return out.result(self, ctx.config)
        argv = workload_argv(ctx.config, nproc)
        reserve, interval = ctx.config.workload_timeout_s, ctx.config.workload_util_interval_s
        with workload_util.sample_utilisation(ctx, reserve_s=reserve, interval_s=interval) as util:
            got = run_once(ctx, out, argv, "")
        devices: tuple[RankDevice, ...] = ()
        extra: dict[str, str] = {}
        if got is not None:
            out.measurements.extend(_remeasured(ctx, out, argv, run_measurements("workload", got.run, 6)))
            out.measurements.append(_measure("workload/init_s", "s", [got.run.init_s], dict(got.run.settings), 6))
            devices = got.devices
            rate = sorted(s.samples_per_s for s in got.run.measured)
            extra["measured-samples-per-s"] = f"{rate[len(rate) // 2]:.1f}"
        if ctx.snapshot is not None:  # GPU utilisation during the run (phases.workload_util; never the status)
            init_s = got.run.init_s if got is not None else None
            trained = sum(s.step_time_s for s in got.run.steps[1:]) if got is not None else 0.0
            measured, notes = workload_util.utilisation_measurements(util, ctx.snapshot, init_s, trained)
            out.measurements.extend(measured)
            out.reasons.extend(notes)
        return _with_map(out.result(self, ctx.config, extra=extra), devices)

    def budget_s(self, config: CvfConfig, *, samples: int, nodes: int) -> float:
        """One run's deadline per run it may take (re-measurement: MAX_RUNS), and the utilisation sampling."""
        return config.workload_timeout_s * MAX_RUNS + workload_util.BUDGET_S

    def plan(self, config: CvfConfig, *, samples: int) -> tuple[str, ...]:
        """Dry-run description."""
        return (
            f"{shlex.join(workload_argv(config, 'NGPUS'))}  (timeout {config.workload_timeout_s:g}s)",
            "pass: exit 0, the JSON-lines contract complete, finite loss, no NCCL/RCCL timeout or error in the "
            "log, every rank on a GPU of the snapshot; judged against the baseline by the workload.* rules",
            workload_util.plan_line(config.workload_util_interval_s, self.vendor),
        )


def visible_var(config: CvfConfig, vendor: Vendor) -> str:
    """The variable phase 7 permutes: `UPGRADE_GATE_WORKLOAD_VISIBLE_VAR`, except that its default (HIP's,
    `HIP_VISIBLE_DEVICES`) becomes the node's vendor's index variable (`Vendor.pin.index_var`:
    `CUDA_VISIBLE_DEVICES` on NVIDIA), which CUDA reads; HIP's would leave an NVIDIA run unpermuted, a
    perturbation that never happened (issue 30)."""
    default = CvfConfig().workload_visible_var
    return vendor.pin.index_var if config.workload_visible_var == default else config.workload_visible_var


def _refused_var(var: str, vendor: Vendor, argv: tuple[str, ...]) -> str | None:
    """Why phase 7 cannot permute `var` on this node (None: it can): the runtime does not read it, or the
    command sets it itself."""
    read = RUNTIME_VARS.get(vendor.name, (vendor.pin.index_var,))
    if var not in read:
        return (
            f"UPGRADE_GATE_WORKLOAD_VISIBLE_VAR={var}: the {vendor.title} runtime does not read it, so the "
            f"permutation would never happen; set {' or '.join(read)}"
        )
    pinned = next((a for a in argv if a.startswith(f"{var}=")), None)
    if pinned is not None:
        return (
            f"the workload command sets {pinned} itself: phase 7's {var} would never reach the runtime; leave "
            f"{var} to the phase"
        )
    return None


def _bus(bdf: str | None) -> str | None:
    """A device map's PCIe address without its function (torch reports none), None if it is none."""
    try:
        return str(normalize_bdf(bdf or "", tool="workload", line_no=0, allow_missing_function=True)).rsplit(".", 1)[0]
    except ParseError:
        return None


def _not_permuted(snapshot: Snapshot, runs: list[tuple[str, str, WorkloadRun]]) -> str | None:
    """Why the runs (how, list, run) show that the permuted list never reached the runtime; None when they
    show that it did, or cannot say (a device map without `index`: the caller notes it)."""
    count = len(snapshot.gpus)
    listed = {_bus(str(g.bdf)): g.index for g in snapshot.gpus if g.bdf is not None}
    first: dict[str, tuple[int, str]] = {}  # bus -> (unpermuted device, run that said so)
    unpermuted = fixed = True  # every index as the snapshot enumerates; every device a fixed point of the list
    for how, order, run in runs:
        visible = [int(i) for i in order.split(",")]
        for d in run.devices:
            bus = _bus(d.bdf)
            if d.index is None or bus is None:
                return None
            if d.index >= count:
                return f"{how}: rank {d.rank} is at index {d.index} of a {count}-entry list"
            device = visible[d.index]
            seen = first.setdefault(bus, (device, how))
            if seen[0] != device:
                return (
                    f"GPU {d.bdf} was device {seen[0]} of the unpermuted order by the {seen[1]} run and {device} "
                    f"by the {how} run (visible index {d.index} both times)"
                )
            unpermuted = unpermuted and listed.get(bus) == d.index
            fixed = fixed and device == d.index
    if unpermuted and not fixed:
        return "every rank's visible index is its GPU's index in the snapshot, as in an unpermuted run"
    return None


class PerturbationPhase:
    """Phase 7: the same job with the visible-device list reversed, then rotated."""

    number = 7
    name = cvf.PHASE_NAMES[7]
    label_key: str | None = cvf.PERTURBATION_VALIDATION

    def __init__(self, vendor: Vendor = DEFAULT) -> None:
        self.vendor = vendor  # the dry-run plan's variable; a run reads the snapshot's vendor

    def run(self, ctx: PhaseContext) -> PhaseResult:
        """Run the job once per permutation; `workload.index_dependent` compares them with phase 6."""
        out = Outcome()
        nproc = ranks(ctx, out)
        if nproc is None or ctx.snapshot is None:
            return out.result(self, ctx.config)
        count = len(ctx.snapshot.gpus)
        vendor = vendor_of(p.name for p in ctx.snapshot.probes)
        var = visible_var(ctx.config, vendor)
        refused = _refused_var(var, vendor, workload_argv(ctx.config, nproc))
        if refused is not None:
            out.error(refused)
            return out.result(self, ctx.config, extra={"variable": var})
        devices: list[RankDevice] = []
        runs: list[tuple[str, str, WorkloadRun]] = []
        for how in PERTURBATIONS:
            order = permuted(count, how)
            argv = ("env", f"{var}={order}", *workload_argv(ctx.config, nproc))
            got = run_once(ctx, out, argv, f"{how} ({var}={order})")
            if got is not None:
                out.measurements.extend(run_measurements(f"perturbation/{how}", got.run, 7))
                devices.extend(got.devices)
                runs.append((how, order, got.run))
        if count > 1 and len(runs) == len(PERTURBATIONS):
            if any(d.index is None for _, _, run in runs for d in run.devices):
                out.reasons.append(f"{var} permutation not verified: the device map gives no rank's index")
            elif (why := _not_permuted(ctx.snapshot, runs)) is not None:
                out.error(f"the {var} permutation did not reach the workload's runtime: {why}")
        return _with_map(out.result(self, ctx.config, extra={"variable": var}), tuple(devices))

    def budget_s(self, config: CvfConfig, *, samples: int, nodes: int) -> float:
        """Two runs' deadlines."""
        return config.workload_timeout_s * len(PERTURBATIONS)

    def plan(self, config: CvfConfig, *, samples: int) -> tuple[str, ...]:
        """Dry-run description."""
        var = visible_var(config, self.vendor)
        return (
            f"env {var}=N-1,...,0 then {var}=1,...,N-1,0 {shlex.join(workload_argv(config, 'NGPUS'))}  "
            f"(the child's environment only; timeout {config.workload_timeout_s:g}s each)",
            "pass: both runs complete as phase 6's; judged by workload.index_dependent against phase 6's device "
            "map, throughput and loss",
        )


def _with_map(result: PhaseResult, devices: tuple[RankDevice, ...]) -> PhaseResult:
    return replace(result, device_map=devices)
