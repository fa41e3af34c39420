"""The object store behind the API server double: resourceVersion, uid, timestamps, Status errors.

Semantics follow the Kubernetes API reference ("API Concepts", "Kubernetes API Conventions"):
- every write bumps one global resourceVersion counter (etcd's revision) and stamps the object with it;
  list answers carry the counter at the time of the list;
- `metadata.uid` (a UUID) and `metadata.creationTimestamp` (RFC 3339, seconds) are set on create and
  never change; `metadata.generation` starts at 1 and grows on spec changes;
- an update (PUT) whose body carries a resourceVersion other than the stored one fails with 409
  Conflict ("the object has been modified"), the optimistic-concurrency contract; a body without a
  resourceVersion is an unconditional update (allowed for nodes and configmaps);
- errors are `Status` objects (`kind: Status`, `status: Failure`, `reason`, `code`, `details`).
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class ResourceType:
    """One API resource the double serves."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """`v1`, `batch/v1`, `kubeflow.org/v2beta1`."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """`nodes`, `jobs.batch`, `mpijobs.kubeflow.org` (as in API error messages)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES: dict[tuple[str, str], ResourceType] = {
    (r.group, r.plural): r
    for r in (
        ResourceType("", "v1", "nodes", "Node", False),
        ResourceType("", "v1", "pods", "Pod", True),
        ResourceType("", "v1", "configmaps", "ConfigMap", True),
        ResourceType("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True),  # stored only
        ResourceType("", "v1", "namespaces", "Namespace", False),
        ResourceType("batch", "v1", "jobs", "Job", True),
        ResourceType("batch", "v1", "cronjobs", "CronJob", True),  # stored only: no controller runs them
        ResourceType("kubeflow.org", "v2beta1", "mpijobs", "MPIJob", True),
    )
}


def now_rfc3339() -> str:
    """The API's timestamp format (UTC, seconds)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiStatusError(Exception):
    """A failure the server answers with a `Status` object."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: Obj | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}
        self.headers = headers or {}

    def status(self) -> Obj:
        """The `Status` object."""
        out: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            out["details"] = self.details
        return out


def not_found(rt: ResourceType, name: str) -> ApiStatusError:
    """404 NotFound as the API server words it."""
    return ApiStatusError(
        404,
        "NotFound",
        f'{rt.qualified} "{name}" not found',
        details={"name": name, "group": rt.group, "kind": rt.plural},
    )


def conflict(rt: ResourceType, name: str) -> ApiStatusError:
    """409 Conflict for a stale resourceVersion."""
    return ApiStatusError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        details={"name": name, "group": rt.group, "kind": rt.plural},
    )


def invalid(rt: ResourceType, name: str, field: str, detail: str) -> ApiStatusError:
    """422 Invalid naming the field."""
    return ApiStatusError(
        422,
        "Invalid",
        f'{rt.kind}.{rt.group or "core"} "{name}" is invalid: {field}: {detail}',
        details={
            "name": name,
            "group": rt.group,
            "kind": rt.kind,
            "causes": [{"reason": "FieldValueInvalid", "message": detail, "field": field}],
        },
    )


class Store:
    """Objects by (plural, namespace, name); one lock, one resourceVersion counter."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self._rv = 0
        self._objects: dict[tuple[str, str, str], Obj] = {}

    def _bump(self) -> str:
        self._rv += 1
        return str(self._rv)

    @property
    def resource_version(self) -> str:
        """The current global resourceVersion."""
        with self.lock:
            return str(self._rv)

    def create(self, rt: ResourceType, namespace: str, obj: Obj, *, uid: str | None = None) -> Obj:
        """Store a new object (with `uid` when the caller pre-assigned one); 409 AlreadyExists if taken."""
        with self.lock:
            meta = obj.setdefault("metadata", {})
            name = meta.get("name", "")
            key = (rt.plural, namespace, name)
            if key in self._objects:
                raise ApiStatusError(
                    409,
                    "AlreadyExists",
                    f'{rt.qualified} "{name}" already exists',
                    details={"name": name, "group": rt.group, "kind": rt.plural},
                )
            obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
            if rt.namespaced:
                meta["namespace"] = namespace
            meta["uid"] = uid or str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta["generation"] = 1
            meta["resourceVersion"] = self._bump()
            self._objects[key] = obj
            self.changed.notify_all()
            return copy.deepcopy(obj)

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        """A copy of one object; 404 if absent."""
        with self.lock:
            obj = self._objects.get((rt.plural, namespace, name))
            if obj is None:
                raise not_found(rt, name)
            return copy.deepcopy(obj)

    def find(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        """A copy of one object, or None."""
        with self.lock:
            obj = self._objects.get((rt.plural, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, rt: ResourceType, namespace: str | None = None) -> list[Obj]:
        """Copies of every object of a type (in one namespace, or all), sorted by namespace/name."""
        with self.lock:
            return [
                copy.deepcopy(obj)
                for (plural, ns, _name), obj in sorted(self._objects.items())
                if plural == rt.plural and (namespace is None or ns == namespace)
            ]

    def update(self, rt: ResourceType, namespace: str, name: str, new: Obj, *, precondition_rv: str | None) -> Obj:
        """Replace an object; 409 Conflict when `precondition_rv` is given and stale."""
        with self.lock:
            key = (rt.plural, namespace, name)
            old = self._objects.get(key)
            if old is None:
                raise not_found(rt, name)
            if precondition_rv and precondition_rv != old["metadata"]["resourceVersion"]:
                raise conflict(rt, name)
            meta = new.setdefault("metadata", {})
            for fixed in ("uid", "creationTimestamp", "name"):
                meta[fixed] = old["metadata"][fixed]
            if rt.namespaced:
                meta["namespace"] = namespace
            new["apiVersion"], new["kind"] = rt.api_version, rt.kind
            generation = old["metadata"].get("generation", 1)
            meta["generation"] = generation + (1 if new.get("spec") != old.get("spec") else 0)
            if "status" not in new and "status" in old:
                new["status"] = old["status"]  # the main resource cannot write status
            meta["resourceVersion"] = self._bump()
            self._objects[key] = new
            self.changed.notify_all()
            return copy.deepcopy(new)

    def mutate(self, rt: ResourceType, namespace: str, name: str, fn: Callable[[Obj], None]) -> Obj | None:
        """Controller-side in-place change (status included); None when the object is gone."""
        with self.lock:
            obj = self._objects.get((rt.plural, namespace, name))
            if obj is None:
                return None
            before = copy.deepcopy(obj)
            fn(obj)
            if obj != before:
                obj["metadata"]["resourceVersion"] = self._bump()
                self.changed.notify_all()
            return copy.deepcopy(obj)

    def delete(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        """Remove an object; 404 if absent."""
        with self.lock:
            obj = self._objects.pop((rt.plural, namespace, name), None)
            if obj is None:
                raise not_found(rt, name)
            obj["metadata"]["resourceVersion"] = self._bump()
            self.changed.notify_all()
            return obj
