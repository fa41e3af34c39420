"""What the API server does to an object before storing it: schema check, validation, defaulting.

- Schema: built-in kinds are checked against the Kubernetes OpenAPI schema as generated into the
  official Python client's models (`extra="forbid"`, strict types, required fields). An unknown or
  mistyped field is a 400 BadRequest "strict decoding error", i.e. the server behaves as if the
  request carried `fieldValidation=Strict`. A real server defaults to `Warn` (drop the field, warn);
  the double is deliberately stricter so that a typo in a manifest fails a test instead of being
  silently ignored on a real cluster.
- Validation (422 Invalid) and defaulting follow the batch/v1 Job reference: a Job name must be a
  DNS-1123 label of at most 63 characters (it becomes the `job-name` label of its pods), the pod
  template's restartPolicy must be Never or OnFailure, every container needs a name and an image.
  Defaults: parallelism 1, completions 1, backoffLimit 6, completionMode NonIndexed, suspend false,
  and the generated selector / template labels `batch.kubernetes.io/controller-uid`,
  `batch.kubernetes.io/job-name`, `controller-uid`, `job-name`.
- MPIJob (kubeflow.org/v2beta1): `spec.mpiReplicaSpecs` needs a Launcher with one replica and a
  Worker; defaults as the mpi-operator's `SetDefaults_MPIJob` (slotsPerWorker 1, cleanPodPolicy None,
  mpiImplementation OpenMPI, sshAuthMountPath /root/.ssh, launcherCreationPolicy AtStartup).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from kubernetes import client as k8s
from pydantic import ValidationError

from tests.k8s.store import ApiStatusError, Obj, ResourceType, invalid

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

_MODELS: dict[str, Any] = {
    "nodes": k8s.V1Node,
    "pods": k8s.V1Pod,
    "configmaps": k8s.V1ConfigMap,
    "persistentvolumeclaims": k8s.V1PersistentVolumeClaim,
    "jobs": k8s.V1Job,
    "namespaces": k8s.V1Namespace,
}


def _schema_check(rt: ResourceType, obj: Obj) -> None:
    model = _MODELS.get(rt.plural)
    if model is None:
        return
    try:
        model.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"])
        detail = f'unknown field "{path}"' if first["type"] == "extra_forbidden" else f"{path}: {first['msg']}"
        raise ApiStatusError(
            400,
            "BadRequest",
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: strict decoding error: {detail}',
        ) from exc


def _check_name(rt: ResourceType, name: str) -> None:
    if not name:
        raise invalid(rt, name, "metadata.name", "Required value: name or generateName is required")
    pattern, limit = (_DNS_LABEL, 63) if rt.plural == "jobs" else (_DNS_SUBDOMAIN, 253)
    if len(name) > limit or not pattern.fullmatch(name):
        what = "a lowercase RFC 1123 label" if rt.plural == "jobs" else "a lowercase RFC 1123 subdomain"
        raise invalid(
            rt, name, "metadata.name", f'Invalid value: "{name}": must be no more than {limit} characters and {what}'
        )


def _check_pod_spec(rt: ResourceType, name: str, spec: Any, path: str) -> None:
    if not isinstance(spec, dict):
        raise invalid(rt, name, path, "Required value")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise invalid(rt, name, f"{path}.containers", "Required value")
    for i, c in enumerate(containers):
        for required in ("name", "image"):
            if not c.get(required):
                raise invalid(rt, name, f"{path}.containers[{i}].{required}", "Required value")


def admit_create(rt: ResourceType, obj: Obj) -> str:
    """Check and default a new object in place; returns the uid to store it under."""
    meta = obj.setdefault("metadata", {})
    for server_owned in ("uid", "resourceVersion", "creationTimestamp", "generation", "deletionTimestamp"):
        meta.pop(server_owned, None)
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
    obj.setdefault("apiVersion", rt.api_version)
    obj.setdefault("kind", rt.kind)
    if obj.get("apiVersion") != rt.api_version or obj.get("kind") != rt.kind:
        raise ApiStatusError(
            400,
            "BadRequest",
            f"the API version in the data ({obj.get('apiVersion')}) does not match the expected API version "
            f"({rt.api_version})",
        )
    _schema_check(rt, obj)
    name = str(meta.get("name", ""))
    _check_name(rt, name)
    uid = str(uuid.uuid4())
    if rt.plural == "jobs":
        _admit_job(rt, name, uid, obj)
    elif rt.plural == "mpijobs":
        _admit_mpijob(rt, name, obj)
    elif rt.plural == "pods":
        _check_pod_spec(rt, name, obj.get("spec"), "spec")
        obj.setdefault("status", {"phase": "Pending"})
    return uid


def admit_update(rt: ResourceType, obj: Obj) -> None:
    """Check a replaced or patched object."""
    _schema_check(rt, obj)


def _admit_job(rt: ResourceType, name: str, uid: str, job: Obj) -> None:
    spec = job.get("spec")
    if not isinstance(spec, dict):
        raise invalid(rt, name, "spec", "Required value")
    template = spec.get("template") or {}
    pod_spec = template.get("spec")
    _check_pod_spec(rt, name, pod_spec, "spec.template.spec")
    assert isinstance(pod_spec, dict)
    policy = pod_spec.get("restartPolicy")
    if policy not in ("Never", "OnFailure"):
        raise invalid(
            rt,
            name,
            "spec.template.spec.restartPolicy",
            f'Unsupported value: "{policy}": supported values: "OnFailure", "Never"',
        )
    for key, default in (("parallelism", 1), ("completions", 1), ("backoffLimit", 6)):
        spec.setdefault(key, default)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    if not job["metadata"].get("labels"):  # SetDefaults_Job: a Job without labels takes its template's
        job["metadata"]["labels"] = dict((template.get("metadata") or {}).get("labels") or {})
    generated = {"batch.kubernetes.io/controller-uid": uid}
    spec["selector"] = {"matchLabels": generated}
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    labels.update(
        {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
    )
    job["status"] = {}


def _admit_mpijob(rt: ResourceType, name: str, job: Obj) -> None:
    spec = job.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("mpiReplicaSpecs"), dict):
        raise invalid(rt, name, "spec.mpiReplicaSpecs", "Required value")
    replicas = spec["mpiReplicaSpecs"]
    launcher, worker = replicas.get("Launcher"), replicas.get("Worker")
    if not isinstance(launcher, dict) or launcher.get("replicas", 1) != 1:
        raise invalid(rt, name, "spec.mpiReplicaSpecs[Launcher].replicas", "must be 1")
    if not isinstance(worker, dict):
        raise invalid(rt, name, "spec.mpiReplicaSpecs[Worker]", "Required value")
    for role, replica in (("Launcher", launcher), ("Worker", worker)):
        _check_pod_spec(
            rt, name, (replica.get("template") or {}).get("spec"), f"spec.mpiReplicaSpecs[{role}].template.spec"
        )
        replica.setdefault("replicas", 1)
        replica.setdefault("restartPolicy", "Never")
    spec.setdefault("slotsPerWorker", 1)
    spec.setdefault("mpiImplementation", "OpenMPI")
    spec.setdefault("sshAuthMountPath", "/root/.ssh")
    spec.setdefault("launcherCreationPolicy", "AtStartup")
    spec.setdefault("runPolicy", {}).setdefault("cleanPodPolicy", "None")
    job["status"] = {}
