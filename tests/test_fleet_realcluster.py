"""Issue 11's defects, each against the real control plane (kube-apiserver with Node,RBAC and its default
admission plugins, kube-controller-manager, kube-scheduler, etcd), as the upgrade-gate service account.

The real server is what showed them: the in-repo double accepted the MPIJob workers' node affinity,
never rejected a pod by Pod Security, and its nodes' logs outlived the nodes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.k8s.cluster import FAST_RETRY
from tests.k8s.realcluster import NS, RealCluster
from tests.test_validate_support import fast_config
from upgrade_gate.cli.main import run
from upgrade_gate.fakenode import Faults, build_fake_node, mi300x_node
from upgrade_gate.fleet.errors import KubeRefusedError, KubeTLSError, KubeUnauthorizedError
from upgrade_gate.fleet.executor import ExecutorSettings, KubeLauncher, capture_nodes, write_cvf_labels
from upgrade_gate.fleet.jobs import RunStatus, run_job, run_mpijob
from upgrade_gate.fleet.kube import KubeClient
from upgrade_gate.fleet.manifests import CAPTURE_ACCESS, JobSettings, JobSpec, MpiJobSpec
from upgrade_gate.model import NodeName, PhaseStatus, replace
from upgrade_gate.validate.launcher import LauncherError
from upgrade_gate.validate.phase import make_result
from upgrade_gate.validate.phases import default_phases

pytest_plugins = ["tests.k8s.fixtures"]  # real_cluster, real_client

REPO = Path(__file__).resolve().parent.parent
PLAN = REPO / "examples" / "plans" / "rocm-6.1.3-to-6.2.0.yaml"
SETTINGS = JobSettings(python=sys.executable)


def _job(node: str, code: str, run_id: str = "r1") -> JobSpec:
    return JobSpec(
        node=NodeName(node), purpose="cmd", run_id=run_id, argv=(sys.executable, "-c", code), settings=SETTINGS
    )


def _nodes(cluster: RealCluster, *names: str, **kw: object) -> None:
    for name in names:
        cluster.add_node(name, **kw)  # type: ignore[arg-type]
    cluster.wait_nodes_settled(list(names))


def _busy_pod(node: str, name: str = "training-0", namespace: str = "team-a") -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "training"}},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "t", "image": "x", "command": ["sshd"], "resources": {"limits": {"amd.com/gpu": "8"}}}
            ],
        },
    }


@pytest.fixture
def team_a(real_cluster: RealCluster) -> Iterator[None]:
    real_cluster.cp.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    yield


# --------------------------------------------------------------------------- defect 1: MPIJob workers


def test_real_mpijob_worker_pods_pass_api_validation(real_cluster: RealCluster) -> None:
    """The MPIJob's worker pod template is a valid Pod for the real API server (a single `metadata.name
    In [n1, n2]` term was rejected: one value per field selector)."""
    spec = MpiJobSpec(
        run_id="v1",
        nodes=(NodeName("gpu-01"), NodeName("gpu-02"), NodeName("gpu-03")),
        launcher_argv=("true",),
        image="i",
        gpus_per_node=8,
    )
    template = spec.manifest()["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "w0", "namespace": NS, **template["metadata"]},
        "spec": template["spec"],
    }
    real_cluster.cp.request("POST", f"/api/v1/namespaces/{NS}/pods?dryRun=All", pod)


def test_real_mpijob_runs_on_the_cordoned_canaries(real_cluster: RealCluster, real_client: KubeClient) -> None:
    """Phase 5's MPIJob end to end: workers scheduled by the real scheduler onto two cordoned, tainted
    nodes (and only those), the launcher a real Job."""
    _nodes(real_cluster, "gpu-01", "gpu-02", "gpu-03")
    for name in ("gpu-01", "gpu-02"):
        real_client.cordon(name)
    spec = MpiJobSpec(
        run_id="m1",
        nodes=(NodeName("gpu-01"), NodeName("gpu-02")),
        launcher_argv=("true",),
        image="i",
        gpus_per_node=8,
        settings=SETTINGS,
    )
    res = run_mpijob(real_client, spec, timeout_s=90, poll_s=0.1)
    assert res.status is RunStatus.SUCCEEDED, res.reason
    assert real_cluster.mpi is not None and real_cluster.mpi.rejections == []


# --------------------------------------------------------------------------- defect 3: busy canaries


def test_real_capture_on_a_busy_node_names_the_kubelet_rejection(
    real_cluster: RealCluster, real_client: KubeClient, team_a: None, tmp_path: Path
) -> None:
    """A capture Job that asks for GPUs a workload holds is rejected by the kubelet: the result says
    `OutOfamd.com/gpu`, not only BackoffLimitExceeded; `--capture-privileged` captures without GPUs."""
    fake = build_fake_node(tmp_path / "gpu-01", mi300x_node("gpu-01", seed=1), Faults())
    _nodes(real_cluster, "gpu-01", env=fake.env(os.environ), host_root=fake.host_root)
    real_cluster.cp.apply(_busy_pod("gpu-01"))
    real_cluster.wait_for("the workload to run", lambda: real_client.gpu_pods_on_node("gpu-01"))
    node = real_client.get_node("gpu-01")
    base = ExecutorSettings(
        jobs=SETTINGS, upgrade_gate_argv=(sys.executable, "-m", "upgrade_gate"), poll_s=0.1, capture_timeout_s=120
    )
    with pytest.raises(KubeRefusedError, match=r"OutOfamd\.com/gpu") as info:  # issue 28: busy, not broken
        capture_nodes(real_client, [node], base, run_id="c1")
    assert info.value.exit_code == 4 and "team-a/training" in str(info.value), info.value
    (bundle,) = capture_nodes(real_client, [node], replace(base, capture_privileged=True), run_id="c2").values()
    assert not isinstance(bundle, str), bundle


def test_real_window_start_drains_gpu_pods_through_the_eviction_api(
    real_cluster: RealCluster, team_a: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`window start` cordons, taints, then evicts the canaries' GPU pods; a PodDisruptionBudget that
    forbids it stops the start with exit 4 naming the pod; `--no-drain` leaves the workload alone."""
    _nodes(real_cluster, *(f"gpu-a-{i:02d}" for i in range(1, 5)), node_class="mi300x-8gpu")
    kubeconfig = str(real_cluster.kubeconfig(tmp_path / "sa.kubeconfig"))
    store = str(tmp_path / "store")
    # One canary needs an idle peer for phases 4-5 (issue 28): gpu-a-04 stays idle, and the plan does not
    # prefer idle canaries, so the canary (gpu-a-01) runs a workload that the start must drain.
    busy_plan = tmp_path / "plan.yaml"
    busy_plan.write_text(PLAN.read_text().replace("prefer_idle: true", "prefer_idle: false"))
    plan = ["window", "plan", "--plan", str(busy_plan), "--store", store, "--kubeconfig", kubeconfig]
    for i in range(1, 4):
        real_cluster.cp.apply(_busy_pod(f"gpu-a-{i:02d}", name=f"training-{i}"))
    client = KubeClient.from_kubeconfig(kubeconfig, retry=FAST_RETRY)
    real_cluster.wait_for("workloads", lambda: all(client.gpu_pods_on_node(f"gpu-a-{i:02d}") for i in range(1, 4)))
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "training", "namespace": "team-a"},
        "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "training"}}},
    }
    real_cluster.cp.apply(pdb)
    real_cluster.wait_for(
        "the budget to count the pods",
        lambda: (
            real_cluster.cp.request("GET", "/apis/policy/v1/namespaces/team-a/poddisruptionbudgets/training")
            .get("status", {})
            .get("currentHealthy")
        ),
    )
    assert run(plan) == 0
    wid = "rocm-6.1.3-to-6.2.0"
    start = ["window", "start", "--id", wid, "--store", store, "--kubeconfig", kubeconfig, "--poll-interval", "0.1"]
    capsys.readouterr()
    assert run([*start, "--drain-timeout", "2"]) == 4
    err = capsys.readouterr().err
    assert "team-a/training-1" in err and "disruption budget" in err, err
    assert real_cluster.node("gpu-a-01")["spec"]["unschedulable"] is True  # cordoned, start can be repeated
    assert run([*start, "--no-drain"]) == 0
    assert "--no-drain" in capsys.readouterr().out
    assert client.gpu_pods_on_node("gpu-a-01") == ("team-a/training-1",)  # left alone
    real_cluster.cp.request("DELETE", "/apis/policy/v1/namespaces/team-a/poddisruptionbudgets/training")
    assert run([*start, "--drain-timeout", "60"]) == 0  # start again (idempotent), now the budget allows it
    assert "evicted team-a/training-1" in capsys.readouterr().out
    assert client.gpu_pods_on_node("gpu-a-01") == ()
    assert client.gpu_pods_on_node("gpu-a-02") == ("team-a/training-2",)  # not a canary: untouched
    client.close()


# --------------------------------------------------------------------------- defect 4: Pod Security


def test_real_pod_security_refusal_fails_the_job_at_once(real_cluster: RealCluster, real_client: KubeClient) -> None:
    """Under a `baseline` Pod Security level the Job controller cannot create the hostNetwork pod: the
    FailedCreate event ends the wait with the server's words, long before the timeout."""
    _nodes(real_cluster, "gpu-01")
    label = "pod-security.kubernetes.io/enforce"
    patch = "application/merge-patch+json"
    real_cluster.cp.request(
        "PATCH", f"/api/v1/namespaces/{NS}", {"metadata": {"labels": {label: "baseline"}}}, content_type=patch
    )
    try:
        spec = JobSpec(
            node=NodeName("gpu-01"),
            purpose="capture",
            run_id="ps1",
            argv=("true",),
            settings=SETTINGS,
            access=CAPTURE_ACCESS,
        )
        res = run_job(real_client, spec, timeout_s=300, poll_s=0.1)
    finally:
        real_cluster.cp.request(
            "PATCH", f"/api/v1/namespaces/{NS}", {"metadata": {"labels": {label: "privileged"}}}, content_type=patch
        )
    assert res.status is RunStatus.REFUSED, res  # issue 28: says nothing about the node
    assert "cannot create its pod" in (res.reason or "") and "PodSecurity" in (res.reason or ""), res.reason


# --------------------------------------------------------------------------- defect 5: a node that vanished


def test_real_node_deleted_after_its_pod_finished_is_node_lost(
    real_cluster: RealCluster, real_client: KubeClient
) -> None:
    """The pod finished, then the node died before its log was read: node vanished, no invented exit code."""
    _nodes(real_cluster, "gpu-01")
    real_cluster.nodes_agent.nodes["gpu-01"].die_after_pod = True
    launcher = KubeLauncher(
        real_client, [real_client.get_node("gpu-01")], ExecutorSettings(jobs=SETTINGS, poll_s=0.1), run_id="d5"
    )
    spec = launcher.spec(NodeName("gpu-01"), ["true"])
    res = run_job(real_client, spec, timeout_s=120, poll_s=0.1)
    assert res.status is RunStatus.NODE_LOST, res
    with pytest.raises(LauncherError, match="node vanished"):
        launcher.to_result(spec, res)


# --------------------------------------------------------------------------- defect 6: stale CVF metadata


def test_real_cvf_metadata_is_exactly_this_runs(real_cluster: RealCluster, real_client: KubeClient) -> None:
    _nodes(real_cluster, "gpu-01")
    stale_labels = {
        "amd.com/gpu-hw-acceptance": "failed",
        "amd.com/rail-bandwidth": "passed",
        "amd.com/cluster-validation-candidate": "true",
        "team/keep": "yes",
    }
    stale_notes = {
        "amd.com/gpu-hw-acceptance-failure-reason": "an earlier run",
        "amd.com/rail-bandwidth-measured-bw": "390.00",
        "team/note": "keep",
    }
    real_client.patch_node_metadata("gpu-01", labels=stale_labels, annotations=stale_notes)
    config = fast_config()
    phases = {p.number: p for p in default_phases()}
    results = {
        NodeName("gpu-01"): (
            make_result(phases[0], config, PhaseStatus.PASSED, ()),
            make_result(phases[1], config, PhaseStatus.PASSED, ()),
            make_result(phases[2], config, PhaseStatus.FAILED, ("bus bandwidth 80 < 100",), measured_bw=80.0),
            make_result(phases[3], config, PhaseStatus.NOT_RUN, ("phase 2 failed",)),
        )
    }
    assert write_cvf_labels(real_client, results) == {"gpu-01": None}
    labels, notes = real_cluster.labels("gpu-01"), real_cluster.annotations("gpu-01")
    cvf = {k: v for k, v in labels.items() if k.startswith("amd.com/")}
    assert cvf == {
        "amd.com/gpu-hw-acceptance": "passed",
        "amd.com/gpu-mesh-validation": "failed",
        "amd.com/cluster-validation-candidate": "true",
    }
    assert {k for k in notes if k.startswith("amd.com/")} == {
        "amd.com/gpu-mesh-validation-failure-reason",
        "amd.com/gpu-mesh-validation-measured-bw",
    }
    assert labels["team/keep"] == "yes" and notes["team/note"] == "keep"  # not ours: untouched


# --------------------------------------------------------------------------- defect 7


def test_real_unauthenticated_is_not_called_rbac(real_cluster: RealCluster) -> None:
    client = KubeClient.from_url(real_cluster.url, token="not-a-token", ca_cert=str(real_cluster.ca), retry=FAST_RETRY)
    with pytest.raises(KubeUnauthorizedError) as err:
        client.list_nodes()
    assert "HTTP 401" in str(err.value) and "RBAC" not in str(err.value) and "credentials" in str(err.value)
    client.close()


def test_real_tls_verification_failure_is_not_retried(real_cluster: RealCluster) -> None:
    sleeps: list[float] = []
    client = KubeClient.from_url(real_cluster.url, token=real_cluster.token(), retry=FAST_RETRY, sleep=sleeps.append)
    with pytest.raises(KubeTLSError, match="certificate"):
        client.list_nodes()  # the system's CAs do not know the test CA
    assert sleeps == []
    client.close()


def test_real_plan_says_why_each_node_was_passed_over(
    real_cluster: RealCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A permanent taint the Jobs tolerate keeps a node eligible (--tolerate); without it, and for a node
    the lifecycle controller keeps tainted not-ready, `window plan` names each node and why."""
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    _nodes(real_cluster, "gpu-a-01", "gpu-a-02", node_class="mi300x-8gpu", taints=[taint])
    real_cluster.add_node("gpu-a-03", node_class="mi300x-8gpu", ready=False)
    kubeconfig = str(real_cluster.kubeconfig(tmp_path / "sa.kubeconfig"))
    plan = ["window", "plan", "--plan", str(PLAN), "--store", str(tmp_path / "store"), "--kubeconfig", kubeconfig]
    capsys.readouterr()
    assert run(plan) == 3
    err = capsys.readouterr().err
    assert "gpu-a-01: tainted dedicated=gpu:NoSchedule, which the Jobs do not tolerate" in err, err
    assert "gpu-a-03: NotReady" in err, err
    assert run([*plan, "--tolerate", "dedicated=gpu:NoSchedule"]) == 0
    assert "canary gpu-a-01  class mi300x-8gpu" in capsys.readouterr().out
