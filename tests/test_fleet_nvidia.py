"""NVIDIA nodes through the Kubernetes executor (issue 30): each node's vendor picks its capture probes,
its phases, the device plugin's resource and the Jobs' host access; a vendor in doubt fails closed.

The cluster tests run against the real control plane of `tests.k8s` with a fake 8x H100 node whose
kubelet runs the pods as local processes (the same fixture as the AMD executor tests)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.k8s.cluster import ClusterDouble
from tests.test_validate_support import fast_config
from upgrade_gate.fakenode import FakeNode
from upgrade_gate.fakenode.nvidia import build_nvidia_node, h100_node
from upgrade_gate.fleet.executor import (
    ExecutorSettings,
    KubeLauncher,
    capture_nodes,
    capture_spec,
    node_vendor,
    run_vendor_phases,
)
from upgrade_gate.fleet.kube import KubeClient
from upgrade_gate.fleet.launcher import collective_image
from upgrade_gate.fleet.manifests import JobSettings
from upgrade_gate.fleet.objects import KubeNode
from upgrade_gate.fleet.workload_jobs import WorkloadJobs, workload_image
from upgrade_gate.model import NodeName, PhaseStatus
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.validate import cvf
from upgrade_gate.validate.launcher import LauncherError
from upgrade_gate.validate.phase import PhaseContext
from upgrade_gate.validate.phases import EligibilityPhase, select_phases
from upgrade_gate.validate.phases.workload import workload_argv
from upgrade_gate.vendors import AMD, NVIDIA, vendor_of

pytest_plugins = ["tests.k8s.fixtures"]  # kube_cluster, kube_client

SETTINGS = ExecutorSettings(
    jobs=JobSettings(python=sys.executable), upgrade_gate_argv=(sys.executable, "-m", "upgrade_gate"), poll_s=0.05
)
NV_LABEL = {"nvidia.com/gpu.present": "true"}


def _kube_node(name: str = "h100-01", **resources: str) -> KubeNode:
    return KubeNode(name=NodeName(name), uid="u", resource_version="1", allocatable=dict(resources))


def _nv(name: str = "h100-01") -> KubeNode:
    return _kube_node(name, **{"nvidia.com/gpu": "8"})


def _amd(name: str = "mi300x-01") -> KubeNode:
    return _kube_node(name, **{"amd.com/gpu": "8"})


def test_vendor_kube_facts_agree_with_cvf_and_the_device_plugins() -> None:
    assert AMD.kube.node_label == (cvf.NFD_AMD_GPU, "true")  # CVF's default selector is AMD's label
    assert (AMD.kube.gpu_resource, NVIDIA.kube.gpu_resource) == ("amd.com/gpu", "nvidia.com/gpu")
    assert NVIDIA.kube.node_label == ("nvidia.com/gpu.present", "true") and not NVIDIA.kube.mount_rocm


def test_node_vendor_explicit_then_baseline_then_advertised_resource() -> None:
    assert node_vendor(_nv()) is NVIDIA and node_vendor(_amd()) is AMD
    assert node_vendor(_kube_node()) is AMD  # nothing advertised: the default (a wrong guess blocks on probes)
    assert node_vendor(_kube_node(), explicit=NVIDIA) is NVIDIA


@pytest.mark.parametrize(
    ("node", "explicit", "words"),
    [
        (_kube_node(**{"amd.com/gpu": "8", "nvidia.com/gpu": "8"}), None, "advertises amd.com/gpu and nvidia.com/gpu"),
        (_amd(), NVIDIA, "--vendor nvidia says NVIDIA, but the node advertises amd.com/gpu (AMD)"),
        (_nv(), AMD, "--vendor amd says AMD, but the node advertises nvidia.com/gpu (NVIDIA)"),
    ],
)
def test_node_vendor_in_doubt_is_a_reason_never_a_guess(node: KubeNode, explicit: object, words: str) -> None:
    found = node_vendor(node, explicit=explicit)  # type: ignore[arg-type]
    assert isinstance(found, str) and words in found


def test_capture_spec_of_an_nvidia_node_runs_its_probes_with_its_gpus_and_no_rocm_mount() -> None:
    job = capture_spec(_nv(), SETTINGS, "c1", NVIDIA).manifest()
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"][-5:] == ["--host-root", "/host", "--vendor", "nvidia", "--out", "-"][-5:]
    assert "--vendor" in container["command"] and "nvidia" in container["command"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
    assert "/opt/rocm" not in str(job)
    amd = capture_spec(_amd(), SETTINGS, "c1", AMD).manifest()
    (amd_container,) = amd["spec"]["template"]["spec"]["containers"]
    assert amd_container["resources"] == {"limits": {"amd.com/gpu": "8"}} and "/opt/rocm" in str(amd)


def test_launcher_specs_on_nvidia_request_nvidia_gpus_and_monitor_through_the_toolkit() -> None:
    launcher = KubeLauncher(None, [_nv()], SETTINGS, run_id="r1", vendor=NVIDIA)  # type: ignore[arg-type]
    phase1 = launcher.spec(NodeName("h100-01"), NVIDIA.phase_commands[1])
    assert phase1.purpose == "phase1" and phase1.gpus == 8 and phase1.gpu_resource == "nvidia.com/gpu"
    monitor = launcher.spec(NodeName("h100-01"), ("nvidia-smi", "--query-gpu=index", "--format=csv"))
    assert monitor.purpose == "monitor" and monitor.gpus == 0 and not monitor.access.rocm
    assert ("NVIDIA_VISIBLE_DEVICES", "all") in monitor.env
    (container,) = monitor.manifest()["spec"]["template"]["spec"]["containers"]
    assert "resources" not in container and "volumeMounts" not in container


def test_phase5_image_on_nvidia_must_be_the_sites_never_amds_default() -> None:
    with pytest.raises(LauncherError, match="rocm/rccl-tests:latest is AMD's default"):
        collective_image(SETTINGS, NVIDIA)
    from dataclasses import replace

    assert collective_image(replace(SETTINGS, rccl_image="site/nccl-tests:2.18"), NVIDIA) == "site/nccl-tests:2.18"
    assert collective_image(SETTINGS, AMD) == "rocm/rccl-tests:latest"


def test_workload_job_on_nvidia_needs_the_sites_image_and_requests_nvidia_gpus() -> None:
    config = fast_config()
    argv = workload_argv(config, 8)
    ids = iter(("1", "2"))
    default = WorkloadJobs(config=config, image=workload_image("", config, NVIDIA), vendor=NVIDIA)
    with pytest.raises(LauncherError, match="no workload image, and NVIDIA names no default"):
        default.spec(_nv(), argv, lambda: next(ids))
    amds = WorkloadJobs(config=config, image="rocm/pytorch:latest", vendor=NVIDIA)
    with pytest.raises(LauncherError, match="rocm/pytorch:latest is AMD's default image"):
        amds.spec(_nv(), argv, lambda: next(ids))
    site = WorkloadJobs(config=config, image="nvcr.io/nvidia/pytorch:25.06-py3", vendor=NVIDIA)
    spec = site.spec(_nv(), argv, lambda: "3")
    assert spec is not None and spec.gpus == 8 and spec.gpu_resource == "nvidia.com/gpu"


def test_eligibility_cluster_mode_asks_an_nvidia_node_for_its_own_label_unless_the_site_chose() -> None:
    def run(phase: EligibilityPhase, labels: dict[str, str], **config: str) -> PhaseStatus:
        ctx = PhaseContext(node=NodeName("h100-01"), config=fast_config(**config), launcher=None,  # type: ignore[arg-type]
                           snapshot=None, node_labels=labels, requested=frozenset({0, 1, 2}))  # fmt: skip
        return phase.run(ctx).status

    assert run(EligibilityPhase(NVIDIA), NV_LABEL) is PhaseStatus.PASSED
    assert run(EligibilityPhase(NVIDIA), {cvf.NFD_AMD_GPU: "true"}) is PhaseStatus.FAILED
    assert run(EligibilityPhase(AMD), NV_LABEL) is PhaseStatus.FAILED
    assert run(EligibilityPhase(NVIDIA), NV_LABEL, NODE_SELECTOR_LABELS="site/gpu=yes") is PhaseStatus.FAILED
    assert select_phases(frozenset({0}), NVIDIA)[0].vendor is NVIDIA  # type: ignore[union-attr]


def _h100(cluster: ClusterDouble, root: Path, name: str) -> FakeNode:
    fake = build_nvidia_node(root / name, h100_node(name, seed=len(name)))
    cluster.add_node(name, node_class="h100-8gpu", amd_gpu=False, labels=NV_LABEL, gpu_resource="nvidia.com/gpu",
                     env=fake.env(os.environ), host_root=fake.host_root)  # fmt: skip
    return fake


def test_fleet_nvidia_node_captured_and_run_with_its_vendors_phases(
    kube_cluster: ClusterDouble, kube_client: KubeClient, tmp_path: Path
) -> None:
    """Capture by the advertised resource, phases 0-2 by the snapshot's vendor: dcgmi and nccl-tests Jobs
    holding `nvidia.com/gpu`, nvidia-smi monitor Jobs without /opt/rocm; every phase passes."""
    _h100(kube_cluster, tmp_path, "h100-01")
    (node,) = kube_client.list_nodes()
    vendors = {node.name: node_vendor(node)}
    assert vendors == {"h100-01": NVIDIA}
    bundles = capture_nodes(kube_client, [node], SETTINGS, run_id="c1")  # no vendors: the advertised resource's
    snap = build_snapshot(bundles[node.name])  # type: ignore[arg-type]
    assert vendor_of(p.name for p in snap.probes) is NVIDIA and len(snap.gpus) == 8
    results = run_vendor_phases(kube_client, [node], numbers=frozenset({0, 1, 2}), vendors={node.name: NVIDIA},
                                run_id="p1", config=fast_config(UPGRADE_GATE_SAMPLES="1"), settings=SETTINGS,
                                snapshots={node.name: snap})  # fmt: skip
    zero, one, two = results[node.name]
    assert [r.status for r in (zero, one, two)] == [PhaseStatus.PASSED] * 3, [r.reasons for r in (zero, one, two)]
    assert any(m.key.startswith("mesh/all_reduce/busbw/") for m in two.measurements)
    jobs = {j["metadata"]["labels"]["upgrade-gate/purpose"]: j for j in kube_cluster.objects("jobs", "upgrade-gate",
                                                                                              "batch")}  # fmt: skip
    for purpose in ("capture", "phase1", "phase2"):
        (container,) = jobs[purpose]["spec"]["template"]["spec"]["containers"]
        assert container["resources"] == {"limits": {"nvidia.com/gpu": "8"}}, purpose
    assert "/opt/rocm" not in str(jobs["monitor"]) and "NVIDIA_VISIBLE_DEVICES" in str(jobs["monitor"])
