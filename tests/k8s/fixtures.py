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

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.k8s.cluster import FAST_RETRY, ClusterDouble
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
