"""Issue 28, items 3 and 7: leftovers of a run that died are found by what upgrade-gate stamps, and
phase 5's MPIJob waits for its workers.

Through the API server double, whose MPI controller labels the launcher Job as mpi-operator v0.7.0
does (`app: <name>` only); the same on the real control plane: tests/test_fleet_window_field_real.py.
"""

from __future__ import annotations

import sys

import pytest

from tests.k8s.apiserver import wait_until
from tests.k8s.cluster import ClusterDouble
from upgrade_gate.fleet.errors import KubeWaitTimeoutError
from upgrade_gate.fleet.executor import stop_leftovers
from upgrade_gate.fleet.kube import KubeClient
from upgrade_gate.fleet.manifests import MPI_LAUNCHER_RETRIES, JobSettings, JobSpec, MpiJobSpec
from upgrade_gate.model import NodeName

pytest_plugins = ["tests.k8s.fixtures"]  # kube_cluster, kube_client

NS = "upgrade-gate"
SLEEP = (sys.executable, "-c", "import time; time.sleep(120)")


def _mpi(run_id: str, *nodes: str) -> MpiJobSpec:
    return MpiJobSpec(
        run_id=run_id,
        nodes=tuple(NodeName(n) for n in nodes),
        launcher_argv=SLEEP,
        image="rccl:x",
        gpus_per_node=8,
        worker_command=SLEEP,
    )


def _running_pods(cluster: ClusterDouble, prefix: str) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in cluster.objects("pods", NS)
        if p["metadata"]["name"].startswith(prefix) and p["status"].get("phase") in ("Pending", "Running")
    ]


def test_leftovers_mpijob_found_by_our_stamp_not_the_operators_labels(
    kube_cluster: ClusterDouble, kube_client: KubeClient
) -> None:
    """A phase 5 MPIJob left by a dead run (its launcher Job labelled `app: <name>` only, as the real
    operator does) is deleted and the rerun waits until its workers are gone; another window's MPIJob on
    other nodes is left alone."""
    for n in ("gpu-01", "gpu-02", "gpu-03", "gpu-04"):
        kube_cluster.add_node(n)
    mine, theirs = _mpi("dead", "gpu-01", "gpu-02"), _mpi("other", "gpu-03", "gpu-04")
    for spec in (mine, theirs):
        kube_client.create_mpijob(spec.manifest(), NS)
    assert wait_until(lambda: len(_running_pods(kube_cluster, mine.name + "-launcher")) == 1, timeout_s=20)
    (launcher,) = [
        j for j in kube_cluster.objects("jobs", NS, "batch") if j["metadata"]["name"] == f"{mine.name}-launcher"
    ]
    assert launcher["metadata"]["labels"] == {"app": mine.name}  # nothing of ours on it
    deleted = stop_leftovers(kube_client, NS, [NodeName("gpu-01"), NodeName("gpu-02")], poll_s=0.05, timeout_s=30)
    assert deleted == (mine.name,)
    assert _running_pods(kube_cluster, mine.name) == []  # returned only once its pods were gone
    assert [m["metadata"]["name"] for m in kube_cluster.objects("mpijobs", NS, "kubeflow.org")] == [theirs.name]
    assert _running_pods(kube_cluster, theirs.name + "-worker")


def test_leftovers_job_pods_still_there_after_the_wait_are_exit_4(
    kube_cluster: ClusterDouble, kube_client: KubeClient
) -> None:
    """A leftover whose pods outlive the wait is named (exit 4), not a rerun refused by its GPUs."""
    kube_cluster.add_node("gpu-01")
    spec = JobSpec(node=NodeName("gpu-01"), purpose="phase1", run_id="dead", argv=SLEEP, gpus=8,
                   settings=JobSettings(python=sys.executable), framed=False)  # fmt: skip
    kube_client.create_job(spec.manifest(), NS)
    assert wait_until(lambda: _running_pods(kube_cluster, spec.name), timeout_s=20)
    kube_cluster.api.inject("delete", "jobs", 500, times=1)  # the delete is retried by the client
    assert stop_leftovers(kube_client, NS, [NodeName("gpu-01")], poll_s=0.05, timeout_s=30) == (spec.name,)
    assert _running_pods(kube_cluster, spec.name) == []
    again = JobSpec(node=NodeName("gpu-01"), purpose="phase1", run_id="dead2", argv=SLEEP,
                    settings=JobSettings(python=sys.executable), framed=False)  # fmt: skip
    kube_client.create_job(again.manifest(), NS)
    assert wait_until(lambda: _running_pods(kube_cluster, "ug-phase1-gpu-01-dead2"), timeout_s=20)
    kube_cluster.api.inject("delete", "jobs", 404, times=1)  # the delete "misses": its pod stays
    with pytest.raises(KubeWaitTimeoutError, match="pods of an earlier run still on gpu-01") as info:
        stop_leftovers(kube_client, NS, [NodeName("gpu-01")], poll_s=0.05, timeout_s=0.5)
    assert info.value.exit_code == 4


def test_leftovers_mpijob_manifest_stamps_and_waits_for_workers() -> None:
    """Our labels and `upgrade-gate/nodes` on the MPIJob and both pod templates; the launcher is created once
    the workers are Ready and may start again (the sshd race), never `backoffLimit: 0`."""
    m = _mpi("r1", "gpu-01", "gpu-02").manifest()
    assert m["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert m["spec"]["runPolicy"]["backoffLimit"] == MPI_LAUNCHER_RETRIES > 0
    for meta in (
        m["metadata"],
        m["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"],
        m["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"],
    ):
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "upgrade-gate"
        assert meta["annotations"] == {"upgrade-gate/nodes": "gpu-01,gpu-02"}
