"""Phases 6-7 as Jobs on the real control plane (issue 25, items 4-5), as the upgrade-gate service account.

The real kube-apiserver, Job controller and scheduler; the fake nodes' pods run as local processes
through the tests' node agent, so the Job's container command - the result wrapper, the stager that
writes the shipped script from the Job's environment into the pod's emptyDir, then the fake node's
`torchrun` - runs for real, and the shipped reference_train.py trains for real in it (PyTorch, gloo,
two ranks on the CPUs, 5 steps; the GPU identities come from the fake node, the documented seam). The
result comes back in the result frame and goes through the same parsing, checks and labels as on a
node: there is no second code path to test.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.realcluster import NS, RealCluster
from tests.test_validate_support import fast_config, snapshot_of
from upgrade_gate.fakenode import FakeNode, Faults, NodeSpec, build_fake_node, faults, mi300x_node
from upgrade_gate.fleet.executor import ExecutorSettings, run_phases, write_cvf_labels
from upgrade_gate.fleet.kube import KubeClient
from upgrade_gate.fleet.manifests import JobSettings
from upgrade_gate.fleet.window import Actor
from upgrade_gate.fleet.window_rollout import observe_window
from upgrade_gate.fleet.window_state import save_window
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import NodeInfo, NodeName, PhaseStatus, Snapshot, replace
from upgrade_gate.store.gitstore import BaselineStore
from upgrade_gate.validate import cvf
from upgrade_gate.validate.phases import select_phases

pytest_plugins = ["tests.k8s.fixtures"]  # real_cluster, real_client

torch = pytest.importorskip("torch")
REPO = Path(__file__).resolve().parent.parent
SHORT = {"UPGRADE_GATE_WORKLOAD_STEPS": "5", "UPGRADE_GATE_WORKLOAD_WARMUP": "1", "UPGRADE_GATE_WORKLOAD_BATCH": "8"}
SAMPLED = {"UPGRADE_GATE_WORKLOAD_UTIL_INTERVAL_S": "0.5"}  # with 2 s steps: amd-smi monitor -u Jobs inside training
IMAGE = "registry.site/pytorch-rocm:6.2"
SETTINGS = ExecutorSettings(
    jobs=JobSettings(python=sys.executable), upgrade_gate_argv=(sys.executable, "-m", "upgrade_gate"), poll_s=0.1,
    workload_image=IMAGE,
)  # fmt: skip


def _spec(name: str, nics: int = 0, **kw: str) -> NodeSpec:
    return mi300x_node(name, seed=3, gpu_count=4, nic_count=nics, **kw)  # type: ignore[arg-type]


def _add(cluster: RealCluster, fake: FakeNode) -> None:
    env = {**fake.env(os.environ), "PYTHONPATH": str(REPO)}  # capture Jobs run `python -m upgrade_gate`
    cluster.add_node(fake.spec.name, node_class="mi300x-4gpu", gpus=4, amd_nic=bool(fake.spec.nics), env=env,
                     host_root=fake.host_root)  # fmt: skip
    cluster.wait_nodes_settled([fake.spec.name])


def _jobs(cluster: RealCluster, purpose: str) -> list[dict[str, Any]]:
    items = cluster.list(f"/apis/batch/v1/namespaces/{NS}/jobs?labelSelector=upgrade-gate/purpose%3D{purpose}")
    return sorted(items, key=lambda j: str(j["metadata"]["name"]))


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[FakeNode, Snapshot]]]:
    root = tmp_path_factory.mktemp("workload-real")
    out = {}
    for name, spec in (("gpu-w1", _spec("gpu-w1")), ("gpu-w2", faults.workload_timeouts(_spec("gpu-w2"), 2))):
        fake = build_fake_node(root / name, spec, Faults())
        out[name] = (fake, snapshot_of(fake))
    yield out


def test_real_workload_phases_run_as_jobs_holding_every_gpu(
    real_cluster: RealCluster, real_client: KubeClient, nodes: dict[str, tuple[FakeNode, Snapshot]]
) -> None:
    """`window validate --phases 0,6,7`'s executor path: phase 6 and both perturbation runs are Jobs in the
    workload image holding all 4 GPUs; the real training's results come back, pass, and their CVF-style
    labels and annotation land on the node."""
    fake, snap = nodes["gpu-w1"]
    _add(real_cluster, fake)
    node = real_client.get_node("gpu-w1")
    results = run_phases(real_client, [node], phases=select_phases(frozenset({0, 6, 7})), config=fast_config(**SHORT),
                         settings=SETTINGS, run_id="wl1", snapshots={NodeName("gpu-w1"): snap})  # fmt: skip
    zero, six, seven = results[NodeName("gpu-w1")]
    assert (zero.status, six.status, seven.status) == (PhaseStatus.PASSED,) * 3, (six.reasons, seven.reasons)
    keys = {m.key for m in six.measurements}
    assert {"workload/samples_per_s", "workload/loss", "workload/init_s", "workload/collective_timeouts"} <= keys
    bdfs = {str(g.bdf) for g in snap.gpus}
    assert len(six.device_map) == 2 and {str(d.bdf) for d in six.device_map} <= bdfs  # the fake node's 2 ranks
    assert {d.visible for d in seven.device_map} == {"reversed (HIP_VISIBLE_DEVICES=3,2,1,0)",
                                                      "rotated (HIP_VISIBLE_DEVICES=1,2,3,0)"}  # fmt: skip
    for purpose, count in (("phase6", 1), ("phase7", 2)):
        jobs = _jobs(real_cluster, purpose)
        assert len(jobs) == count, [j["metadata"]["name"] for j in jobs]
        for job in jobs:
            pod = job["spec"]["template"]["spec"]
            (container,) = pod["containers"]
            assert container["image"] == IMAGE and pod["nodeName"] == "gpu-w1"
            assert container["resources"]["limits"] == {"amd.com/gpu": "4"}
    assert write_cvf_labels(real_client, results) == {NodeName("gpu-w1"): None}
    labels, annotations = real_cluster.labels("gpu-w1"), real_cluster.annotations("gpu-w1")
    assert labels[cvf.WORKLOAD_VALIDATION] == labels[cvf.PERTURBATION_VALIDATION] == "passed"
    assert float(annotations[f"{cvf.WORKLOAD_VALIDATION}-measured-samples-per-s"]) > 0
    assert not any(k.endswith("-failure-reason") for k in annotations)


def test_real_workload_collective_timeouts_fail_phase_6_and_its_label(
    real_cluster: RealCluster, real_client: KubeClient, nodes: dict[str, tuple[FakeNode, Snapshot]]
) -> None:
    """The training completes but its log has NCCL watchdog timeouts: phase 6 fails in the Job as on the
    node, the label says `failed` with the cause as the failure reason, phase 7 does not run."""
    fake, snap = nodes["gpu-w2"]
    _add(real_cluster, fake)
    node = real_client.get_node("gpu-w2")
    results = run_phases(real_client, [node], phases=select_phases(frozenset({0, 6, 7})), config=fast_config(**SHORT),
                         settings=SETTINGS, run_id="wl2", snapshots={NodeName("gpu-w2"): snap})  # fmt: skip
    _, six, seven = results[NodeName("gpu-w2")]
    assert six.status is PhaseStatus.FAILED and "2 collective timeout(s) in the job's log" in (six.reason or "")
    assert seven.status is PhaseStatus.NOT_RUN
    write_cvf_labels(real_client, results)
    assert real_cluster.labels("gpu-w2")[cvf.WORKLOAD_VALIDATION] == "failed"
    reason = real_cluster.annotations("gpu-w2")[f"{cvf.WORKLOAD_VALIDATION}-failure-reason"]
    assert "collective timeout" in reason and "Watchdog caught collective operation timeout" in reason


FIRST_WORKLOAD_CHANGE = (
    "name: first-workload-change\nrules:\n  - {id: workload.evidence, params: {without_baseline: warn}}\n"
)
"""The baselines of these tests were taken without phase 6: a site's first change after adopting it."""


def test_real_soak_observation_trains_in_a_job_and_records_it(
    real_cluster: RealCluster, real_client: KubeClient, tmp_path: Path
) -> None:
    """A soaking window whose plan watches the workload: `window observe`'s first observation captures the
    canary with a Job, runs phases 0 and 6 as Jobs (the training for real), passes against a baseline
    without a reference run under a policy that allows that (`workload.evidence` `without_baseline: warn`,
    a site's first change after adopting phase 6; the default blocks: tests/test_workload_rules.py): the
    run's own checks (it completed, no timeout, every rank on a known GPU); and records throughput, init
    time and timeouts for the page."""
    before = build_fake_node(tmp_path / "before", _spec("gpu-s1", 8), Faults())
    # steps long enough for phase 6's amd-smi monitor -u Jobs to sample the training (workload.utilisation_spread)
    after = build_fake_node(tmp_path / "after", faults.slow_workload(_spec("gpu-s1", 8, rocm_version="6.2.0",
                            driver_version="6.8.5"), step_delay_s=2.0), Faults())  # fmt: skip
    _add(real_cluster, after)
    real_cluster.set_configmap("cluster-validation-config", NS, {**SHORT, **SAMPLED, "UPGRADE_GATE_SAMPLES": "2"})
    store = BaselineStore(tmp_path / "store")
    store.init()
    info = NodeInfo(name=NodeName("gpu-s1"), node_class="mi300x-4gpu")
    store.save([replace(snapshot_of(before), node=info)], tag="rocm-6.1.3", message="baseline")
    change = {"rocm": {"from": "6.1.3", "to": "6.2.0"}, "driver": {"from": "6.7.0", "to": "6.8.5"}}
    save_window(store, {
        "schema_version": "1", "id": "w1", "change_id": "rocm-6.2.0", "state": "soaking",
        "plan": {"id": "rocm-6.2.0", "source": "plan.yaml", "sha256": "0" * 64,
                 "document": {"id": "rocm-6.2.0", "change": change}},
        "class_label": "upgrade-gate/node-class", "namespace": NS,
        "canaries": [{"node": "gpu-s1", "class": "mi300x-4gpu", "idle": True, "busy_pods": []}],
        "classes": [], "excluded": [],
        "history": [{"action": "validate", "by": "op", "at": "2026-12-01T00:00:00Z", "state": "soaking"}],
        "soak": {"started_at": "2026-12-01T00:00:00Z", "duration_s": 259200, "every_s": 21600,
                 "min_observations": 2, "mesh": False, "workload_every_s": 86400, "observations": []},
    }, "test: soaking, the workload watched daily")  # fmt: skip
    first = tmp_path / "policy.yaml"
    first.write_text(FIRST_WORKLOAD_CHANGE, encoding="utf-8")
    outcome = observe_window(store, "w1", actor=Actor(by="cron", at="2026-12-01T06:00:00Z"),
                             policy=load_policy(first), client=real_client, settings=SETTINGS,
                             run_id="obs1")  # fmt: skip
    last = outcome.record.doc["soak"]["observations"][-1]
    assert outcome.passed, last["nodes"]["gpu-s1"]["causes"]
    metrics = last["metrics"]["gpu-s1"]
    assert metrics["workload/samples_per_s"] > 0 and metrics["workload/init_s"] > 0
    assert metrics["workload/collective_timeouts"] == 0.0
    (job,) = _jobs(real_cluster, "phase6")
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE


def test_real_window_validate_phases_0_6_then_observe_trains_through_the_cli(
    real_cluster: RealCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's window with the workload, every step through the CLI as the service account: plan,
    start, `window validate --phases 0,6 --workload-image IMG` (a policy that asks for phase 6), the soak
    CronJob carrying the image on, then `window observe` 6 h later trains again in a Job, and the
    window's page charts the run."""
    import yaml

    from upgrade_gate.cli.main import run

    names = ("gpu-c1", "gpu-c2")  # one canary and its peer (the plan's, for phases 4-5; not used here)
    info = {n: NodeInfo(name=NodeName(n), node_class="mi300x-4gpu") for n in names}
    fakes = {n: build_fake_node(tmp_path / n, _spec(n, 8), Faults()) for n in names}
    for fake in fakes.values():
        _add(real_cluster, fake)
    store = tmp_path / "store"
    with BaselineStore(store) as st:
        st.init()
        st.save([replace(snapshot_of(fakes[n]), node=info[n]) for n in names], tag="rocm-6.1.3", message="baselines")
    real_cluster.set_configmap("cluster-validation-config", NS, {**SHORT, **SAMPLED})
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({
        "id": "rocm-6.2.0", "change": {"rocm": {"from": "6.1.3", "to": "6.2.0"}, "driver": {"from": "6.7.0",
                                                                                          "to": "6.8.5"}},
        "canaries": {"max_fraction": 0.5, "min": 1},
        "soak": {"duration": "72h", "every": "6h", "workload_every": "24h"},
    }), encoding="utf-8")  # fmt: skip
    policy = tmp_path / "policy.yaml"
    policy.write_text("name: workload-window\nrules:\n  - id: evidence.missing\n    params:\n"
                      "      required_phases: [6]\n  - id: bandwidth.threshold\n    enabled: false\n"
                      "  - {id: workload.evidence, params: {without_baseline: warn}}\n",
                      encoding="utf-8")  # fmt: skip
    kubeconfig = str(real_cluster.kubeconfig(tmp_path / "kubeconfig"))
    jobs = ["--job-python", sys.executable, "--job-command", f"{sys.executable} -m upgrade_gate",
            "--poll-interval", "0.1", "--workload-image", IMAGE]  # fmt: skip
    st_opts = ["--id", "w1", "--store", str(store), "--kubeconfig", kubeconfig]
    monkeypatch.setenv("UPGRADE_GATE_NOW", "2026-12-01T00:00:00Z")
    assert run(["window", "plan", "--plan", str(plan), *st_opts]) == 0, capsys.readouterr()
    assert run(["window", "start", *st_opts]) == 0, capsys.readouterr()
    with BaselineStore(store) as st:
        (canary,) = (c["node"] for c in st.read_document("windows/w1.json")["canaries"])
    changed = build_fake_node(tmp_path / "changed", faults.slow_workload(_spec(canary, 8, rocm_version="6.2.0",
                              driver_version="6.8.5"), step_delay_s=2.0), Faults())  # fmt: skip
    _add(real_cluster, changed)
    code = run(["window", "validate", "--phases", "0,workload", "--policy", str(policy), *st_opts, *jobs])
    out = capsys.readouterr().out
    assert code == 0 and "window w1: soaking" in out, out.splitlines()[-12:]
    assert "hold-peer" not in out  # the peer is for phases 4-5 only: the workload phase does not cordon it
    assert real_cluster.labels(canary)[cvf.WORKLOAD_VALIDATION] == "passed"
    assert cvf.GPU_MESH_VALIDATION not in real_cluster.labels(canary)  # phase 2 did not run: no label
    (cron,) = real_cluster.list(f"/apis/batch/v1/namespaces/{NS}/cronjobs")
    command = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-2:] == ["--workload-image", IMAGE]

    monkeypatch.setenv("UPGRADE_GATE_NOW", "2026-12-01T06:00:00Z")
    assert run(["window", "observe", "--policy", str(policy), *st_opts, *jobs]) == 0, capsys.readouterr()
    assert "observation PASS" in capsys.readouterr().out
    assert len(_jobs(real_cluster, "phase6")) == 2  # validate's run and the observation's
    page = tmp_path / "w1.html"
    assert run(["window", "status", "--id", "w1", "--store", str(store), "--html", str(page)]) == 0
    assert f"{canary}: reference training run: samples/s (median step)" in page.read_text(encoding="utf-8")
