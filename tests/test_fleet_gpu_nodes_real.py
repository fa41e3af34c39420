"""Which nodes the fleet commands work on by default (issue 30), on the real API server: every vendor's GPU nodes,
each found by its vendor's discovery label, so a mixed fleet needs no `--selector`. One label selector cannot say
"amd-gpu=true or gpu.present=true"; the real server is what decides what each selector matches."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.k8s.realcluster import RealCluster
from upgrade_gate.cli.main import run
from upgrade_gate.fleet.kube import KubeClient
from upgrade_gate.fleet.node_vendor import describe_selector, gpu_nodes

pytest_plugins = ["tests.k8s.fixtures"]  # real_cluster, real_client

AMD_LABEL = "feature.node.kubernetes.io/amd-gpu"


def _mixed(cluster: RealCluster) -> None:
    """amd-01/02 (AMD's NFD label), h100-01/02 (GFD's nvidia.com/gpu.present only), cpu-01 (neither)."""
    for name in ("amd-01", "amd-02", "h100-01", "h100-02", "cpu-01"):
        cluster.add_node(name, node_class="mi300x" if name.startswith("amd") else "h100-8gpu")
    for name, labels in (
        ("h100-01", {AMD_LABEL: None, "nvidia.com/gpu.present": "true"}),
        ("h100-02", {AMD_LABEL: None, "nvidia.com/gpu.present": "true"}),
        ("cpu-01", {AMD_LABEL: None}),
    ):
        cluster.cp.request("PATCH", f"/api/v1/nodes/{name}", {"metadata": {"labels": labels}},
                           content_type="application/merge-patch+json")  # fmt: skip


def test_gpu_nodes_default_is_every_vendors_gpu_nodes(real_cluster: RealCluster, real_client: KubeClient) -> None:
    _mixed(real_cluster)
    assert [n.name for n in gpu_nodes(real_client, None)] == ["amd-01", "amd-02", "h100-01", "h100-02"]
    assert [n.name for n in gpu_nodes(real_client, "nvidia.com/gpu.present=true")] == ["h100-01", "h100-02"]
    assert [n.name for n in gpu_nodes(real_client, "")] == ["amd-01", "amd-02", "cpu-01", "h100-01", "h100-02"]
    assert describe_selector(None) == f"{AMD_LABEL}=true or nvidia.com/gpu.present=true"
    assert describe_selector("") == "every node"


def test_fleet_status_without_selector_lists_both_vendors(
    real_cluster: RealCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _mixed(real_cluster)
    kubeconfig = real_cluster.kubeconfig(tmp_path / "sa.kubeconfig")
    assert run(["fleet", "status", "--kubeconfig", str(kubeconfig)]) == 0
    shown = {line.split()[0] for line in capsys.readouterr().out.splitlines()[1:] if line.strip()}
    assert shown == {"amd-01", "amd-02", "h100-01", "h100-02"}
