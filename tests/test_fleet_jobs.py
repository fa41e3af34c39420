"""Job / MPIJob manifests and running them across simulated nodes (`run_on_nodes`, `run_job`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.apiserver import wait_until
from tests.k8s.cluster import ClusterDouble
from upgrade_gate.fakenode import build_fake_node, faults, mi300x_node
from upgrade_gate.fleet import errors as fe
from upgrade_gate.fleet.jobs import NodeRunResult, RunStatus, run_mpijob, run_on_nodes
from upgrade_gate.fleet.kube import KubeClient
from upgrade_gate.fleet.manifests import CAPTURE_ACCESS, HostAccess, JobSettings, JobSpec, MpiJobSpec, capture_access
from upgrade_gate.fleet.objects import JobPhase
from upgrade_gate.fleet.resultframe import wrapper_source
from upgrade_gate.model import NodeName, replace

pytest_plugins = ["tests.k8s.fixtures"]  # kube_cluster, kube_client

NS = "upgrade-gate"
SETTINGS = JobSettings(python=sys.executable)


def _spec(node: str, code: str, *, purpose: str = "capture", **kw: Any) -> JobSpec:
    return JobSpec(
        node=NodeName(node), purpose=purpose, run_id="r1", argv=(sys.executable, "-c", code), settings=SETTINGS, **kw
    )


# --------------------------------------------------------------------------- manifests


def test_jobs_manifest_pins_with_node_name_and_drops_privileges() -> None:
    m = _spec("gpu-01", "print()", gpus=8, access=CAPTURE_ACCESS).manifest()
    pod = m["spec"]["template"]["spec"]
    assert m["metadata"]["name"] == "ug-capture-gpu-01-r1"
    assert m["spec"]["backoffLimit"] == 0 and m["spec"]["activeDeadlineSeconds"] == 1800
    assert pod["nodeName"] == "gpu-01" and "affinity" not in pod
    assert pod["automountServiceAccountToken"] is False and pod["serviceAccountName"] == "upgrade-gate-job"
    assert pod["tolerations"] == [{"key": "upgrade-gate/canary", "operator": "Exists", "effect": "NoSchedule"}]
    (c,) = pod["containers"]
    assert c["command"][:6] == [sys.executable, "-I", "-S", "-c", wrapper_source(), "--"]
    assert c["resources"] == {"limits": {"amd.com/gpu": "8"}}
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["SYSLOG"]},
    }
    assert {v["mountPath"]: v["readOnly"] for v in c["volumeMounts"]} == {
        "/host": True,
        "/opt/rocm": True,
        "/dev/infiniband": False,
    }
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert m["metadata"]["labels"] == m["spec"]["template"]["metadata"]["labels"]
    assert m["metadata"]["labels"] is not m["spec"]["template"]["metadata"]["labels"]


def test_jobs_manifest_without_host_access_has_no_host_mounts() -> None:
    pod = _spec("gpu-01", "print()").manifest()["spec"]["template"]["spec"]
    assert "volumes" not in pod and "hostNetwork" not in pod
    assert "resources" not in pod["containers"][0] and "volumeMounts" not in pod["containers"][0]
    assert "infiniband" not in str(_spec("gpu-01", "x", access=capture_access(rdma=False)).manifest())


def test_jobs_manifest_affinity_pin_tolerates_cordon() -> None:
    settings = JobSettings(pin="affinity")
    m = JobSpec(node=NodeName("gpu-01"), purpose="phase2", run_id="r1", argv=("x",), settings=settings).manifest()
    pod = m["spec"]["template"]["spec"]
    assert "nodeName" not in pod
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-01"]}]}]
    assert {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]


def test_jobs_manifest_rejects_bad_node_name() -> None:
    with pytest.raises(fe.InvalidNameError, match="'gpu_01'"):
        _spec("gpu_01", "print()").manifest()


def test_jobs_mpijob_manifest() -> None:
    spec = MpiJobSpec(
        run_id="r1",
        nodes=(NodeName("gpu-01"), NodeName("gpu-02")),
        launcher_argv=("mpirun", "-np", "16", "all_reduce_perf"),
        image="rccl:x",
        gpus_per_node=8,
    )
    m = spec.manifest()
    assert m["metadata"]["name"] == "ug-phase5-r1"
    assert m["spec"]["slotsPerWorker"] == 8
    worker = m["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    affinity = worker["template"]["spec"]["affinity"]
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    # one term per node: the API server allows one value per metadata.name field selector (issue 11)
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}
                     for n in ("gpu-01", "gpu-02")]  # fmt: skip
    assert affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == (
        "kubernetes.io/hostname"
    )
    with pytest.raises(fe.InvalidNameError, match="at least 2 nodes"):
        MpiJobSpec(run_id="r1", nodes=(NodeName("a"),), launcher_argv=("x",), image="i", gpus_per_node=1).manifest()


# --------------------------------------------------------------------------- running


def test_jobs_run_on_nodes_brings_results_back_in_order(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    for i in range(5):
        kube_cluster.add_node(f"gpu-{i:02d}")
    code = "import os, sys; print('chatter', file=sys.stderr); print('payload of', os.environ['UPGRADE_GATE_NODE'])"
    specs = [_spec(f"gpu-{i:02d}", code) for i in range(5)]
    seen: list[NodeRunResult] = []
    results = run_on_nodes(kube_client, specs, concurrency=3, timeout_s=30, poll_s=0.02, on_result=seen.append)
    assert [r.node for r in results] == [f"gpu-{i:02d}" for i in range(5)]
    assert all(r.status is RunStatus.SUCCEEDED and r.exit_code == 0 for r in results), [
        (r.reason, r.log) for r in results
    ]
    assert [r.payload for r in results] == [f"payload of gpu-{i:02d}\n".encode() for i in range(5)]
    assert "chatter" in results[0].log
    assert sorted(r.node for r in seen) == sorted(r.node for r in results)


def test_jobs_failed_and_unframed_nodes_fail_closed(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    for n in ("gpu-01", "gpu-02", "gpu-03"):
        kube_cluster.add_node(n)
    bad = _spec("gpu-01", "import sys; print('partial'); sys.exit(4)")
    good = _spec("gpu-02", "print('ok')")
    unframed = JobSpec(node=NodeName("gpu-03"), purpose="capture", run_id="r1", argv=(sys.executable, "-c", "print(1)"),
                       settings=SETTINGS, framed=False)  # fmt: skip
    a, b, c = run_on_nodes(kube_client, [bad, good, unframed], timeout_s=30, poll_s=0.02)
    assert a.status is RunStatus.FAILED and a.exit_code == 4
    assert "BackoffLimitExceeded" in (a.reason or "") and "exit code 4" in (a.reason or "")
    assert a.payload == b"partial\n"  # the frame still carries what the tool printed: evidence
    assert b.status is RunStatus.SUCCEEDED and b.payload == b"ok\n"
    assert c.status is RunStatus.SUCCEEDED and c.payload is None and c.log == "1\n"


def test_jobs_complete_without_frame_is_failed(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.add_node("gpu-01")
    no_wrapper = JobSettings(python=shutil.which("true") or "/bin/true")  # "wrapper" exits 0, prints nothing
    spec = JobSpec(node=NodeName("gpu-01"), purpose="capture", run_id="r1", argv=("x",), settings=no_wrapper)
    (res,) = run_on_nodes(kube_client, [spec], timeout_s=20, poll_s=0.02)
    assert res.status is RunStatus.FAILED and res.payload is None
    assert "completed but result-frame: no result frame in the pod log" in (res.reason or "")


def test_jobs_node_deleted_mid_run_is_a_per_node_result(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    for n in ("gpu-01", "gpu-02"):
        kube_cluster.add_node(n)
    hang = _spec("gpu-01", "import time; print('started', flush=True); time.sleep(60)")
    fine = _spec("gpu-02", "print('ok')")

    def kill_node_when_running() -> None:
        running = lambda: any(  # noqa: E731
            p["spec"].get("nodeName") == "gpu-01" and p["status"].get("phase") == "Running"
            for p in kube_cluster.objects("pods", NS)
        )
        if wait_until(running, timeout_s=20):
            kube_cluster.delete_node("gpu-01")

    killer = threading.Thread(target=kill_node_when_running)
    killer.start()
    lost, ok = run_on_nodes(kube_client, [hang, fine], timeout_s=30, poll_s=0.02)
    killer.join()
    assert lost.status is RunStatus.NODE_LOST and "gpu-01 disappeared" in (lost.reason or "")
    assert ok.status is RunStatus.SUCCEEDED


def test_jobs_timeout_deletes_the_job(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.add_node("gpu-01")
    (res,) = run_on_nodes(kube_client, [_spec("gpu-01", "import time; time.sleep(60)")], timeout_s=0.3, poll_s=0.02)
    assert res.status is RunStatus.TIMED_OUT and "did not finish within 0.3s" in (res.reason or "")
    assert kube_cluster.objects("jobs", NS, "batch") == []
    assert wait_until(lambda: kube_cluster.objects("pods", NS) == [])


def test_jobs_pod_that_cannot_run_times_out(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.add_node("gpu-01", kubelet=False)  # registered, but its kubelet never starts pods
    (res,) = run_on_nodes(kube_client, [_spec("gpu-01", "print()")], timeout_s=0.3, poll_s=0.02)
    assert res.status is RunStatus.TIMED_OUT


def test_jobs_forbidden_aborts_the_fleet_run(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    for n in ("gpu-01", "gpu-02"):
        kube_cluster.add_node(n)
    kube_cluster.api.inject("create", "jobs", 403, times=5)
    with pytest.raises(fe.KubeForbiddenError, match="refuses to create jobs") as info:
        run_on_nodes(kube_client, [_spec("gpu-01", "print()"), _spec("gpu-02", "print()")], timeout_s=10, poll_s=0.02)
    assert info.value.exit_code == 4


def test_jobs_transient_errors_do_not_fail_nodes(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    kube_cluster.add_node("gpu-01")
    kube_cluster.api.inject("create", "jobs", 500)
    kube_cluster.api.inject("get", "jobs", 429, retry_after=0)
    kube_cluster.api.inject("get", "pods/log", 503)
    (res,) = run_on_nodes(kube_client, [_spec("gpu-01", "print('ok')")], timeout_s=30, poll_s=0.02)
    assert res.status is RunStatus.SUCCEEDED and res.payload == b"ok\n"


def test_jobs_duplicate_specs_rejected_before_any_create(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    with pytest.raises(fe.InvalidNameError, match="same node"):
        run_on_nodes(kube_client, [_spec("gpu-01", "x"), _spec("gpu-01", "y")])
    with pytest.raises(fe.InvalidNameError, match="'GPU-01'"):
        run_on_nodes(kube_client, [_spec("gpu-01", "x"), _spec("GPU-01", "y")])
    assert kube_cluster.api.seen("create") == []


def test_jobs_finished_jobs_pruned_keeping_the_newest(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    """The newest `keep` finished Jobs per node and kind (issue 28, item 6: every kind, not captures only)."""
    for i in range(2):
        kube_cluster.add_node(f"gpu-{i}")
    runs = (("r1", "capture"), ("r2", "capture"), ("r3", "phase1"), ("r4", "phase1"), ("r5", "monitor"))
    for run_id, purpose in runs:
        specs = [_spec(f"gpu-{i}", "print()", purpose=purpose) for i in range(2)]
        specs = [replace(s, run_id=run_id) for s in specs]
        run_on_nodes(kube_client, specs, timeout_s=30, poll_s=0.02, keep_finished=1)
    names = sorted(j["metadata"]["name"] for j in kube_cluster.objects("jobs", NS, "batch"))
    assert names == [f"ug-{p}-gpu-{i}-{r}" for p, r in (("capture", "r2"), ("monitor", "r5"), ("phase1", "r4"))
                     for i in range(2)], names  # fmt: skip


def test_jobs_capture_on_a_fake_node_through_the_double(
    kube_cluster: ClusterDouble, kube_client: KubeClient, tmp_path: Path
) -> None:
    spec = faults.reverse_enumeration(mi300x_node("gpu-07", seed=7))
    fake = build_fake_node(tmp_path / "gpu-07", spec)
    kube_cluster.add_node("gpu-07", env=fake.env({}), host_root=fake.host_root)
    job = JobSpec(
        node=NodeName("gpu-07"),
        purpose="capture",
        run_id="r1",
        argv=("grep", "-H", ".", "/host/opt/rocm/.info/version"),
        access=HostAccess(host_root=True),
        settings=SETTINGS,
    )
    rocminfo = JobSpec(node=NodeName("gpu-07"), purpose="rocminfo", run_id="r1", argv=("rocminfo",), settings=SETTINGS)
    version, info = run_on_nodes(kube_client, [job, rocminfo], timeout_s=30, poll_s=0.02)
    assert version.status is RunStatus.SUCCEEDED, version.reason
    expected_version = (fake.host_root / "opt/rocm/.info/version").read_text(encoding="utf-8").strip()
    assert version.payload is not None and version.payload.decode().strip().endswith(":" + expected_version)
    assert info.status is RunStatus.SUCCEEDED, info.reason
    local = subprocess.run(["rocminfo"], env=fake.env({}), capture_output=True, check=True).stdout
    assert info.payload == local


def test_jobs_mpijob_spec_runs_in_the_double(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    for n in ("gpu-01", "gpu-02", "gpu-03"):
        kube_cluster.add_node(n, taints=[{"key": "upgrade-gate/canary", "value": "c1", "effect": "NoSchedule"}],
                              unschedulable=True)  # fmt: skip
    spec = MpiJobSpec(
        run_id="r1",
        nodes=(NodeName("gpu-01"), NodeName("gpu-03")),
        launcher_argv=(sys.executable, "-c", "print('rank0 says hi')"),
        image="rccl:x",
        gpus_per_node=8,
    )
    kube_client.create_mpijob(spec.manifest(), NS)
    state = kube_client.wait_mpijob(spec.name, NS, timeout_s=20, poll_s=0.02)
    assert state.phase is JobPhase.SUCCEEDED
    assert kube_client.mpijob_logs(spec.name, NS) == "rank0 says hi\n"
    assert kube_client.delete_mpijob(spec.name, NS)


def _mpi(nodes: tuple[str, ...], code: str) -> MpiJobSpec:
    return MpiJobSpec(
        run_id="r2",
        nodes=tuple(NodeName(n) for n in nodes),
        launcher_argv=(sys.executable, "-c", code),
        image="rccl:x",
        gpus_per_node=8,
    )


def test_jobs_run_mpijob_success_and_failure(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    for n in ("gpu-01", "gpu-02"):
        kube_cluster.add_node(n)
    ok = run_mpijob(kube_client, _mpi(("gpu-01", "gpu-02"), "print('# Avg bus bandwidth    : 312.5')"),
                    timeout_s=20, poll_s=0.02)  # fmt: skip
    assert ok.status is RunStatus.SUCCEEDED and ok.log == "# Avg bus bandwidth    : 312.5\n"
    assert kube_cluster.objects("mpijobs", NS, "kubeflow.org") == []  # deleted after reading the log
    bad = run_mpijob(kube_client, _mpi(("gpu-01", "gpu-02"), "raise SystemExit(2)"), timeout_s=20, poll_s=0.02)
    assert bad.status is RunStatus.FAILED and "MPIJob ug-phase5-r2 failed" in (bad.reason or "")


def test_jobs_run_mpijob_names_the_lost_node(kube_cluster: ClusterDouble, kube_client: KubeClient) -> None:
    for n in ("gpu-01", "gpu-02"):
        kube_cluster.add_node(n)
    spec = _mpi(("gpu-01", "gpu-02"), "import time; print('rank0 up', flush=True); time.sleep(60)")

    def kill_when_running() -> None:
        launcher_running = lambda: any(  # noqa: E731
            "launcher" in p["metadata"]["name"] and p["status"].get("phase") == "Running"
            for p in kube_cluster.objects("pods", NS)
        )
        if wait_until(launcher_running, timeout_s=20):
            kube_cluster.delete_node("gpu-02")

    killer = threading.Thread(target=kill_when_running)
    killer.start()
    res = run_mpijob(kube_client, spec, timeout_s=20, poll_s=0.02)
    killer.join()
    assert res.status is RunStatus.NODE_LOST and res.lost_nodes == ("gpu-02",)
    assert "gpu-02 disappeared" in (res.reason or "")


def test_run_job_log_read_beside_the_confirming_read_is_used_only_for_the_pod_that_read_shows() -> None:
    """The log of the pod a watch event said Succeeded is read while the wait's read confirms it; only
    that read decides whether it is used (the newest pod, Succeeded), else the log is read as before."""
    from upgrade_gate.fleet.jobs import _LogPrefetch
    from upgrade_gate.fleet.objects import PodState

    class Client:
        def __init__(self) -> None:
            self.reads: list[str] = []

        def pod_logs(self, pod: str, namespace: str) -> str:
            self.reads.append(pod)
            if pod == "broken":
                raise fe.KubeServerError("no kubelet", verb="get", resource="pods/log", status=502)
            return f"log of {pod}"

    def pod(name: str, phase: str) -> PodState:
        return PodState(name=name, node="gpu-01", phase=phase)

    client = Client()
    used = _LogPrefetch(client, NS)  # type: ignore[arg-type]
    used.start(pod("p1", "Succeeded"))
    used.start(pod("p2", "Succeeded"))  # one read per wait
    assert used.take((pod("p0", "Failed"), pod("p1", "Succeeded"))) == ("log of p1", None)
    assert client.reads == ["p1"]
    unconfirmed = _LogPrefetch(client, NS)  # type: ignore[arg-type]
    unconfirmed.start(pod("p1", "Succeeded"))
    assert unconfirmed.take((pod("p1", "Running"),)) is None  # the read says it runs: the event does not decide
    assert unconfirmed.take((pod("p1", "Succeeded"), pod("p2", "Succeeded"))) is None  # not the newest pod
    assert _LogPrefetch(client, NS).take((pod("p1", "Succeeded"),)) is None  # no event came: nothing read  # type: ignore[arg-type]
    failed = _LogPrefetch(client, NS)  # type: ignore[arg-type]
    failed.start(pod("broken", "Succeeded"))
    assert failed.take((pod("broken", "Succeeded"),)) is None  # a pods/log 5xx is the node's: read again as before
