"""Typed, immutable views of the Kubernetes objects the fleet stage reads (no `kubernetes` import).

Design decisions
- Untrusted API JSON is converted into these frozen dataclasses at the edge (`fleet.kube`) and never
  travels further as dicts or client models; the window, phase and report code depend on this module
  only, so they stay importable (and testable) without the heavy `kubernetes` package.
- A Job is finished only by its `Complete` or `Failed` condition with status "True", the way kubectl
  waits (`kubectl wait --for=condition=Complete`); since Kubernetes 1.31 the intermediate conditions
  `SuccessCriteriaMet` / `FailureTarget` appear first and are not terminal. An MPIJob (kubeflow.org
  v2beta1) is finished by `Succeeded` or `Failed`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from upgrade_gate.fleet.labels import GPU_RESOURCE
from upgrade_gate.model import NodeName


@dataclass(frozen=True, slots=True, kw_only=True)
class Taint:
    """One node taint (`key=value:effect`)."""

    key: str
    effect: str
    value: str | None = None

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"

    def to_api(self) -> dict[str, str]:
        """The taint as the API's `spec.taints[]` item."""
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class KubeNode:
    """What the fleet needs to know about one node."""

    name: NodeName
    uid: str
    resource_version: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    capacity: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, str] = field(default_factory=dict)
    ready: bool | None = None  # the Ready condition; None when the node reports none

    def gpu_count(self, resource: str = GPU_RESOURCE) -> int:
        """GPUs the device plugin advertises (allocatable, else capacity); 0 when absent."""
        raw = self.allocatable.get(resource) or self.capacity.get(resource) or "0"
        try:
            return int(raw)
        except ValueError:
            return 0


class JobPhase(StrEnum):
    """Where a Job (or MPIJob) stands, from its terminal conditions."""

    ACTIVE = "active"  # neither terminal condition yet
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Condition:
    """One status condition."""

    type: str
    status: str
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobState:
    """A batch/v1 Job's status as read back."""

    name: str
    namespace: str
    uid: str
    phase: JobPhase
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    reason: str | None = None  # of the terminal condition
    message: str | None = None
    conditions: tuple[Condition, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    completion_time: str | None = None
    creation_time: str | None = None
    completions: int | None = None  # spec.completions (the API server defaults it to 1)
    settled_by: str | None = None  # set when a wait settled the outcome from the pod, before the condition


@dataclass(frozen=True, slots=True, kw_only=True)
class PodState:
    """One pod of a Job: where it ran and how its container ended."""

    name: str
    node: str | None
    phase: str  # Pending / Running / Succeeded / Failed / Unknown
    exit_code: int | None = None
    reason: str | None = None
    creation_time: str | None = None
    message: str | None = None  # status.message: why the kubelet rejected or evicted it
    disruption: str | None = None  # reason of a True DisruptionTarget condition (PodGC, eviction, taint)
    waiting: str | None = None  # `reason: message` of a container waiting to start (ErrImagePull, ...)
    unscheduled: str | None = None  # message of a False PodScheduled condition (no node would take it)
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class MpiJobState:
    """A kubeflow.org/v2beta1 MPIJob's status as read back."""

    name: str
    namespace: str
    uid: str
    phase: JobPhase
    reason: str | None = None
    message: str | None = None
    conditions: tuple[Condition, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


# The kubelet's waiting reasons of a container whose image cannot be had (kubelet images/types.go).
IMAGE_PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})


def pull_failure(pod: PodState) -> str | None:
    """Why a pending pod will not start because of its image (says nothing about the node), else None."""
    if pod.phase != "Pending" or pod.waiting is None or pod.waiting.partition(":")[0] not in IMAGE_PULL_FAILURES:
        return None
    return f"pod {pod.name} cannot pull its image ({pod.waiting})"


def job_phase(conditions: tuple[Condition, ...], *, success: str, failure: str) -> tuple[JobPhase, Condition | None]:
    """The phase implied by terminal conditions (`success` / `failure` with status True)."""
    for cond in conditions:
        if cond.status == "True" and cond.type == failure:
            return JobPhase.FAILED, cond
    for cond in conditions:
        if cond.status == "True" and cond.type == success:
            return JobPhase.SUCCEEDED, cond
    return JobPhase.ACTIVE, None


# --------------------------------------------------------------------------- API JSON -> views
# The API's JSON is untrusted: every accessor below tolerates a missing or mistyped field and yields
# the empty value, never an exception, so one odd object cannot break a fleet-wide listing.


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _str_map(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in _dict(value).items() if v is not None}


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def conditions_from_api(raw: object) -> tuple[Condition, ...]:
    """Status conditions from API JSON."""
    return tuple(
        Condition(
            type=str(c.get("type", "")),
            status=str(c.get("status", "")),
            reason=_opt_str(c.get("reason")),
            message=_opt_str(c.get("message")),
        )
        for c in _list(raw)
        if isinstance(c, dict)
    )


def node_from_api(obj: Mapping[str, Any]) -> KubeNode:
    """A core/v1 Node's JSON as a KubeNode."""
    meta, spec, status = _dict(obj.get("metadata")), _dict(obj.get("spec")), _dict(obj.get("status"))
    ready: bool | None = None
    for cond in conditions_from_api(status.get("conditions")):
        if cond.type == "Ready":
            ready = cond.status == "True"
    return KubeNode(
        name=NodeName(str(meta.get("name", ""))),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        labels=_str_map(meta.get("labels")),
        annotations=_str_map(meta.get("annotations")),
        taints=tuple(
            Taint(key=str(t.get("key", "")), effect=str(t.get("effect", "")), value=_opt_str(t.get("value")))
            for t in _list(spec.get("taints"))
            if isinstance(t, dict)
        ),
        unschedulable=spec.get("unschedulable") is True,
        capacity=_str_map(status.get("capacity")),
        allocatable=_str_map(status.get("allocatable")),
        ready=ready,
    )


def job_from_api(obj: Mapping[str, Any]) -> JobState:
    """A batch/v1 Job's JSON as a JobState."""
    meta, status = _dict(obj.get("metadata")), _dict(obj.get("status"))
    completions = _dict(obj.get("spec")).get("completions")
    conditions = conditions_from_api(status.get("conditions"))
    phase, terminal = job_phase(conditions, success="Complete", failure="Failed")
    return JobState(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        uid=str(meta.get("uid", "")),
        phase=phase,
        active=_int(status.get("active")),
        succeeded=_int(status.get("succeeded")),
        failed=_int(status.get("failed")),
        reason=terminal.reason if terminal else None,
        message=terminal.message if terminal else None,
        conditions=conditions,
        labels=_str_map(meta.get("labels")),
        completion_time=_opt_str(status.get("completionTime")),
        creation_time=_opt_str(meta.get("creationTimestamp")),
        completions=completions if isinstance(completions, int) and not isinstance(completions, bool) else None,
    )


def pod_from_api(obj: Mapping[str, Any]) -> PodState:
    """A core/v1 Pod's JSON as a PodState (exit code of its terminated container, if any)."""
    meta, spec, status = _dict(obj.get("metadata")), _dict(obj.get("spec")), _dict(obj.get("status"))
    exit_code: int | None = None
    waiting: str | None = None
    reason = _opt_str(status.get("reason"))
    for cs in _list(status.get("containerStatuses")):
        wait = _dict(_dict(_dict(cs).get("state")).get("waiting"))
        if _opt_str(wait.get("reason")):
            waiting = f"{wait['reason']}: {_opt_str(wait.get('message')) or 'no message'}"
        term = _dict(_dict(_dict(cs).get("state")).get("terminated"))
        if term:
            code = term.get("exitCode")
            exit_code = code if isinstance(code, int) else None
            reason = _opt_str(term.get("reason")) or reason
    disruption = next(
        (
            _opt_str(c.get("reason")) or "DisruptionTarget"
            for c in map(_dict, _list(status.get("conditions")))
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        ),
        None,
    )
    unscheduled = next(
        (
            _opt_str(c.get("message")) or _opt_str(c.get("reason")) or "Unschedulable"
            for c in map(_dict, _list(status.get("conditions")))
            if c.get("type") == "PodScheduled" and c.get("status") == "False"
        ),
        None,
    )
    return PodState(
        name=str(meta.get("name", "")),
        node=_opt_str(spec.get("nodeName")),
        phase=str(status.get("phase") or "Unknown"),
        exit_code=exit_code,
        reason=reason,
        creation_time=_opt_str(meta.get("creationTimestamp")),
        message=_opt_str(status.get("message")),
        disruption=disruption,
        waiting=waiting,
        unscheduled=unscheduled,
        labels=_str_map(meta.get("labels")),
    )


def mpijob_from_api(obj: Mapping[str, Any]) -> MpiJobState:
    """A kubeflow.org/v2beta1 MPIJob's JSON as an MpiJobState."""
    meta, status = _dict(obj.get("metadata")), _dict(obj.get("status"))
    conditions = conditions_from_api(status.get("conditions"))
    phase, terminal = job_phase(conditions, success="Succeeded", failure="Failed")
    return MpiJobState(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        uid=str(meta.get("uid", "")),
        phase=phase,
        reason=terminal.reason if terminal else None,
        message=terminal.message if terminal else None,
        conditions=conditions,
        labels=_str_map(meta.get("labels")),
        annotations=_str_map(meta.get("annotations")),
    )
