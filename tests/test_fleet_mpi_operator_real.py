"""Phase 5 against the REAL Kubeflow MPI operator (issue 28: real, not imitated) on the real control plane.

The operator is built from its Go module by tests/controlplane/build-mpi-operator.sh (pinned in
tests/controlplane/mpi-operator/go.mod, cached outside the repository); without it these tests skip and
the pytest summary says so (UPGRADE_GATE_REQUIRE_MPI_OPERATOR=1: a failure). What they pin, on the operator
itself: our MPIJob (WaitForWorkersReady, backoffLimit, our stamps) is accepted by its CRD schema and run;
the launcher Job carries only the operator's `app: <name>`, while our labels and `upgrade-gate/nodes`
reach the pods; a leftover is found and cleared by what we stamp.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.k8s import mpioperator
from tests.k8s.realcluster import NS, RealCluster
from upgrade_gate.fleet.executor import stop_leftovers
from upgrade_gate.fleet.jobs import RunStatus, run_mpijob
from upgrade_gate.fleet.kube import KubeClient
from upgrade_gate.fleet.manifests import JobSettings, MpiJobSpec
from upgrade_gate.model import NodeName

pytest_plugins = ["tests.k8s.fixtures"]  # real_cluster, real_cluster_session, real_client

SETTINGS = JobSettings(python=sys.executable)
SLEEP = (sys.executable, "-c", "import time; time.sleep(600)")


@pytest.fixture(scope="module")
def operator(
    real_cluster_session: RealCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[mpioperator.RealMpiOperator]:
    """The real operator in place of the stand-in for this module (put back afterwards)."""
    reason = mpioperator.missing_reason()
    if reason is not None:
        if os.environ.get("UPGRADE_GATE_REQUIRE_MPI_OPERATOR") == "1":  # built by CI: missing is a failure
            pytest.fail(reason)
        pytest.skip(reason)
    op = mpioperator.RealMpiOperator(real_cluster_session, tmp_path_factory.mktemp("mpi-operator"))
    op.swap_in()
    try:
        yield op
    finally:
        op.swap_out()


def _two_nodes(cluster: RealCluster) -> tuple[NodeName, NodeName]:
    for name in ("gpu-01", "gpu-02"):
        cluster.add_node(name)
    cluster.wait_nodes_settled(["gpu-01", "gpu-02"])
    return NodeName("gpu-01"), NodeName("gpu-02")


def test_real_operator_runs_phase5_mpijob(
    operator: mpioperator.RealMpiOperator, real_cluster: RealCluster, real_client: KubeClient
) -> None:
    nodes = _two_nodes(real_cluster)
    spec = MpiJobSpec(run_id="op1", nodes=nodes, image="rccl", gpus_per_node=8, settings=SETTINGS,
                      launcher_argv=(sys.executable, "-c", "print('# Avg bus bandwidth    : 312.5')"),
                      worker_command=SLEEP)  # fmt: skip
    res = run_mpijob(real_client, spec, timeout_s=240, poll_s=0.2)
    assert res.status is RunStatus.SUCCEEDED, (res.reason, operator.log_text()[-3000:])
    assert "# Avg bus bandwidth    : 312.5" in res.log


def test_real_operator_leftover_found_by_our_stamp(
    operator: mpioperator.RealMpiOperator, real_cluster: RealCluster, real_client: KubeClient, tmp_path: Path
) -> None:
    nodes = _two_nodes(real_cluster)
    spec = MpiJobSpec(run_id="op2", nodes=nodes, image="rccl", gpus_per_node=8, settings=SETTINGS,
                      launcher_argv=SLEEP, worker_command=SLEEP)  # fmt: skip
    real_client.create_mpijob(spec.manifest(), NS)
    launcher = f"/apis/batch/v1/namespaces/{NS}/jobs/{spec.name}-launcher"
    job = real_cluster.wait_for(
        "the operator's launcher Job (after the workers are Ready)",
        lambda: real_cluster.cp.request("GET", launcher, ok404=True),
        timeout=180,
    )
    assert job["metadata"].get("labels") == {"app": spec.name}, job["metadata"]  # nothing of ours on it
    workers = real_client.pods(NS, f"upgrade-gate/run-id={spec.run_id}")
    assert {p.node for p in workers if "worker" in p.name} == set(nodes)  # our stamps reached the pods
    assert stop_leftovers(real_client, NS, [nodes[0]], poll_s=0.2, timeout_s=120) == (spec.name,)
    assert [p for p in real_client.pods(NS, f"upgrade-gate/run-id={spec.run_id}") if p.phase == "Running"] == []
