"""KubeClient through the real `kubernetes` client over HTTP against the API server double."""

from __future__ import annotations

import json
import socket
import sys
import time
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.k8s.apiserver import Rule, wait_until
from tests.k8s.cluster import FAST_RETRY, ClusterDouble
from upgrade_gate.errors import ExitCode
from upgrade_gate.fleet import errors as fe
from upgrade_gate.fleet.kube import KubeClient, RetryPolicy
from upgrade_gate.fleet.objects import JobPhase, Taint
from upgrade_gate.model import replace

pytest_plugins = ["tests.k8s.fixtures"]  # kube_cluster, kube_client

NS = "upgrade-gate"
STRATEGIC = "application/strategic-merge-patch+json"
CANARY = Taint(key="upgrade-gate/canary", value="chg-1", effect="NoSchedule")


def _job(name: str, argv: list[str], *, node: str = "gpu-01", deadline: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "backoffLimit": 0,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "nodeName": node,
                "containers": [{"name": "c", "image": "img", "command": argv}],
            }
        },
    }
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": {"t": "x"}}, "spec": spec}


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _rest(client: KubeClient, method: str, path: str, **kw: Any) -> dict[str, Any]:
    """One raw call through the client's ApiClient, for API semantics KubeClient does not expose."""
    return dict(json.loads(client._raw(method, path, **kw)))


def _recording_client(cluster: ClusterDouble, **policy: float) -> tuple[KubeClient, list[float]]:
    delays: list[float] = []

    def sleep(seconds: float) -> None:
        delays.append(seconds)
        time.sleep(min(seconds, 0.01))

    retry = replace(FAST_RETRY, **policy)  # type: ignore[arg-type]
    return KubeClient.from_url(cluster.url, retry=retry, sleep=sleep), delays


# --------------------------------------------------------------------------- nodes


def test_kube_list_nodes_label_and_field_selectors(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.add_node("gpu-01", node_class="mi300x")
    kube_cluster.add_node("gpu-02", node_class="mi300x", amd_nic=False, unschedulable=True)
    kube_cluster.add_node("cpu-01", amd_gpu=False, amd_nic=False)
    names = lambda nodes: [n.name for n in nodes]  # noqa: E731
    assert names(kube_client.list_nodes()) == ["cpu-01", "gpu-01", "gpu-02"]
    assert names(kube_client.list_nodes("feature.node.kubernetes.io/amd-gpu=true")) == ["gpu-01", "gpu-02"]
    assert names(kube_client.list_nodes("feature.node.kubernetes.io/amd-nic!=true")) == ["cpu-01", "gpu-02"]
    assert names(kube_client.list_nodes("upgrade-gate/node-class in (mi300x,mi250),!amd.com/nic-health")) == [
        "gpu-01",
        "gpu-02",
    ]
    assert names(kube_client.list_nodes(field_selector="spec.unschedulable=true")) == ["gpu-02"]
    assert names(kube_client.list_nodes(field_selector="metadata.name=gpu-01")) == ["gpu-01"]
    node = kube_client.get_node("gpu-01")
    assert node.gpu_count() == 8 and node.ready is True and node.uid and node.resource_version


def test_kube_list_nodes_follows_pagination(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    for i in range(7):
        kube_cluster.add_node(f"gpu-{i:02d}")
    raw = _rest(kube_client, "GET", "/api/v1/nodes", query={"limit": 3})
    assert len(raw["items"]) == 3 and raw["metadata"]["continue"] and raw["metadata"]["remainingItemCount"] == 4
    assert [n.name for n in kube_client.list_nodes(page_size=3)] == [f"gpu-{i:02d}" for i in range(7)]
    assert len(kube_cluster.api.seen("list", "nodes")) == 1 + 3
    kube_cluster.api.slow("list", "nodes", 0)  # the first page passes...
    kube_cluster.api.inject("list", "nodes", 410, reason="Expired", message="continue parameter is too old")
    assert len(kube_client.list_nodes(page_size=3)) == 7  # ...the expired second one restarts the list once


def test_kube_bad_selector_is_invalid(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    with pytest.raises(fe.KubeInvalidError, match="HTTP 400"):
        kube_client.list_nodes("a in ()")
    with pytest.raises(fe.KubeInvalidError, match="not a known field selector"):
        kube_client.list_nodes(field_selector="spec.providerID=x")


def test_kube_patch_labels_and_annotations_merge_patch(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.add_node("gpu-01", labels={"amd.com/nic-health": "failed"})
    node = kube_client.patch_node_metadata(
        "gpu-01",
        labels={"amd.com/gpu-mesh-validation": "failed", "amd.com/nic-health": None},
        annotations={"amd.com/gpu-mesh-validation-failure-reason": "avg busbw 88.1 GB/s < 100 GB/s"},
    )
    assert node.labels["amd.com/gpu-mesh-validation"] == "failed"
    assert "amd.com/nic-health" not in node.labels
    assert node.annotations["amd.com/gpu-mesh-validation-failure-reason"].startswith("avg busbw")
    assert kube_cluster.api.seen("patch", "nodes")[-1].content_type == "application/merge-patch+json"
    assert kube_cluster.node("gpu-01")["metadata"]["labels"]["feature.node.kubernetes.io/amd-gpu"] == "true"


def test_kube_patch_rejects_bad_label_value_before_the_api(
    kube_cluster: ClusterDouble, kube_client: KubeClient
) -> None:
    kube_cluster.add_node("gpu-01")
    with pytest.raises(fe.InvalidNameError, match=r"amd\.com/gpu-mesh-validation"):
        kube_client.patch_node_labels("gpu-01", {"amd.com/gpu-mesh-validation": "not ok!"})
    with pytest.raises(fe.InvalidNameError, match="'GPU_01'"):
        kube_client.get_node("GPU_01")
    assert kube_cluster.api.seen("patch") == [] and kube_cluster.api.seen("get", "nodes") == []


def test_kube_strategic_merge_patch_through_the_client(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.add_node("gpu-01", taints=[{"key": "a", "effect": "NoSchedule"}])
    body = {"metadata": {"labels": {"x": "1"}}, "spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}}
    node = _rest(kube_client, "PATCH", "/api/v1/nodes/gpu-01", body=body, content_type=STRATEGIC)
    assert kube_cluster.api.seen("patch", "nodes")[-1].content_type == STRATEGIC
    assert node["metadata"]["labels"]["x"] == "1"
    assert [t["key"] for t in node["spec"]["taints"]] == ["b"]  # taints are atomic: replaced, not merged
    ops = [{"op": "add", "path": "/metadata/labels/y", "value": "2"}]
    _rest(kube_client, "PATCH", "/api/v1/nodes/gpu-01", body=ops, content_type="application/json-patch+json")
    assert kube_cluster.node("gpu-01")["metadata"]["labels"]["y"] == "2"
    with pytest.raises(ApiException) as info:
        _rest(kube_client, "PATCH", "/api/v1/nodes/gpu-01", body={}, content_type="application/apply-patch+yaml")
    assert info.value.status == 415


def test_kube_replace_with_stale_resource_version_conflicts(
    kube_cluster: ClusterDouble, kube_client: KubeClient
) -> None:
    kube_cluster.add_node("gpu-01")
    stale = _rest(kube_client, "GET", "/api/v1/nodes/gpu-01")
    kube_client.patch_node_labels("gpu-01", {"someone": "else"})
    stale["metadata"]["labels"]["mine"] = "1"
    with pytest.raises(ApiException) as info:
        _rest(kube_client, "PUT", "/api/v1/nodes/gpu-01", body=stale)
    assert info.value.status == 409 and '"reason": "Conflict"' in info.value.body
    assert "the object has been modified" in info.value.body
    fresh = _rest(kube_client, "GET", "/api/v1/nodes/gpu-01")
    fresh["metadata"]["labels"]["mine"] = "1"
    replaced = _rest(kube_client, "PUT", "/api/v1/nodes/gpu-01", body=fresh)
    assert replaced["metadata"]["labels"]["mine"] == "1"
    assert int(replaced["metadata"]["resourceVersion"]) > int(fresh["metadata"]["resourceVersion"])


def test_kube_taints_read_modify_write_keeps_others_and_is_idempotent(
    kube_cluster: ClusterDouble, kube_client: KubeClient
) -> None:
    other = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2025-06-01T10:00:00Z"}
    kube_cluster.add_node("gpu-01", taints=[other])
    node = kube_client.add_taint("gpu-01", CANARY)
    assert node.taints[-1] == CANARY
    assert kube_cluster.node("gpu-01")["spec"]["taints"][0] == other  # timeAdded survives byte for byte
    patches = len(kube_cluster.api.seen("patch", "nodes"))
    kube_client.add_taint("gpu-01", CANARY)
    assert len(kube_cluster.api.seen("patch", "nodes")) == patches  # already there: no write
    node = kube_client.add_taint("gpu-01", Taint(key=CANARY.key, value="chg-2", effect="NoSchedule"))
    assert [t.value for t in node.taints if t.key == CANARY.key] == ["chg-2"]
    node = kube_client.remove_taint("gpu-01", CANARY.key)
    assert [t.key for t in node.taints] == ["node.kubernetes.io/unreachable"]


def test_kube_taint_write_with_stale_resource_version_is_retried(
    kube_cluster: ClusterDouble, kube_client: KubeClient
) -> None:
    kube_cluster.add_node("gpu-01")
    rv = kube_client.get_node("gpu-01").resource_version
    kube_client.patch_node_labels("gpu-01", {"bump": "1"})
    with pytest.raises(ApiException) as info:  # the double enforces the precondition for real
        body = {"metadata": {"resourceVersion": rv}, "spec": {"taints": []}}
        _rest(kube_client, "PATCH", "/api/v1/nodes/gpu-01", body=body, content_type="application/merge-patch+json")
    assert info.value.status == 409
    kube_cluster.api.inject("patch", "nodes", 409, reason="Conflict", times=2)
    reads = len(kube_cluster.api.seen("get", "nodes"))
    node = kube_client.add_taint("gpu-01", CANARY)
    assert node.taints == (CANARY,)
    assert len(kube_cluster.api.seen("get", "nodes")) - reads == 3  # re-read before each of the three writes


def test_kube_taint_conflict_exhausted_raises_conflict(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.add_node("gpu-01")
    kube_cluster.api.inject("patch", "nodes", 409, reason="Conflict", times=FAST_RETRY.conflict_attempts)
    with pytest.raises(fe.KubeConflictError) as info:
        kube_client.add_taint("gpu-01", CANARY)
    assert info.value.exit_code == ExitCode.ENVIRONMENT and fe.is_temporary(info.value)


def test_kube_cordon_uncordon(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.add_node("gpu-01")
    assert kube_client.cordon("gpu-01").unschedulable is True
    assert kube_client.uncordon("gpu-01").unschedulable is False
    assert "unschedulable" not in kube_cluster.node("gpu-01")["spec"]


# --------------------------------------------------------------------------- faults


def test_kube_forbidden_names_verb_and_resource_exit_4(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.add_node("gpu-01")
    kube_cluster.api.authorize([Rule(frozenset({""}), frozenset({"nodes"}), frozenset({"get", "list"}))])
    assert kube_client.get_node("gpu-01").name == "gpu-01"
    with pytest.raises(fe.KubeForbiddenError) as info:
        kube_client.cordon("gpu-01")
    err = info.value
    assert err.exit_code == ExitCode.ENVIRONMENT == 4
    assert (err.verb, err.resource, err.status) == ("patch", "nodes", 403)
    assert 'refuses to patch nodes "gpu-01"' in str(err)
    assert 'cannot patch resource "nodes"' in str(err)
    assert isinstance(err.__cause__, ApiException)
    assert len(kube_cluster.api.seen("patch", "nodes")) == 1  # permanent: not retried


def test_kube_not_found(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    with pytest.raises(fe.KubeNotFoundError, match='get nodes "gpu-99": not found') as info:
        kube_client.get_node("gpu-99")
    assert info.value.exit_code == ExitCode.BAD_INPUT


def test_kube_throttled_is_retried_honouring_retry_after(kube_cluster: ClusterDouble) -> None:
    kube_cluster.add_node("gpu-01")
    client, delays = _recording_client(kube_cluster)
    kube_cluster.api.inject("list", "nodes", 429, retry_after=2, times=2)
    assert [n.name for n in client.list_nodes()] == ["gpu-01"]
    assert delays == [2.0, 2.0]  # the server's Retry-After, not the 10 ms back-off
    assert [r.status for r in kube_cluster.api.seen("list", "nodes")] == [429, 429, 200]


def test_kube_throttled_beyond_the_time_budget_gives_up(kube_cluster: ClusterDouble) -> None:
    kube_cluster.add_node("gpu-01")
    client, delays = _recording_client(kube_cluster, max_total_s=1.0)
    kube_cluster.api.inject("get", "nodes", 429, retry_after=30)
    with pytest.raises(fe.KubeThrottledError) as info:
        client.get_node("gpu-01")
    assert delays == [] and info.value.retry_after_s == 30.0


def test_kube_server_errors_retried_then_raised(kube_cluster: ClusterDouble) -> None:
    kube_cluster.add_node("gpu-01")
    client, delays = _recording_client(kube_cluster)
    kube_cluster.api.inject("get", "nodes", 500, times=2)
    assert client.get_node("gpu-01").name == "gpu-01"
    assert len(delays) == 2 and all(0 < d <= FAST_RETRY.max_delay_s * 1.2 for d in delays)
    kube_cluster.api.inject("get", "nodes", 503, times=FAST_RETRY.max_attempts)
    with pytest.raises(fe.KubeServerError, match="HTTP 503") as info:
        client.get_node("gpu-01")
    assert info.value.exit_code == ExitCode.ENVIRONMENT
    assert len(kube_cluster.api.seen("get", "nodes")) == 3 + FAST_RETRY.max_attempts


def test_kube_backoff_grows_and_is_capped() -> None:
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=4.0, jitter=0.0)
    assert [policy.backoff(n, 0.5) for n in range(1, 6)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    jittered = RetryPolicy(base_delay_s=1.0, jitter=0.2)
    assert jittered.backoff(1, 0.0) == pytest.approx(0.8) and jittered.backoff(1, 0.999999) == pytest.approx(1.2)


def test_kube_slow_answer_times_out_and_is_retried(kube_cluster: ClusterDouble) -> None:
    kube_cluster.add_node("gpu-01")
    client, _ = _recording_client(kube_cluster, request_timeout_s=0.2, max_attempts=2)
    kube_cluster.api.slow("get", "nodes", 1.0)
    assert client.get_node("gpu-01").name == "gpu-01"
    kube_cluster.api.slow("get", "nodes", 1.0, times=2)
    with pytest.raises(fe.KubeRequestTimeoutError, match="did not answer in time") as info:
        client.get_node("gpu-01")
    assert info.value.exit_code == ExitCode.ENVIRONMENT


def test_kube_unreachable_api(kube_cluster: ClusterDouble) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = KubeClient.from_url(f"http://127.0.0.1:{port}", retry=FAST_RETRY)
    with pytest.raises(fe.KubeConnectionError, match="Kubernetes API unreachable") as info:
        client.list_nodes()
    assert info.value.exit_code == ExitCode.ENVIRONMENT


def test_kube_bad_kubeconfig_is_environment_error(tmp_path: Any) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("not: [a kubeconfig", encoding="utf-8")
    with pytest.raises(fe.KubeConnectionError, match="kubeconfig"):
        KubeClient.from_kubeconfig(str(path))


def test_kube_bearer_token_is_sent(kube_cluster: ClusterDouble) -> None:
    client = KubeClient.from_url(kube_cluster.url, token="s3cret", retry=FAST_RETRY)
    client.list_nodes()
    assert kube_cluster.api.seen("list", "nodes")[-1].authorization == "Bearer s3cret"


def test_kube_kubeconfig_reaches_the_double(kube_cluster: ClusterDouble, tmp_path: Any) -> None:
    kube_cluster.add_node("gpu-01")
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
        f"clusters: [{{name: c, cluster: {{server: '{kube_cluster.url}'}}}}]\n"
        "users: [{name: u, user: {token: abc}}]\n"
        "contexts: [{name: t, context: {cluster: c, user: u}}]\n",
        encoding="utf-8",
    )
    with KubeClient.from_kubeconfig(str(path), retry=FAST_RETRY) as client:
        assert [n.name for n in client.list_nodes()] == ["gpu-01"]
    assert kube_cluster.api.seen("list", "nodes")[-1].authorization == "Bearer abc"


# --------------------------------------------------------------------------- jobs and pods


def test_kube_job_runs_on_simulated_node_and_logs_come_back(
    kube_cluster: ClusterDouble, kube_client: KubeClient
) -> None:
    kube_cluster.add_node("gpu-01", env={"GREETING": "hi from gpu-01"})
    job = _job("ug-echo", _py("import os, sys; print(os.environ['GREETING']); print('warn', file=sys.stderr)"))
    created = kube_client.create_job(job, NS)
    assert created.uid and created.phase is JobPhase.ACTIVE
    state = kube_client.wait_job("ug-echo", NS, timeout_s=20, poll_s=0.02)
    assert state.phase is JobPhase.SUCCEEDED and state.succeeded == 1
    assert [c.type for c in state.conditions] == ["SuccessCriteriaMet", "Complete"]
    assert state.labels == {"t": "x"}
    assert sorted(kube_client.job_logs("ug-echo", NS).splitlines()) == ["hi from gpu-01", "warn"]
    assert kube_client.job_logs("ug-echo", NS, tail_lines=1) in ("hi from gpu-01\n", "warn\n")
    (pod,) = kube_client.job_pods("ug-echo", NS)
    assert (pod.node, pod.phase, pod.exit_code, pod.reason) == ("gpu-01", "Succeeded", 0, "Completed")


def test_kube_failed_job_reports_condition_and_exit_code(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.add_node("gpu-01")
    kube_client.create_job(_job("ug-fail", _py("import sys; print('bad'); sys.exit(3)")), NS)
    state = kube_client.wait_job("ug-fail", NS, timeout_s=20, poll_s=0.02)
    assert (state.phase, state.reason, state.failed) == (JobPhase.FAILED, "BackoffLimitExceeded", 1)
    assert [c.type for c in state.conditions] == ["FailureTarget", "Failed"]
    assert kube_client.job_pods("ug-fail", NS)[0].exit_code == 3


def test_kube_job_deadline_exceeded(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.add_node("gpu-01")
    kube_client.create_job(_job("ug-hang", _py("import time; time.sleep(60)"), deadline=1), NS)
    state = kube_client.wait_job("ug-hang", NS, timeout_s=20, poll_s=0.05)
    assert (state.phase, state.reason) == (JobPhase.FAILED, "DeadlineExceeded")


def test_kube_wait_job_times_out(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.add_node("gpu-01")
    kube_client.create_job(_job("ug-slow", _py("import time; time.sleep(60)")), NS)
    with pytest.raises(fe.KubeWaitTimeoutError, match='wait jobs "ug-slow"') as info:
        kube_client.wait_job("ug-slow", NS, timeout_s=0.2, poll_s=0.02)
    assert not fe.is_temporary(info.value)
    assert kube_client.delete_job("ug-slow", NS) is True
    assert wait_until(lambda: kube_cluster.objects("pods", NS) == [])


def test_kube_job_name_and_schema_checked_by_server_and_client(
    kube_cluster: ClusterDouble, kube_client: KubeClient
) -> None:
    with pytest.raises(fe.KubeInvalidError, match="must be no more than 63 characters"):
        kube_client.create_job(_job("ug-" + "x" * 70, ["true"]), NS)
    bad = _job("ug-typo", ["true"])
    bad["spec"]["template"]["spec"]["containers"][0]["comand"] = ["true"]
    with pytest.raises(fe.KubeInvalidError, match="batch/v1 schema"):
        kube_client.create_job(bad, NS)
    always = _job("ug-always", ["true"])
    always["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    with pytest.raises(fe.KubeInvalidError, match='Unsupported value: "Always"'):
        kube_client.create_job(always, NS)


def test_kube_create_job_already_exists(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.add_node("gpu-01")
    kube_client.create_job(_job("ug-once", ["true"]), NS)
    with pytest.raises(fe.KubeAlreadyExistsError, match='create jobs "ug-once"'):
        kube_client.create_job(_job("ug-once", ["true"]), NS)


def test_kube_create_retried_after_lost_answer_reads_back_own_job(
    kube_cluster: ClusterDouble, kube_client: KubeClient
) -> None:
    kube_cluster.add_node("gpu-01")
    kube_client.create_job(_job("ug-dup", ["true"]), NS)  # as if a first attempt landed...
    kube_cluster.api.inject("create", "jobs", 503)  # ...and its answer was lost as a 503
    state = kube_client.create_job(_job("ug-dup", ["true"]), NS)
    assert state.name == "ug-dup"


def test_kube_delete_job_default_orphans_pods_background_removes_them(
    kube_cluster: ClusterDouble, kube_client: KubeClient
) -> None:
    kube_cluster.add_node("gpu-01")
    for name in ("ug-a", "ug-b"):
        kube_client.create_job(_job(name, ["true"]), NS)
        kube_client.wait_job(name, NS, timeout_s=20, poll_s=0.02)
    _rest(kube_client, "DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/ug-a")  # API default: orphan
    orphans = [p for p in kube_cluster.objects("pods", NS) if p["metadata"]["labels"]["job-name"] == "ug-a"]
    assert len(orphans) == 1 and orphans[0]["metadata"]["ownerReferences"] == []
    assert kube_client.delete_job("ug-b", NS) is True
    assert [p["metadata"]["labels"]["job-name"] for p in kube_cluster.objects("pods", NS)] == ["ug-a"]
    assert kube_client.delete_job("ug-b", NS) is False


def test_kube_prune_jobs_keeps_newest_finished(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.add_node("gpu-01")
    for i in range(4):
        kube_client.create_job(_job(f"ug-p{i}", ["true"]), NS)
        kube_client.wait_job(f"ug-p{i}", NS, timeout_s=20, poll_s=0.02)
    kube_client.create_job(_job("ug-running", _py("import time; time.sleep(60)")), NS)
    deleted = kube_client.prune_jobs(NS, "t=x", keep=2)
    assert len(deleted) == 2
    left = [j.name for j in kube_client.list_jobs(NS, "t=x")]
    assert "ug-running" in left and len(left) == 3
    kube_client.delete_job("ug-running", NS)


def test_kube_job_logs_without_pod_is_not_found(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_client.create_job(_job("ug-nowhere", ["true"], node="gpu-77"), NS)
    with pytest.raises(fe.KubeNotFoundError):
        kube_client.job_logs("ug-nowhere-missing", NS)


def test_kube_get_configmap(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.set_configmap("cluster-validation-config", NS, {"PHASE2_BW_THRESHOLD": "100"})
    assert kube_client.get_configmap("cluster-validation-config", NS) == {"PHASE2_BW_THRESHOLD": "100"}
    with pytest.raises(fe.KubeNotFoundError, match="configmaps"):
        kube_client.get_configmap("absent", NS)


# --------------------------------------------------------------------------- MPIJob


def _mpijob(name: str, launcher: list[str], nodes: list[str]) -> dict[str, Any]:
    def template(containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
        return {"spec": {"containers": containers, **spec}}

    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": nodes}]}]
            }
        }
    }
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": 8,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": template([{"name": "l", "image": "i", "command": launcher}])},
                "Worker": {
                    "replicas": len(nodes),
                    "template": template(
                        [{"name": "w", "image": "i", "resources": {"limits": {"amd.com/gpu": "8"}}}], affinity=affinity
                    ),
                },
            },
        },
    }


def test_kube_mpijob_runs_launcher_and_reports_success(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    for n in ("gpu-01", "gpu-02", "gpu-03"):
        kube_cluster.add_node(n)
    launcher = _py("import os; print(open(os.environ['OMPI_MCA_orte_default_hostfile']).read(), end='')")
    created = kube_client.create_mpijob(_mpijob("ug-p5", launcher, ["gpu-01", "gpu-02"]), NS)
    assert created.uid and created.phase is JobPhase.ACTIVE
    state = kube_client.wait_mpijob("ug-p5", NS, timeout_s=20, poll_s=0.02)
    assert (state.phase, state.reason) == (JobPhase.SUCCEEDED, "MPIJobSucceeded")
    assert state.conditions[0].type == "Created"
    hostfile = kube_client.mpijob_logs("ug-p5", NS).splitlines()
    assert hostfile == [
        "ug-p5-worker-0.ug-p5.upgrade-gate.svc slots=8",
        "ug-p5-worker-1.ug-p5.upgrade-gate.svc slots=8",
    ]
    workers = {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in kube_cluster.objects("pods", NS)
        if "worker" in p["metadata"]["name"]
    }
    assert sorted(workers.values()) == ["gpu-01", "gpu-02"]  # one per node, only the named nodes
    assert kube_client.delete_mpijob("ug-p5", NS) is True
    assert kube_cluster.objects("pods", NS) == [] and kube_cluster.objects("jobs", NS, "batch") == []
    assert kube_client.delete_mpijob("ug-p5", NS) is False


def test_kube_mpijob_failed_launcher(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    for n in ("gpu-01", "gpu-02"):
        kube_cluster.add_node(n)
    kube_client.create_mpijob(_mpijob("ug-p5f", _py("raise SystemExit(1)"), ["gpu-01", "gpu-02"]), NS)
    state = kube_client.wait_mpijob("ug-p5f", NS, timeout_s=20, poll_s=0.02)
    assert state.phase is JobPhase.FAILED and "has failed" in (state.message or "")


def test_kube_mpijob_forbidden_create(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.api.inject("create", "mpijobs", 403)
    with pytest.raises(fe.KubeForbiddenError, match='refuses to create mpijobs "ug-x" in namespace "upgrade-gate"'):
        kube_client.create_mpijob(_mpijob("ug-x", ["true"], ["gpu-01"]), NS)
