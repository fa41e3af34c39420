"""`RealCluster`: the real control plane (tests.k8s.controlplane) with its node agent and MPI stand-in.

Started once per test session (fixture `real_cluster_session` in tests.k8s.fixtures); each test gets
it through `real_cluster`, which removes the test's nodes, Jobs, MPIJobs and pods afterwards, so
tests see an empty fleet. deploy/rbac.yaml is applied once; `kubeconfig` writes a kubeconfig holding a
bound token of the `upgrade-gate` service account: upgrade-gate runs with exactly deploy/'s rights.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.k8s.controlplane import REPO, ControlPlane, write_kubeconfig
from tests.k8s.mpistandin import MpiStandIn
from tests.k8s.nodeagent import NodeAgent

NS = "upgrade-gate"
SA = "upgrade-gate"


class RealCluster:
    """A started control plane, its fake nodes' agent and the MPI stand-in."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.cp = ControlPlane(workdir / "cp")
        self.agent: NodeAgent | None = None
        self.mpi: MpiStandIn | None = None
        self._token: str | None = None

    def start(self) -> None:
        """Start the control plane, apply deploy/rbac.yaml, install the MPIJob CRD, start the agents."""
        self.cp.start()
        for name in ("rbac.yaml", "store.yaml"):  # the cluster set up from deploy/ alone
            for doc in yaml.safe_load_all((REPO / "deploy" / name).read_text(encoding="utf-8")):
                if doc:
                    self.cp.apply(doc)
        self.agent = NodeAgent(self.cp, self.workdir / "agent")
        self.agent.start()
        self.mpi = MpiStandIn(self.cp, self.workdir / "agent")
        self.mpi.install()
        self.mpi.start()

    def restart_mpi_standin(self) -> None:
        """A fresh stand-in loop (after tests.k8s.mpioperator ran the real operator in its place)."""
        if self.mpi is not None:
            self.mpi.stop()
        self.mpi = MpiStandIn(self.cp, self.workdir / "agent")
        self.mpi.start()

    def stop(self) -> None:
        """Stop everything."""
        if self.mpi is not None:
            self.mpi.stop()
        if self.agent is not None:
            self.agent.stop()
        self.cp.stop()

    @property
    def url(self) -> str:
        """The API server's URL."""
        return self.cp.url

    @property
    def ca(self) -> Path:
        """The CA file that verifies the API server."""
        return self.cp.pki / "ca.crt"

    @property
    def nodes_agent(self) -> NodeAgent:
        """The node agent (started)."""
        assert self.agent is not None
        return self.agent

    def token(self) -> str:
        """A bound token of the upgrade-gate service account."""
        if self._token is None:
            self._token = self.cp.token_for(NS, SA)
        return self._token

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for the upgrade-gate service account (deploy/rbac.yaml's rights, nothing more)."""
        return write_kubeconfig(path, self.url, self.ca, self.token())

    # ----------------------------------------------------------------------- objects

    def add_node(self, name: str, **kw: Any) -> None:
        """Register a fake GPU node (see NodeAgent.add_node)."""
        self.nodes_agent.add_node(name, **kw)

    def node(self, name: str) -> dict[str, Any]:
        """The Node object as the API server has it."""
        return dict(self.cp.request("GET", f"/api/v1/nodes/{name}"))

    def labels(self, name: str) -> dict[str, str]:
        """A node's labels."""
        return dict(self.node(name)["metadata"].get("labels") or {})

    def annotations(self, name: str) -> dict[str, str]:
        """A node's annotations."""
        return dict(self.node(name)["metadata"].get("annotations") or {})

    def set_configmap(self, name: str, namespace: str, data: Mapping[str, str]) -> None:
        """Create (or replace) a ConfigMap."""
        self.cp.request("DELETE", f"/api/v1/namespaces/{namespace}/configmaps/{name}", ok404=True)
        self.cp.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace},
                "data": dict(data),
            }
        )

    def list(self, path: str) -> list[dict[str, Any]]:
        """Items of a list path."""
        return list(self.cp.request("GET", path)["items"])

    def wait_for(self, what: str, check: Any, timeout: float = 60.0) -> Any:
        """Poll `check()` until it returns something truthy."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.1)

    def wait_nodes_settled(self, names: list[str], timeout: float = 60.0) -> None:
        """Wait until the node lifecycle controller removed the not-ready taint it puts on new nodes."""

        def settled() -> bool:
            for name in names:
                taints = self.node(name)["spec"].get("taints") or []
                if any(t["key"] == "node.kubernetes.io/not-ready" for t in taints):
                    return False
            return True

        self.wait_for("new nodes to become schedulable", settled, timeout)

    def reset(self) -> None:
        """Remove every node, Job, MPIJob, pod, PDB and ConfigMap a test left (between tests)."""
        agent = self.nodes_agent
        for name in list(agent.nodes):
            agent.kill_node(name)
            del agent.nodes[name]
        for path in (
            f"/apis/kubeflow.org/v2beta1/namespaces/{NS}/mpijobs",
            f"/apis/batch/v1/namespaces/{NS}/cronjobs",
            f"/apis/batch/v1/namespaces/{NS}/jobs",
        ):
            for item in self.list(path):
                self.cp.request("DELETE", f"{path}/{item['metadata']['name']}?propagationPolicy=Background", ok404=True)
        for ns in self.list("/api/v1/namespaces"):
            name = ns["metadata"]["name"]
            if name.startswith("kube-") or name == "default":
                continue
            for pdb in self.list(f"/apis/policy/v1/namespaces/{name}/poddisruptionbudgets"):
                self.cp.request(
                    "DELETE",
                    f"/apis/policy/v1/namespaces/{name}/poddisruptionbudgets/{pdb['metadata']['name']}",
                    ok404=True,
                )
            for pod in self.list(f"/api/v1/namespaces/{name}/pods"):
                body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
                self.cp.request("DELETE", f"/api/v1/namespaces/{name}/pods/{pod['metadata']['name']}", body, ok404=True)
        self.cp.request("DELETE", f"/api/v1/namespaces/{NS}/configmaps/cluster-validation-config", ok404=True)
