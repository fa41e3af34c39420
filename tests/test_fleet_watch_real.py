"""Issue 14: Job waits watch instead of polling, on the real control plane, as the upgrade-gate service account.

The API server's audit log says what the client did: one `watch pods` per wait and a handful of reads,
where a poll every 0.1 s would have read the Job dozens of times. A Job that does not finish by the
deadline is a timeout, never a pass; a failed pod is not settled early (the Job controller's own
Failed condition and its reason are waited for); the MPIJob wait watches the MPIJob.
"""

from __future__ import annotations

import sys

import pytest

from tests.k8s.realcluster import NS, RealCluster
from upgrade_gate.fleet.errors import KubeWaitTimeoutError
from upgrade_gate.fleet.jobs import RunStatus, run_job, run_mpijob, run_on_nodes
from upgrade_gate.fleet.kube import KubeClient
from upgrade_gate.fleet.manifests import JobSettings, JobSpec, MpiJobSpec
from upgrade_gate.fleet.objects import JobPhase
from upgrade_gate.model import NodeName

pytest_plugins = ["tests.k8s.fixtures"]  # real_cluster, real_client

SETTINGS = JobSettings(python=sys.executable)
SA_USER = "system:serviceaccount:upgrade-gate:upgrade-gate"


def _spec(run_id: str, code: str) -> JobSpec:
    argv = (sys.executable, "-c", code)
    return JobSpec(node=NodeName("gpu-01"), purpose="cmd", run_id=run_id, argv=argv, settings=SETTINGS)


def _requests(cluster: RealCluster, verb: str, resource: str, name: str = "") -> list[dict[str, object]]:
    out = []
    for event in cluster.cp.audit(SA_USER):
        ref = event.get("objectRef") or {}
        same = event["verb"] == verb and ref.get("resource") == resource and not ref.get("subresource")
        if same and (not name or ref.get("name") == name or name in str(event.get("requestURI", ""))):
            out.append(event)
    return out


@pytest.fixture
def node(real_cluster: RealCluster) -> None:
    real_cluster.add_node("gpu-01")
    real_cluster.wait_nodes_settled(["gpu-01"])


def test_real_job_wait_watches_the_pods_instead_of_polling(
    real_cluster: RealCluster, real_client: KubeClient, node: None
) -> None:
    spec = _spec("w1", "import time; time.sleep(3); print('done')")
    res = run_job(real_client, spec, timeout_s=120, poll_s=0.1)  # polling at 0.1 s would read ~30 times
    assert res.status is RunStatus.SUCCEEDED, res
    watches = real_cluster.wait_for(
        "the watch in the audit log", lambda: _requests(real_cluster, "watch", "pods", f"job-name%3D{spec.name}")
    )
    assert all("resourceVersion=" in str(w["requestURI"]) for w in watches)
    assert len(_requests(real_cluster, "get", "jobs", spec.name)) <= 4, "the wait read the Job as if polling"
    assert real_client.watch_refused == {}


def test_real_job_result_takes_one_log_read_and_no_extra_pod_list(
    real_cluster: RealCluster, real_client: KubeClient, node: None
) -> None:
    """Issue 14: the log is read once (beside the read that confirms the pod's end, or after it) and the
    pods are listed only by the wait's reads; the result is the pod's output, exit code included."""
    spec = _spec("w7", "import sys, time; time.sleep(1); print('frame me'); sys.exit(0)")
    res = run_job(real_client, spec, timeout_s=120)
    assert res.status is RunStatus.SUCCEEDED and res.payload == b"frame me\n" and res.exit_code == 0, res
    logs = [
        e
        for e in real_cluster.cp.audit(SA_USER)
        if e["verb"] == "get" and (e.get("objectRef") or {}).get("subresource") == "log" and spec.name in str(e)
    ]
    assert len(logs) == 1, logs
    lists = [e for e in _requests(real_cluster, "list", "pods") if f"job-name%3D{spec.name}" in str(e["requestURI"])]
    assert len(lists) <= 2, lists  # the read before the watch and the one that confirmed the end (no third)
    assert len(_requests(real_cluster, "get", "jobs", spec.name)) <= 2


def test_real_job_wait_settles_on_the_pod_or_the_job_condition(real_client: KubeClient, node: None) -> None:
    spec = _spec("w2", "print('ok')")
    real_client.create_job(spec.manifest(), NS)
    state = real_client.wait_job(spec.name, NS, timeout_s=120, settle_on_pod=True)
    assert state.phase is JobPhase.SUCCEEDED
    # either the pod settled it (the Job controller had not written Complete yet) or Complete was there
    assert state.settled_by is not None or any(c.type == "Complete" and c.status == "True" for c in state.conditions)
    later = real_client.wait_job(spec.name, NS, timeout_s=120)  # without settle_on_pod: the Job's own condition
    assert later.phase is JobPhase.SUCCEEDED and later.settled_by is None and later.completion_time


def test_real_failed_pod_waits_for_the_jobs_own_failed_condition(real_client: KubeClient, node: None) -> None:
    spec = _spec("w3", "import sys; sys.exit(3)")
    real_client.create_job(spec.manifest(), NS)
    state = real_client.wait_job(spec.name, NS, timeout_s=120, poll_s=0.1, settle_on_pod=True)
    assert (state.phase, state.reason, state.settled_by) == (JobPhase.FAILED, "BackoffLimitExceeded", None)


def test_real_job_not_finished_by_the_deadline_is_a_timeout(real_client: KubeClient, node: None) -> None:
    """Fail closed: the watch ends (its timeout) without a final state; the wait raises, run_job says
    timed-out and deletes the Job."""
    spec = _spec("w4", "import time; time.sleep(600)")
    real_client.create_job(spec.manifest(), NS)
    with pytest.raises(KubeWaitTimeoutError, match="not finished after 2s"):
        real_client.wait_job(spec.name, NS, timeout_s=2, settle_on_pod=True)
    real_client.delete_job(spec.name, NS)
    res = run_job(real_client, _spec("w5", "import time; time.sleep(600)"), timeout_s=2)
    assert res.status is RunStatus.TIMED_OUT and res.payload is None, res
    assert all(j.name != "ug-cmd-gpu-01-w5" for j in real_client.list_jobs(NS))


def test_real_mpijob_wait_watches_the_mpijob(real_cluster: RealCluster, real_client: KubeClient) -> None:
    for n in ("gpu-01", "gpu-02"):
        real_cluster.add_node(n)
    real_cluster.wait_nodes_settled(["gpu-01", "gpu-02"])
    spec = MpiJobSpec(run_id="w6", nodes=(NodeName("gpu-01"), NodeName("gpu-02")), launcher_argv=("true",),
                      image="i", gpus_per_node=8, settings=SETTINGS)  # fmt: skip
    res = run_mpijob(real_client, spec, timeout_s=90, poll_s=0.1)
    assert res.status is RunStatus.SUCCEEDED, res
    assert real_cluster.wait_for("the watch", lambda: _requests(real_cluster, "watch", "mpijobs"))


def test_real_run_on_nodes_prunes_jobs_settled_by_their_pods(
    real_cluster: RealCluster, real_client: KubeClient
) -> None:
    """Jobs settled by their pod (before the Job controller wrote Complete) still count as finished when
    the run prunes. Pruning keeps the newest N per node and kind (issue 28), so keep_finished=0 deletes
    all three of the run's Jobs, one a node: none was left for want of a Complete condition."""
    for n in ("gpu-01", "gpu-02", "gpu-03"):
        real_cluster.add_node(n)
    real_cluster.wait_nodes_settled(["gpu-01", "gpu-02", "gpu-03"])
    specs = [JobSpec(node=NodeName(n), purpose="cmd", run_id="w7", argv=("true",), settings=SETTINGS, framed=False)
             for n in ("gpu-01", "gpu-02", "gpu-03")]  # fmt: skip
    results = run_on_nodes(real_client, specs, timeout_s=120, keep_finished=0)
    assert all(r.status is RunStatus.SUCCEEDED for r in results), results
    left = [j.name for j in real_client.list_jobs(NS, "upgrade-gate/purpose=cmd")]
    assert left == [], left
