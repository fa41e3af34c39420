"""Issue 26, every reader has a cap: Kubernetes API answers and pod logs are read to a cap, over it an
infrastructure error (exit 4) naming the request, never a cut answer read as if whole (docs/limits.md).

The API server double stands in for the kubelet's log endpoint (the real control plane in the tests has no
kubelet) and for an answer larger than an honest server would send.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.k8s.apiserver import wait_until
from tests.k8s.cluster import ClusterDouble
from upgrade_gate.errors import ExitCode
from upgrade_gate.fleet import errors as fe
from upgrade_gate.fleet.kube import KubeClient, api

pytest_plugins = ["tests.k8s.fixtures"]  # kube_cluster, kube_client

NS = "default"


def _pod_with_log(cluster: ClusterDouble, client: KubeClient, name: str, text: str) -> None:
    """A pod that really prints `text` (run by the kubelet double) and has finished."""
    if not any(n.name == "gpu-01" for n in client.list_nodes()):
        cluster.add_node("gpu-01")
    code = f"import sys; sys.stdout.write({text!r})"
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "restartPolicy": "Never",
            "nodeName": "gpu-01",
            "containers": [{"name": "c", "image": "python", "command": [sys.executable, "-c", code]}],
        },
    }
    client._raw("POST", f"/api/v1/namespaces/{NS}/pods", body=body)

    def done() -> bool:
        pod = json.loads(client._raw("GET", f"/api/v1/namespaces/{NS}/pods/{name}"))
        return pod.get("status", {}).get("phase") == "Succeeded"

    assert wait_until(done, timeout_s=60)


def test_a_pod_log_over_its_cap_is_an_infrastructure_error_naming_the_pod(
    kube_cluster: ClusterDouble, kube_client: KubeClient
) -> None:
    _pod_with_log(kube_cluster, kube_client, "big", "x" * 5000)
    with pytest.raises(fe.KubeAnswerTooLargeError) as err:
        kube_client.pod_logs("big", NS, limit_bytes=1000)
    assert err.value.exit_code == ExitCode.ENVIRONMENT
    assert 'get pods/log "big"' in str(err.value)
    # The kubelet is asked for one byte past the cap, so the cap is enforced at the source too.
    asked = [r for r in kube_cluster.api.seen("get", "pods/log")]
    assert asked and all(r.query.get("limitBytes") == "1001" for r in asked)


def test_a_pod_log_of_exactly_its_cap_reads_whole(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    _pod_with_log(kube_cluster, kube_client, "exact", "y" * 1000)
    assert kube_client.pod_logs("exact", NS, limit_bytes=1000) == "y" * 1000


def test_a_pod_log_never_asks_past_the_frame_cap(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    _pod_with_log(kube_cluster, kube_client, "small", "ok\n")
    assert kube_client.pod_logs("small", NS, limit_bytes=10 * api.MAX_LOG_BYTES) == "ok\n"
    asked = kube_cluster.api.seen("get", "pods/log")
    assert asked[-1].query.get("limitBytes") == str(api.MAX_LOG_BYTES + 1)


def test_an_api_answer_over_the_cap_is_refused_once_not_retried(
    kube_cluster: ClusterDouble, kube_client: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube_cluster.add_node("gpu-01", labels={f"example.com/l{i}": "v" * 60 for i in range(60)})
    before = len(kube_cluster.api.seen("list", "nodes"))
    monkeypatch.setattr(api, "MAX_ANSWER_BYTES", 2000)
    with pytest.raises(fe.KubeAnswerTooLargeError, match="list nodes: the answer is over the 0 MiB") as err:
        kube_client.list_nodes()
    assert err.value.exit_code == ExitCode.ENVIRONMENT
    assert len(kube_cluster.api.seen("list", "nodes")) == before + 1  # permanent: no retry
    monkeypatch.setattr(api, "MAX_ANSWER_BYTES", 64 * 1024 * 1024)
    assert [n.name for n in kube_client.list_nodes()] == ["gpu-01"]
