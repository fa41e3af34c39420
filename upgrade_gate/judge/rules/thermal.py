"""Thermal outliers under the phase 2 load: a GPU much hotter than its peers, its class, or itself before.

The fleet reliability write-up: "one [GPU] running ten to fifteen degrees hotter than its peers, even
within healthy limits, sets the pace for the gang. A large temperature gap can therefore be treated as
a fault." Phase 2 loads every GPU of a node with the same all-reduce and samples each GPU's hotspot
temperature and socket power (`validate.phases.thermal`); this rule reads those measurements:

- peers: a GPU whose hottest reading under load exceeds the median of the node's other GPUs by more than
  `threshold_c` (default 10 °C, the low end of the write-up's 10-15) - with at least `min_peers` peers;
- class: the same GPU slot's value in the class reference (`thermal/gpu<i>/temp_c_max` at the same BDF, the
  median over the class's baselines, at least `class_min_nodes` nodes, same load and sensor) plus
  `threshold_c`;
- baseline: the same GPU (matched by identity, not index) at its own baseline under the same load plus
  `baseline_threshold_c`. A whole node that runs hotter after a change is a regression too. Another
  load (other GPU count or sweep) is not compared; the bandwidth rules report the load change.
Each finding names the GPU (index and BDF), its temperature, the reference and the threshold, and the
power beside it: a hot GPU at its peers' power points at cooling (fan, cold plate, thermal paste); a
hot GPU drawing more points at the part or its clocks.

Design decisions:
- Severity: the rule's policy severity, `block` by default, because the write-up treats the gap as a
  fault and a gang runs at its slowest rank; a site that only wants to watch sets `severity: warn`.
- Fail closed: a phase 2 that ran (passed or failed) but left a GPU device without a thermal reading
  (amd-smi missing, hanging, printing an error text or garbage, a GPU it did not list) is missing
  evidence, reported by this rule at `missing_evidence` (default block) with the phase's `thermal: ...`
  reasons. A phase 2 that did not run is `evidence.missing`'s business. A compute partition shares its
  device's sensor: a device counts as read when any of its partitions was.
- Fail closed on the readings too (`_judged`, `_unusable`): a `temp_c_max` or `power_w_mean` reading in a
  unit, from a tool or of a sensor this rule does not know, without samples, or with a physically
  implausible value is missing evidence for that GPU (same `missing_evidence` severity, the finding names
  the key), and is never compared with peers, class or baseline. So is a power reading the baseline had at a slot whose
  GPU phase 2 read this time without one. A sensor the GPU model lacks (amd-smi prints N/A) leaves no
  measurement (`validate.phases.thermal`) before and after alike, which is no finding.
- Readings follow the slot: each is placed on the GPU at the BDF it was taken at (`readings`), so an
  order change never moves a temperature to another GPU.
- Each snapshot's readings are placed and judged once (`_read`, issue 29: the rule runs for every node of
  a fleet): the candidate's and the baseline's temperatures and power, each reading's verdict and value
  from one pass (`_judged`), which the peer, class, baseline and lost-power checks all read, as they read
  the one map of GPU index to device. A reading's unit, tool and sensor verdict (`_refused`) is a function
  of those strings, which a fleet's readings share: it is remembered, not asked again for every reading.
- Thermal measurements are judged here only: `bandwidth.*` and `fleet.odd_one_out` skip them
  (`rules.measured.bandwidth_key`), since a relative tolerance on °C means nothing.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from upgrade_gate.judge import stats
from upgrade_gate.judge.idcache import IdCache
from upgrade_gate.judge.rules.base import NodeContext, ParamSpec, finding, spec
from upgrade_gate.judge.rules.measured import THERMAL_PREFIX, merged_measurements, thermal_keys
from upgrade_gate.model import (
    ClassReference,
    Finding,
    Gpu,
    Measurement,
    MetricSummary,
    PhaseStatus,
    Snapshot,
    measurements_of,
)
from upgrade_gate.parse.common import digits

if TYPE_CHECKING:
    from upgrade_gate.judge.policy import RuleEntry

MESH_PHASE = 2
NOTE = "thermal: "
EVIDENCE = "phase 2 thermal sampling (amd-smi monitor, or rocm-smi standing in)"
_COMPARED = ("load", "sensor")  # settings that make two readings comparable (amd-smi's hotspot = rocm-smi's junction)
_COMPARED_AT_SLOT = (*_COMPARED, "bdf")  # against the class reference's slot, the slot (BDF) too


@dataclass(frozen=True, slots=True, kw_only=True)
class _Understood:
    """What this rule can read of one thermal measurement name: unit, sensor, plausible range (low, high]."""

    unit: str
    sensor: str
    low: float
    high: float
    what: str


# The bounds are physical plausibility, not health (the outlier checks judge health); a value outside
# them is a wrong scale, a sensor default or a garbled value, never a reading to compare:
# - temp_c_max is the hottest hotspot (junction) reading while the all-reduce loads every GPU. A junction
#   is never colder than the coolant carrying its heat away, and a loaded Instinct GPU sits tens of °C
#   above it: the coolest readings in the corpus are near-idle MI300A APUs at 26-30 °C (amd-smi
#   monitor-mi300a-4apu-gtt-usage-doc-example, GFX 2 %); loaded MI300X/MI350X read 47-69 °C. Below 15 °C
#   is no loaded GPU: 0 or -1 (a sensor default), a tenth of the value. Above 150 °C is past any part's
#   limit (MI300X shuts down at 110 °C, SHUTDOWN_HOTSPOT_TEMPERATURE in amd-smi static): millidegrees
#   (amdgpu's hwmon unit) or a Fahrenheit value leaked.
# - power_w_mean is the mean socket power under load: a GPU doing the all-reduce draws power, so 0 W or
#   less is a default or an error; above 3000 W is twice the largest Instinct board power (MI355X, 1.4 kW):
#   milliwatts or a scale error.
_UNDERSTOOD = {
    "temp_c_max": _Understood(unit="C", sensor="hotspot", low=15.0, high=150.0, what="hotspot temperature under load"),
    "power_w_mean": _Understood(unit="W", sensor="socket power", low=0.0, high=3000.0, what="socket power under load"),
}


def key_values(snapshot: Snapshot) -> dict[str, float]:
    """What a soak observation records of phase 2's heat: the hottest GPU, and its gap to the others' median."""
    temps: dict[str, float] = {}
    for m in measurements_of(snapshot):
        parts = m.key.split("/")
        if len(parts) == 3 and parts[0] == THERMAL_PREFIX.rstrip("/") and parts[2] == "temp_c_max":
            value = _usable_value(m, "temp_c_max")
            if value is not None:
                temps[parts[1]] = max(value, temps.get(parts[1], value))
    if not temps:
        return {}
    hottest = max(temps, key=lambda gpu: temps[gpu])
    others = [t for gpu, t in temps.items() if gpu != hottest]
    out = {"thermal/temp_c_max": temps[hottest]}
    if others:
        out["thermal/gap_c"] = round(temps[hottest] - statistics.median(others), 1)
    return out


def _value(m: Measurement | None) -> float | None:
    samples = m.samples if m is not None else ()
    if samples and math.isfinite(sum(samples)):  # every sample finite (an inf or a NaN makes the sum not)
        return max(samples)
    usable = [s for s in samples if s == s and abs(s) != float("inf")]
    return max(usable) if usable else None


def _usable_value(m: Measurement, name: str) -> float | None:
    """The reading's value (its highest sample), None when `_unusable` refuses it."""
    judged = _judged(m, name)
    return None if isinstance(judged, tuple) else judged


_AMD_SENSORS = {"temp_c_max": "hotspot", "power_w_mean": "socket power"}
SENSORS: dict[str, dict[str, str]] = {
    "amd-smi": _AMD_SENSORS,
    "rocm-smi": _AMD_SENSORS,  # rocm-smi's junction is amd-smi's hotspot
    "nvidia-smi": {"temp_c_max": "gpu", "power_w_mean": "board power"},  # temperature.gpu, power.draw (issue 30)
}
"""Per program, the sensor each understood reading must come from (what phase 2 records on each vendor:
`validate.phases.thermal` and `nvidia_thermal`). Readings compare only within one sensor (`_COMPARED`)."""
TOOLS = frozenset(SENSORS)
"""The programs whose readings phase 2 records (`validate.phases.thermal`'s MONITOR_ARGV and ROCMSMI_ARGV,
`nvidia_thermal`'s query; a test holds them together: importing the phase here cost each gate worker
~0.1 s). By program, not by the whole argv: a later release may ask with other flags, and a reading it took
is still that tool's."""


def _unusable(m: Measurement, name: str) -> tuple[str, str] | None:
    """Why reading `m` (a `thermal/gpu<i>/<name>`) is no evidence, and what it showed; None when usable."""
    judged = _judged(m, name)
    return judged if isinstance(judged, tuple) else None


def _judged(m: Measurement, name: str) -> float | tuple[str, str]:
    """Reading `m`'s value (its highest sample) when usable, else why it is no evidence and what it showed.

    One pass answers both: the check that clears a reading already holds its highest sample, which is
    `_value`'s answer for a reading of finite samples (and a usable one has only those)."""
    refused = _refused(name, m.unit, m.settings.get("tool"), m.settings.get("sensor"))
    if refused is not None:
        return refused
    samples = m.samples
    if not samples:
        return "it has no samples", "no samples"
    known = _UNDERSTOOD[name]
    # the usual reading: every sample finite and plausible (the loop below names the first that is not)
    if math.isfinite(sum(samples)) and known.low < min(samples) and (highest := max(samples)) <= known.high:
        return highest
    for s in samples:
        if not math.isfinite(s) or not known.low < s <= known.high:
            unit = "°C" if m.unit == "C" else m.unit
            bounds = f"above {known.low:g}, at most {known.high:g} {unit}"
            return f"{s:g} {unit} is no plausible {known.what} ({bounds})", f"{s:g}"
    return max(samples)


@functools.lru_cache(maxsize=64)
def _refused(name: str, unit: str, tool: str | None, sensor: str | None) -> tuple[str, str] | None:
    """Why a `name` reading in `unit`, taken by `tool` from `sensor`, is no evidence; None when this rule reads it.

    A pure function of four strings a fleet's readings share: answered once, not once per reading."""
    known = _UNDERSTOOD[name]
    if unit != known.unit:
        return f"its unit is {unit!r}, not {known.unit!r}", unit
    program = tool.split(" ", 1)[0] if tool is not None else None
    if program is None or program not in TOOLS:
        return f"it was taken by {tool!r}, not amd-smi monitor, rocm-smi or nvidia-smi", str(tool)
    expected = SENSORS[program][name]
    if sensor != expected:
        return f"its sensor is {sensor!r}, not {expected!r}", str(sensor)
    return None


def readings(
    measurements: Mapping[str, Measurement], gpus: Iterable[Gpu], name: str, keys: Iterable[str] | None = None
) -> dict[int, Measurement]:
    """GPU index -> its `thermal/gpu<i>/<name>` reading, placed by the BDF it was taken at (settings `bdf`).

    Readings follow the slot, not the index: a snapshot whose order changed after phase 2 (or a hand-made
    one) still gets each reading on the GPU that was read; without a `bdf` setting the index decides.
    `keys`: the measurements' keys to look at (default all; the judge passes the thermal ones)."""
    return _placed(measurements, gpus, (name,), keys)[0]


def _placed(
    measurements: Mapping[str, Measurement], gpus: Iterable[Gpu], names: tuple[str, ...], keys: Iterable[str] | None
) -> list[dict[int, Measurement]]:
    """`readings` of each of `names`, the GPUs' slots looked up once."""
    by_bdf = {str(g.bdf): g.index for g in gpus if g.bdf is not None}
    indexes = {g.index for g in gpus}
    among = tuple(measurements if keys is None else keys)
    found = []
    for name in names:
        out: dict[int, Measurement] = {}
        for key, label in _named(among, name):
            m = measurements[key]
            bdf = m.settings.get("bdf")
            index = by_bdf.get(bdf) if bdf is not None else _index(label, indexes)
            if index is not None:
                out[index] = m
        found.append(out)
    return found


class _Read(NamedTuple):  # a tuple, not a dataclass: four are built for every node of a fleet
    """One snapshot's phase 2 readings of one name by GPU index (`readings`), each judged once (`_judged`)."""

    found: dict[int, Measurement]
    values: dict[int, float]  # the usable ones' values, in `found`'s order
    problems: dict[int, tuple[str, str]]  # the others: why each is no evidence, and what it showed


def _read(snapshot: Snapshot, gpus: Iterable[Gpu]) -> tuple[_Read, _Read]:
    """`snapshot`'s phase 2 temperatures and power readings, placed on `gpus` and judged."""
    names = ("temp_c_max", "power_w_mean")
    placed = _placed(merged_measurements(snapshot)[0], gpus, names, thermal_keys(snapshot))
    out = []
    for name, found in zip(names, placed, strict=True):
        values: dict[int, float] = {}
        problems: dict[int, tuple[str, str]] = {}
        for i, m in found.items():
            judged = _judged(m, name)
            if isinstance(judged, tuple):
                problems[i] = judged
            else:
                values[i] = judged
        out.append(_Read(found=found, values=values, problems=problems))
    return out[0], out[1]


@functools.lru_cache(maxsize=64)
def _named(keys: tuple[str, ...], name: str) -> tuple[tuple[str, str], ...]:
    """(key, GPU label) of each `thermal/<label>/<name>` among `keys`, in order: a pure function of a key set
    a fleet's snapshots share, parsed once instead of once per snapshot and reading."""
    out = []
    for key in keys:
        parts = key.split("/")
        if len(parts) == 3 and key.startswith(THERMAL_PREFIX) and parts[2] == name:
            out.append((key, parts[1]))
    return tuple(out)


def _index(label: str, indexes: set[int]) -> int | None:
    number = label.removeprefix("gpu")
    return int(number) if digits(number) and int(number) in indexes else None


def _device(gpu: Gpu) -> str:
    return str(gpu.bdf).rsplit(".", 1)[0] if gpu.bdf is not None else f"index {gpu.index}"


def _name(gpu: Gpu) -> str:
    return f"GPU {gpu.index} ({gpu.bdf if gpu.bdf is not None else 'no BDF'})"


def _power_text(power: Mapping[int, float], gpu: int, others: Iterable[int]) -> str:
    mine = power.get(gpu)
    theirs = [power[i] for i in others if i in power]
    if mine is None or not theirs:
        return ""
    return f"; power {mine:.0f} W vs {statistics.median(theirs):.0f} W"


def check_thermal(ctx: NodeContext, entry: RuleEntry) -> Iterable[Finding]:
    """Outliers against peers, class and baseline; missing thermal evidence of a phase 2 that ran."""
    phase = next((p for p in ctx.candidate.phases if p.phase == MESH_PHASE), None)
    if phase is None or phase.status not in (PhaseStatus.PASSED, PhaseStatus.FAILED):
        return  # no phase 2 result to read: evidence.missing / phase.failed report it
    gpus = sorted(ctx.candidate.gpus, key=lambda g: g.index)
    hot, watts = _read(ctx.candidate, gpus)
    by_index = {g.index: g for g in gpus}
    devices = [_device(g) for g in gpus]  # gpus[k]'s device
    device = dict(zip([g.index for g in gpus], devices, strict=True))  # by index, as `by_index` picks the GPU
    temps, power = hot.values, watts.values
    notes = [r.removeprefix(NOTE) for r in phase.reasons if r.startswith(NOTE)]
    for read in (hot, watts):
        for i, (why, shown) in sorted(read.problems.items()):
            gpu, key = by_index[i], read.found[i].key
            yield _no_evidence(ctx, entry, gpu, key, f"{_name(gpu)}: {key} is no thermal evidence: {why}", shown)
    garbled = {device[i] for i in hot.problems}  # named above, not again as missing
    kept = [(g, d) for g, d in zip(gpus, devices, strict=True) if d not in garbled]
    yield from _missing(ctx, entry, kept, temps, notes)
    was_hot, was_watts = _read(ctx.baseline, ctx.baseline.gpus) if ctx.baseline is not None else (None, None)
    yield from _lost_power(ctx, entry, was_watts, by_index, device, hot.found, watts.found)
    threshold = entry.number("threshold_c")
    min_peers = entry.integer("min_peers")
    for gpu in gpus:
        t = temps.get(gpu.index)
        if t is None:
            continue
        mine = device[gpu.index]
        others = [i for i in temps if i != gpu.index and device[i] != mine]
        if len(others) < min_peers:
            continue
        median = stats.median([temps[i] for i in others])  # statistics.median's value, without its generality
        if t - median > threshold:
            yield _outlier(
                ctx,
                entry,
                gpu,
                t,
                median + threshold,
                f"{t - median:.1f} °C above the median of its {len(others)} peers ({median:.1f} °C) under the "
                f"same phase 2 load; threshold {threshold:g} °C{_power_text(power, gpu.index, others)}",
                hot.found[gpu.index].key,
            )
    yield from _against_class(ctx, entry, gpus, temps, hot.found)
    yield from _against_baseline(ctx, entry, temps, hot.found, was_hot)


def _outlier(ctx: NodeContext, entry: RuleEntry, gpu: Gpu, temp: float, limit: float, why: str, key: str) -> Finding:
    return finding(
        ctx,
        entry,
        f"{_name(gpu)} ran at {temp:.0f} °C, {why}",
        device=str(gpu.bdf) if gpu.bdf is not None else f"gpu[{gpu.index}]",
        path=f"measurements[key={key}]",
        expected=round(limit, 1),
        actual=temp,
        evidence=EVIDENCE,
        hint=(
            f"check {_name(gpu)}'s cooling (fans, airflow, cold plate, thermal interface), then re-run phase 2: "
            f"upgrade-gate validate --phases 2 --node {ctx.node}"
        ),
    )


def _no_evidence(ctx: NodeContext, entry: RuleEntry, gpu: Gpu, key: str, message: str, actual: object) -> Finding:
    name = key.rsplit("/", 1)[-1]
    known = _UNDERSTOOD[name]
    return finding(
        ctx,
        entry,
        message,
        device=str(gpu.bdf) if gpu.bdf is not None else f"gpu[{gpu.index}]",
        path=f"measurements[key={key}]",
        expected=f"{known.sensor} reading in {known.unit}, {known.low:g} < value <= {known.high:g}",
        actual=actual,
        evidence=EVIDENCE,
        severity=entry.severity_param("missing_evidence"),
        hint=f"check the thermal tool's output on {ctx.node}, then re-run phase 2: "
        f"upgrade-gate validate --phases 2 --node {ctx.node}",
    )


def _lost_power(
    ctx: NodeContext,
    entry: RuleEntry,
    before: _Read | None,
    by_index: Mapping[int, Gpu],
    device: Mapping[int, str],
    hot: Mapping[int, Measurement],
    watts: Mapping[int, Measurement],
) -> Iterable[Finding]:
    """A slot (PCI device) the baseline had a usable power reading for (`before`), read this time without one."""
    if ctx.baseline is None or before is None:
        return
    device_before = {g.index: _device(g) for g in ctx.baseline.gpus}
    had: dict[str, float] = {}
    for i, v in sorted(before.values.items()):
        had.setdefault(device_before[i], v)
    have = {device[i] for i in watts}  # an unusable one is reported as such
    for i in sorted(hot):  # a device without a temperature is `_missing`'s
        gpu, slot = by_index[i], device[i]
        was = had.pop(slot, None)
        if was is None or slot in have:
            continue
        key = f"{THERMAL_PREFIX}gpu{i}/power_w_mean"
        message = (
            f"{_name(gpu)}: {key} is missing: the baseline had {was:g} W in this slot, phase 2 recorded no power "
            "this time"
        )
        yield _no_evidence(ctx, entry, gpu, key, message, None)


def _missing(
    ctx: NodeContext,
    entry: RuleEntry,
    gpus: list[tuple[Gpu, str]],
    temps: Mapping[int, float],
    notes: list[str],
) -> Iterable[Finding]:
    """One finding naming the GPUs (each with its device) whose device has no usable temperature."""
    read = {d for g, d in gpus if g.index in temps}
    missing = [g for g, d in gpus if d not in read]
    if not missing:
        return
    shown = ", ".join(_name(g) for g in missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
    why = "; ".join(notes) if notes else "the phase result carries no thermal readings (not sampled)"
    yield finding(
        ctx,
        entry,
        f"phase 2 ran without thermal evidence for {shown}: {why}",
        device="thermal",
        path=f"phases[phase={MESH_PHASE}].measurements",
        expected="a temperature under load for every GPU",
        actual=None,
        evidence=EVIDENCE,
        severity=entry.severity_param("missing_evidence"),
        hint=f"make amd-smi work on {ctx.node}, then re-run phase 2: "
        f"upgrade-gate validate --phases 2 --node {ctx.node}",
    )


def _comparable(a: Measurement, b: Mapping[str, str], *, same_bdf: bool) -> bool:
    mine = a.settings
    for k in _COMPARED_AT_SLOT if same_bdf else _COMPARED:  # noqa: SIM110 - a loop, not all(): 4x less CPU
        if mine.get(k) != b.get(k):
            return False
    return True


def _against_class(
    ctx: NodeContext, entry: RuleEntry, gpus: list[Gpu], temps: Mapping[int, float], hot: Mapping[int, Measurement]
) -> Iterable[Finding]:
    ref = ctx.reference
    if ref is None:
        return
    threshold = entry.number("threshold_c")
    slots = _SLOTS.get(ref, _slots)
    for gpu in gpus:
        t, m, summary = temps.get(gpu.index), hot.get(gpu.index), slots.get(str(gpu.bdf))
        if t is None or summary is None or m is None or summary.n_nodes < entry.integer("class_min_nodes"):
            continue
        if summary.unit != m.unit or not _comparable(m, summary.settings, same_bdf=True):
            continue  # another load: not the same comparison
        if t - summary.median > threshold:
            yield _outlier(
                ctx,
                entry,
                gpu,
                t,
                summary.median + threshold,
                f"{t - summary.median:.1f} °C above class {ref.node_class} in this slot "
                f"(median {summary.median:.1f} °C over {summary.n_nodes} nodes) under the same phase 2 load; "
                f"threshold {threshold:g} °C",
                m.key,
            )


def _slots(ref: ClassReference) -> dict[str | None, MetricSummary]:
    """A class reference's `temp_c_max` summaries by slot (BDF)."""
    return {
        s.settings.get("bdf"): s
        for s in ref.metrics
        if s.key.startswith(THERMAL_PREFIX) and s.key.endswith("/temp_c_max") and "bdf" in s.settings
    }


_SLOTS: IdCache[ClassReference, dict[str | None, MetricSummary]] = IdCache(8)  # one reference serves a run


def _against_baseline(
    ctx: NodeContext,
    entry: RuleEntry,
    temps: Mapping[int, float],
    hot: Mapping[int, Measurement],
    before: _Read | None,
) -> Iterable[Finding]:
    """Each GPU against its own baseline temperature (`before`: the baseline's, placed and judged)."""
    if before is None:
        return
    threshold = entry.number("baseline_threshold_c")
    for pair in ctx.pairs:
        if pair.baseline is None or pair.candidate is None:
            continue
        gpu = pair.candidate
        t, c, b = temps.get(gpu.index), hot.get(gpu.index), before.found.get(pair.baseline.index)
        was = before.values.get(pair.baseline.index)  # None when garbled: no reference
        if t is None or c is None or b is None or was is None:
            continue
        if b.unit != c.unit or not _comparable(c, b.settings, same_bdf=False):
            continue  # another load (GPU count, sweep): bandwidth.not_comparable reports the load change
        if t - was > threshold:
            yield _outlier(
                ctx,
                entry,
                gpu,
                t,
                was + threshold,
                f"{t - was:.1f} °C above its own baseline ({was:.0f} °C) under the same phase 2 load; "
                f"threshold {threshold:g} °C",
                c.key,
            )


SPECS = (
    spec(
        "thermal.outlier",
        "a GPU much hotter under the phase 2 load than its peers, its class or its baseline; or no thermal evidence",
        check_thermal,
        plan_can_accept=False,
        params={
            "threshold_c": ParamSpec(
                kind="number", default=10.0, doc="°C above the peers' median or the class median", minimum=0
            ),
            "baseline_threshold_c": ParamSpec(
                kind="number", default=10.0, doc="°C above the GPU's own baseline", minimum=0
            ),
            "min_peers": ParamSpec(
                kind="integer", default=3, doc="other GPUs a node needs for a peer median", minimum=1
            ),
            "class_min_nodes": ParamSpec(
                kind="integer", default=3, doc="class nodes a slot's median needs before it is compared", minimum=1
            ),
            "missing_evidence": ParamSpec(
                kind="string",
                default="block",
                doc="severity when phase 2 ran without thermal readings: block, warn or info (anything else blocks)",
            ),
        },
    ),
)
