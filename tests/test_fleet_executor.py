"""The Kubernetes executor: capture and phases as Jobs, a node deleted mid-run, API faults and exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.k8s.apiserver import wait_until
from tests.k8s.cluster import ClusterDouble
from tests.test_fleet_window import write_kubeconfig
from tests.test_validate_support import fast_config
from upgrade_gate.cli.main import run
from upgrade_gate.fakenode import FakeNode, Faults, build_fake_node, faults, mi300x_node
from upgrade_gate.fleet.errors import InvalidNameError, KubeConnectionError, KubeForbiddenError, KubeServerError
from upgrade_gate.fleet.executor import ExecutorSettings, KubeLauncher, bundle_from_payload, capture_nodes, run_phases
from upgrade_gate.fleet.kube import KubeClient
from upgrade_gate.fleet.manifests import JobSettings
from upgrade_gate.model import NodeName, PhaseStatus
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.validate.launcher import LauncherError
from upgrade_gate.validate.phases import MeshPhase
from upgrade_gate.validate.pipeline import aborts_run

pytest_plugins = ["tests.k8s.fixtures"]  # kube_cluster, kube_client

SETTINGS = ExecutorSettings(
    jobs=JobSettings(python=sys.executable), upgrade_gate_argv=(sys.executable, "-m", "upgrade_gate"), poll_s=0.05
)
REPO = Path(__file__).resolve().parent.parent
PLAN = REPO / "examples" / "plans" / "rocm-6.1.3-to-6.2.0.yaml"


def _node(cluster: ClusterDouble, root: Path, name: str, fault: Faults | None = None) -> FakeNode:
    fake = build_fake_node(root / name, mi300x_node(name, seed=len(name)), fault or Faults())
    cluster.add_node(name, node_class="mi300x-8gpu", env=fake.env(os.environ), host_root=fake.host_root)
    return fake


def test_fleet_executor_capture_out_dash_writes_a_bundle_to_stdout(tmp_path: Path) -> None:
    fake = build_fake_node(tmp_path / "gpu-01", mi300x_node("gpu-01"), Faults())
    argv = [sys.executable, "-m", "upgrade_gate", "capture", "--node", "gpu-01", "--host-root", str(fake.host_root),
            "--out", "-"]  # fmt: skip
    proc = subprocess.run(argv, env=fake.env(os.environ), capture_output=True, check=True)
    bundle = bundle_from_payload(proc.stdout, node="gpu-01")
    assert bundle.node == "gpu-01" and all(r.ok for r in bundle.records if r.required)
    assert b"wrote the bundle (.tar.gz) to stdout" in proc.stderr and b"ok      rocminfo" in proc.stderr


def test_fleet_executor_node_deleted_mid_run_is_an_error_never_a_pass(
    kube_cluster: ClusterDouble, kube_client: KubeClient, tmp_path: Path
) -> None:
    _node(kube_cluster, tmp_path, "gpu-01")
    _node(kube_cluster, tmp_path, "gpu-02", Faults(tools={"all_reduce_perf": faults.hang()}))
    nodes = list(kube_client.list_nodes())
    bundles = capture_nodes(kube_client, nodes, SETTINGS, run_id="c1")
    snaps = {n: build_snapshot(b) for n, b in bundles.items() if not isinstance(b, str)}
    assert set(snaps) == {"gpu-01", "gpu-02"}, bundles

    def running_on_gpu02() -> bool:
        pods = kube_cluster.objects("pods", "upgrade-gate")
        return any(p["spec"].get("nodeName") == "gpu-02" and p["status"].get("phase") == "Running"
                   and p["metadata"]["labels"].get("upgrade-gate/purpose") == "phase2" for p in pods)  # fmt: skip

    def kill() -> None:
        if wait_until(running_on_gpu02, timeout_s=30):
            kube_cluster.delete_node("gpu-02")

    killer = threading.Thread(target=kill)
    killer.start()
    results = run_phases(kube_client, nodes, phases=[MeshPhase()], config=fast_config(UPGRADE_GATE_SAMPLES="1"),
                         settings=SETTINGS, run_id="p1", snapshots=snaps)  # fmt: skip
    killer.join()
    (ok,) = results[NodeName("gpu-01")]
    (lost,) = results[NodeName("gpu-02")]
    assert ok.status is PhaseStatus.PASSED, ok.reasons
    assert lost.status is PhaseStatus.ERROR
    assert lost.reason is not None and lost.reason.startswith("node vanished: node gpu-02 disappeared")
    assert lost.labels == {"amd.com/gpu-mesh-validation": "failed"}
    assert lost.annotations["amd.com/gpu-mesh-validation-failure-reason"].startswith("node vanished")


def test_fleet_executor_launcher_validates_node_names(kube_client: KubeClient) -> None:
    launcher = KubeLauncher(kube_client, [], SETTINGS, run_id="r1")
    with pytest.raises(Exception, match="not part of this run"):
        launcher.runner_for(NodeName("gpu-01"))
    from upgrade_gate.fleet.executor import capture_spec
    from upgrade_gate.fleet.objects import KubeNode

    spec = capture_spec(KubeNode(name=NodeName("GPU_01"), uid="u", resource_version="1"), SETTINGS, "r1")
    with pytest.raises(InvalidNameError, match="'GPU_01'"):
        spec.manifest()


def test_fleet_executor_forbidden_verb_exits_4_naming_it(
    kube_cluster: ClusterDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kube_cluster.add_node("gpu-01", node_class="mi300x-8gpu")
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", kube_cluster.url)
    kube_cluster.api.inject("list", "nodes", 403)
    code = run(["window", "plan", "--plan", str(PLAN), "--store", str(tmp_path / "s"), "--kubeconfig", str(kubeconfig)])
    assert code == 4
    err = capsys.readouterr().err
    assert "refuses to list nodes" in err and "deploy/rbac.yaml" in err


def test_fleet_executor_throttling_and_server_errors_are_retried_then_exit_4(
    kube_cluster: ClusterDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(1, 11):
        kube_cluster.add_node(f"gpu-{i:02d}", node_class="mi300x-8gpu")
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", kube_cluster.url)
    store = ["--store", str(tmp_path / "s"), "--kubeconfig", str(kubeconfig)]
    kube_cluster.api.inject("list", "nodes", 429, times=2, retry_after=0)
    kube_cluster.api.inject("list", "pods", 503, times=1, retry_after=0)
    assert run(["window", "plan", "--plan", str(PLAN), *store]) == 0
    assert "canary gpu-01" in capsys.readouterr().out
    assert len([r for r in kube_cluster.api.seen("list", "nodes") if r.status == 429]) == 2
    kube_cluster.api.inject("patch", "nodes", 429, times=1, retry_after=0)
    kube_cluster.api.inject("get", "nodes", 500, times=1, retry_after=0)
    assert run(["window", "start", "--id", "rocm-6.1.3-to-6.2.0", *store]) == 0
    taints = kube_cluster.node("gpu-01")["spec"]["taints"]
    assert taints == [{"key": "upgrade-gate/canary", "value": "rocm-6.1.3-to-6.2.0", "effect": "NoSchedule"}]
    capsys.readouterr()
    kube_cluster.api.inject("patch", "nodes", 500, times=20, retry_after=0)
    assert run(["window", "rollback", "--id", "rocm-6.1.3-to-6.2.0", "--reason", "x", *store]) == 4
    err = capsys.readouterr().err
    assert 'patch nodes "gpu-01": API server error (HTTP 500' in err
    assert run(["window", "status", "--id", "rocm-6.1.3-to-6.2.0", "--store", str(tmp_path / "s")]) == 0
    assert "started" in capsys.readouterr().out  # the failed rollback recorded nothing


def test_fleet_executor_api_failure_stops_the_run_instead_of_failing_phases(
    kube_cluster: ClusterDouble, kube_client: KubeClient, tmp_path: Path
) -> None:
    """An API server that keeps answering 503 (retries exhausted) is the environment's failure: the
    pipeline stops with the error (the CLI exits 4) instead of recording `failed` phases (issue 11, defect 2)."""
    _node(kube_cluster, tmp_path, "gpu-01")
    nodes = list(kube_client.list_nodes())
    snaps = {n: build_snapshot(b) for n, b in capture_nodes(kube_client, nodes, SETTINGS, run_id="c1").items()
             if not isinstance(b, str)}  # fmt: skip
    kube_cluster.api.inject("create", "jobs", 503, times=50)
    with pytest.raises(KubeServerError, match="create jobs"):
        run_phases(kube_client, nodes, phases=[MeshPhase()], config=fast_config(UPGRADE_GATE_SAMPLES="1"),
                   settings=SETTINGS, run_id="p1", snapshots=snaps)  # fmt: skip


def test_fleet_executor_pipeline_aborts_only_on_environment_errors() -> None:
    """`LauncherError` (a node unreachable or vanished) stays the node's own error; other environment
    failures (the API, the store) abort the run."""
    assert aborts_run(KubeConnectionError("x")) and aborts_run(KubeServerError("x"))
    assert not aborts_run(LauncherError("node vanished: gpu-01")) and not aborts_run(ValueError("bug"))


def test_thermal_sampling_jobs_allocate_no_gpu_and_get_the_nodes_rocm(kube_client: KubeClient) -> None:
    """Phase 2 holds every GPU while amd-smi/rocm-smi sample it: their Jobs must not ask for one."""
    from upgrade_gate.fleet.objects import KubeNode

    node = KubeNode(name=NodeName("gpu-01"), uid="u", resource_version="1")
    for settings, privileged in ((SETTINGS, False), (ExecutorSettings(capture_privileged=True), True)):
        launcher = KubeLauncher(kube_client, [node], settings, run_id="t1")
        for argv in (("amd-smi", "monitor", "-p", "-t"), ("rocm-smi", "--showtemp", "--json")):
            spec = launcher.spec(NodeName("gpu-01"), argv)
            assert (spec.purpose, spec.gpus) == ("monitor", 0)
            assert spec.access.rocm and spec.access.devices is privileged
            manifest = spec.manifest()
            container = manifest["spec"]["template"]["spec"]["containers"][0]
            assert "amd.com/gpu" not in str(container.get("resources", {}))
            assert {"name": "rocm", "mountPath": "/opt/rocm", "readOnly": True} in container["volumeMounts"]


def test_fleet_executor_cvf_labels_of_many_nodes_are_written_at_once(
    kube_cluster: ClusterDouble, kube_client: KubeClient
) -> None:
    """write_cvf_labels patches the nodes concurrently; a vanished node is that node's error, the others
    are written; an API error that dooms the run still propagates (exit 4 upstream)."""
    from upgrade_gate.fleet.executor import write_cvf_labels
    from upgrade_gate.validate.phase import make_result
    from upgrade_gate.validate.phases import default_phases

    config = fast_config()
    phase0 = next(p for p in default_phases() if p.number == 0)
    names = [f"gpu-{i:02d}" for i in range(1, 7)]
    for name in names:
        kube_cluster.add_node(name, node_class="mi300x-8gpu")
    results = {NodeName(n): (make_result(phase0, config, PhaseStatus.PASSED, ()),) for n in [*names, "gone-01"]}
    out = write_cvf_labels(kube_client, results, concurrency=4)
    assert list(out) == sorted(results) and out["gone-01"] is not None and out["gone-01"].startswith("node vanished")
    assert all(out[n] is None for n in names)
    for name in names:
        assert kube_cluster.node(name)["metadata"]["labels"]["amd.com/cluster-validation-candidate"] == "true"
    kube_cluster.api.inject("patch", "nodes", 403, times=50)
    with pytest.raises(KubeForbiddenError, match="patch"):
        write_cvf_labels(kube_client, results, concurrency=4)
