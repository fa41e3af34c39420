"""Re-measuring on Kubernetes (issue 14), on the real control plane, as the upgrade-gate service account.

`window validate` hands the phases the policy's `bandwidth.regression` limits and each canary's baseline
(`fleet.window_validate.phase_resampling`), as `validate --policy --baseline` does on one node: a phase 2
sweep whose comparison with the node's baseline is inconclusive runs again, each run a Job of its own,
up to the policy's `max_samples`; a canary without a baseline keeps the fixed count.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.k8s.realcluster import NS, RealCluster
from tests.test_validate_support import fast_config, healthy_spec, make_node, snapshot_of
from upgrade_gate.fakenode import FakeNode
from upgrade_gate.fleet.executor import ExecutorSettings, run_phases
from upgrade_gate.fleet.kube import KubeClient
from upgrade_gate.fleet.manifests import JobSettings
from upgrade_gate.fleet.window_validate import phase_resampling
from upgrade_gate.judge.policy import Policy, load_policy
from upgrade_gate.model import NodeInfo, NodeName, PhaseResult, PhaseStatus, Snapshot, Software, replace
from upgrade_gate.validate import cvf
from upgrade_gate.validate.phases import select_phases

pytest_plugins = ["tests.k8s.fixtures"]  # real_cluster, real_client

NODE = NodeName("node-01")
CLASS = "mi300x-8gpu"
SETTINGS = ExecutorSettings(jobs=JobSettings(python=sys.executable), concurrency=2)


@pytest.fixture
def fake(real_cluster: RealCluster, tmp_path: Path) -> FakeNode:
    node = make_node(tmp_path, healthy_spec(NODE))
    real_cluster.add_node(NODE, node_class=CLASS, env=node.env(os.environ), host_root=node.host_root)
    real_cluster.wait_nodes_settled([NODE])
    return node


def _policy(tmp_path: Path) -> Policy:
    path = tmp_path / "policy.yaml"
    path.write_text("rules:\n  - {id: bandwidth.regression, params: {max_samples: 5}}\n", encoding="utf-8")
    return load_policy(path)


def _mesh(client: KubeClient, snap: Snapshot, run_id: str, baselines: Mapping[NodeName, Snapshot],
          policy: Policy) -> PhaseResult:  # fmt: skip
    (kube_node,) = [n for n in client.list_nodes() if n.name == NODE]
    results = run_phases(
        client, [kube_node], phases=select_phases(frozenset({2})), config=fast_config(), settings=SETTINGS,
        run_id=run_id, snapshots={NODE: snap}, resampling=phase_resampling(policy, {NODE: snap}, baselines),
    )  # fmt: skip
    (mesh,) = results[NODE]
    return mesh


def _baseline(result: PhaseResult, snap: Snapshot, shift: float) -> Snapshot:
    """The node's baseline: this phase-2 result with the all_reduce bandwidths `shift` times higher."""
    scaled = tuple(
        replace(m, samples=tuple(round(s * shift, 2) for s in m.samples), settings=dict(m.settings))
        if m.key.startswith("mesh/all_reduce/")
        else m
        for m in result.measurements
    )
    return replace(snap, phases=(replace(result, measurements=scaled),))


def _phase2_jobs(client: KubeClient, run_id: str) -> int:
    return sum(1 for j in client.list_jobs(NS, "upgrade-gate/purpose=phase2") if j.labels.get("upgrade-gate/run-id",
               "").startswith(f"{run_id}-"))  # fmt: skip


def test_real_phase2_re_measures_against_the_canarys_baseline(
    fake: FakeNode, real_client: KubeClient, tmp_path: Path
) -> None:
    snap = replace(snapshot_of(fake), node=NodeInfo(name=NODE, node_class=CLASS))
    policy = _policy(tmp_path)
    clear = _mesh(real_client, snap, "rm1", {}, policy)  # no baseline: the fixed 3 samples
    assert clear.status is PhaseStatus.PASSED, clear.reasons
    assert {len(m.samples) for m in clear.measurements if m.key.startswith("mesh/all_reduce/")} == {3}
    assert _phase2_jobs(real_client, "rm1") == 3
    # the baseline 7.5% higher: the curve's shift (-7%) sits at the 7% tolerance, neither in nor out
    banded = _mesh(real_client, snap, "rm2", {NODE: _baseline(clear, snap, 1.075)}, policy)
    assert banded.status is PhaseStatus.PASSED, banded.reasons
    assert {len(m.samples) for m in banded.measurements if m.key.startswith("mesh/all_reduce/")} == {5}
    assert _phase2_jobs(real_client, "rm2") == 5  # every extra run a Job on the node, up to max_samples
    note = banded.annotations[f"{cvf.GPU_MESH_VALIDATION}-samples"]
    assert f"with {NODE}'s baseline inconclusive" in note, note


def test_phase_resampling_takes_the_most_generous_limit_and_each_canarys_own_baseline(tmp_path: Path) -> None:
    """No cluster needed: what `window validate` hands the phases for canaries of two classes."""
    path = tmp_path / "policy.yaml"
    path.write_text(
        "rules:\n  - {id: bandwidth.regression, params: {max_samples: 6}}\n"
        "  - {id: bandwidth.regression, applies_to: [rack2], params: {max_samples: 9}}\n",
        encoding="utf-8",
    )
    policy = load_policy(path)

    def snap(name: str, node_class: str) -> Snapshot:
        return Snapshot(node=NodeInfo(name=NodeName(name), node_class=node_class), taken_at="2026-12-01T00:00:00Z",
                        tool_version="test", software=Software())  # fmt: skip

    canaries = {NodeName("a"): snap("a", CLASS), NodeName("b"): snap("b", "rack2")}
    both = phase_resampling(policy, canaries, {NodeName("a"): snap("a", CLASS), NodeName("z"): snap("z", CLASS)})
    assert both.max_samples == 9 and both.compare is not None
    only_a = phase_resampling(policy, {NodeName("a"): canaries[NodeName("a")]}, {})
    assert (only_a.max_samples, only_a.compare) == (6, None)  # no baseline: the limits, nothing to compare with
