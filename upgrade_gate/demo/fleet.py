"""The demo's fleet: eight fake MI300X nodes, the change applied to them, and their evidence gathered.

Everything here runs through the real code paths: each fake node is `fakenode.build_fake_node` (fake
tools first on PATH, a host-root tree), a capture is `collect.capture` through a `LocalRunner` with
the same output check the `capture` command uses, the snapshot is `snapshot.build_snapshot`, and the
phases are `validate.run_pipeline` with a `LocalLauncher` - the `validate` command's path, with one
environment per fake node. Bundles and snapshots are written to the work folder as the commands would,
so every step can be replayed by hand with `upgrade-gate snapshot` / `gate`.

Design decisions:
- Nodes are handled in parallel threads (one per node): build, capture, snapshot, validate. A fake
  tool is a Python start-up that mostly waits on exec and I/O, so threads cut the wall time to about a
  third even on 2 cores, and one node's pure-Python work (building its tools, parsing) overlaps the
  others' waiting. Each node keeps its own runner, launcher and files; nothing is shared between the
  threads but the narration callback, which runs under a lock.
- Seeds are 1..8 by position, so every node has its own serials, unique ids and GUIDs, and the same
  node has the same identity before and after the change (its spec is rebuilt from the same seed).
- "Applying the change" rebuilds a node's fake tools from a spec with the new ROCm and amdgpu versions
  (the ROCm version file, `amd-smi version`, rocminfo's runtime and driver version all follow), plus the
  canary's injected failure when the story wants one. The old fake tools are replaced in place.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from upgrade_gate.collect.bundle import write_bundle
from upgrade_gate.collect.capture import OutputCheck, capture
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.fakenode import FakeNode, NodeSpec, build_fake_node, mi300x_node
from upgrade_gate.model import NodeName, PhaseResult, PhaseStatus, Snapshot, replace
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.snapshot.io import write_snapshot
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.cvf import MEASURED_BW_SUFFIX
from upgrade_gate.validate.launcher import LocalLauncher
from upgrade_gate.validate.phases import select_phases
from upgrade_gate.validate.pipeline import run_pipeline

NODE_CLASS = "mi300x-8gpu"
"""The class every demo node belongs to (eight MI300X OAM GPUs, eight Pollara NICs)."""

FLEET_SIZE = 8
VALIDATION_PHASES = frozenset({0, 1, 2, 3})
"""The single-node CVF phases the demo runs (4 and 5 need node pairs and a launcher across hosts)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Release:
    """A ROCm release and the amdgpu driver that ships with it."""

    rocm: str
    rocm_build: str
    driver: str


ROCM_6_1_3 = Release(rocm="6.1.3", rocm_build="122", driver="6.7.0")
ROCM_6_2_0 = Release(rocm="6.2.0", rocm_build="66", driver="6.8.5")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeEvidence:
    """What one node produced at one stage: its snapshot (phases attached) and where it was written."""

    node: NodeName
    snapshot: Snapshot
    bundle_path: Path
    snapshot_path: Path
    failed_probes: tuple[str, ...]

    @property
    def phases(self) -> tuple[PhaseResult, ...]:
        """The phase results carried by the snapshot."""
        return self.snapshot.phases

    @property
    def all_phases_passed(self) -> bool:
        """True when every phase that ran passed."""
        return bool(self.phases) and all(p.status is PhaseStatus.PASSED for p in self.phases)


def node_names(count: int = FLEET_SIZE) -> tuple[NodeName, ...]:
    """gpu-node-01 .. gpu-node-NN."""
    return tuple(NodeName(f"gpu-node-{i:02d}") for i in range(1, count + 1))


def node_spec(name: NodeName, release: Release) -> NodeSpec:
    """The healthy spec of demo node `name` running `release` (seed = its position, 1-based)."""
    seed = int(name.rsplit("-", 1)[1])
    spec = mi300x_node(name, seed=seed, node_class=NODE_CLASS, rocm_version=release.rocm, driver_version=release.driver)
    return replace(spec, rocm_build=release.rocm_build)


def gather(
    specs: Mapping[NodeName, NodeSpec],
    *,
    fleet_root: Path,
    out: Path,
    config: CvfConfig,
    output_check: OutputCheck,
    on_done: Callable[[NodeEvidence], None] | None = None,
    phases: Mapping[NodeName, frozenset[int]] | None = None,
) -> dict[NodeName, NodeEvidence]:
    """(Re)build each node under fleet_root/<node>, then capture, snapshot and validate it (phases 0-3, or
    the node's entry of `phases`: the workload phases 6-7 run on the canaries only).

    Bundles and snapshots go under `out`. `on_done` is called once per node in name order, as soon as
    that node and every node before it have finished, so the narration reads the same on every run.
    """
    names = sorted(specs)
    done: dict[NodeName, NodeEvidence] = {}
    lock = threading.Lock()
    reported = 0

    def one(name: NodeName) -> NodeEvidence:
        nonlocal reported
        node = build_fake_node(fleet_root / name, specs[name])
        numbers = (phases or {}).get(name, VALIDATION_PHASES)
        evidence = _gather_one(name, node, out=out, config=config, output_check=output_check, phases=numbers)
        with lock:
            done[name] = evidence
            while reported < len(names) and names[reported] in done:
                if on_done is not None:
                    on_done(done[names[reported]])
                reported += 1
        return evidence

    with ThreadPoolExecutor(max_workers=max(1, len(names)), thread_name_prefix="demo-node") as pool:
        results = list(pool.map(one, names))
    return {e.node: e for e in results}


def _gather_one(
    name: NodeName,
    node: FakeNode,
    *,
    out: Path,
    config: CvfConfig,
    output_check: OutputCheck,
    phases: frozenset[int] = VALIDATION_PHASES,
) -> NodeEvidence:
    env = node.env(os.environ)
    bundle = capture(
        LocalRunner(env=env), node=name, host_root=node.host_root, hostname=name, output_check=output_check
    )
    bundle_path = write_bundle(bundle, out / "bundles" / name)
    snapshot = build_snapshot(bundle, node_class=NODE_CLASS)
    results = run_pipeline(
        [name],
        phases=select_phases(phases),
        config=config,
        launcher=LocalLauncher({name: env}),
        snapshots={name: snapshot},
    )[name]
    snapshot = replace(snapshot, phases=results)
    snapshot_path = out / "snapshots" / f"{name}.json"
    write_snapshot(snapshot, snapshot_path)
    return NodeEvidence(
        node=name,
        snapshot=snapshot,
        bundle_path=bundle_path,
        snapshot_path=snapshot_path,
        failed_probes=tuple(r.name for r in bundle.records if not r.ok),
    )


def measured_mesh_bw(phases: Sequence[PhaseResult]) -> str | None:
    """Phase 2's `...-measured-bw` annotation (CVF's average bus bandwidth), if phase 2 ran."""
    for phase in phases:
        if phase.phase == 2:
            for key, value in phase.annotations.items():
                if key.endswith(MEASURED_BW_SUFFIX):
                    return value if any(c.isalpha() for c in value) else f"{value} GB/s"
    return None


def phase_summary(phases: Sequence[PhaseResult]) -> str:
    """`0-3 passed` (`0-3, 6-7 passed`) when all passed, else `0 passed, 1 passed, 2 failed (reason), 3 not-run`."""
    if phases and all(p.status is PhaseStatus.PASSED for p in phases):
        return f"{spans(sorted(p.phase for p in phases))} passed"
    parts = []
    for p in phases:
        text = f"{p.phase} {p.status.value}"
        if p.status not in (PhaseStatus.PASSED, PhaseStatus.NOT_RUN) and p.reason:
            reason = p.reason if len(p.reason) <= REASON_WIDTH else p.reason[: REASON_WIDTH - 3] + "..."
            text += f" ({reason})"
        parts.append(text)
    return ", ".join(parts)


REASON_WIDTH = 60
"""A failed phase's reason in a node's line is cut here (the reports carry it whole)."""


def spans(numbers: Sequence[int]) -> str:
    """[0, 1, 2, 3, 6, 7] -> `0-3, 6-7`."""
    out: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(f"{start}-{prev}" if prev > start else str(start))
        if n is not None:
            start = prev = n
    return ", ".join(out)
