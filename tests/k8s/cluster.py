"""`ClusterDouble` (the API server double with its simulated control plane and nodes) and RBAC helpers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.k8s.admission import admit_create
from tests.k8s.apiserver import ApiServerDouble, Rule
from tests.k8s.kubelet import NODES, Kubelet, SimNode
from tests.k8s.store import RESOURCES, Obj, now_rfc3339
from upgrade_gate.fleet.kube import RetryPolicy

NODE_CLASS_LABEL = "upgrade-gate/node-class"
REPO = Path(__file__).resolve().parents[2]
FAST_RETRY = RetryPolicy(
    max_attempts=4, base_delay_s=0.01, max_delay_s=0.05, max_total_s=5.0, request_timeout_s=5.0, conflict_attempts=5
)


class ClusterDouble:
    """The API server double plus its simulated control plane and nodes."""

    def __init__(self, workdir: Path) -> None:
        self.api = ApiServerDouble()
        self.kubelet = Kubelet(self.api, workdir)
        self.workdir = workdir

    def start(self) -> str:
        """Start serving; returns the URL."""
        url = self.api.start()
        self.kubelet.start()
        self.apply_store_claim()
        return url

    def apply_store_claim(self) -> None:
        """The CronJobs' store claim of deploy/store.yaml, as a cluster set up from deploy/ has it."""
        doc = yaml.safe_load((REPO / "deploy" / "store.yaml").read_text(encoding="utf-8"))
        doc["status"] = {"phase": "Bound"}
        ns = doc["metadata"].pop("namespace")
        self.api.store.create(RESOURCES[("", "persistentvolumeclaims")], ns, doc)

    def stop(self) -> None:
        """Stop the controllers (killing running containers) and the server."""
        self.kubelet.stop()
        self.api.stop()

    @property
    def url(self) -> str:
        """Base URL of the API server."""
        return self.api.url

    def add_node(
        self,
        name: str,
        *,
        node_class: str | None = None,
        gpus: int = 8,
        amd_gpu: bool = True,
        amd_nic: bool = True,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        taints: Iterable[Mapping[str, str]] = (),
        unschedulable: bool = False,
        env: Mapping[str, str] | None = None,
        host_root: Path | None = None,
        kubelet: bool = True,
        gpu_resource: str = "amd.com/gpu",
    ) -> Obj:
        """Register a node: NFD labels, node-class label, `gpu_resource` capacity (the device plugin's:
        `amd.com/gpu`, or `nvidia.com/gpu` for an NVIDIA node), a kubelet (unless off)."""
        all_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        if amd_gpu:
            all_labels["feature.node.kubernetes.io/amd-gpu"] = "true"
        if amd_nic:
            all_labels["feature.node.kubernetes.io/amd-nic"] = "true"
        if node_class:
            all_labels[NODE_CLASS_LABEL] = node_class
        all_labels.update(labels or {})
        resources = {"cpu": "128", "memory": "2113472Mi", "pods": "110", gpu_resource: str(gpus)}
        now = now_rfc3339()
        node: Obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": all_labels, "annotations": dict(annotations or {})},
            "spec": {"taints": [dict(t) for t in taints]} if taints else {},
            "status": {
                "capacity": resources,
                "allocatable": dict(resources),
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "addresses": [{"type": "Hostname", "address": name}],
            },
        }
        if unschedulable:
            node["spec"]["unschedulable"] = True
        uid = admit_create(NODES, node)
        created = self.api.store.create(NODES, "", node, uid=uid)
        if kubelet:
            self.kubelet.nodes[name] = SimNode(name=name, env=dict(env or {}), host_root=host_root)
        return created

    def delete_node(self, name: str) -> None:
        """Remove a node (as if it died and was deleted); its pods are garbage-collected and killed."""
        self.api.store.delete(NODES, "", name)
        self.kubelet.nodes.pop(name, None)

    def node(self, name: str) -> Obj:
        """The stored node object."""
        return self.api.store.get(NODES, "", name)

    def objects(self, plural: str, namespace: str | None = None, group: str = "") -> list[Obj]:
        """Stored objects of one resource type."""
        return self.api.store.list(RESOURCES[(group, plural)], namespace)

    def set_configmap(self, name: str, namespace: str, data: Mapping[str, str]) -> Obj:
        """Create a ConfigMap directly in the store."""
        cm: Obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": dict(data)}
        return self.api.store.create(RESOURCES[("", "configmaps")], namespace, cm)


def rbac_rules(docs: Iterable[Mapping[str, Any]], *, namespace: str, service_account: str) -> list[Rule]:
    """The rules that RoleBindings/ClusterRoleBindings in `docs` grant to one service account."""
    docs = [d for d in docs if d]
    roles = {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
    }
    out: list[Rule] = []
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(
            s.get("kind") == "ServiceAccount" and s.get("name") == service_account and s.get("namespace") == namespace
            for s in binding.get("subjects") or ()
        ):
            continue
        ref = binding["roleRef"]
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role_ns = scope or "" if ref["kind"] == "Role" else ""
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        if role is None:
            continue
        for rule in role.get("rules") or ():
            out.append(
                Rule(
                    api_groups=frozenset(rule.get("apiGroups") or ()),
                    resources=frozenset(rule.get("resources") or ()),
                    verbs=frozenset(rule.get("verbs") or ()),
                    namespace=scope,
                    resource_names=frozenset(rule.get("resourceNames") or ()),
                )
            )
    return out
