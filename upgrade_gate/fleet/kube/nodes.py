"""Node calls: list/read nodes, labels and annotations, cordon, taints, conditions, the pods on a node.

Design decisions
- Node label/annotation writes are JSON merge patches (RFC 7386; `null` deletes a key). Taints are a
  list the API treats atomically, so a taint change is read-modify-write: read the node, edit the
  list (keeping other taints byte for byte, including `timeAdded`), patch `spec.taints` together with
  `metadata.resourceVersion`, which makes the API server reject the write with 409 if anyone changed
  the node in between; then re-read and try again, up to `RetryPolicy.conflict_attempts` times. This
  needs only the `patch` verb on nodes (no `update`).
- Answers become `fleet.objects` views here; no `kubernetes` import (requests go through `api.ApiBase`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from upgrade_gate.fleet.errors import KubeConflictError, KubeInvalidError, KubeNotFoundError
from upgrade_gate.fleet.kube.api import ApiBase
from upgrade_gate.fleet.kube.shapes import MERGE_PATCH, STRATEGIC_MERGE_PATCH, Json, items, q
from upgrade_gate.fleet.labels import GPU_RESOURCE, validate_label_key, validate_label_value, validate_node_name
from upgrade_gate.fleet.objects import KubeNode, Taint, node_from_api


class NodeCalls(ApiBase):
    """The node verbs of `KubeClient`."""

    def list_nodes(
        self, selector: str | None = None, *, field_selector: str | None = None, page_size: int = 500
    ) -> tuple[KubeNode, ...]:
        """Nodes matching a label (and field) selector, sorted by name; follows list pagination."""
        out: list[KubeNode] = []
        token: str | None = None
        restarted = False
        while True:
            query = {"labelSelector": selector, "fieldSelector": field_selector, "limit": page_size, "continue": token}
            try:
                page = self._json_request("list", "nodes", "GET", "/api/v1/nodes", query=query)
            except KubeInvalidError as exc:
                if exc.status != 410 or token is None or restarted:
                    raise
                out, token, restarted = [], None, True  # continue token expired (410 Gone): list again once
                continue
            out.extend(node_from_api(item) for item in items(page))
            token = str(page.get("metadata", {}).get("continue") or "") or None
            if not token:
                return tuple(sorted(out, key=lambda n: n.name))

    def get_node(self, name: str) -> KubeNode:
        """One node by name."""
        return node_from_api(self._read_node(name))

    def node_address(self, name: str) -> str:
        """The node's InternalIP (else its Hostname address, else its name): where a hostNetwork pod listens."""
        addresses = self._read_node(name).get("status", {}).get("addresses") or []
        by_type = {a.get("type"): a.get("address") for a in addresses if isinstance(a, dict)}
        return str(by_type.get("InternalIP") or by_type.get("Hostname") or name)

    def gpu_pods_on_node(self, name: str, resource: str = GPU_RESOURCE) -> tuple[str, ...]:
        """`namespace/name` of the running or pending pods on a node that request `resource`, DaemonSet
        pods left out (the device plugin and exporters run everywhere): the node is idle when empty."""
        validate_node_name(name)
        query = {"fieldSelector": f"spec.nodeName={name}"}
        page = self._json_request("list", "pods", "GET", "/api/v1/pods", query=query)
        busy: list[str] = []
        for pod in items(page):
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if any(isinstance(o, dict) and o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or ()):
                continue
            containers = [*(spec.get("containers") or ()), *(spec.get("initContainers") or ())]
            if any(_requests(c, resource) for c in containers if isinstance(c, dict)):
                busy.append(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
        return tuple(sorted(busy))

    def evict_pod(self, name: str, namespace: str) -> str | None:
        """Evict a pod through the Eviction API (PodDisruptionBudgets respected): None when it was evicted
        or is already gone, else why the server refused it now (429: a budget forbids it; try later)."""
        path = f"/api/v1/namespaces/{q(namespace)}/pods/{q(name)}/eviction"
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        try:
            return self._post_tolerating("pods/eviction", path, body, tolerate=429, name=name, namespace=namespace)
        except KubeNotFoundError:
            return None

    def pod_exists(self, name: str, namespace: str) -> bool:
        """Whether the pod is still there (an evicted pod is gone once its kubelet confirmed it)."""
        validate_node_name(name)
        query = {"fieldSelector": f"metadata.namespace={namespace},metadata.name={name}"}
        return bool(items(self._json_request("list", "pods", "GET", "/api/v1/pods", query=query)))

    def _read_node(self, name: str) -> Json:
        validate_node_name(name)
        return self._json_request("get", "nodes", "GET", f"/api/v1/nodes/{q(name)}", name=name)

    def _patch_node(self, name: str, body: Json) -> KubeNode:
        validate_node_name(name)
        node = self._json_request(
            "patch", "nodes", "PATCH", f"/api/v1/nodes/{q(name)}", name=name, body=body, content_type=MERGE_PATCH
        )
        return node_from_api(node)

    def patch_node_metadata(
        self,
        name: str,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> KubeNode:
        """Set (or, with None, remove) labels and annotations in one merge patch."""
        meta: Json = {}
        for key, value in (labels or {}).items():
            validate_label_key(key)
            if value is not None:
                validate_label_value(value, key=key)
        for key in annotations or {}:
            validate_label_key(key)
        if labels:
            meta["labels"] = dict(labels)
        if annotations:
            meta["annotations"] = dict(annotations)
        return self._patch_node(name, {"metadata": meta}) if meta else self.get_node(name)

    def patch_node_labels(self, name: str, labels: Mapping[str, str | None]) -> KubeNode:
        """Set or remove node labels (merge patch)."""
        return self.patch_node_metadata(name, labels=labels)

    def patch_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> KubeNode:
        """Set or remove node annotations (merge patch)."""
        return self.patch_node_metadata(name, annotations=annotations)

    def cordon(self, name: str) -> KubeNode:
        """Mark the node unschedulable (`kubectl cordon`)."""
        return self._patch_node(name, {"spec": {"unschedulable": True}})

    def uncordon(self, name: str) -> KubeNode:
        """Make the node schedulable again (`kubectl uncordon`)."""
        return self._patch_node(name, {"spec": {"unschedulable": None}})

    def add_taint(self, name: str, taint: Taint) -> KubeNode:
        """Add (or update the value of) the taint with this key and effect; read-modify-write."""

        def mutate(taints: list[Json]) -> list[Json] | None:
            same = [t for t in taints if t.get("key") == taint.key and t.get("effect") == taint.effect]
            if same and all((t.get("value") or None) == (taint.value or None) for t in same):
                return None
            return [*(t for t in taints if t not in same), taint.to_api()]

        return self._update_taints(name, mutate)

    def remove_taint(self, name: str, key: str, effect: str | None = None) -> KubeNode:
        """Remove the taints with this key (and effect, if given); read-modify-write."""

        def mutate(taints: list[Json]) -> list[Json] | None:
            kept = [t for t in taints if not (t.get("key") == key and effect in (None, t.get("effect")))]
            return None if len(kept) == len(taints) else kept

        return self._update_taints(name, mutate)

    def _update_taints(self, name: str, mutate: Callable[[list[Json]], list[Json] | None]) -> KubeNode:
        last: KubeConflictError | None = None
        for attempt in range(1, self.retry.conflict_attempts + 1):
            node = self._read_node(name)
            raw = node.get("spec", {}).get("taints") or []
            new = mutate([dict(t) for t in raw if isinstance(t, dict)])
            if new is None:
                return node_from_api(node)
            rv = node.get("metadata", {}).get("resourceVersion")
            try:
                return self._patch_node(name, {"metadata": {"resourceVersion": rv}, "spec": {"taints": new}})
            except KubeConflictError as exc:
                last = exc
                self._sleep(self.retry.backoff(attempt, self._rand()))
        assert last is not None
        raise last

    def set_node_condition(self, name: str, condition: Mapping[str, Any]) -> None:
        """Set one node condition by type (strategic merge patch of `nodes/status`, as node-problem-detector
        does); its `lastTransitionTime` is kept while the status does not change."""
        validate_node_name(name)
        body = dict(condition)
        for current in self._read_node(name).get("status", {}).get("conditions") or []:
            if current.get("type") == body.get("type") and current.get("status") == body.get("status"):
                body["lastTransitionTime"] = current.get("lastTransitionTime", body.get("lastTransitionTime"))
        self._json_request(
            "patch", "nodes/status", "PATCH", f"/api/v1/nodes/{q(name)}/status", name=name,
            body={"status": {"conditions": [body]}}, content_type=STRATEGIC_MERGE_PATCH,
        )  # fmt: skip


def _requests(container: Mapping[str, Any], resource: str) -> bool:
    """True when a container asks for a non-zero amount of `resource` (limits or requests)."""
    res = container.get("resources") or {}
    for part in ("limits", "requests"):
        value = (res.get(part) or {}).get(resource) if isinstance(res, dict) else None
        if value not in (None, "", "0", 0):
            return True
    return False
