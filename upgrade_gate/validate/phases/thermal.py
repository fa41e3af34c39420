"""Thermal sampling during phase 2: each GPU's temperature and power while the mesh test loads the node.

A GPU running 10-15 °C hotter than its peers under the same load sets the pace for the whole gang even
inside vendor limits (the reliability write-up treats it as a fault). Phase 2 is the one point where
upgrade-gate puts every GPU of a node under the same load, so it samples there, and the judge's
`thermal.outlier` rule compares each GPU with its peers, its class and its own baseline.

How (`sample_thermal`, a context manager around the sweep):
- before the load: `amd-smi list --json` once (amd-smi's GPU index -> BDF, which maps a reading to the
  snapshot's GPU: amd-smi's order need not be HIP's) and one `amd-smi monitor -p -t` sample;
- during the load: a background thread (`phases.sampler`, shared with phase 6) takes a sample at once
  and then every `interval_s`, at most `max_during` of them, until the sweep ends;
- at the end: one sample right after the last sweep, before the GPUs cool down.
When amd-smi fails (list or first sample: missing, timed out, an error text, unreadable output),
`rocm-smi --showbus --showtemp --showpower --json` stands in for the whole run (its junction sensor is
amd-smi's hotspot; `PCI Bus` names the BDF), and the note says so; the tool is in each measurement's
settings. Known preambles (amd-smi's missing-group banner, rocm-smi's low-power warning) are skipped
as everywhere else (`parse.preamble`).
Every command has its own timeout (`timeout_s`) and stays inside the phase deadline (`TimedRunner`);
the thread's tool time overlaps the sweep's, so it is not added to the phase's tool clock.

Measurements (per GPU, HIP index `i` of the snapshot; settings: `bdf`, `sensor`, `tool`, `load`):
- `thermal/gpu<i>/temp_c_max`: the hottest hotspot (junction) reading under load (during + end), °C;
  the value `thermal.outlier` judges (one sample per run, so a class reference of them is a median of
  per-node maxima, like with like);
- `thermal/gpu<i>/temp_c`: every hotspot reading in time order (before, during..., end): the curve;
- `thermal/gpu<i>/mem_temp_c_max`: the hottest HBM reading under load;
- `thermal/gpu<i>/power_w_mean`: mean socket power under load (a hot GPU at its peers' power points at
  cooling; a hot GPU drawing more points at the part or its clocks).

Design decisions:
- Sampling never changes the phase status or its CVF label (CVF's phase 2 is a bandwidth test). What
  went wrong is appended to the result's reasons as `thermal: ...` lines, and a GPU without readings
  has no measurement: `thermal.outlier` turns that into missing evidence (blocking by default), so a
  phase 2 that ran without thermal evidence never passes the thermal check silently.
- A compute partition (a BDF function > 0 of a device) shares the device's sensors: amd-smi prints
  N/A for it (doc example: only XCP 0 reports). It is covered when another partition of the same
  device has readings.
- Phase 2's budget holds the sampling (`BUDGET_S` is added to it); a budget set too small for both the
  sweeps and the sampling (`UPGRADE_GATE_PHASE2_TIMEOUT_S`) gets no sampling, never a shorter sweep,
  and the note says so.

Dated notes:
- 2026-12: under the Kubernetes executor each sample is a Job of its own (purpose `monitor`: no GPUs
  allocated, the phase 2 Job holds them; the node's /opt/rocm mounted, privileged only with
  `--capture-privileged`: `fleet.launcher._monitor_access`). rocm-smi reads sysfs (hwmon), which an
  unprivileged pod sees; amd-smi may need the device nodes. Not checked on a real GPU cluster here:
  where neither tool sees the GPUs, the rule reports missing thermal evidence (fail closed) rather
  than passing, and `thermal.outlier.missing_evidence: warn` is the site's way out.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from upgrade_gate.collect.causes import known_cause
from upgrade_gate.errors import ParseError
from upgrade_gate.model import Measurement, Snapshot
from upgrade_gate.parse.amdsmi import parse_amdsmi_list
from upgrade_gate.parse.amdsmi_monitor import parse_amdsmi_monitor
from upgrade_gate.parse.preamble import parse_after_preamble
from upgrade_gate.parse.rocmsmi_thermal import parse_rocmsmi_thermal
from upgrade_gate.validate.phase import Outcome, PhaseContext, TimedRunner
from upgrade_gate.validate.phases.sampler import STUCK, in_background

MONITOR_ARGV = ("amd-smi", "monitor", "-p", "-t")
LIST_ARGV = ("amd-smi", "list", "--json")
ROCMSMI_ARGV = ("rocm-smi", "--showbus", "--showtemp", "--showpower", "--json")
PREFIX = "thermal/"
NOTE = "thermal: "
SOURCE = "phase 2 thermal sampling"
TIMEOUT_S = 30.0
INTERVAL_S = 20.0
MAX_DURING = 30
BUDGET_S = 4 * TIMEOUT_S  # list, before (and its fallback) and end run in sequence with the sweep


@dataclass(frozen=True, slots=True, kw_only=True)
class Reading:
    """One GPU's values in one sample (None: the tool printed N/A)."""

    hotspot_c: float | None = None
    memory_c: float | None = None
    power_w: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """One sample (before/during/end): readings by BDF, or why there are none."""

    when: str
    readings: dict[str, Reading] = field(default_factory=dict)
    error: str | None = None


@dataclass(slots=True)
class ThermalRecord:
    """What the sampling produced: the tool used, amd-smi index -> BDF, the samples, problems met."""

    tool: tuple[str, ...] = MONITOR_ARGV
    bdfs: dict[int, str] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    reader: Callable[[str], dict[str, Reading]] | None = None  # another vendor's tool (phases.nvidia_thermal)
    sensors: tuple[str, str] = ("hotspot", "socket power")  # the temperature and power sensors, as settings

    def add(self, sample: Sample) -> None:
        """Record one sample (thread-safe)."""
        with self.lock:
            self.samples.append(sample)


def _read(record: ThermalRecord, text: str) -> dict[str, Reading]:
    if record.reader is not None:
        return record.reader(text)
    if record.tool == ROCMSMI_ARGV:
        cards = parse_after_preamble(text, parse_rocmsmi_thermal)
        return {c.bdf: Reading(hotspot_c=c.junction_c, memory_c=c.memory_c, power_w=c.power_w) for c in cards}
    out: dict[str, Reading] = {}
    for row in parse_after_preamble(text, parse_amdsmi_monitor).rows:
        bdf = record.bdfs.get(row.gpu)
        have = out.get(bdf) if bdf is not None else None
        if bdf is None or (have is not None and (have.hotspot_c or 0.0) >= (row.hotspot_c or 0.0)):
            continue  # a GPU amd-smi list did not name, or an XCP row without readings
        out[bdf] = Reading(hotspot_c=row.hotspot_c, memory_c=row.memory_c, power_w=row.power_w)
    return out


def take_sample(runner: TimedRunner, record: ThermalRecord, when: str, timeout_s: float) -> Sample:
    result = runner.run(record.tool, timeout=timeout_s)
    why = result.failure_reason()
    if why is not None:
        return Sample(when=when, error=why)
    try:
        return Sample(when=when, readings=_read(record, result.stdout))
    except ParseError as exc:
        # A tool that exits 0 yet states why it has nothing (rocm-smi without amdgpu) is named by that,
        # as the snapshot builder does for the capture's probes.
        cause = known_cause(result.stdout, result.stderr)
        detail = f"{cause} (unreadable output: {exc})" if cause else f"unreadable output: {exc}"
        return Sample(when=when, error=f"{record.tool[0]}: {detail}")


def start_amd_smi(runner: TimedRunner, record: ThermalRecord, timeout_s: float) -> bool:
    """amd-smi list and the first sample; rocm-smi stands in when amd-smi fails (DESIGN: fallbacks).

    False when neither tool answered: later samples would only fail (or hang) the same way."""
    result = runner.run(LIST_ARGV, timeout=timeout_s)
    why = result.failure_reason()
    if why is None:
        try:
            listing = parse_amdsmi_list(result.stdout)
            record.bdfs = {g.index: str(g.bdf) for g in listing.gpus if g.bdf is not None}
        except ParseError as exc:
            why = f"unreadable output: {exc}"
    before = take_sample(runner, record, "before", timeout_s) if why is None else Sample(when="before", error=why)
    if before.error is None:
        record.add(before)
        return True
    record.tool = ROCMSMI_ARGV
    fallback = take_sample(runner, record, "before", timeout_s)
    if fallback.error is None:
        record.problems.append(f"amd-smi failed ({before.error}); {' '.join(ROCMSMI_ARGV)} stood in")
        record.add(fallback)
        return True
    record.tool = MONITOR_ARGV
    record.problems.append(f"amd-smi failed ({before.error}) and rocm-smi too ({fallback.error}); not sampled further")
    record.add(before)
    return False


Starter = Callable[[TimedRunner, ThermalRecord, float], bool]
"""Sets the record's tool and takes the first sample; False when no later sample can succeed."""


@contextmanager
def sample_thermal(
    ctx: PhaseContext,
    *,
    reserve_s: float = 0.0,
    interval_s: float = INTERVAL_S,
    max_during: int = MAX_DURING,
    timeout_s: float = TIMEOUT_S,
    start: Starter = start_amd_smi,
) -> Iterator[ThermalRecord]:
    """Sample before the body (the load), in the background during it, and after it.

    `reserve_s` is the time the body may take: when the phase budget cannot hold it and the sampling
    together, nothing is sampled (the load's time is never cut for it) and a note says why. The check
    leaves the rocm-smi fallback's share of `BUDGET_S` out as slack (the phase started a moment ago).
    """
    record = ThermalRecord()
    if ctx.left() < reserve_s + BUDGET_S - TIMEOUT_S:
        record.problems.append(
            f"not sampled: the phase budget ({ctx.left():.1f}s left) cannot hold the load ({reserve_s:g}s) "
            f"and the sampling ({BUDGET_S:g}s)"
        )
        yield record
        return
    runner = ctx.runner()
    if not start(runner, record, timeout_s):
        yield record
        return
    with in_background(
        ctx,
        lambda background: record.add(take_sample(background, record, "during", timeout_s)),
        lambda exc: record.add(Sample(when="during", error=f"sampling failed: {exc}")),
        interval_s=interval_s,
        timeout_s=timeout_s,
        name="thermal",
        immediately=True,
        limit=max_during,
    ) as loop:
        yield record
    if loop.stuck:
        record.problems.append(STUCK)
    record.add(take_sample(runner, record, "end", timeout_s))


def _device(bdf: str) -> str:
    """The PCI device of a BDF (partitions of one device differ only in the function)."""
    return bdf.rsplit(".", 1)[0]


def _readings(record: ThermalRecord, bdf: str) -> list[tuple[str, Reading]]:
    with record.lock:
        samples = list(record.samples)
    return [(s.when, s.readings[bdf]) for s in samples if bdf in s.readings and s.readings[bdf].hotspot_c is not None]


def _measurement(key: str, unit: str, values: Sequence[float], settings: dict[str, str]) -> Measurement:
    return Measurement(
        key=key, unit=unit, samples=tuple(values), settings=settings, source=SOURCE, higher_is_better=False
    )


def thermal_measurements(
    record: ThermalRecord, snapshot: Snapshot, load: Sequence[str]
) -> tuple[tuple[Measurement, ...], list[str]]:
    """Measurements per GPU of `snapshot` and the `thermal: ...` notes for the phase's reasons."""
    notes = list(record.problems)
    failed = [f"{s.when} the load: {s.error}" for s in record.samples if s.error is not None]
    if failed:
        notes.append(f"{len(failed)} of {len(record.samples)} samples failed ({'; '.join(failed[:3])})")
    common = {"tool": " ".join(record.tool), "load": " ".join(load)}
    out: list[Measurement] = []
    covered: set[str] = set()
    unread: list[tuple[int, str | None]] = []
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        bdf = str(gpu.bdf) if gpu.bdf is not None else None
        readings = _readings(record, bdf) if bdf is not None else []
        loaded = [row for when, row in readings if when != "before"]
        if bdf is None or not loaded:
            unread.append((gpu.index, bdf))
            continue
        covered.add(_device(bdf))
        key = f"{PREFIX}gpu{gpu.index}"
        hot = {**common, "bdf": bdf, "sensor": record.sensors[0]}
        out.append(_measurement(f"{key}/temp_c_max", "C", [max(r.hotspot_c or 0.0 for r in loaded)], hot))
        out.append(_measurement(f"{key}/temp_c", "C", [row.hotspot_c or 0.0 for _, row in readings], hot))
        memory = [r.memory_c for r in loaded if r.memory_c is not None]
        if memory:
            out.append(_measurement(f"{key}/mem_temp_c_max", "C", [max(memory)], {**hot, "sensor": "memory"}))
        power = [r.power_w for r in loaded if r.power_w is not None]
        if power:
            mean = round(statistics.fmean(power), 1)
            out.append(_measurement(f"{key}/power_w_mean", "W", [mean], {**hot, "sensor": record.sensors[1]}))
    missing = [f"GPU {i} ({bdf or 'no BDF'})" for i, bdf in unread if bdf is None or _device(bdf) not in covered]
    if missing and any(s.readings for s in record.samples):
        notes.append(f"no temperature under load for {', '.join(missing)}")
    return tuple(out), [NOTE + n for n in notes]


def record_thermal(record: ThermalRecord, out: Outcome, snapshot: Snapshot | None, load: Sequence[str]) -> None:
    """Add the thermal measurements to the phase outcome; problems become `thermal: ...` reasons."""
    if snapshot is None:
        return
    measurements, notes = thermal_measurements(record, snapshot, load)
    out.measurements.extend(measurements)
    out.reasons.extend(notes)  # not failures or errors: the rule judges them (module docstring)


def plan_line(*, interval_s: float = INTERVAL_S, max_during: int = MAX_DURING) -> str:
    """The dry-run description of the sampling."""
    return (
        f"thermal: {' '.join(LIST_ARGV)}; {' '.join(MONITOR_ARGV)} (fallback: {' '.join(ROCMSMI_ARGV)}) before, "
        f"every {interval_s:g}s during (at most {max_during}) and after the sweep, {TIMEOUT_S:g}s each; "
        "judged by thermal.outlier"
    )
