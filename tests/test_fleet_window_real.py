"""The README's change window end to end on the real control plane, as the upgrade-gate service account.

16 fake GPU nodes of two classes registered with the real kube-apiserver; their pods run as local
processes through the tests' node agent (each node's fake tools on PATH, its sysfs under its host
root); Jobs are run by the real Job controller, the MPIJob workers placed by the real kube-scheduler.
Every command runs through `upgrade_gate.cli.main.run` with a kubeconfig holding a token of the
`upgrade-gate` service account (deploy/rbac.yaml's rights). Also: the API server stopped for 30 s in
the middle of `window validate` (exit 4, no labels, the same command afterwards reaches a verdict).
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.k8s.realcluster import NS, RealCluster
from tests.test_validate_support import FAST, snapshot_of
from upgrade_gate.cli.main import run
from upgrade_gate.fakenode import FakeNode, Faults, NodeSpec, build_fake_node, faults, mi300x_node
from upgrade_gate.fleet.kube import KubeClient
from upgrade_gate.fleet.kube import api as kube_api
from upgrade_gate.model import NodeInfo, NodeName, replace
from upgrade_gate.store.gitstore import BaselineStore

pytest_plugins = ["tests.k8s.fixtures"]  # real_cluster, real_cluster_session

REPO = Path(__file__).resolve().parent.parent
PLAN = REPO / "examples" / "plans" / "rocm-6.1.3-to-6.2.0.yaml"
WINDOW = "rocm-6.1.3-to-6.2.0"
CLASS_A, CLASS_B = "mi300x-8gpu", "mi300x-8gpu-rack2"
NODES = {**{f"gpu-a-{i:02d}": CLASS_A for i in range(1, 9)}, **{f"gpu-b-{i:02d}": CLASS_B for i in range(1, 9)}}
CVF = {**FAST, "UPGRADE_GATE_SAMPLES": "2"}
BY_JOB = ("gpu-a-02", "gpu-b-02")
JOB_OPTS = [
    "--job-python",
    sys.executable,
    "--job-command",
    f"{sys.executable} -m upgrade_gate",
    "--poll-interval",
    "0.1",
]
CVF_KEYS = (
    "amd.com/gpu-hw-acceptance",
    "amd.com/gpu-mesh-validation",
    "amd.com/nic-health",
    "amd.com/rail-bandwidth",
    "amd.com/cluster-validation-status",
)
SA_USER = "system:serviceaccount:upgrade-gate:upgrade-gate"


def spec_of(name: str, **kw: str) -> NodeSpec:
    """The node's healthy spec (identity unique per node), optionally on other versions."""
    return mi300x_node(name, seed=sorted(NODES).index(name) + 1, **kw)  # type: ignore[arg-type]


def changed(name: str) -> NodeSpec:
    """The node after the change the plan describes (ROCm 6.2.0 with its driver)."""
    return spec_of(name, rocm_version="6.2.0", driver_version="6.8.5")


def busy_pod(node: str) -> dict[str, object]:
    """A training pod holding every GPU of `node` (team-a)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"training-{node}", "namespace": "team-a"},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "t", "image": "x", "command": ["sshd"], "resources": {"limits": {"amd.com/gpu": "8"}}}
            ],
        },
    }


@dataclass
class Env:
    """One test's cluster, kubeconfig and store."""

    cluster: RealCluster
    kubeconfig: Path
    store: Path
    root: Path

    def cli(self, *args: str) -> int:
        """Run one CLI command as the upgrade-gate service account."""
        return run([*args, "--kubeconfig", str(self.kubeconfig)])

    def apply_change(self, spec: NodeSpec) -> None:
        """What the operator does to a canary: the node now runs the new software (a new fake node)."""
        fake = build_fake_node(self.root / "changed" / spec.name, spec, Faults())
        self.cluster.add_node(spec.name, env=fake.env(os.environ), host_root=fake.host_root)

    def cvf_labels(self, node: str) -> dict[str, str]:
        return {k: v for k, v in self.cluster.labels(node).items() if k.startswith("amd.com/")}


def add_nodes(cluster: RealCluster, fakes: dict[str, FakeNode]) -> None:
    """Register the 16 nodes; gpu-b-01 is already cordoned by someone else."""
    for name, cls in NODES.items():
        fake = fakes[name]
        cluster.add_node(
            name, node_class=cls, env=fake.env(os.environ), host_root=fake.host_root, unschedulable=name == "gpu-b-01"
        )
    cluster.wait_nodes_settled(list(NODES))


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, FakeNode]:
    root = tmp_path_factory.mktemp("fleet-real")
    return {name: build_fake_node(root / name, spec_of(name), Faults()) for name in NODES}


@pytest.fixture(scope="module")
def baselines(
    real_cluster_session: RealCluster, fakes: dict[str, FakeNode], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A store with the 16 nodes' baselines, taken once per module: two by capture Jobs (`fleet
    snapshot`, as on a real cluster), the other fourteen with the same capture code in process."""
    cluster = real_cluster_session
    root = tmp_path_factory.mktemp("fleet-real-store")
    store = root / "store"
    try:
        add_nodes(cluster, fakes)
        kubeconfig = cluster.kubeconfig(root / "kubeconfig")
        selector = f"kubernetes.io/hostname in ({','.join(BY_JOB)})"
        argv = ["fleet", "snapshot", "--store", str(store), "--tag", "rocm-6.1.3", "--selector", selector]
        assert run([*argv, *JOB_OPTS, "--kubeconfig", str(kubeconfig)]) == 0
    finally:
        cluster.reset()
    others = [
        replace(snapshot_of(fakes[n]), node=NodeInfo(name=NodeName(n), node_class=NODES[n]))
        for n in NODES
        if n not in BY_JOB
    ]
    with BaselineStore(store) as st:
        assert sorted(st.nodes()) == sorted(BY_JOB)
        st.save(others, message="baselines of the other nodes")
    return store


@pytest.fixture
def env(real_cluster: RealCluster, fakes: dict[str, FakeNode], baselines: Path, tmp_path: Path) -> Iterator[Env]:
    """16 nodes, the CVF ConfigMap, busy nodes, and a copy of the module's baseline store."""
    add_nodes(real_cluster, fakes)
    real_cluster.set_configmap("cluster-validation-config", NS, CVF)
    real_cluster.cp.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    kubeconfig = real_cluster.kubeconfig(tmp_path / "kubeconfig")
    store = tmp_path / "store"
    shutil.copytree(baselines, store)
    env = Env(real_cluster, kubeconfig, store, tmp_path)
    # the workloads: gpu-a-01 runs one (the plan prefers idle gpu-a-02), and so does every eligible node
    # of class B, so its canary is busy and `window start` has to drain it
    for node in ("gpu-a-01", *(f"gpu-b-{i:02d}" for i in range(2, 9))):
        real_cluster.cp.apply(busy_pod(node))
    client = KubeClient.from_kubeconfig(str(kubeconfig))
    real_cluster.wait_for("the workloads to run", lambda: client.gpu_pods_on_node("gpu-b-08"))
    client.close()
    yield env


def test_real_window_plan_start_validate_promote(
    env: Env, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    st = ["--store", str(env.store)]
    monkeypatch.setenv("UPGRADE_GATE_NOW", "2026-12-01T00:00:00Z")
    capsys.readouterr()
    assert env.cli("window", "plan", "--plan", str(PLAN), *st) == 0
    out = capsys.readouterr().out
    assert "canary gpu-a-02  class mi300x-8gpu  idle" in out, out
    assert "canary gpu-b-02  class mi300x-8gpu-rack2  busy: team-a/training-gpu-b-02" in out, out
    canaries = ("gpu-a-02", "gpu-b-02")

    assert env.cli("window", "start", "--id", WINDOW, *st, "--poll-interval", "0.1") == 0
    assert "evicted team-a/training-gpu-b-02" in capsys.readouterr().out
    for name in canaries:
        node = env.cluster.node(name)
        assert node["spec"]["unschedulable"] is True
        taints = [t for t in node["spec"].get("taints") or [] if t["key"] == "upgrade-gate/canary"]
        assert taints == [{"key": "upgrade-gate/canary", "value": WINDOW, "effect": "NoSchedule"}]
        assert node["metadata"]["annotations"]["upgrade-gate/cordoned-by"] == WINDOW
    pods = {p["metadata"]["name"] for p in env.cluster.list("/api/v1/namespaces/team-a/pods")}
    assert "training-gpu-b-02" not in pods and "training-gpu-b-03" in pods  # only the canary was drained

    for name in canaries:
        env.apply_change(changed(name))
    assert env.cli("window", "validate", "--id", WINDOW, *st, *JOB_OPTS) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert f"window {WINDOW}: soaking" in out and "validation PASS" in out  # the plan's 72 h soak
    for name in canaries:
        labels = env.cluster.labels(name)
        for key in CVF_KEYS:
            assert labels[key] == "passed", (key, labels)
        assert labels["amd.com/cluster-validation-candidate"] == "true"
        notes = env.cluster.annotations(name)
        assert float(notes["amd.com/gpu-mesh-validation-measured-bw"]) > 100
        assert not any(k.endswith("-failure-reason") for k in notes)
    created = [
        e
        for e in env.cluster.cp.audit(SA_USER)
        if e["verb"] == "create" and (e.get("objectRef") or {}).get("resource") == "mpijobs"
    ]
    assert len(created) >= 4  # phase 5: all_reduce and all_gather, 2 samples each (per window so far)

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
        assert not node["spec"].get("unschedulable")
        assert not [t for t in node["spec"].get("taints") or [] if t["key"] == "upgrade-gate/canary"]
        assert env.cluster.labels(name)["upgrade-gate/window-state"] == "promoted"
    assert env.cluster.node("gpu-b-01")["spec"]["unschedulable"] is True  # someone else's cordon stays
    with BaselineStore(env.store) as store:
        new = store.load("gpu-a-02", "rocm-6.2.0")
        assert new.software.rocm_version is not None and new.software.rocm_version.startswith("6.2.0")


def test_real_window_reversed_gpu_order_blocks_and_rolls_back(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    st = ["--store", str(env.store)]
    assert env.cli("window", "plan", "--plan", str(PLAN), *st) == 0
    assert env.cli("window", "start", "--id", WINDOW, *st, "--poll-interval", "0.1") == 0
    env.apply_change(changed("gpu-a-02"))
    env.apply_change(faults.reverse_enumeration(changed("gpu-b-02")))
    capsys.readouterr()
    assert env.cli("window", "validate", "--id", WINDOW, *st, *JOB_OPTS) == 1
    out = capsys.readouterr().out
    assert "gpu-b-02: BLOCK" in out and "gpu-a-02: PASS" in out and "device.order_changed" in out
    assert env.cli("window", "promote", "--id", WINDOW, *st) == 1
    assert env.cli("window", "rollback", "--id", WINDOW, *st, "--reason", "GPU order reversed on gpu-b-02") == 0
    for name in ("gpu-a-02", "gpu-b-02"):
        node = env.cluster.node(name)
        assert node["spec"]["unschedulable"] is True
        # kept; the real node lifecycle controller adds node.kubernetes.io/unschedulable beside it
        assert "upgrade-gate/canary" in [t["key"] for t in node["spec"].get("taints") or []]
        assert env.cluster.labels(name)["upgrade-gate/window-state"] == "rolled-back"


def test_real_api_server_outage_mid_validate_is_exit_4_and_resumable(
    env: Env, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """kube-apiserver stopped while the phases run, and kept down until `validate` has given up: exit 4,
    no CVF label written, the window still `started`; the same command afterwards continues to a verdict.
    (The outage ends when validate has ended, not after a fixed 30 s: a longer outage only lengthens the
    real controllers' watch back-off afterwards. The first validate retries the API with a shorter budget
    than the default (`RetryPolicy`'s 6 attempts, ~20 s here): the same retry loop and error mapping, and
    half the outage, so the resumed run waits ~20 s for its first Job instead of ~38 s.)"""
    st = ["--store", str(env.store)]
    assert env.cli("window", "plan", "--plan", str(PLAN), *st) == 0
    assert env.cli("window", "start", "--id", WINDOW, *st, "--poll-interval", "0.1") == 0
    for name in ("gpu-a-02", "gpu-b-02"):
        env.apply_change(changed(name))
    cp = env.cluster.cp
    codes: list[int] = []
    short = functools.partial(kube_api.RetryPolicy, max_attempts=4, base_delay_s=0.25)
    monkeypatch.setattr(kube_api, "RetryPolicy", short)  # the clients `validate` makes; undone below
    validate = threading.Thread(
        target=lambda: codes.append(env.cli("window", "validate", "--id", WINDOW, *st, *JOB_OPTS))
    )
    validate.start()

    def phases_running() -> bool:
        jobs = cp.request("GET", f"/apis/batch/v1/namespaces/{NS}/jobs")["items"]
        return any(j["metadata"]["labels"].get("upgrade-gate/purpose", "").startswith("phase") for j in jobs)

    env.cluster.wait_for("the phase Jobs", phases_running, timeout=300)
    cp.stop_apiserver()
    validate.join(timeout=120)  # the API stays down until validate has given up
    cp.start_apiserver()
    monkeypatch.undo()  # the resumed run retries with the default policy
    assert not validate.is_alive() and codes == [4], codes
    assert "Kubernetes API unreachable" in capsys.readouterr().err
    for name in ("gpu-a-02", "gpu-b-02"):
        assert env.cvf_labels(name) == {}, name  # no `failed` labels on healthy canaries
        assert env.cluster.labels(name)["upgrade-gate/window-state"] == "started"
    assert run(["window", "status", "--id", WINDOW, *st]) == 0
    assert f"window {WINDOW}: started" in capsys.readouterr().out

    assert env.cli("window", "validate", "--id", WINDOW, *st, *JOB_OPTS) == 0
    assert "validation PASS" in capsys.readouterr().out
    for name in ("gpu-a-02", "gpu-b-02"):
        assert env.cvf_labels(name)["amd.com/cluster-validation-status"] == "passed"
