"""Derive a fleet of (baseline, candidate) snapshots from ONE real-format node snapshot.

Design decisions
- The template is real: a fake 8x MI300X node (`upgrade_gate.fakenode`, real tool formats) captured
  with the real capture code, built into a snapshot by the real builder, and validated by the real CVF
  pipeline (phases 0-5 on two fake nodes through `LocalLauncher`), so every field the judge reads has
  the shape production gives it. Nothing is invented except values substituted into that shape.
- Node i gets its own identity (name, GPU serials and unique ids, NIC GUIDs, phase-4 peer); BDFs,
  firmware and topology are the platform's and stay equal, as on a real homogeneous fleet.
- Bandwidth noise: every measurement of the template is re-drawn per node and side as
  `mean * (1 + cv * N(0, 1))`, with the template's median as the mean; sweeps carry `samples`
  samples (the pipeline's default 5), rails as many as phase 4 produced in the template (2026-11: one
  run per rail at first, the pipeline's sample count since) unless `rail_samples` says otherwise.
- Candidates carry the planned change (ROCm `from_rocm` -> `to_rocm` on every node); `fault_rate` of
  them (default 5%) also carry one unplanned fault, cycling through: GPU order reversed, one VF lost,
  a PCIe link x16 -> x8, a GPU firmware block changed, a 15% drop of the mesh's large sizes.
- Objects are built with `dataclasses.replace` from the template, so strings equal on every node
  (firmware versions, BDFs) are shared, as interning would; per-node values are fresh objects.
- Seeds are fixed (`random.Random(seed)`), so a fleet is reproducible.
"""

from __future__ import annotations

import json
import os
import random
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from upgrade_gate import codec
from upgrade_gate.model import (
    GpuSerial,
    Measurement,
    NodeName,
    PhaseResult,
    Snapshot,
    Software,
    replace,
)

FAULT_KINDS = ("order", "vf", "link", "firmware", "bandwidth")
FROM_ROCM = "6.1.3"
TO_ROCM = "6.2.0"
LARGE_BYTES = 64 << 20  # "large message sizes" of the mesh: 64 MiB and up
BANDWIDTH_DROP = 0.15
VFS = 8  # SR-IOV VFs enabled on every NIC PF of the template (so one can be lost)


@dataclass(frozen=True, slots=True, kw_only=True)
class Template:
    """The real-format node everything is derived from: its snapshot with phase results inside."""

    snapshot: Snapshot


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetNode:
    """One derived node: baseline, candidate, and the fault injected into the candidate (or None)."""

    name: NodeName
    baseline: Snapshot
    candidate: Snapshot
    fault: str | None


def build_template(workdir: Path, *, phases: frozenset[int] = frozenset(range(6))) -> Template:
    """Capture two fake nodes, snapshot them, run the CVF `phases` locally; node 1 is the template."""
    from upgrade_gate.cli.collect_cmds import parser_check
    from upgrade_gate.collect.capture import capture
    from upgrade_gate.collect.runner import LocalRunner
    from upgrade_gate.fakenode import build_fake_node, mi300x_node
    from upgrade_gate.snapshot.build import build_snapshot
    from upgrade_gate.validate.config import parse_cvf_config
    from upgrade_gate.validate.launcher import LocalLauncher
    from upgrade_gate.validate.phases import select_phases
    from upgrade_gate.validate.pipeline import run_pipeline

    names = ("gpu-node-01", "gpu-node-02") if 4 in phases or 5 in phases else ("gpu-node-01",)
    envs: dict[str, dict[str, str]] = {}
    snaps: dict[str, Snapshot] = {}
    for name in names:
        spec = mi300x_node(name, seed=1, rocm_version=FROM_ROCM)
        spec = replace(spec, nics=tuple(replace(n, sriov_numvfs=VFS) for n in spec.nics))
        node = build_fake_node(workdir / name, spec)
        envs[name] = node.env(os.environ)
        bundle = capture(LocalRunner(env=envs[name]), node=name, host_root=node.host_root, output_check=parser_check())
        snaps[name] = build_snapshot(bundle, node_class="mi300x-8gpu")
    config = parse_cvf_config({"UPGRADE_GATE_PHASE4_SERVER_START_S": "0"}, source="bench")
    results = run_pipeline(
        list(names), phases=select_phases(phases), config=config, launcher=LocalLauncher(envs), snapshots=snaps
    )
    first = names[0]
    return Template(snapshot=replace(snaps[first], phases=results[NodeName(first)]))


def describe(template: Template) -> str:
    """What the template's measurements are, per phase: "phase 2: 23 metrics x 5 samples, ..."."""
    parts = []
    for p in template.snapshot.phases:
        if p.measurements:
            counts = sorted({len(m.samples) for m in p.measurements})
            runs = "/".join(str(c) for c in counts)
            parts.append(f"phase {p.phase}: {len(p.measurements)} metrics x {runs} sample(s)")
    return ", ".join(parts) or "no measurements"


def save_template(template: Template, path: Path) -> None:
    """Write the template snapshot as JSON (no schema check: a bench artefact)."""
    path.write_text(json.dumps(codec.to_jsonable(template.snapshot)), encoding="utf-8")


def load_template(path: Path) -> Template:
    """Read a template written by `save_template`."""
    return Template(snapshot=codec.from_jsonable(Snapshot, json.loads(path.read_text(encoding="utf-8"))))


@dataclass(frozen=True, slots=True)
class _Metric:
    """A template measurement, pre-digested for fast re-drawing."""

    proto: Measurement
    mean: float
    rail: bool


def _digest(phases: tuple[PhaseResult, ...]) -> tuple[tuple[_Metric, ...], ...]:
    return tuple(
        tuple(
            _Metric(proto=m, mean=statistics.median(m.samples), rail=m.key.startswith("rail/"))
            for m in phase.measurements
        )
        for phase in phases
    )


def _size(key: str) -> int | None:
    last = key.rsplit("/", 1)[-1]
    return int(last) if last.isdigit() else None


def degradation(template: Template, group: str, drop: float) -> dict[str, float]:
    """Factor per measurement key when one metric `group` of the candidate drops by `drop`.

    `mesh-large`: the phase-2 sweep's sizes >= 64 MiB, and its `avg_busbw` by the same absolute
    amount spread over the sweep (the average of the sizes moves with them); `rail`: the first rail.
    """
    means = {m.key: statistics.median(m.samples) for p in template.snapshot.phases for m in p.measurements}
    if group == "rail":
        first = min(k for k in means if k.startswith("rail/"))
        return {first: 1.0 - drop}
    if group != "mesh-large":
        raise ValueError(f"unknown metric group {group}")
    sizes = {k: v for k, v in means.items() if k.startswith("mesh/") and _size(k) is not None}
    large = {k for k in sizes if (_size(k) or 0) >= LARGE_BYTES}
    out = dict.fromkeys(large, 1.0 - drop)
    share = sum(sizes[k] for k in large) / sum(sizes.values())
    for key in means:
        if key.startswith("mesh/") and key.endswith("/avg_busbw"):
            out[key] = 1.0 - drop * share
    return out


def _draw(means: list[float], noise: np.random.Generator, cv: float, count: int) -> list[tuple[float, ...]]:
    """`count` noisy samples around each mean, rounded like the tools print them (2 decimals)."""
    if not means:
        return []
    values = np.round(np.asarray(means)[:, None] * (1.0 + cv * noise.standard_normal((len(means), count))), 2)
    return [tuple(row) for row in values.tolist()]


def _phases(
    template: tuple[PhaseResult, ...],
    digest: tuple[tuple[_Metric, ...], ...],
    noise: np.random.Generator,
    *,
    cv: float,
    samples: int,
    rail_samples: int | None,
    peer: str,
    factors: dict[str, float] | None = None,
) -> tuple[PhaseResult, ...]:
    out = []
    scale = factors or {}
    for phase, metrics in zip(template, digest, strict=True):
        rails = [mt for mt in metrics if mt.rail]
        others = [mt for mt in metrics if not mt.rail]
        rail_count = rail_samples if rail_samples is not None else (len(rails[0].proto.samples) if rails else 1)
        drawn = dict(
            zip(
                (id(mt) for mt in (*others, *rails)),
                (
                    *_draw([mt.mean * scale.get(mt.proto.key, 1.0) for mt in others], noise, cv, samples),
                    *_draw([mt.mean * scale.get(mt.proto.key, 1.0) for mt in rails], noise, cv, rail_count),
                ),
                strict=True,
            )
        )
        measurements = []
        for mt in metrics:
            m = mt.proto
            values = drawn[id(mt)]
            # settings equal on every node are shared, as a decoder's equal strings would be
            settings = {**m.settings, "peer": peer} if mt.rail else m.settings
            measurements.append(
                Measurement(
                    key=m.key,
                    unit=m.unit,
                    samples=values,
                    settings=settings,
                    source=m.source,
                    higher_is_better=m.higher_is_better,
                )
            )
        out.append(replace(phase, measurements=tuple(measurements), peer=peer if phase.peer else None))
    return tuple(out)


def _identity(snap: Snapshot, index: int, name: NodeName) -> Snapshot:
    gpus = tuple(
        replace(
            g,
            serial=GpuSerial(f"{692400000000 + index * 16 + g.index}"),
            unique_id=f"0x{(0x1000000000000000 | (index << 8) | g.index):016x}",
        )
        for g in snap.gpus
    )
    nics = tuple(
        replace(n, node_guid=f"0690:81ff:fe{(index >> 8) & 0xFF:02x}:{(index & 0xFF) << 8 | j:04x}")
        for j, n in enumerate(snap.nics)
    )
    return replace(snap, node=replace(snap.node, name=name, hostname=name), gpus=gpus, nics=nics)


def _fault(snap: Snapshot, kind: str) -> Snapshot:
    if kind == "order":
        order = tuple(reversed([(g.bdf, g.serial, g.unique_id) for g in snap.gpus]))
        gpus = tuple(
            replace(g, bdf=order[i][0], serial=order[i][1], unique_id=order[i][2]) for i, g in enumerate(snap.gpus)
        )
        return replace(snap, gpus=gpus)
    if kind == "vf":
        nic = snap.nics[0]
        lost = max(0, (nic.sriov_numvfs or 1) - 1)
        nics = (replace(nic, sriov_numvfs=lost), *snap.nics[1:])
        sriov = tuple(replace(s, numvfs=lost) if s.bdf == nic.bdf else s for s in snap.sriov)
        return replace(snap, nics=nics, sriov=sriov)
    if kind == "link":
        target = snap.gpus[0].bdf
        pcie = tuple(replace(p, width=8, downgraded=True) if p.bdf == target else p for p in snap.pcie)
        return replace(snap, pcie=pcie)
    if kind == "firmware":
        gpu = snap.gpus[0]
        block = sorted(gpu.firmware)[0] if gpu.firmware else "SMC"
        gpus = (replace(gpu, firmware={**gpu.firmware, block: "99.99.99"}), *snap.gpus[1:])
        return replace(snap, gpus=gpus)
    raise ValueError(f"unknown fault {kind}")


def derive_fleet(
    template: Template,
    n: int,
    *,
    seed: int = 7,
    cv: float = 0.03,
    samples: int = 5,
    rail_samples: int | None = None,
    fault_rate: float = 0.05,
    degrade: tuple[str, float] | None = None,
    plan_change: bool = True,
) -> Iterator[FleetNode]:
    """Yield `n` derived nodes (deterministic for a seed); see the module docstring.

    `degrade` (group, drop) lowers one metric group on every candidate (see `degradation`);
    `plan_change` False keeps the candidates' ROCm version (no upgrade between the two sides).
    """
    rng = random.Random(seed)
    noise = np.random.default_rng(seed)
    base = template.snapshot
    digest = _digest(base.phases)
    bandwidth_fault = degradation(template, "mesh-large", BANDWIDTH_DROP)
    degraded = degradation(template, *degrade) if degrade is not None else None
    faults = 0
    for i in range(n):
        name = NodeName(f"gpu-node-{i:05d}")
        peer = f"gpu-node-{i ^ 1:05d}"
        ident = _identity(base, i, name)
        fault = FAULT_KINDS[faults % len(FAULT_KINDS)] if rng.random() < fault_rate else None
        faults += fault is not None
        factors = bandwidth_fault if fault == "bandwidth" else degraded
        baseline = replace(
            ident,
            taken_at="2025-06-01T10:00:00Z",
            software=replace(base.software, rocm_version=FROM_ROCM),
            phases=_phases(
                base.phases,
                digest,
                noise,
                cv=cv,
                samples=samples,
                rail_samples=rail_samples,
                peer=peer,
            ),
        )
        candidate = replace(
            ident,
            taken_at="2025-06-08T10:00:00Z",
            software=_upgraded(base.software) if plan_change else baseline.software,
            phases=_phases(
                base.phases,
                digest,
                noise,
                cv=cv,
                samples=samples,
                rail_samples=rail_samples,
                peer=peer,
                factors=factors,
            ),
        )
        if fault is not None and fault != "bandwidth":
            candidate = _fault(candidate, fault)
        yield FleetNode(name=name, baseline=baseline, candidate=candidate, fault=fault)


def _upgraded(software: Software) -> Software:
    return replace(software, rocm_version=TO_ROCM)
