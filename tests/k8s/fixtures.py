"""pytest fixtures for the Kubernetes test double: a running `ClusterDouble` and a `KubeClient` on it.

Use from a test module with `pytest_plugins = ["tests.k8s.fixtures"]` (or list it in the root
conftest's `pytest_plugins`); import `ClusterDouble`, `FAST_RETRY` and `rbac_rules` from
`tests.k8s.cluster`:

    def test_x(kube_cluster, kube_client):
        kube_cluster.add_node("gpu-01", node_class="mi300x", gpus=8, env={"PATH": fake_tools_dir})
        kube_cluster.api.inject("patch", "nodes", 429, retry_after=1)
        kube_client.patch_node_labels("gpu-01", {"amd.com/gpu-mesh-validation": "passed"})
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.k8s.cluster import FAST_RETRY, ClusterDouble
from tests.k8s.controlplane import ensure_built
from tests.k8s.realcluster import RealCluster
from upgrade_gate.fleet.kube import KubeClient


@pytest.fixture
def kube_cluster(tmp_path: Path) -> Iterator[ClusterDouble]:
    """A started API server double with its controllers; stopped after the test."""
    cluster = ClusterDouble(tmp_path / "k8s")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def kube_client(kube_cluster: ClusterDouble) -> Iterator[KubeClient]:
    """A KubeClient (real `kubernetes` client over HTTP) on the double, with tiny retry delays."""
    client = KubeClient.from_url(kube_cluster.url, retry=FAST_RETRY)
    try:
        yield client
    finally:
        client.close()


# --------------------------------------------------------------------------- the real control plane


@pytest.fixture(scope="session")
def real_cluster_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler (+ node agent, MPI stand-in),
    started once per session; skips with the reason when the binaries are not built here."""
    reason = ensure_built()
    if reason is not None:
        if os.environ.get("UPGRADE_GATE_REQUIRE_REAL_K8S") == "1":  # CI built them: missing is a failure
            pytest.fail(reason)
        pytest.skip(reason)
    cluster = RealCluster(tmp_path_factory.mktemp("real-k8s"))
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def real_cluster(real_cluster_session: RealCluster) -> Iterator[RealCluster]:
    """The session's real cluster, emptied of the test's nodes, Jobs, MPIJobs and pods afterwards."""
    real_cluster_session.cp.check()
    try:
        yield real_cluster_session
    finally:
        real_cluster_session.reset()


@pytest.fixture
def real_client(real_cluster: RealCluster, tmp_path: Path) -> Iterator[KubeClient]:
    """A KubeClient on the real API server as the upgrade-gate service account (deploy/rbac.yaml)."""
    client = KubeClient.from_kubeconfig(str(real_cluster.kubeconfig(tmp_path / "sa.kubeconfig")), retry=FAST_RETRY)
    try:
        yield client
    finally:
        client.close()
