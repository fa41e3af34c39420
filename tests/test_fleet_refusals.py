"""Issue 28 (items 4, 5): a pod the cluster refuses says nothing about the node: REFUSED, exit 4, no label.

Through the API server double (its Job controller creates the pods); a node without a kubelet lets the
test write the pod status a kubelet or the scheduler would have written (the fault). The same cases on
the real control plane: tests/test_fleet_window_field_real.py.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.k8s.apiserver import wait_until
from tests.k8s.cluster import ClusterDouble
from tests.k8s.store import RESOURCES, Obj
from upgrade_gate.fleet.errors import KubeRefusedError
from upgrade_gate.fleet.executor import ExecutorSettings, capture_nodes
from upgrade_gate.fleet.jobs import NodeRunResult, RunStatus, run_job
from upgrade_gate.fleet.kube import KubeClient
from upgrade_gate.fleet.launcher import KubeLauncher
from upgrade_gate.fleet.manifests import JobSettings, JobSpec
from upgrade_gate.model import NodeName

pytest_plugins = ["tests.k8s.fixtures"]  # kube_cluster, kube_client

NS = "upgrade-gate"
SETTINGS = JobSettings(python=sys.executable)
PODS = RESOURCES[("", "pods")]


def _spec(node: str, *, gpus: int = 8) -> JobSpec:
    return JobSpec(node=NodeName(node), purpose="phase1", run_id="r1", argv=("rvs",), gpus=gpus, settings=SETTINGS)


def _workload(cluster: ClusterDouble, node: str) -> None:
    """A training pod (team-a) holding every GPU of `node`."""
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"training-{node}", "namespace": "team-a", "uid": f"uid-training-{node}"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "t", "image": "x", "resources": {"limits": {"amd.com/gpu": "8"}}}],
        },
        "status": {"phase": "Running"},
    }
    cluster.api.store.create(PODS, "team-a", pod)


def _run_with_pod_status(
    cluster: ClusterDouble, client: KubeClient, spec: JobSpec, status: Callable[[Obj], None], *, timeout_s: float
) -> NodeRunResult:
    """run_job while the Job's pod gets `status` written once it exists (the kubelet's or scheduler's word)."""
    box: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: box.setdefault("res", run_job(client, spec, timeout_s=timeout_s, poll_s=0.02)), daemon=True
    )
    thread.start()
    assert wait_until(lambda: cluster.objects("pods", NS) != [], timeout_s=10)
    (pod,) = cluster.objects("pods", NS)
    cluster.api.store.mutate(PODS, NS, pod["metadata"]["name"], status)
    thread.join(timeout_s + 30)
    res = box["res"]
    assert isinstance(res, NodeRunResult)
    return res


def _out_of_gpus(pod: Obj) -> None:
    pod["status"] = {
        "phase": "Failed",
        "reason": "OutOfamd.com/gpu",
        "message": "Pod was rejected: Node didn't have enough resource: amd.com/gpu, requested: 8, used: 8, "
        "capacity: 8",
    }


def test_refusal_busy_node_out_of_gpus_is_refused_not_failed(
    kube_cluster: ClusterDouble, kube_client: KubeClient
) -> None:
    """Item 4: the kubelet's OutOfamd.com/gpu while a workload holds the GPUs is REFUSED, and the launcher
    turns it into exit 4 (the pipeline stops, no phase result, no label), not `rvs: exit code None`."""
    kube_cluster.add_node("gpu-01", kubelet=False)
    _workload(kube_cluster, "gpu-01")
    spec = _spec("gpu-01")
    res = _run_with_pod_status(kube_cluster, kube_client, spec, _out_of_gpus, timeout_s=20)
    assert res.status is RunStatus.REFUSED, res
    assert "OutOfamd.com/gpu" in (res.reason or "") and "team-a/training-gpu-01" in (res.reason or ""), res.reason
    launcher = KubeLauncher(kube_client, [kube_client.get_node("gpu-01")], ExecutorSettings(jobs=SETTINGS), run_id="x")
    with pytest.raises(KubeRefusedError, match="says nothing about the node") as info:
        launcher.to_result(spec, res)
    assert info.value.exit_code == 4


def test_refusal_out_of_gpus_on_an_idle_node_stays_a_failure(
    kube_cluster: ClusterDouble, kube_client: KubeClient
) -> None:
    """No other pod holds the GPUs: the node advertises GPUs it cannot give, which is evidence about it."""
    kube_cluster.add_node("gpu-01", kubelet=False)
    res = _run_with_pod_status(kube_cluster, kube_client, _spec("gpu-01"), _out_of_gpus, timeout_s=20)
    assert res.status is RunStatus.FAILED and "OutOfamd.com/gpu" in (res.reason or ""), res


def test_refusal_image_pull_failure_ends_the_wait_as_refused(
    kube_cluster: ClusterDouble, kube_client: KubeClient
) -> None:
    """An image that cannot be pulled ends the wait at once (not at the timeout) as REFUSED; the Job goes."""

    def pull(pod: Obj) -> None:
        waiting = {"reason": "ErrImagePull", "message": 'pull access denied for "ghcr.io/x/upgrade-gate"'}
        statuses = [{"name": "upgrade-gate", "state": {"waiting": waiting}}]
        pod["status"] = {"phase": "Pending", "containerStatuses": statuses}

    kube_cluster.add_node("gpu-01", kubelet=False)
    res = _run_with_pod_status(kube_cluster, kube_client, _spec("gpu-01"), pull, timeout_s=120)
    assert res.status is RunStatus.REFUSED and "ErrImagePull" in (res.reason or ""), res
    assert res.duration_s < 60  # ended by the pod's status, long before the 120 s timeout
    assert kube_cluster.objects("jobs", NS, "batch") == []


def test_refusal_pod_never_scheduled_is_refused_at_the_timeout(
    kube_cluster: ClusterDouble, kube_client: KubeClient
) -> None:
    """A pod no node would take (PodScheduled False) until the timeout: REFUSED naming the scheduler's words."""

    def unschedulable(pod: Obj) -> None:
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient amd.com/gpu."}  # fmt: skip
        pod["status"] = {"phase": "Pending", "conditions": [cond]}

    kube_cluster.add_node("gpu-01", kubelet=False)
    res = _run_with_pod_status(kube_cluster, kube_client, _spec("gpu-01"), unschedulable, timeout_s=1.0)
    assert res.status is RunStatus.REFUSED and "Insufficient amd.com/gpu" in (res.reason or ""), res


def test_refusal_capture_raises_or_reports_refused_nodes(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    """capture_nodes: a refused capture is exit 4 for the window (no bundle, no error string that would
    BLOCK the node), or listed apart when the caller collects refusals (fleet watch skips the node)."""
    kube_cluster.add_node("gpu-01", kubelet=False)
    _workload(kube_cluster, "gpu-01")
    node = kube_client.get_node("gpu-01")
    settings = ExecutorSettings(jobs=SETTINGS, poll_s=0.02, capture_timeout_s=20)

    def reject_when_created() -> None:
        assert wait_until(lambda: kube_cluster.objects("pods", NS) != [], timeout_s=10)
        (pod,) = kube_cluster.objects("pods", NS)
        kube_cluster.api.store.mutate(PODS, NS, pod["metadata"]["name"], _out_of_gpus)

    thread = threading.Thread(target=reject_when_created, daemon=True)
    thread.start()
    with pytest.raises(KubeRefusedError, match="node gpu-01: capture Job") as info:
        capture_nodes(kube_client, [node], settings, run_id="c1")
    thread.join()
    assert info.value.exit_code == 4
    thread = threading.Thread(target=reject_when_created, daemon=True)
    for pod in kube_cluster.objects("pods", NS):
        kube_cluster.api.store.delete(PODS, NS, pod["metadata"]["name"])
    thread.start()
    refused: dict[NodeName, str] = {}
    assert capture_nodes(kube_client, [node], settings, run_id="c2", refused=refused) == {}
    thread.join()
    assert "OutOfamd.com/gpu" in refused[NodeName("gpu-01")]
