"""The soak, the waves and the class-wide cap through the CLI on a simulated 20-node class.

The same kind of cluster as tests/test_fleet_window.py (the Kubernetes API server double with its
simulated kubelet running each Job on its node's fake tools), one class of 20 MI300X nodes, and one
clock: `UPGRADE_GATE_NOW`, so a 72-hour soak with 6-hour observations runs in seconds.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.k8s.cluster import ClusterDouble
from tests.test_fleet_window import CVF, JOB_OPTS, NS, apply_change, write_kubeconfig
from tests.test_validate_support import snapshot_of
from upgrade_gate.cli.main import run
from upgrade_gate.fakenode import FakeNode, Faults, NodeSpec, build_fake_node, faults, mi300x_node
from upgrade_gate.model import NodeInfo, NodeName
from upgrade_gate.store.gitstore import BaselineStore

pytest_plugins = ["tests.k8s.fixtures"]  # kube_cluster

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
    from dataclasses import replace

    snaps = [replace(snapshot_of(fakes[n]), node=NodeInfo(name=NodeName(n), node_class=CLASS)) for n in NODES]
    with BaselineStore(store) as st:
        st.init()
        st.save(snaps, tag="rocm-6.1.3", message="baselines")
    return fakes, store


@dataclass
class Env:
    cluster: ClusterDouble
    kubeconfig: Path
    store: Path
    root: Path
    monkeypatch: pytest.MonkeyPatch

    def cli(self, *args: str, at: str | None = None) -> int:
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


@pytest.fixture
def env(
    kube_cluster: ClusterDouble,
    fleet: tuple[dict[str, FakeNode], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Env]:
    fakes, template = fleet
    for name in NODES:
        fake = fakes[name]
        kube_cluster.add_node(name, node_class=CLASS, env=fake.env(os.environ), host_root=fake.host_root)
    kube_cluster.set_configmap("cluster-validation-config", NS, CVF)
    store = tmp_path / "store"
    shutil.copytree(template, store)
    monkeypatch.setenv("UPGRADE_GATE_NOW", START)
    yield Env(kube_cluster, write_kubeconfig(tmp_path / "kubeconfig", kube_cluster.url), store, tmp_path, monkeypatch)


def _labels(env: Env, node: str) -> dict[str, str]:
    return dict(env.cluster.node(node)["metadata"]["labels"])


def _canaries(env: Env, window: str) -> list[str]:
    with BaselineStore(env.store) as st:
        doc = st.read_document(f"windows/{window}.json")
    return [c["node"] for c in doc["canaries"]]


def test_soak_drift_at_hour_30_blocks_promote(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    st = ["--store", str(env.store)]
    plan = env.plan("soak-72h", soak={"duration": "72h", "every": "6h"})
    assert env.cli("window", "plan", "--plan", str(plan), *st) == 0
    assert env.cli("window", "start", "--id", "soak-72h", *st) == 0
    canaries = _canaries(env, "soak-72h")
    assert len(canaries) == 2  # 10% of 20
    for name in canaries:
        apply_change(env.cluster, env.root, changed(name))
    assert env.cli("window", "validate", "--id", "soak-72h", *st, *JOB_OPTS) == 0
    for hour in (6, 12, 18, 24):
        assert env.cli("window", "observe", "--id", "soak-72h", *st, *JOB_OPTS, at=f"2026-12-02T{hour - 24:02d}:00:00Z"
                       if hour >= 24 else f"2026-12-01T{hour:02d}:00:00Z") == 0  # fmt: skip
    # hour 30: the first canary's GPUs re-enumerate (a driver reload after a PF reset, say)
    apply_change(env.cluster, env.root, faults.reverse_enumeration(changed(canaries[0])))
    capsys.readouterr()
    assert env.cli("window", "observe", "--id", "soak-72h", *st, *JOB_OPTS, at="2026-12-02T06:00:00Z") == 1
    out = capsys.readouterr().out
    assert "observation BLOCK" in out and "now blocked" in out and "device.order_changed" in out
    assert _labels(env, canaries[0])["upgrade-gate/window-state"] == "blocked"
    assert env.cli("window", "promote", "--id", "soak-72h", *st, at="2026-12-04T00:00:00Z") == 1
    assert env.cli("window", "promote", "--id", "soak-72h", *st, "--skip-soak", "--reason", "x") == 1
    capsys.readouterr()
    assert run(["window", "status", "--id", "soak-72h", *st]) == 0
    out = capsys.readouterr().out
    assert "5 observation(s), 1 blocked" in out and "observe" in out


def test_skip_soak_is_recorded(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    st = ["--store", str(env.store)]
    plan = env.plan("skip", soak={"duration": "72h", "every": "6h"})
    assert env.cli("window", "plan", "--plan", str(plan), *st) == 0
    assert env.cli("window", "start", "--id", "skip", *st) == 0
    for name in _canaries(env, "skip"):
        apply_change(env.cluster, env.root, changed(name))
    assert env.cli("window", "validate", "--id", "skip", *st, *JOB_OPTS) == 0
    assert env.cli("window", "promote", "--id", "skip", *st, "--skip-soak") == 2  # a reason is required
    assert env.cli("window", "promote", "--id", "skip", *st, "--skip-soak", "--reason", "CVE fix, 24 h approved") == 0
    with BaselineStore(env.store) as store:
        doc = store.read_document("windows/skip.json")
    assert doc["soak"]["skipped"]["reason"] == "CVE fix, 24 h approved"
    assert [h["action"] for h in doc["history"]][-2:] == ["skip-soak", "promote"]


def test_waves_stop_at_the_wave_where_a_node_breaks(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    st = ["--store", str(env.store)]
    plan = env.plan("waves", soak={"duration": "0s"}, waves=[0.10, 0.25, 1.0])
    assert env.cli("window", "plan", "--plan", str(plan), *st) == 0
    assert env.cli("window", "start", "--id", "waves", *st) == 0
    wave1 = _canaries(env, "waves")
    for name in wave1:
        apply_change(env.cluster, env.root, changed(name))
    assert env.cli("window", "validate", "--id", "waves", *st, *JOB_OPTS) == 0
    assert env.cli("window", "promote", "--id", "waves", *st) == 0
    capsys.readouterr()
    assert env.cli("window", "expand", "--id", "waves", *st) == 0
    out = capsys.readouterr().out
    wave2 = _canaries(env, "waves")
    assert "wave 1 started" in out and len(wave2) == 2 and not set(wave2) & set(wave1)  # cap 2 of 20
    assert "needs 3 more node(s); 2 taken now" in out
    for name in wave2:
        assert env.cluster.node(name)["spec"]["unschedulable"] is True
    apply_change(env.cluster, env.root, changed(wave2[0]))
    apply_change(env.cluster, env.root, faults.reverse_enumeration(changed(wave2[1])))
    assert env.cli("window", "validate", "--id", "waves", *st, *JOB_OPTS) == 1
    assert env.cli("window", "expand", "--id", "waves", *st) == 3  # blocked: the rollout stops here
    capsys.readouterr()
    assert run(["window", "status", "--id", "waves", *st]) == 0
    out = capsys.readouterr().out
    assert "the gate blocked in wave 1" in out
    with BaselineStore(env.store) as store:
        doc = store.read_document("windows/waves.json")
        assert store.load(wave1[0], "rocm-6.2.0").software.rocm_version.startswith("6.2.0")  # type: ignore[union-attr]
    assert doc["rollout"]["completed"] == sorted(wave1)


def test_two_windows_on_one_class_never_exceed_the_cap(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    st = ["--store", str(env.store)]
    first = env.plan("first", canaries={"max_fraction": 0.10, "min": 1})
    second = env.plan("second", canaries={"max_fraction": 0.10, "min": 1})
    assert env.cli("window", "plan", "--plan", str(first), *st) == 0
    capsys.readouterr()
    assert env.cli("window", "plan", "--plan", str(second), *st) == 3  # the class's 2 are held by `first`
    assert "disruption cap 2: 2 node(s) held by open window(s) first" in capsys.readouterr().err
    third = env.plan("third", canaries={"max_fraction": 0.20, "min": 1})
    assert env.cli("window", "plan", "--plan", str(third), *st) == 0  # its own cap is 4: 2 more
    held = _canaries(env, "first") + _canaries(env, "third")
    assert len(held) == 4 and len(set(held)) == 4
    assert env.cli("window", "rollback", "--id", "first", *st, "--reason", "r") == 3  # planned: nothing to roll back
