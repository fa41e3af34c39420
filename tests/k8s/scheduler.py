"""Pod placement as kube-scheduler's filter plugins decide it (test double, the subset used here).

A pod fits a node when (Kubernetes "Assigning Pods to Nodes", "Taints and Tolerations"):
- every `nodeSelector` label matches;
- one of the required node-affinity `nodeSelectorTerms` matches (matchExpressions with In, NotIn,
  Exists, DoesNotExist, Gt, Lt; matchFields on metadata.name), the terms ORed, expressions ANDed;
- every NoSchedule / NoExecute taint is tolerated; a cordoned node (`spec.unschedulable`) counts as
  the taint `node.kubernetes.io/unschedulable:NoSchedule`, so cordoned canaries take only pods that
  tolerate it (or are bound with `nodeName`, which bypasses the scheduler);
- the node's allocatable extended resources (e.g. `amd.com/gpu`) cover the requests of the pods
  already bound to it plus this one;
- a required pod anti-affinity term on `kubernetes.io/hostname` finds no matching pod on the node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tests.k8s.selectors import match_labels, parse_label_selector

Obj = dict[str, Any]
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def _expr_matches(expr: Mapping[str, Any], value: str | None) -> bool:
    op, values = expr.get("operator"), expr.get("values") or []
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and values:
        try:
            return int(value) > int(values[0]) if op == "Gt" else int(value) < int(values[0])
        except ValueError:
            return False
    return False


def _term_matches(term: Mapping[str, Any], node: Obj) -> bool:
    labels = node["metadata"].get("labels") or {}
    fields = {"metadata.name": node["metadata"]["name"]}
    return all(_expr_matches(e, labels.get(e.get("key"))) for e in term.get("matchExpressions") or ()) and all(
        _expr_matches(e, fields.get(e.get("key"))) for e in term.get("matchFields") or ()
    )


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether one of the tolerations tolerates the taint."""
    for tol in tolerations:
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists":
            if not tol.get("key") or tol.get("key") == taint.get("key"):
                return True
        elif tol.get("key") == taint.get("key") and (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def requests_of(pod: Obj, resource: str) -> int:
    """Integer requests of an extended resource over the pod's containers (limits when no requests)."""
    total = 0
    for c in pod["spec"].get("containers") or ():
        res = c.get("resources") or {}
        raw = (res.get("requests") or {}).get(resource) or (res.get("limits") or {}).get(resource)
        if raw is not None:
            total += int(raw)
    return total


def fit_reason(pod: Obj, node: Obj, bound: list[Obj]) -> str | None:
    """None when the pod fits the node, else why not (as in scheduler events)."""
    spec = pod["spec"]
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return "node(s) didn't match Pod's node affinity/selector"
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required and not any(_term_matches(t, node) for t in required.get("nodeSelectorTerms") or ()):
        return "node(s) didn't match Pod's node affinity/selector"
    taints = list(node["spec"].get("taints") or ())
    if node["spec"].get("unschedulable"):
        taints.append(UNSCHEDULABLE_TAINT)
    tolerations = spec.get("tolerations") or ()
    for taint in taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    for resource in ("amd.com/gpu",):
        wanted = requests_of(pod, resource)
        if wanted and wanted + sum(requests_of(p, resource) for p in bound) > int(allocatable.get(resource, "0")):
            return f"Insufficient {resource}"
    anti = ((spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or ()
    for term in anti:
        if term.get("topologyKey") != "kubernetes.io/hostname":
            continue
        sel = term.get("labelSelector") or {}
        reqs = parse_label_selector(",".join(f"{k}={v}" for k, v in (sel.get("matchLabels") or {}).items()))
        if any(match_labels(reqs, p["metadata"].get("labels")) for p in bound):
            return "node(s) didn't match pod anti-affinity rules"
    return None
