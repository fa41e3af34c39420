"""The Kubernetes test double's own semantics (selectors, patches, scheduling) and the JSON-to-view edge."""

from __future__ import annotations

from typing import Any

import pytest

from tests.k8s import patch, selectors
from tests.k8s.scheduler import fit_reason
from upgrade_gate.fleet.objects import JobPhase, job_from_api, mpijob_from_api, node_from_api, pod_from_api

LABELS = {"env": "prod", "tier": "gpu", "amd.com/nic-health": "passed"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("env=prod", True),
        ("env==prod", True),
        ("env!=prod", False),
        ("missing!=x", True),
        ("env in (prod, staging)", True),
        ("env notin (prod)", False),
        ("missing notin (x)", True),
        ("tier", True),
        ("!tier", False),
        ("!missing", True),
        ("env=prod,tier=cpu", False),
        ("amd.com/nic-health=passed,env in (prod)", True),
    ],
)
def test_double_label_selector_semantics(selector: str, matches: bool) -> None:
    assert selectors.match_labels(selectors.parse_label_selector(selector), LABELS) is matches


@pytest.mark.parametrize("selector", ["env in ()", "=x", "env=a b", "a,,b"])
def test_double_label_selector_rejects_garbage(selector: str) -> None:
    with pytest.raises(selectors.SelectorError):
        selectors.parse_label_selector(selector)


def test_double_field_selector() -> None:
    pred = selectors.parse_field_selector("spec.unschedulable=true,metadata.name!=a", "nodes")
    assert pred({"metadata": {"name": "b"}, "spec": {"unschedulable": True}})
    assert not pred({"metadata": {"name": "a"}, "spec": {"unschedulable": True}})
    assert not pred({"metadata": {"name": "b"}, "spec": {}})
    with pytest.raises(selectors.SelectorError, match="not a known field selector"):
        selectors.parse_field_selector("status.phase=Running", "nodes")


def test_double_merge_patch_rfc7386() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
    got = patch.merge_patch(target, {"a": "z", "c": {"f": None}, "l": [3]})
    assert got == {"a": "z", "c": {"d": "e"}, "l": [3]}


def test_double_strategic_merge_patch_by_merge_key() -> None:
    target: dict[str, Any] = {
        "spec": {
            "containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}],
            "tolerations": [{"key": "x"}],
        },
        "metadata": {"finalizers": ["f1"]},
    }
    body = {
        "spec": {
            "containers": [{"name": "b", "image": "2"}, {"name": "a", "$patch": "delete"}, {"name": "c", "image": "3"}],
            "tolerations": [{"key": "y"}],
        },
        "metadata": {"finalizers": ["f2"]},
    }
    got = patch.strategic_merge_patch(target, body)
    assert got["spec"]["containers"] == [{"name": "b", "image": "2"}, {"name": "c", "image": "3"}]
    assert got["spec"]["tolerations"] == [{"key": "y"}]  # no patch strategy: replaced
    assert got["metadata"]["finalizers"] == ["f1", "f2"]
    assert patch.strategic_merge_patch({"a": {"b": 1}}, {"a": {"$patch": "replace", "c": 2}}) == {"a": {"c": 2}}


def test_double_json_patch_rfc6902() -> None:
    doc = {"metadata": {"labels": {"a": "1"}}, "spec": {"taints": []}}
    ops = [
        {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
        {"op": "test", "path": "/metadata/labels/a", "value": "1"},
        {"op": "remove", "path": "/metadata/labels/a"},
        {"op": "add", "path": "/spec/taints/-", "value": {"key": "k"}},
        {"op": "copy", "from": "/spec/taints/0", "path": "/spec/first"},
    ]
    assert patch.json_patch(doc, ops) == {
        "metadata": {"labels": {"b/c": "2"}},
        "spec": {"taints": [{"key": "k"}], "first": {"key": "k"}},
    }
    with pytest.raises(patch.PatchError, match="test failed"):
        patch.json_patch(doc, [{"op": "test", "path": "/metadata/labels/a", "value": "9"}])
    with pytest.raises(LookupError):
        patch.apply_patch("application/apply-patch+yaml", doc, {})


def _node(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"c": "x"}},
        "spec": spec,
        "status": {"allocatable": {"amd.com/gpu": "8"}},
    }


def _pod(**spec: Any) -> dict[str, Any]:
    containers = [{"name": "c", "image": "i", "resources": {"limits": {"amd.com/gpu": "8"}}}]
    return {"metadata": {"labels": {"app": "w"}}, "spec": {"containers": containers, **spec}}


def test_double_scheduler_filters() -> None:
    canary = {"key": "upgrade-gate/canary", "value": "c1", "effect": "NoSchedule"}
    assert fit_reason(_pod(), _node("n"), []) is None
    assert "untolerated taint" in (fit_reason(_pod(), _node("n", taints=[canary]), []) or "")
    tolerate = [{"key": "upgrade-gate/canary", "operator": "Exists", "effect": "NoSchedule"}]
    assert fit_reason(_pod(tolerations=tolerate), _node("n", taints=[canary]), []) is None
    assert "unschedulable" in (fit_reason(_pod(tolerations=tolerate), _node("n", unschedulable=True), []) or "")
    assert fit_reason(_pod(), _node("n"), [_pod()]) == "Insufficient amd.com/gpu"
    assert "selector" in (fit_reason(_pod(nodeSelector={"c": "y"}), _node("n"), []) or "")
    pin = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["m"]}]}]}}}  # fmt: skip
    assert fit_reason(_pod(affinity=pin), _node("n"), []) is not None
    assert fit_reason(_pod(affinity=pin), _node("m"), []) is None


def test_objects_views_tolerate_odd_json() -> None:
    node = node_from_api({"metadata": {"name": "n", "labels": {"a": "b", "none": None}}, "spec": {"taints": "x"}})
    assert node.labels == {"a": "b"} and node.taints == () and node.ready is None and node.gpu_count() == 0
    conditions = [
        {"type": "Complete", "status": "False"},
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"},
    ]
    job = job_from_api({"metadata": {"name": "j"}, "status": {"conditions": conditions}})
    assert job.phase is JobPhase.FAILED and job.reason == "DeadlineExceeded"
    assert job_from_api({}).phase is JobPhase.ACTIVE
    pod = pod_from_api(
        {"status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": 2}}}]}}
    )
    assert pod.exit_code == 2 and pod.node is None
    mpi = mpijob_from_api({"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}})
    assert mpi.phase is JobPhase.SUCCEEDED
