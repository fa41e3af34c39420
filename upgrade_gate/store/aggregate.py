"""Per-class references: the prevailing state of a node class, and how one node departs from it.

Pure (no git, no I/O): `aggregate_class` turns the snapshots of one class into a `ClassReference`
for judging nodes that have no baseline of their own and for spotting the odd node out;
`deviations` / `odd_ones_out` list, as data, where one snapshot differs from such a reference. The
judge turns those into findings; thresholds for metrics are the judge's business, so metrics are
summarised here but not compared.

Design decisions:
- "Prevailing" is the most common value; ties go to the smallest value by its text (None last) so
  the result does not depend on the order the snapshots came in.
- GPU order: the prevailing GPU count decides the length; per index the prevailing BDF.
- Firmware keys: `gpu/<block>` per amd-smi firmware block (every GPU of every node votes),
  `gpu/vbios`, and `nic/<vendor_part_id>/fw_ver` (or `nic/fw_ver` when the part id is unknown), so a
  front-end NIC of another model is not outvoted by the RDMA NICs.
- VF counts per PF BDF from the sysfs SR-IOV records, with a NIC's own `sriov_numvfs` as fallback.
- Metrics: measurements compare only when their settings agree, so per key the nodes vote for a
  (unit, settings) pair and only the prevailing pair is summarised (`n_nodes` says how many nodes
  carried it). Each node contributes the median of its samples; the summary is the median of those
  per-node medians and their raw median absolute deviation (unscaled: multiply by 1.4826 for a
  normal-consistent sigma).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from upgrade_gate import codec, schemas
from upgrade_gate.errors import InputError
from upgrade_gate.model import ClassReference, MetricSummary, Nic, NodeName, Snapshot, measurements_of

T = TypeVar("T")
_SOFTWARE_FIELDS = ("kernel", "driver_version", "rocm_version", "amdsmi_version")
Settings = tuple[str, tuple[tuple[str, str], ...], bool]  # (unit, sorted settings items, higher_is_better)


@dataclass(frozen=True, slots=True, kw_only=True)
class Deviation:
    """One place where a node differs from its class reference."""

    path: str  # "gpus[3].bdf", "gpus[0].firmware.SMC", "nics[mlx5_0].fw_ver", "software.rocm_version"
    actual: object
    expected: object

    def __str__(self) -> str:
        """`path: actual (class: expected)`, with None shown as `absent`."""
        return f"{self.path}: {_show(self.actual)} (class: {_show(self.expected)})"


def _show(value: object) -> str:
    return "absent" if value is None else str(value)


def prevailing(values: Iterable[T]) -> T | None:
    """The most common value (ties: smallest by text, None last); None when there are none."""
    counts = Counter(values)
    if not counts:
        return None
    return min(counts, key=lambda v: (-counts[v], v is None, str(v)))


def nic_firmware_key(nic: Nic) -> str:
    """The ClassReference.firmware key of a NIC's firmware version."""
    return f"nic/{nic.vendor_part_id}/fw_ver" if nic.vendor_part_id else "nic/fw_ver"


def vf_counts(snapshot: Snapshot) -> dict[str, int | None]:
    """VFs enabled per PF BDF: sysfs SR-IOV records first, a NIC's own count as fallback."""
    out: dict[str, int | None] = {str(f.bdf): f.numvfs for f in snapshot.sriov}
    for nic in snapshot.nics:
        if nic.bdf is not None and nic.sriov_numvfs is not None:
            out.setdefault(str(nic.bdf), nic.sriov_numvfs)
    return out


def aggregate_class(node_class: str, snapshots: Sequence[Snapshot]) -> ClassReference:
    """The prevailing state of `node_class` over `snapshots` (one per node)."""
    acc = ClassAccumulator(node_class)
    for snap in snapshots:
        acc.add(snap)
    return acc.result()


# Settings that name the run rather than the measurement: a rail measured against another peer is the
# same metric of the class. Grouping on them would leave one node per group (a class "median" of one).
PER_RUN_SETTINGS = frozenset({"peer"})


def _prevailing_count(counts: Counter[Any]) -> Any:
    """`prevailing` over a tally (same tie rule)."""
    if not counts:
        return None
    return min(counts, key=lambda v: (-counts[v], v is None, str(v)))


class ClassAccumulator:
    """`aggregate_class` one snapshot at a time, keeping only tallies and per-node medians.

    Streaming (issue 14): a class reference over 8,192 baselines holds ~80 medians per node, not the
    snapshots. `aggregate_class` is this accumulator over a list, so both give the same reference.
    """

    def __init__(self, node_class: str) -> None:
        self.node_class = node_class
        self._names: list[NodeName] = []
        self._seen: set[NodeName] = set()
        self._gpu_counts: Counter[int] = Counter()
        self._order: defaultdict[int, Counter[str | None]] = defaultdict(Counter)
        self._firmware: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self._software: defaultdict[str, Counter[str | None]] = defaultdict(Counter)
        self._vfs: defaultdict[str, Counter[int]] = defaultdict(Counter)
        # key -> settings -> (nodes voting for it, per-node medians)
        self._metrics: defaultdict[str, dict[Settings, list[float]]] = defaultdict(dict)

    def add(self, snap: Snapshot) -> None:
        """Count one node's snapshot in (a node given twice is an InputError)."""
        name = snap.node.name
        if name in self._seen:
            raise InputError(f"class {self.node_class}: node {name} is given twice")
        self._seen.add(name)
        self._names.append(name)
        self._gpu_counts[len(snap.gpus)] += 1
        for gpu in snap.gpus:
            self._order[gpu.index][str(gpu.bdf) if gpu.bdf is not None else None] += 1
            for block, version in gpu.firmware.items():
                self._firmware[f"gpu/{block}"][version] += 1
            if gpu.vbios is not None:
                self._firmware["gpu/vbios"][gpu.vbios] += 1
        for nic in snap.nics:
            if nic.fw_ver is not None:
                self._firmware[nic_firmware_key(nic)][nic.fw_ver] += 1
        for field in _SOFTWARE_FIELDS:
            self._software[field][getattr(snap.software, field)] += 1
        for pf, count in vf_counts(snap).items():
            if count is not None:
                self._vfs[pf][count] += 1
        pooled: dict[str, dict[Settings, list[float]]] = {}
        for m in measurements_of(snap):
            if not m.samples:
                continue
            kept = tuple(sorted((k, v) for k, v in m.settings.items() if k not in PER_RUN_SETTINGS))
            pooled.setdefault(m.key, {}).setdefault((m.unit, kept, m.higher_is_better), []).extend(m.samples)
        for key, per_settings in pooled.items():
            slot = self._metrics[key]
            for settings, samples in per_settings.items():
                slot.setdefault(settings, []).append(statistics.median(samples))

    def result(self) -> ClassReference:
        """The class reference of everything added so far."""
        if not self._names:
            raise InputError(f"class {self.node_class}: no snapshots to aggregate")
        gpu_count = _prevailing_count(self._gpu_counts) or 0
        gpu_order = tuple(_prevailing_count(self._order[i]) if i in self._order else None for i in range(gpu_count))
        firmware = {k: v for k in sorted(self._firmware) if (v := _prevailing_count(self._firmware[k])) is not None}
        software = {
            name: str(value)
            for name in _SOFTWARE_FIELDS
            if (value := _prevailing_count(self._software[name])) is not None
        }
        sriov = {pf: n for pf in sorted(self._vfs) if (n := _prevailing_count(self._vfs[pf])) is not None}
        return ClassReference(
            node_class=self.node_class,
            nodes=tuple(sorted(self._names)),
            gpu_order=gpu_order,
            firmware=firmware,
            software=software,
            sriov=sriov,
            metrics=self._summaries(),
        )

    def _summaries(self) -> tuple[MetricSummary, ...]:
        out: list[MetricSummary] = []
        for key in sorted(self._metrics):
            per_settings = self._metrics[key]
            votes = Counter({s: len(medians) for s, medians in per_settings.items()})
            chosen = _prevailing_count(votes)
            if chosen is None:
                continue
            medians = per_settings[chosen]
            centre = statistics.median(medians)
            out.append(
                MetricSummary(
                    key=key,
                    unit=chosen[0],
                    median=float(centre),
                    spread=float(statistics.median(abs(m - centre) for m in medians)),
                    n_nodes=len(medians),
                    settings=dict(chosen[1]),
                    higher_is_better=chosen[2],
                )
            )
        return tuple(out)


def deviations(reference: ClassReference, snapshot: Snapshot) -> tuple[Deviation, ...]:
    """Where `snapshot` differs from its class: GPU count and order, firmware, software, VF counts."""
    out: list[Deviation] = []
    gpus = {g.index: g for g in snapshot.gpus}
    if len(snapshot.gpus) != len(reference.gpu_order):
        out.append(Deviation(path="gpu_count", actual=len(snapshot.gpus), expected=len(reference.gpu_order)))
    for i, bdf in enumerate(reference.gpu_order):
        gpu = gpus.get(i)
        if gpu is None:
            out.append(Deviation(path=f"gpus[{i}]", actual=None, expected=bdf))
        elif gpu.bdf != bdf:
            out.append(Deviation(path=f"gpus[{i}].bdf", actual=gpu.bdf, expected=bdf))
    blocks = sorted(k.removeprefix("gpu/") for k in reference.firmware if k.startswith("gpu/") and k != "gpu/vbios")
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        for block in blocks:
            actual = gpu.firmware.get(block)
            if actual != reference.firmware[f"gpu/{block}"]:
                path = f"gpus[{gpu.index}].firmware.{block}"
                out.append(Deviation(path=path, actual=actual, expected=reference.firmware[f"gpu/{block}"]))
        vbios = reference.firmware.get("gpu/vbios")
        if vbios is not None and gpu.vbios != vbios:
            out.append(Deviation(path=f"gpus[{gpu.index}].vbios", actual=gpu.vbios, expected=vbios))
    for nic in sorted(snapshot.nics, key=lambda n: n.name):
        expected = reference.firmware.get(nic_firmware_key(nic))
        if expected is not None and nic.fw_ver != expected:
            out.append(Deviation(path=f"nics[{nic.name}].fw_ver", actual=nic.fw_ver, expected=expected))
    for name, value in sorted(reference.software.items()):
        actual = getattr(snapshot.software, name, None)
        if actual != value:
            out.append(Deviation(path=f"software.{name}", actual=actual, expected=value))
    counts = vf_counts(snapshot)
    for pf, numvfs in sorted(reference.sriov.items()):
        if counts.get(pf) != numvfs:
            out.append(Deviation(path=f"sriov[{pf}].numvfs", actual=counts.get(pf), expected=numvfs))
    return tuple(out)


def odd_ones_out(reference: ClassReference, snapshot: Snapshot) -> tuple[str, ...]:
    """`deviations` as one line each: `path: actual (class: expected)`."""
    return tuple(str(d) for d in deviations(reference, snapshot))


def class_reference_to_document(reference: ClassReference) -> dict[str, Any]:
    """The schema-valid JSON form of a class reference (as `baseline aggregate` writes it)."""
    data: dict[str, Any] = codec.to_jsonable(reference)
    schemas.validate("class-reference", data, source=f"class {reference.node_class}")
    return data


def class_reference_from_document(data: Any, *, source: str) -> ClassReference:
    """Validate and decode a class reference document (e.g. the store's classes/<class>.json)."""
    schemas.validate("class-reference", data, source=source)
    return codec.from_jsonable(ClassReference, data)
