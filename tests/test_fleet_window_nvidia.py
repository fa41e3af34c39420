"""A change window on NVIDIA nodes through the CLI (issue 30): `window plan/start/validate` on 4 fake 8x H100
nodes of the API server double, the driver 550 -> 570 change of `demo --vendor nvidia`, phases 0-2.

`window validate` reads each canary's vendor from its baseline (or `--vendor`), captures it with NVIDIA's
probes as a Job holding `nvidia.com/gpu`, and runs NVIDIA's phases 1-2 (dcgmi diag, nccl-tests with
nvidia-smi sampling) on it; a `--vendor` that contradicts the node's advertised GPUs blocks uncaptured."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.k8s.cluster import ClusterDouble
from tests.k8s.kubelet import SimNode
from tests.test_fleet_window import write_kubeconfig
from tests.test_validate_support import FAST
from upgrade_gate.cli.main import run
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.probes import probe_catalogue
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.demo.nvidia import NEW, OLD, PLAN_TEXT, POLICY_TEXT, node_spec
from upgrade_gate.fakenode import FakeNode
from upgrade_gate.fakenode.nvidia import build_nvidia_node
from upgrade_gate.model import NodeName
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.store.gitstore import BaselineStore
from upgrade_gate.vendors import NVIDIA

pytest_plugins = ["tests.k8s.fixtures"]  # kube_cluster

NS = "upgrade-gate"
NODES = [NodeName(f"h100-{i:02d}") for i in range(1, 5)]
JOB_OPTS = ["--job-python", sys.executable, "--job-command", f"{sys.executable} -m upgrade_gate",
            "--poll-interval", "0.05"]  # fmt: skip
WINDOW = f"nvidia-{OLD.version}-to-{NEW.version}"


def _fake(root: Path, name: NodeName, new: bool = False) -> FakeNode:
    return build_nvidia_node(root / ("new" if new else "old") / name, node_spec(name, NEW if new else OLD))


def _setup(cluster: ClusterDouble, root: Path) -> tuple[Path, list[str]]:
    store = root / "store"
    snaps = []
    for name in NODES:
        fake = _fake(root, name)
        cluster.add_node(name, node_class="h100-8gpu", amd_gpu=False, labels={"nvidia.com/gpu.present": "true"},
                         gpu_resource="nvidia.com/gpu", env=fake.env(os.environ), host_root=fake.host_root)  # fmt: skip
        bundle = capture(LocalRunner(env=fake.env(os.environ)), node=name, host_root=fake.host_root,
                         probes=probe_catalogue(fake.host_root, vendor=NVIDIA))  # fmt: skip
        snaps.append(build_snapshot(bundle, node_class="h100-8gpu"))
    with BaselineStore(store) as st:
        st.init()
        st.save(snaps, message="H100 baselines", tag=f"nvidia-{OLD.version}")
    cluster.set_configmap("cluster-validation-config", NS, {**FAST, "UPGRADE_GATE_SAMPLES": "1"})
    (root / "plan.yaml").write_text(PLAN_TEXT, encoding="utf-8")
    (root / "policy.yaml").write_text(POLICY_TEXT, encoding="utf-8")
    return store, ["--store", str(store)]


def _plan_and_start(cluster: ClusterDouble, root: Path, kubeconfig: Path, st: list[str]) -> str:
    # no --selector: the default finds every vendor's GPU nodes (here GFD's nvidia.com/gpu.present=true)
    assert run(["window", "plan", "--plan", str(root / "plan.yaml"), *st, "--kubeconfig", str(kubeconfig)]) == 0
    assert run(["window", "start", "--id", WINDOW, *st, "--kubeconfig", str(kubeconfig)]) == 0
    (canary,) = [n for n in NODES if cluster.node(n)["metadata"]["labels"].get("upgrade-gate/canary")]
    fake = _fake(root, canary, new=True)  # the operator applies the driver change
    cluster.kubelet.nodes[canary] = SimNode(name=canary, env=fake.env(os.environ), host_root=fake.host_root)
    return canary


def test_fleet_window_nvidia_canary_validated_with_its_vendors_probes_and_phases(
    kube_cluster: ClusterDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, st = _setup(kube_cluster, tmp_path)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", kube_cluster.url)
    canary = _plan_and_start(kube_cluster, tmp_path, kubeconfig, st)
    capsys.readouterr()
    code = run(["window", "validate", "--id", WINDOW, *st, *JOB_OPTS, "--phases", "0,1,2", "--policy",
                str(tmp_path / "policy.yaml"), "--kubeconfig", str(kubeconfig)])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    labels = kube_cluster.node(canary)["metadata"]["labels"]
    assert labels["amd.com/gpu-hw-acceptance"] == "passed" and labels["amd.com/gpu-mesh-validation"] == "passed"
    jobs = kube_cluster.objects("jobs", NS, "batch")
    by_purpose = {j["metadata"]["labels"]["upgrade-gate/purpose"]: j for j in jobs}
    (capture_container,) = by_purpose["capture"]["spec"]["template"]["spec"]["containers"]
    assert "--vendor" in capture_container["command"] and "nvidia" in capture_container["command"]
    for purpose in ("capture", "phase1", "phase2"):
        (container,) = by_purpose[purpose]["spec"]["template"]["spec"]["containers"]
        assert container["resources"] == {"limits": {"nvidia.com/gpu": "8"}}, purpose
    assert "dcgmi" in json.dumps(by_purpose["phase1"]) and "/opt/rocm" not in json.dumps(jobs)
    with BaselineStore(store) as stored:
        assert stored.nodes()  # the store is intact


def test_fleet_window_nvidia_vendor_contradicting_the_nodes_gpus_blocks_uncaptured(
    kube_cluster: ClusterDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _store, st = _setup(kube_cluster, tmp_path)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", kube_cluster.url)
    canary = _plan_and_start(kube_cluster, tmp_path, kubeconfig, st)
    capsys.readouterr()
    code = run(["window", "validate", "--id", WINDOW, *st, *JOB_OPTS, "--phases", "0,1,2", "--vendor", "amd",
                "--policy", str(tmp_path / "policy.yaml"), "--kubeconfig", str(kubeconfig)])  # fmt: skip
    out = capsys.readouterr()
    assert code == 1, out.out + out.err
    assert "--vendor amd says AMD, but the node advertises nvidia.com/gpu (NVIDIA)" in out.out + out.err
    assert not kube_cluster.objects("jobs", NS, "batch")  # nothing ran on a node whose vendor is in doubt
    assert canary in out.out + out.err


def test_fleet_window_validate_unknown_vendor_is_a_usage_error(tmp_path: Path) -> None:
    code = run(["window", "validate", "--id", WINDOW, "--store", str(tmp_path / "none"), "--vendor", "intel"])
    assert code == 2
