"""GPU utilisation sampled during phase 6's reference training run (issue 25 item 1): the jitter the
incident saw go from 4% to 12% after the bad upgrade.

How (`sample_utilisation`, a context manager around the run, as phase 2's thermal sampling), with the
node's vendor's tool (`Vendor.util`, the vendor `vendors.vendor_of` the snapshot's probes):
- before the run, AMD: `amd-smi list --json` once (amd-smi's GPU index -> BDF, read exactly as
  `phases.thermal` reads it: amd-smi's order need not be HIP's) and one `amd-smi monitor -u` sample
  (`-u, --gfx`: "Monitor graphics utilization (%) and clock (MHz)"; the `GFX%` column); NVIDIA: one
  `nvidia-smi --query-gpu=index,pci.bus_id,utilization.gpu --format=csv,noheader,nounits` sample (the
  documented CSV, `parse.nvidia_smi_query`; the BDF is on every line, so no listing; `utilization.gpu`
  is "percent of time over the past sample period during which one or more kernels was executing",
  `nvidia-smi --help-query-gpu`: a busy-time share, where amd-smi's GFX% is an activity average);
- during the run: a background thread (`phases.sampler`, shared with phase 2's thermal sampling)
  samples every `interval_s` (UPGRADE_GATE_WORKLOAD_UTIL_INTERVAL_S,
  default 2 s; the wait starts when the previous call returns) until the job returns, the first after
  one interval, and keeps the last `MAX_DURING` samples (a run starts with initialisation and ends
  training, so a bound that stopped sampling early would keep the idle part); the number of calls is
  bounded by the job's own deadline over the interval;
- after the run: one sample.
Every command has its own timeout (`thermal.TIMEOUT_S`) and stays inside the phase deadline
(`TimedRunner`); phase 6's budget holds the sequential ones (`BUDGET_S`). When the tool fails at the
start (missing, timed out, an error text, unreadable output), nothing more is sampled: there is no
fallback tool here (rocm-smi's `--showuse` is another reading; a site without amd-smi or nvidia-smi sees
missing evidence, and `workload.utilisation_spread.missing_evidence` is its way out).

Measurements (index `i` of the snapshot; settings: `bdf`, `tool` (the argv sampled), `interval_s`):
- `workload/gpu<i>/gfx_util_pct`: every reading in time order (before, during..., after): the curve. The
  key keeps AMD's "gfx" on NVIDIA nodes too: baselines and `workload.utilisation_spread` name it, and
  the `tool` setting says which reading it is (a baseline from the other tool is another reading);
- `workload/gfx_util_spread_pct`: the spread, defined as the largest, over the node's GPUs, of a GPU's
  standard deviation over time of its GFX% while the job trains (settings name that GPU in `worst`).
  Why this one: the incident's "jitter" is utilisation moving over time; a data-parallel job waits for
  its slowest rank at every step, so one GPU whose utilisation keeps dropping sets the pace of all and
  is the one to name (a mean over GPUs would dilute it 8 times). Max-min across GPUs of the mean
  would catch a GPU that is steadily less busy, which a slower run already shows in throughput.
  "While the job trains" is read from the run's own clock (`training_window`: the contract's `init_s`
  and step times against the launcher's start and end), so the idle seconds of the launcher's start,
  device initialisation and teardown, and the idle before/after samples, are not read as jitter. At least
  `MIN_SAMPLES` such samples per GPU are needed, else there is no spread and a note says why.

Design decisions:
- Sampling never changes phase 6's status, its CVF label, or the training's verdict: what went wrong
  is appended to the result's reasons as `utilisation: ...` lines, and a missing spread is judged by
  `workload.utilisation_spread` as missing evidence (blocking by default), never as a pass.
- Only the first run is sampled: re-measurement runs (inconclusive throughput) add throughput samples,
  and the loss curve and init time stay the first run's, so the utilisation does too.
- A vendor without a reader here (`_READERS`) is not sampled; the reason says so and the rule reports
  missing evidence (fail closed), which `missing_evidence: warn` turns into a warning.
- A compute partition (a BDF function > 0) shares its device's counters (amd-smi prints N/A for it); it
  is covered when another partition of the same device has readings.
- amd-smi's GFX% is `gfx_activity` of the GPU metrics table, which the firmware averages over a short
  window: a sample is a moment, not the interval since the last one (amd-smi docs, 2025).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from upgrade_gate.collect.causes import known_cause
from upgrade_gate.errors import ParseError
from upgrade_gate.model import Measurement, Snapshot
from upgrade_gate.parse.amdsmi import parse_amdsmi_list
from upgrade_gate.parse.amdsmi_monitor import parse_amdsmi_monitor
from upgrade_gate.parse.nvidia_smi_query import parse_nvidia_smi_query_util
from upgrade_gate.parse.preamble import parse_after_preamble
from upgrade_gate.validate.phase import PhaseContext, TimedRunner
from upgrade_gate.validate.phases.sampler import STUCK, in_background
from upgrade_gate.validate.phases.thermal import TIMEOUT_S
from upgrade_gate.vendors import AMD, DEFAULT, NVIDIA, Vendor, vendor_of

MONITOR_ARGV = AMD.util.argv  # amd-smi monitor -u
LIST_ARGV = AMD.util.list_argv  # amd-smi list --json
PREFIX = "workload/"
SPREAD = "workload/gfx_util_spread_pct"
NOTE = "utilisation: "
SOURCE = "phase 6 utilisation sampling"
MAX_DURING = 120
MIN_SAMPLES = 2
BUDGET_S = 3 * TIMEOUT_S  # list, before and after run in sequence with the job


@dataclass(frozen=True, slots=True, kw_only=True)
class UtilSample:
    """One sample: GFX% by BDF (None: the tool printed N/A) at a monotonic time, or why there is none."""

    when: str  # before / during / after
    at: float  # monotonic time the command started; it read the GPUs before `done`
    done: float = 0.0
    readings: dict[str, float | None] = field(default_factory=dict)
    error: str | None = None


@dataclass(slots=True)
class UtilRecord:
    """What the sampling produced: amd-smi index -> BDF, the samples, the job's start and end, problems."""

    interval_s: float
    tool: tuple[str, ...] = MONITOR_ARGV  # the node's vendor's sample (`Vendor.util.argv`)
    bdfs: dict[int, str] = field(default_factory=dict)
    samples: list[UtilSample] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    started: float | None = None
    ended: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, sample: UtilSample, *, keep: int = 0) -> None:
        """Record one sample (thread-safe); `keep` > 0: at most that many `during` samples, the latest."""
        with self.lock:
            self.samples.append(sample)
            during = [i for i, s in enumerate(self.samples) if s.when == "during"]
            if keep > 0 and len(during) > keep:
                del self.samples[during[0]]


def _read_amdsmi(record: UtilRecord, text: str) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for row in parse_after_preamble(text, parse_amdsmi_monitor).rows:
        bdf = record.bdfs.get(row.gpu)
        if bdf is not None and out.get(bdf) is None:
            out[bdf] = row.gfx_util_pct  # a later XCP row of the same BDF never hides a reading
    return out


def _read_query(record: UtilRecord, text: str) -> dict[str, float | None]:
    return parse_nvidia_smi_query_util(text)


_READERS: dict[str, Callable[[UtilRecord, str], dict[str, float | None]]] = {
    AMD.name: _read_amdsmi,
    NVIDIA.name: _read_query,
}
"""How each vendor's sample (`Vendor.util.argv`) is read: readings by BDF (ParseError when refused)."""


def _sample(
    runner: TimedRunner,
    record: UtilRecord,
    when: str,
    timeout_s: float,
    read: Callable[[UtilRecord, str], dict[str, float | None]] = _read_amdsmi,
) -> UtilSample:
    at = time.monotonic()
    result = runner.run(record.tool, timeout=timeout_s)
    done = time.monotonic()
    why = result.failure_reason()
    if why is not None:
        return UtilSample(when=when, at=at, done=done, error=why)
    try:
        return UtilSample(when=when, at=at, done=done, readings=read(record, result.stdout))
    except ParseError as exc:
        cause = known_cause(result.stdout, result.stderr)
        detail = f"{cause} (unreadable output: {exc})" if cause else f"unreadable output: {exc}"
        return UtilSample(when=when, at=at, done=done, error=f"{record.tool[0]}: {detail}")


def _start(
    runner: TimedRunner,
    record: UtilRecord,
    timeout_s: float,
    list_argv: tuple[str, ...],
    read: Callable[[UtilRecord, str], dict[str, float | None]],
) -> bool:
    """The listing (amd-smi list, where the vendor has one) and the first sample; False (and a problem)
    when either failed."""
    if list_argv:
        result = runner.run(list_argv, timeout=timeout_s)
        why = result.failure_reason()
        if why is None:
            try:
                listing = parse_amdsmi_list(result.stdout)
                record.bdfs = {g.index: str(g.bdf) for g in listing.gpus if g.bdf is not None}
            except ParseError as exc:
                why = f"unreadable output: {exc}"
        if why is not None:
            record.problems.append(f"{' '.join(list_argv)} failed ({why}); not sampled")
            return False
    before = _sample(runner, record, "before", timeout_s, read)
    record.add(before)
    if before.error is not None:
        record.problems.append(f"{' '.join(record.tool)} failed before the run ({before.error}); not sampled further")
        return False
    return True


@contextmanager
def sample_utilisation(
    ctx: PhaseContext,
    *,
    reserve_s: float,
    interval_s: float,
    max_during: int = MAX_DURING,
    timeout_s: float = TIMEOUT_S,
) -> Iterator[UtilRecord]:
    """Sample before the body (the training run), in the background during it, and after it.

    `reserve_s` is the time the run may take: when the phase budget cannot hold it and the sampling,
    nothing is sampled (the run's time is never cut for it) and a note says why."""
    vendor = vendor_of(p.name for p in ctx.snapshot.probes) if ctx.snapshot is not None else DEFAULT
    record = UtilRecord(interval_s=interval_s, tool=vendor.util.argv)
    read = _READERS.get(vendor.name)
    if read is None:
        record.problems.append(f"not sampled: a {vendor.name} node (no reader of {' '.join(vendor.util.argv)})")
        yield record
        return
    if ctx.left() < reserve_s + BUDGET_S:
        record.problems.append(
            f"not sampled: the phase budget ({ctx.left():.1f}s left) cannot hold the run ({reserve_s:g}s) "
            f"and the sampling ({BUDGET_S:g}s)"
        )
        yield record
        return
    runner = ctx.runner()
    if not _start(runner, record, timeout_s, vendor.util.list_argv, read):
        yield record
        return

    def failed(exc: Exception) -> None:
        now = time.monotonic()
        record.add(UtilSample(when="during", at=now, done=now, error=f"sampling failed: {exc}"), keep=max_during)

    record.started = time.monotonic()
    with in_background(
        ctx,
        lambda background: record.add(_sample(background, record, "during", timeout_s, read), keep=max_during),
        failed,
        interval_s=interval_s,
        timeout_s=timeout_s,
        name="util",
        immediately=False,
    ) as loop:
        try:
            yield record
        finally:
            record.ended = time.monotonic()
    if loop.stuck:
        record.problems.append(STUCK)
    record.add(_sample(runner, record, "after", timeout_s, read))


def _device(bdf: str) -> str:
    return bdf.rsplit(".", 1)[0]


def _within(sample: UtilSample, start: float | None, end: float | None) -> bool:
    """The sample read the GPUs inside [start, end]: it started after `start` and returned before `end`."""
    return start is not None and end is not None and start <= sample.at and sample.done <= end


def _measure(key: str, values: list[float], settings: dict[str, str]) -> Measurement:
    return Measurement(
        key=key, unit="%", samples=tuple(values), settings=settings, source=SOURCE, higher_is_better=False
    )


def training_window(record: UtilRecord, init_s: float, training_s: float) -> tuple[float, float] | None:
    """The monotonic interval in which the job trained, or None (not sampled).

    The gate knows when it started the launcher (`started`) and when the launcher returned (`ended`);
    the job knows its time to the first completed step (`init_s`, from its own process start, which
    comes after the launcher's) and how long its later steps took (`training_s`). Training therefore
    began no earlier than started + init_s and no earlier than ended - training_s (so the launcher's
    own start-up, seconds of importing PyTorch, is outside), and ended before `ended`. Only the ranks'
    teardown (destroy the process group, exit; torchrun polls every 0.1 s) may still be inside: bounding
    the end by started + init_s + training_s as well would cut the window by the launcher's start-up
    and leave a default 30-step run without samples."""
    if record.started is None or record.ended is None:
        return None
    return max(record.started + init_s, record.ended - training_s), record.ended


def utilisation_measurements(
    record: UtilRecord, snapshot: Snapshot, init_s: float | None, training_s: float = 0.0
) -> tuple[tuple[Measurement, ...], list[str]]:
    """The per-GPU curves, the spread (when every GPU has enough samples while training) and the notes.

    `init_s`: the run's time to its first completed step (None: the run gave no evidence, so there was
    no training to read a spread from); `training_s`: the step times after the first, summed."""
    notes = list(record.problems)
    with record.lock:
        samples = sorted(record.samples, key=lambda s: s.at)
    failed = [f"{s.when} the run: {s.error}" for s in samples if s.error is not None]
    if failed and not record.problems:
        notes.append(f"{len(failed)} of {len(samples)} samples failed ({'; '.join(failed[:3])})")
    common = {"tool": " ".join(record.tool), "interval_s": f"{record.interval_s:g}"}
    window = training_window(record, init_s, training_s) if init_s is not None else None
    start, end = window if window is not None else (None, None)
    out: list[Measurement] = []
    spreads: dict[str, tuple[int, float]] = {}
    covered: set[str] = set()
    short: list[tuple[int, str | None, int]] = []
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        bdf = str(gpu.bdf) if gpu.bdf is not None else None
        values = [(s, v) for s in samples if bdf is not None and (v := s.readings.get(bdf)) is not None]
        if bdf is not None and values:
            out.append(_measure(f"{PREFIX}gpu{gpu.index}/gfx_util_pct", [v for _, v in values], {**common, "bdf": bdf}))
        training = [v for s, v in values if s.when == "during" and _within(s, start, end)]
        if bdf is not None and len(training) >= MIN_SAMPLES:
            covered.add(_device(bdf))
            spreads[f"gpu{gpu.index} ({bdf})"] = (gpu.index, statistics.pstdev(training))
        else:
            short.append((gpu.index, bdf, len(training)))
    missing = [(i, bdf, n) for i, bdf, n in short if bdf is None or _device(bdf) not in covered]
    if init_s is None:
        notes.append("no spread: the run gave no evidence of training")
    elif missing and not failed and not record.problems:
        named = ", ".join(f"GPU {i} ({bdf or 'no BDF'}): {n}" for i, bdf, n in missing[:4])
        took = f"{max(0.0, end - start):.1f}s" if start is not None and end is not None else "unknown"
        notes.append(
            f"no spread: fewer than {MIN_SAMPLES} samples while training ({named}; training took {took}, "
            f"one sample every {record.interval_s:g}s)"
        )
    if spreads and not missing and init_s is not None:
        worst = max(spreads, key=lambda k: spreads[k][1])
        value = round(spreads[worst][1], 2)
        settings = {**common, "worst": worst, "statistic": "max over GPUs of the stdev over time"}
        out.append(_measure(SPREAD, [value], settings))
    return tuple(out), [NOTE + n for n in notes]


def plan_line(interval_s: float, vendor: Vendor = DEFAULT) -> str:
    """The dry-run description of the sampling with `vendor`'s tool."""
    listing = f"{' '.join(vendor.util.list_argv)}; " if vendor.util.list_argv else ""
    return (
        f"utilisation: {listing}{' '.join(vendor.util.argv)} before, every {interval_s:g}s during (at "
        f"most {MAX_DURING}) and after the run, {TIMEOUT_S:g}s each; judged by workload.utilisation_spread"
    )
