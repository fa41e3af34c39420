"""The change window end to end on a simulated 16-node cluster of two node classes, through the CLI.

Every command runs through `upgrade_gate.cli.main.run` with a kubeconfig that points the real
`kubernetes` client at the API server double; each simulated node runs its Jobs on its own fake node
(fake tools on PATH, sysfs under its host root). The baselines are taken once per module with
`fleet snapshot` (capture Jobs on all 16 nodes) and copied into each test's store. The commands are the
ones docs/kubernetes.md shows, with `--job-python/--job-command` naming this interpreter instead of the
image's and a short `--poll-interval`.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.k8s.cluster import ClusterDouble
from tests.k8s.kubelet import PODS, SimNode
from tests.test_validate_support import FAST, snapshot_of
from upgrade_gate.cli.main import run
from upgrade_gate.fakenode import FakeNode, Faults, NodeSpec, build_fake_node, faults, mi300x_node
from upgrade_gate.model import NodeInfo, NodeName, replace
from upgrade_gate.store.gitstore import BaselineStore

pytest_plugins = ["tests.k8s.fixtures"]  # kube_cluster

REPO = Path(__file__).resolve().parent.parent
PLAN = REPO / "examples" / "plans" / "rocm-6.1.3-to-6.2.0.yaml"
WINDOW = "rocm-6.1.3-to-6.2.0"
NS = "upgrade-gate"
CLASS_A, CLASS_B = "mi300x-8gpu", "mi300x-8gpu-rack2"
NODES = {**{f"gpu-a-{i:02d}": CLASS_A for i in range(1, 9)}, **{f"gpu-b-{i:02d}": CLASS_B for i in range(1, 9)}}
CVF = {**FAST, "UPGRADE_GATE_SAMPLES": "2"}
BY_JOB = ("gpu-a-02", "gpu-a-03", "gpu-b-02", "gpu-b-03")
JOB_OPTS = ["--job-python", sys.executable, "--job-command", f"{sys.executable} -m upgrade_gate",
            "--poll-interval", "0.05"]  # fmt: skip


def spec_of(name: str, **kw: str) -> NodeSpec:
    """The node's healthy spec (identity unique per node), optionally on other versions."""
    return mi300x_node(name, seed=sorted(NODES).index(name) + 1, **kw)  # type: ignore[arg-type]


def changed(name: str) -> NodeSpec:
    """The node after the change the plan describes (ROCm 6.2.0 with its driver)."""
    return spec_of(name, rocm_version="6.2.0", driver_version="6.8.5")


def add_nodes(cluster: ClusterDouble, fakes: dict[str, FakeNode]) -> None:
    """Register the 16 nodes; gpu-b-01 is already cordoned by someone else."""
    for name, cls in NODES.items():
        fake = fakes[name]
        cluster.add_node(name, node_class=cls, env=fake.env(os.environ), host_root=fake.host_root,
                         unschedulable=name == "gpu-b-01")  # fmt: skip


def apply_change(cluster: ClusterDouble, root: Path, spec: NodeSpec) -> FakeNode:
    """What the operator does to a canary: the node now runs the new software (a new fake node)."""
    fake = build_fake_node(root / "changed" / spec.name, spec, Faults())
    cluster.kubelet.nodes[spec.name] = SimNode(name=spec.name, env=fake.env(os.environ), host_root=fake.host_root)
    return fake


def write_kubeconfig(path: Path, url: str) -> Path:
    """A kubeconfig for the test API server (a real cluster's has a CA and a token instead)."""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
        f"clusters:\n- name: test\n  cluster:\n    server: {url}\n"
        "users:\n- name: test\n  user: {}\n"
        "contexts:\n- name: test\n  context: {cluster: test, user: test}\n",
        encoding="utf-8",
    )
    return path


@dataclass
class Env:
    """One test's cluster, kubeconfig and store."""

    cluster: ClusterDouble
    kubeconfig: Path
    store: Path
    root: Path

    def cli(self, *args: str) -> int:
        """Run one CLI command against this cluster and store."""
        return run([*args, "--kubeconfig", str(self.kubeconfig)])


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, FakeNode], Path]:
    """16 fake nodes and a store with their baselines.

    Two nodes per class are captured with `fleet snapshot` (capture Jobs, as on a real cluster); the
    other twelve with the same capture code run in-process, which keeps the module fast.
    """
    root = tmp_path_factory.mktemp("fleet")
    fakes = {name: build_fake_node(root / name, spec_of(name), Faults()) for name in NODES}
    store = root / "store"
    cluster = ClusterDouble(root / "k8s")
    cluster.start()
    try:
        add_nodes(cluster, fakes)
        kubeconfig = write_kubeconfig(root / "kubeconfig", cluster.url)
        code = run(["fleet", "snapshot", "--store", str(store), "--tag", "rocm-6.1.3", "--kubeconfig",
                    str(kubeconfig), "--selector", f"kubernetes.io/hostname in ({','.join(BY_JOB)})",
                    *JOB_OPTS])  # fmt: skip
        assert code == 0
    finally:
        cluster.stop()
    others = [replace(snapshot_of(fakes[n]), node=NodeInfo(name=NodeName(n), node_class=NODES[n]))
              for n in NODES if n not in BY_JOB]  # fmt: skip
    with BaselineStore(store) as st:
        assert sorted(st.nodes()) == sorted(BY_JOB)
        st.save(others, message="baselines of the other nodes")
    return fakes, store


@pytest.fixture
def env(kube_cluster: ClusterDouble, baseline: tuple[dict[str, FakeNode], Path], tmp_path: Path) -> Iterator[Env]:
    fakes, template = baseline
    add_nodes(kube_cluster, fakes)
    kube_cluster.set_configmap("cluster-validation-config", NS, CVF)
    busy = {"metadata": {"name": "training-0"},
            "spec": {"nodeName": "gpu-a-01", "containers": [{"name": "t", "image": "x",
                     "resources": {"limits": {"amd.com/gpu": "8"}}}]},
            "status": {"phase": "Running"}}  # fmt: skip
    kube_cluster.api.store.create(PODS, "team-a", busy)
    store = tmp_path / "store"
    shutil.copytree(template, store)
    yield Env(kube_cluster, write_kubeconfig(tmp_path / "kubeconfig", kube_cluster.url), store, tmp_path)


def _taints(cluster: ClusterDouble, name: str) -> list[dict[str, str]]:
    return list(cluster.node(name)["spec"].get("taints") or [])


def test_fleet_window_plan_start_validate_promote(
    env: Env, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    st = ["--store", str(env.store)]
    monkeypatch.setenv("UPGRADE_GATE_NOW", "2026-12-01T00:00:00Z")
    assert env.cli("window", "plan", "--plan", str(PLAN), *st) == 0
    out = capsys.readouterr().out
    # one canary per class of 8 (10% rounds down, at least one): idle gpu-a-02 over busy gpu-a-01,
    # and never gpu-b-01, which someone else cordoned
    assert "canary gpu-a-02  class mi300x-8gpu  idle" in out and "canary gpu-b-02  class mi300x-8gpu-rack2" in out
    assert f"window {WINDOW} (change rocm-6.1.3-to-6.2.0): planned" in out
    canaries = ("gpu-a-02", "gpu-b-02")

    assert env.cli("window", "start", "--id", WINDOW, *st) == 0
    for name in canaries:
        node = env.cluster.node(name)
        assert node["spec"]["unschedulable"] is True
        assert _taints(env.cluster, name) == [
            {"key": "upgrade-gate/canary", "value": "rocm-6.1.3-to-6.2.0", "effect": "NoSchedule"}
        ]
        assert node["metadata"]["labels"]["upgrade-gate/canary"] == "rocm-6.1.3-to-6.2.0"
        assert node["metadata"]["labels"]["upgrade-gate/window-state"] == "started"
        assert node["metadata"]["annotations"]["upgrade-gate/cordoned-by"] == WINDOW
    assert env.cluster.node("gpu-a-03")["spec"].get("unschedulable") is None

    for name in canaries:
        apply_change(env.cluster, env.root, changed(name))
    capsys.readouterr()
    assert env.cli("window", "validate", "--id", WINDOW, *st, *JOB_OPTS) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert f"window {WINDOW}: soaking" in out and "validation PASS" in out  # the plan's 72 h soak
    for name in canaries:
        meta = env.cluster.node(name)["metadata"]
        labels = meta["labels"]
        for key in ("amd.com/gpu-hw-acceptance", "amd.com/gpu-mesh-validation", "amd.com/nic-health",
                    "amd.com/rail-bandwidth", "amd.com/cluster-validation-status"):  # fmt: skip
            assert labels[key] == "passed", (key, meta)
        assert labels["amd.com/cluster-validation-candidate"] == "true"
        assert float(meta["annotations"]["amd.com/gpu-mesh-validation-measured-bw"]) > 100
        assert not any(k.endswith("-failure-reason") for k in meta["annotations"])
        assert labels["upgrade-gate/window-state"] == "soaking"
    mpijobs = env.cluster.api.seen("create", "mpijobs")
    assert len(mpijobs) == 4  # phase 5: all_reduce and all_gather, 2 samples each

    capsys.readouterr()
    assert env.cli("window", "promote", "--id", WINDOW, *st) == 3  # the soak has just begun
    assert "0 of at least 2 observations" in capsys.readouterr().err
    for at in ("2026-12-01T06:00:00Z", "2026-12-04T00:00:00Z"):  # two observations; the second at 72 h
        monkeypatch.setenv("UPGRADE_GATE_NOW", at)
        assert env.cli("window", "observe", "--id", WINDOW, *st, *JOB_OPTS) == 0, capsys.readouterr()
        assert "observation PASS" in capsys.readouterr().out
    assert env.cli("window", "promote", "--id", WINDOW, *st) == 0
    assert "tagged rocm-6.2.0" in capsys.readouterr().out
    for name in canaries:
        node = env.cluster.node(name)
        assert not node["spec"].get("unschedulable") and _taints(env.cluster, name) == []
        labels = node["metadata"]["labels"]
        assert "upgrade-gate/canary" not in labels and labels["upgrade-gate/change-id"] == "rocm-6.1.3-to-6.2.0"
        assert labels["upgrade-gate/window-state"] == "promoted"
        assert "upgrade-gate/cordoned-by" not in node["metadata"]["annotations"]
    assert env.cluster.node("gpu-b-01")["spec"]["unschedulable"] is True  # someone else's cordon stays

    with BaselineStore(env.store) as store:
        new = store.load("gpu-a-02", "rocm-6.2.0")
        assert new.software.rocm_version is not None and new.software.rocm_version.startswith("6.2.0")
        assert store.load("gpu-a-02", "rocm-6.1.3").software.rocm_version.startswith("6.1.3")  # type: ignore[union-attr]
    assert env.cli("window", "promote", "--id", WINDOW, *st) == 3  # promoted already: wrong state
    assert "is promoted" in capsys.readouterr().err

    assert run(["window", "status", *st]) == 0
    assert f"{WINDOW}" in capsys.readouterr().out
    assert env.cli("fleet", "status") == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["NAME", "STATUS", "NODE-CLASS", "GPU-HW-ACCEPTANCE", "GPU-MESH-VALIDATION",
                                "NIC-HEALTH", "RAIL-BANDWIDTH", "CLUSTER-VALIDATION-STATUS", "CANARY",
                                "WINDOW-STATE", "CHANGE-ID"]  # fmt: skip
    row = next(line.split() for line in table if line.startswith("gpu-a-02"))
    assert row == ["gpu-a-02", "Ready", CLASS_A, *["passed"] * 5, "promoted", "rocm-6.1.3-to-6.2.0"]
    assert next(line for line in table if line.startswith("gpu-b-01")).split()[1] == "Ready,SchedulingDisabled"


def test_fleet_window_reversed_gpu_order_blocks_and_rolls_back(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    st = ["--store", str(env.store)]
    assert env.cli("window", "plan", "--plan", str(PLAN), *st) == 0
    assert env.cli("window", "start", "--id", WINDOW, *st) == 0
    apply_change(env.cluster, env.root, changed("gpu-a-02"))
    apply_change(env.cluster, env.root, faults.reverse_enumeration(changed("gpu-b-02")))
    capsys.readouterr()
    assert env.cli("window", "validate", "--id", WINDOW, *st, *JOB_OPTS) == 1
    out = capsys.readouterr().out
    assert f"window {WINDOW}: blocked" in out and "validation BLOCK" in out
    assert "gpu-b-02: BLOCK" in out and "gpu-a-02: PASS" in out
    assert "device.order_changed" in out
    assert env.cluster.node("gpu-b-02")["metadata"]["labels"]["upgrade-gate/window-state"] == "blocked"

    assert env.cli("window", "promote", "--id", WINDOW, *st) == 1  # the gate said no
    assert "validation BLOCKED; promote only follows a PASS" in capsys.readouterr().err
    assert env.cli("window", "rollback", "--id", WINDOW, *st, "--reason", "GPU order reversed on gpu-b-02") == 0
    for name in ("gpu-a-02", "gpu-b-02"):
        node = env.cluster.node(name)
        assert node["spec"]["unschedulable"] is True and len(_taints(env.cluster, name)) == 1  # kept
        assert node["metadata"]["labels"]["upgrade-gate/window-state"] == "rolled-back"
        assert node["metadata"]["annotations"]["upgrade-gate/rollback-reason"] == "GPU order reversed on gpu-b-02"
    capsys.readouterr()
    assert run(["window", "status", "--id", WINDOW, *st]) == 0
    out = capsys.readouterr().out
    assert "rolled-back" in out and "rollback reason: GPU order reversed on gpu-b-02" in out
    assert "plan" in out and "start" in out and "validate" in out and "rollback" in out  # history with who/when
