"""The soak, the waves, the class-wide cap and `fleet watch` on the real control plane.

The same real kube-apiserver, controllers and node agent as tests/test_fleet_window_real.py, one class
of 20 fake MI300X nodes, every command run as the `upgrade-gate` service account, and one clock:
`UPGRADE_GATE_NOW`, so a 72-hour soak with 6-hour observations runs in seconds.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.k8s.realcluster import NS, RealCluster
from tests.test_fleet_window_real import CVF, JOB_OPTS
from tests.test_validate_support import snapshot_of
from upgrade_gate.cli.main import run
from upgrade_gate.fakenode import FakeNode, Faults, NodeSpec, build_fake_node, faults, mi300x_node
from upgrade_gate.model import NodeInfo, NodeName, replace
from upgrade_gate.store.gitstore import BaselineStore

pytest_plugins = ["tests.k8s.fixtures"]  # real_cluster

CLASS = "mi300x-8gpu"
NODES = [f"gpu-{i:02d}" for i in range(1, 21)]
START = "2026-12-01T00:00:00Z"


def spec_of(name: str, **kw: str) -> NodeSpec:
    return mi300x_node(name, seed=NODES.index(name) + 1, **kw)  # type: ignore[arg-type]


def changed(name: str) -> NodeSpec:
    return spec_of(name, rocm_version="6.2.0", driver_version="6.8.5")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, FakeNode], Path]:
    """20 fake nodes of one class and a store with their baselines (captured in-process)."""
    root = tmp_path_factory.mktemp("soak")
    fakes = {n: build_fake_node(root / n, spec_of(n), Faults()) for n in NODES}
    store = root / "store"
    snaps = [replace(snapshot_of(fakes[n]), node=NodeInfo(name=NodeName(n), node_class=CLASS)) for n in NODES]
    with BaselineStore(store) as st:
        st.init()
        st.save(snaps, tag="rocm-6.1.3", message="baselines")
    return fakes, store


@dataclass
class Env:
    cluster: RealCluster
    kubeconfig: Path
    store: Path
    root: Path
    monkeypatch: pytest.MonkeyPatch

    def cli(self, *args: str, at: str | None = None) -> int:
        """One command as the upgrade-gate service account, optionally at another time."""
        if at is not None:
            self.monkeypatch.setenv("UPGRADE_GATE_NOW", at)
        return run([*args, "--kubeconfig", str(self.kubeconfig)])

    def plan(self, name: str, **extra: object) -> Path:
        doc: dict[str, object] = {
            "id": name,
            "change": {"rocm": {"from": "6.1.3", "to": "6.2.0"}, "driver": {"from": "6.7.0", "to": "6.8.5"}},
            "canaries": {"max_fraction": 0.10, "min": 1},
        }
        doc.update(extra)
        path = self.root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc), encoding="utf-8")
        return path

    def apply_change(self, spec: NodeSpec) -> None:
        fake = build_fake_node(self.root / "changed" / spec.name, spec, Faults())
        self.cluster.add_node(spec.name, env=fake.env(os.environ), host_root=fake.host_root)

    def window(self, window: str) -> dict[str, object]:
        with BaselineStore(self.store) as st:
            return dict(st.read_document(f"windows/{window}.json"))

    def canaries(self, window: str) -> list[str]:
        return [c["node"] for c in self.window(window)["canaries"]]  # type: ignore[attr-defined]


@pytest.fixture
def env(
    real_cluster: RealCluster,
    fleet: tuple[dict[str, FakeNode], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Env]:
    import shutil

    fakes, template = fleet
    for name in NODES:
        fake = fakes[name]
        real_cluster.add_node(name, node_class=CLASS, env=fake.env(os.environ), host_root=fake.host_root)
    real_cluster.wait_nodes_settled(NODES)
    real_cluster.set_configmap("cluster-validation-config", NS, CVF)
    store = tmp_path / "store"
    shutil.copytree(template, store)
    monkeypatch.setenv("UPGRADE_GATE_NOW", START)
    kubeconfig = real_cluster.kubeconfig(tmp_path / "kubeconfig")
    yield Env(real_cluster, kubeconfig, store, tmp_path, monkeypatch)


def _cronjobs(env: Env) -> list[str]:
    return [c["metadata"]["name"] for c in env.cluster.list(f"/apis/batch/v1/namespaces/{NS}/cronjobs")]


def _condition(env: Env, node: str) -> dict[str, str] | None:
    conditions = env.cluster.node(node)["status"].get("conditions") or []
    return next((c for c in conditions if c["type"] == "UpgradeGateDrift"), None)


def test_soak_72h_drift_at_hour_30_blocks_promote(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    st = ["--store", str(env.store)]
    plan = env.plan("soak-72h", soak={"duration": "72h", "every": "6h"})
    assert env.cli("window", "plan", "--plan", str(plan), *st) == 0
    assert env.cli("window", "start", "--id", "soak-72h", *st, "--poll-interval", "0.1") == 0
    canaries = env.canaries("soak-72h")
    assert len(canaries) == 2  # 10% of 20
    for name in canaries:
        env.apply_change(changed(name))
    assert env.cli("window", "validate", "--id", "soak-72h", *st, *JOB_OPTS) == 0
    assert "upgrade-gate-soak-soak-72h" in _cronjobs(env)  # the observations' CronJob
    capsys.readouterr()
    assert env.cli("window", "observe", "--id", "soak-72h", *st, "--if-due", at="2026-12-01T05:00:00Z") == 0
    assert "no observation due before 2026-12-01T06:00:00Z" in capsys.readouterr().out
    for at in ("2026-12-01T06:00:00Z", "2026-12-01T12:00:00Z", "2026-12-01T18:00:00Z", "2026-12-02T00:00:00Z"):
        assert env.cli("window", "observe", "--id", "soak-72h", *st, *JOB_OPTS, at=at) == 0
    assert env.cli("window", "promote", "--id", "soak-72h", *st, at="2026-12-02T01:00:00Z") == 3  # 25 h of 72
    assert "soak has run 25h of 72h" in capsys.readouterr().err
    # hour 30: the first canary's GPUs re-enumerate (a driver reload after a PF reset, say)
    env.apply_change(faults.reverse_enumeration(changed(canaries[0])))
    capsys.readouterr()
    assert env.cli("window", "observe", "--id", "soak-72h", *st, *JOB_OPTS, at="2026-12-02T06:00:00Z") == 1
    out = capsys.readouterr().out
    assert "observation BLOCK" in out and "now blocked" in out and "device.order_changed" in out
    assert env.cluster.labels(canaries[0])["upgrade-gate/window-state"] == "blocked"
    assert env.cli("window", "promote", "--id", "soak-72h", *st, at="2026-12-04T00:00:00Z") == 1
    assert env.cli("window", "promote", "--id", "soak-72h", *st, "--skip-soak", "--reason", "x") == 1
    capsys.readouterr()
    assert run(["window", "status", "--id", "soak-72h", *st]) == 0
    out = capsys.readouterr().out
    assert "5 observation(s), 1 blocked" in out
    assert env.cli("window", "rollback", "--id", "soak-72h", *st, "--reason", "order changed at hour 30") == 0
    assert "upgrade-gate-soak-soak-72h" not in _cronjobs(env)


def test_soak_skip_is_recorded_and_promote_removes_the_cronjob(env: Env) -> None:
    st = ["--store", str(env.store)]
    plan = env.plan("skip", soak={"duration": "72h", "every": "6h"})
    assert env.cli("window", "plan", "--plan", str(plan), *st) == 0
    assert env.cli("window", "start", "--id", "skip", *st, "--poll-interval", "0.1") == 0
    for name in env.canaries("skip"):
        env.apply_change(changed(name))
    assert env.cli("window", "validate", "--id", "skip", *st, *JOB_OPTS) == 0
    assert env.cli("window", "promote", "--id", "skip", *st, "--skip-soak") == 2  # a reason is required
    assert env.cli("window", "promote", "--id", "skip", *st, "--skip-soak", "--reason", "CVE fix, 24 h approved") == 0
    doc = env.window("skip")
    assert doc["soak"]["skipped"]["reason"] == "CVE fix, 24 h approved"  # type: ignore[index]
    assert [h["action"] for h in doc["history"]][-2:] == ["skip-soak", "promote"]  # type: ignore[attr-defined]
    assert "upgrade-gate-soak-skip" not in _cronjobs(env)


def test_waves_10_25_100_stop_at_the_wave_where_a_node_breaks(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    st = ["--store", str(env.store)]
    plan = env.plan("waves", soak={"duration": "0s"}, waves=[0.10, 0.25, 1.0])
    assert env.cli("window", "plan", "--plan", str(plan), *st) == 0
    assert env.cli("window", "start", "--id", "waves", *st, "--poll-interval", "0.1") == 0
    wave1 = env.canaries("waves")
    for name in wave1:
        env.apply_change(changed(name))
    assert env.cli("window", "validate", "--id", "waves", *st, *JOB_OPTS) == 0
    assert env.cli("window", "promote", "--id", "waves", *st) == 0
    capsys.readouterr()
    assert env.cli("window", "expand", "--id", "waves", *st) == 0
    out = capsys.readouterr().out
    wave2 = env.canaries("waves")
    assert "wave 1 started" in out and len(wave2) == 2 and not set(wave2) & set(wave1)  # cap 2 of 20
    assert "needs 3 more node(s); 2 taken now" in out
    for name in wave2:
        assert env.cluster.node(name)["spec"]["unschedulable"] is True
    env.apply_change(changed(wave2[0]))
    env.apply_change(faults.reverse_enumeration(changed(wave2[1])))
    assert env.cli("window", "validate", "--id", "waves", *st, *JOB_OPTS) == 1
    assert env.cli("window", "expand", "--id", "waves", *st) == 3  # blocked: the rollout stops here
    capsys.readouterr()
    assert run(["window", "status", "--id", "waves", *st]) == 0
    assert "the gate blocked in wave 1" in capsys.readouterr().out
    doc = env.window("waves")
    assert doc["rollout"]["completed"] == sorted(wave1)  # type: ignore[index]
    with BaselineStore(env.store) as store:
        assert store.load(wave1[0], "rocm-6.2.0").software.rocm_version.startswith("6.2.0")  # type: ignore[union-attr]


def test_two_windows_on_one_class_never_exceed_the_cap(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    st = ["--store", str(env.store)]
    assert env.cli("window", "plan", "--plan", str(env.plan("first")), *st) == 0
    capsys.readouterr()
    assert env.cli("window", "plan", "--plan", str(env.plan("second")), *st) == 3  # the class's 2 are held
    assert "disruption cap 2: 2 node(s) held by open window(s) first" in capsys.readouterr().err
    third = env.plan("third", canaries={"max_fraction": 0.20, "min": 1})
    assert env.cli("window", "plan", "--plan", str(third), *st) == 0  # its cap is 4: 2 more
    held = env.canaries("first") + env.canaries("third")
    assert len(held) == 4 and len(set(held)) == 4


def test_fleet_watch_sets_and_clears_the_drift_condition(
    env: Env, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    st = ["--store", str(env.store)]
    prom = tmp_path / "textfile" / "upgrade_gate.prom"
    watched = ",".join(NODES[:3])
    opts = [*st, "--selector", f"kubernetes.io/hostname in ({watched})", "--textfile", str(prom), *JOB_OPTS]
    env.apply_change(faults.reverse_enumeration(spec_of(NODES[1])))  # drift nobody planned
    assert env.cli("fleet", "watch", *opts) == 1
    out = capsys.readouterr().out
    assert f"{NODES[1]}" in out and "device.order_changed" in out
    drift = _condition(env, NODES[1])
    assert drift is not None and drift["status"] == "True" and drift["reason"] == "device.order_changed"
    clean = _condition(env, NODES[0])
    assert clean is not None and clean["status"] == "False" and clean["reason"] == "NoDrift"
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text(encoding="utf-8"))}
    blocked = {s.labels["node"]: s.value for s in families["upgrade_gate_blocked"].samples}
    assert blocked == {NODES[0]: 0.0, NODES[1]: 1.0, NODES[2]: 0.0}
    env.apply_change(spec_of(NODES[1]))  # fixed: the order is back
    assert env.cli("fleet", "watch", *opts, at="2026-12-01T00:30:00Z") == 0
    cleared = _condition(env, NODES[1])
    assert cleared is not None and cleared["status"] == "False"
