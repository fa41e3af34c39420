"""Issue 28 on the real control plane, as the upgrade-gate service account (deploy/ applied with -R):
one canary with its peer (plan -> start -> validate -> soak -> promote), a busy canary and a Pod
Security namespace (exit 4, no CVF label), the leftovers of an outage found by our own stamps.

The 16 nodes, baselines and workloads of tests/test_fleet_window_real.py (gpu-a-01 and every eligible
class-B node run a training pod holding all GPUs; gpu-b-01 is cordoned by someone else).
"""

from __future__ import annotations

import pytest

from tests.k8s.realcluster import NS
from tests.test_fleet_window_real import (
    JOB_OPTS,
    PLAN,
    WINDOW,
    Env,
    baselines,
    changed,
    env,
    fakes,
)
from upgrade_gate.cli.main import run
from upgrade_gate.fleet.kube import KubeClient
from upgrade_gate.fleet.manifests import JobSettings, MpiJobSpec
from upgrade_gate.model import NodeName

__all__ = ["baselines", "env", "fakes"]  # the fixtures, shared with tests/test_fleet_window_real.py

pytest_plugins = ["tests.k8s.fixtures"]  # real_cluster, real_cluster_session

CLASS_A = "upgrade-gate/node-class=mi300x-8gpu"
OURS = ("upgrade-gate/peer-of", "upgrade-gate/cordoned-by")


def test_real_one_canary_window_with_its_peer(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 1: plan names the peer; validate holds it (cordon + taint) for phases 4-5 only and PASSes; the
    peer ends without a cordon, taint, annotation or label of ours; observe, then promote."""
    st = ["--store", str(env.store)]
    capsys.readouterr()
    assert env.cli("window", "plan", "--plan", str(PLAN), *st, "--selector", CLASS_A) == 0
    out = capsys.readouterr().out
    assert "canary gpu-a-02  class mi300x-8gpu  idle" in out and "peer gpu-a-03  class mi300x-8gpu" in out, out
    assert env.cli("window", "start", "--id", WINDOW, *st, "--poll-interval", "0.1") == 0
    env.apply_change(changed("gpu-a-02"))
    capsys.readouterr()
    code = env.cli("window", "validate", "--id", WINDOW, *st, *JOB_OPTS)
    out = capsys.readouterr().out
    assert code == 0 and "4:passed 5:passed" in out, out
    assert "hold-peer" in out and "release-peer" in out, out
    peer = env.cluster.node("gpu-a-03")
    assert not peer["spec"].get("unschedulable") and not [
        t for t in peer["spec"].get("taints") or [] if t["key"].startswith("upgrade-gate/")
    ]
    assert not [k for k in peer["metadata"].get("annotations") or {} if k in OURS]
    assert env.cvf_labels("gpu-a-03") == {} and "upgrade-gate/canary" not in env.cluster.labels("gpu-a-03")
    assert env.cvf_labels("gpu-a-02")["amd.com/rail-bandwidth"] == "passed"
    assert env.cli("window", "observe", "--id", WINDOW, *st, *JOB_OPTS) == 0, capsys.readouterr()
    assert "observation PASS" in capsys.readouterr().out
    assert env.cli("window", "promote", "--id", WINDOW, *st, "--skip-soak", "--reason", "test: one observation") == 0
    assert env.cluster.labels("gpu-a-02")["upgrade-gate/window-state"] == "promoted"
    assert not env.cluster.node("gpu-a-03")["spec"].get("unschedulable")


def test_real_busy_canary_is_exit_4_without_a_label(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 4: `--no-drain` leaves gpu-b-02's workload holding its GPUs; with `--capture-privileged` capture
    works, then phase 1's Job is refused by the kubelet (OutOfamd.com/gpu): exit 4 naming it, no
    `amd.com/gpu-hw-acceptance=failed` (no CVF label at all), the window still `started`."""
    st = ["--store", str(env.store)]
    assert env.cli("window", "plan", "--plan", str(PLAN), *st) == 0
    assert env.cli("window", "start", "--id", WINDOW, *st, "--no-drain") == 0
    for name in ("gpu-a-02", "gpu-b-02"):
        env.apply_change(changed(name))
    capsys.readouterr()
    assert env.cli("window", "validate", "--id", WINDOW, *st, *JOB_OPTS, "--capture-privileged") == 4
    err = capsys.readouterr().err
    assert "node gpu-b-02" in err and "OutOfamd.com/gpu" in err and "team-a/training-gpu-b-02" in err, err
    for name in ("gpu-a-02", "gpu-b-02"):
        assert env.cvf_labels(name) == {}, (name, env.cvf_labels(name))
        assert env.cluster.labels(name)["upgrade-gate/window-state"] == "started"
    assert run(["window", "status", "--id", WINDOW, *st]) == 0
    assert f"window {WINDOW}: started" in capsys.readouterr().out


def test_real_pod_security_namespace_is_exit_4_not_a_block(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 5: the namespace at Pod Security `baseline` refuses the capture Jobs' pods: exit 4 naming the
    refusal, no CVF label, `window-state` stays `started` (it used to be exit 1 and `blocked`)."""
    st = ["--store", str(env.store)]
    assert env.cli("window", "plan", "--plan", str(PLAN), *st) == 0
    assert env.cli("window", "start", "--id", WINDOW, *st, "--poll-interval", "0.1") == 0
    label = "pod-security.kubernetes.io/enforce"
    patch = "application/merge-patch+json"
    path = f"/api/v1/namespaces/{NS}"
    env.cluster.cp.request("PATCH", path, {"metadata": {"labels": {label: "baseline"}}}, content_type=patch)
    try:
        capsys.readouterr()
        assert env.cli("window", "validate", "--id", WINDOW, *st, *JOB_OPTS) == 4
    finally:
        env.cluster.cp.request("PATCH", path, {"metadata": {"labels": {label: "privileged"}}}, content_type=patch)
    err = capsys.readouterr().err
    assert "PodSecurity" in err and "says nothing about the node" in err, err
    for name in ("gpu-a-02", "gpu-b-02"):
        assert env.cvf_labels(name) == {}
        assert env.cluster.labels(name)["upgrade-gate/window-state"] == "started"


def test_real_leftover_mpijob_is_found_by_our_stamp(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 3: a phase 5 MPIJob a dead run left on the canaries (its launcher Job labelled `app: <name>` only,
    as mpi-operator v0.7.0 does) holds their GPUs; the rerun deletes it by our labels and annotation, waits
    for its workers to go, and reaches its verdict."""
    st = ["--store", str(env.store)]
    assert env.cli("window", "plan", "--plan", str(PLAN), *st) == 0
    assert env.cli("window", "start", "--id", WINDOW, *st, "--poll-interval", "0.1") == 0
    for name in ("gpu-a-02", "gpu-b-02"):
        env.apply_change(changed(name))
    sleep = ("sleep", "600")
    dead = MpiJobSpec(run_id="dead", nodes=(NodeName("gpu-a-02"), NodeName("gpu-b-02")), launcher_argv=sleep,
                      image="rccl", gpus_per_node=8, worker_command=sleep, settings=JobSettings())  # fmt: skip
    client = KubeClient.from_kubeconfig(str(env.kubeconfig))
    try:
        client.create_mpijob(dead.manifest(), NS)
        env.cluster.wait_for("the dead run's workers", lambda: client.gpu_pods_on_node("gpu-b-02"), timeout=120)
        launcher = env.cluster.cp.request(
            "GET", f"/apis/batch/v1/namespaces/{NS}/jobs/{dead.name}-launcher", ok404=True
        )
        assert launcher is None or launcher["metadata"].get("labels") == {"app": dead.name}
        capsys.readouterr()
        assert env.cli("window", "validate", "--id", WINDOW, *st, *JOB_OPTS) == 0, capsys.readouterr()
        assert "validation PASS" in capsys.readouterr().out
        assert [
            m for m in client.list_mpijobs(NS, "app.kubernetes.io/managed-by=upgrade-gate") if m.name == dead.name
        ] == []
    finally:
        client.close()
