"""`KubeClient`: the one module that imports `kubernetes`; every API call, error mapping and retry.

Design decisions
- Only this module imports the official `kubernetes` client (STYLE.md rule 1). It is heavy, so the CLI
  imports this module inside the command bodies that talk to a cluster; `fleet.jobs`, `fleet.manifests`,
  `fleet.labels` and `fleet.objects` never import it at module level.
- Requests go through the client's `ApiClient` (its Configuration from a kubeconfig or the in-cluster
  service account, auth headers, TLS, urllib3 REST layer and `ApiException`), addressed by their REST
  paths (`/api/v1/nodes/{name}`, `/apis/batch/v1/namespaces/{ns}/jobs`, ...). Not through the generated
  `CoreV1Api` / `BatchV1Api` classes: (2026-11, kubernetes 37.0.2) importing `CoreV1Api` alone pulls in
  hundreds of pydantic models and costs 1.5-3 s on every CLI invocation, and every generated call
  re-validates its arguments; the paths below are the whole API surface the fleet uses, which also
  makes deploy/rbac.yaml easy to audit. Job manifests are still checked against the generated `V1Job`
  model (strict: unknown fields rejected) before they are sent, because a real API server's default
  `fieldValidation=Warn` would silently drop a misspelt field.
- Answers are converted at the edge into the frozen views of `fleet.objects`; client models and
  `ApiException` never leave this module. Every `ApiException` and every transport error (urllib3) is
  mapped to the `fleet.errors` tree, naming the verb, the resource and the object, with the original
  exception as `__cause__`.
- Retries: one loop (`_call`) resends a request after a *temporary* error (429, 5xx, a request timeout,
  a refused connection) with bounded exponential back-off and jitter; when the server sends
  `Retry-After` (429 and some 5xx) that delay is used instead. Attempts and total time are capped by
  `RetryPolicy`; a delay that would overrun the total budget ends the loop at once. urllib3's own
  retries and the client's `client_go_retries` are switched off so that this is the only retry layer
  and its bounds are the real ones. A 409 Conflict is *not* resent as is: the read-modify-write helpers
  (taints) re-read the node and patch again with the new resourceVersion, up to
  `RetryPolicy.conflict_attempts` times.
- Node label/annotation writes are JSON merge patches (RFC 7386; `null` deletes a key). Taints are a
  list the API treats atomically, so a taint change is read-modify-write: read the node, edit the
  list (keeping other taints byte for byte, including `timeAdded`), patch `spec.taints` together with
  `metadata.resourceVersion`, which makes the API server reject the write with 409 if anyone changed
  the node in between. This needs only the `patch` verb on nodes (no `update`).
- Waiting on Jobs polls `GET jobs/<name>` until the `Complete` or `Failed` condition is True (kubectl's
  `wait --for=condition=...`), instead of a watch: a poll survives API server restarts and dropped
  watch connections without resourceVersion bookkeeping, and at one request per Job per poll interval
  (default 2 s) its load is negligible for fleets of hundreds of nodes.
- A create that is retried after a timeout may have landed the first time; a following AlreadyExists
  is then read back as our own object instead of failing the node.
- Deleting a Job sends `propagationPolicy=Background`: the API's default for batch/v1 Jobs is to orphan
  their pods.
"""

from __future__ import annotations

import json
import random
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from upgrade_gate.fleet.errors import (
    KubeAlreadyExistsError,
    KubeConflictError,
    KubeConnectionError,
    KubeError,
    KubeInvalidError,
    KubeNotFoundError,
    KubeWaitTimeoutError,
    TemporaryError,
    describe,
    error_from_response,
    error_from_transport,
    one_line,
    status_body,
)
from upgrade_gate.fleet.labels import (
    JOB_NAME,
    MPI_JOB_NAME,
    MPI_JOB_ROLE,
    validate_label_key,
    validate_label_value,
    validate_node_name,
)
from upgrade_gate.fleet.objects import (
    JobPhase,
    JobState,
    KubeNode,
    MpiJobState,
    PodState,
    Taint,
    job_from_api,
    mpijob_from_api,
    node_from_api,
    pod_from_api,
)

T = TypeVar("T")
Json = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MPI_GROUP, MPI_VERSION, MPI_PLURAL = "kubeflow.org", "v2beta1", "mpijobs"


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Bounds of the retry loop; tests use tiny delays."""

    max_attempts: int = 6
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    max_total_s: float = 60.0
    jitter: float = 0.2  # +-20 % of each back-off delay
    request_timeout_s: float = 30.0
    conflict_attempts: int = 5

    def backoff(self, attempt: int, rand: float) -> float:
        """Delay before retry number `attempt` (1-based), with jitter from `rand` in [0, 1)."""
        delay = min(self.max_delay_s, self.base_delay_s * (2.0 ** (attempt - 1)))
        return max(0.0, delay * (1.0 + self.jitter * (2.0 * rand - 1.0)))


class KubeClient:
    """The fleet's view of the Kubernetes API: nodes, Jobs, pods' logs, MPIJobs, ConfigMaps."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._api = api_client
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._clock = clock
        self._rand = rand

    # ----------------------------------------------------------------------- construction

    @staticmethod
    def _prepare(cfg: k8s.Configuration) -> k8s.ApiClient:
        cfg.retries = False  # this module is the only retry layer
        cfg.client_go_retries = False
        cfg.connection_pool_maxsize = 32  # run_on_nodes shares one client between threads
        return k8s.ApiClient(cfg)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        token: str | None = None,
        verify_ssl: bool = True,
        ca_cert: str | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> KubeClient:
        """A client for an explicit API server URL (tests: `http://127.0.0.1:PORT`)."""
        cfg = k8s.Configuration(host=url.rstrip("/"))
        if token:
            cfg.api_key = {"BearerToken": token}
            cfg.api_key_prefix = {"BearerToken": "Bearer"}
        cfg.verify_ssl = verify_ssl
        if ca_cert:
            cfg.ssl_ca_cert = ca_cert
        return cls(cls._prepare(cfg), retry=retry, sleep=sleep)

    @classmethod
    def from_kubeconfig(
        cls, path: str | None = None, *, context: str | None = None, retry: RetryPolicy | None = None
    ) -> KubeClient:
        """A client from a kubeconfig file (default: $KUBECONFIG or ~/.kube/config)."""
        cfg = k8s.Configuration()
        try:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path, context=context, client_configuration=cfg, persist_config=False
            )
        except (ConfigException, OSError, ValueError, yaml.YAMLError) as exc:
            raise KubeConnectionError(f"kubeconfig {path or '(default)'}: {one_line(str(exc))}") from exc
        return cls(cls._prepare(cfg), retry=retry)

    @classmethod
    def in_cluster(cls, *, retry: RetryPolicy | None = None) -> KubeClient:
        """A client from the pod's service account (running inside the cluster)."""
        cfg = k8s.Configuration()
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except (ConfigException, OSError) as exc:
            raise KubeConnectionError(f"in-cluster config: {one_line(str(exc))}") from exc
        return cls(cls._prepare(cfg), retry=retry)

    def close(self) -> None:
        """Release the connection pool."""
        self._api.close()  # type: ignore[no-untyped-call]

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------- the retry loop

    def _call(self, verb: str, resource: str, fn: Callable[[], T], *, name: str = "", namespace: str = "") -> T:
        """Run one API request, mapping errors and retrying temporary ones within the policy."""
        policy = self.retry
        start = self._clock()
        attempt = 0
        while True:
            attempt += 1
            cause: BaseException
            try:
                return fn()
            except ApiException as exc:
                header = exc.headers.get("Retry-After") if exc.headers is not None else None
                err = error_from_response(
                    http_status=int(exc.status or 0),
                    http_reason=str(exc.reason or ""),
                    body=exc.body,
                    retry_after_header=header,
                    verb=verb,
                    resource=resource,
                    name=name,
                    namespace=namespace,
                )
                cause = exc
            except urllib3.exceptions.HTTPError as exc:
                inner: BaseException = exc
                if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
                    inner = exc.reason
                # urllib3 2.x: NewConnectionError (refused) subclasses ConnectTimeoutError; it is no timeout.
                timed_out = isinstance(inner, urllib3.exceptions.TimeoutError) and not isinstance(
                    inner, urllib3.exceptions.NewConnectionError
                )
                err = error_from_transport(
                    str(inner),
                    timed_out=timed_out,
                    tls=isinstance(inner, urllib3.exceptions.SSLError),
                    verb=verb,
                    resource=resource,
                    name=name,
                    namespace=namespace,
                )
                cause = exc
            retryable = isinstance(err, TemporaryError) and not isinstance(err, KubeConflictError)
            if not retryable or attempt >= policy.max_attempts:
                raise err from cause
            delay = err.retry_after_s if err.retry_after_s is not None else policy.backoff(attempt, self._rand())
            if self._clock() - start + delay > policy.max_total_s:
                raise err from cause
            self._sleep(delay)

    def _raw(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | None] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> bytes:
        """One REST call (one attempt) through the client's ApiClient; the body of a 2xx answer.

        Raises the client's ApiException for any other answer and urllib3 errors for no answer;
        `_call` maps and retries them.
        """
        headers = {"Accept": "application/json, */*"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        request = self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response: Any = self._api.call_api(*request, _request_timeout=self.retry.request_timeout_s)
        data = bytes(response.read() or b"")
        if not 200 <= response.status <= 299:
            ApiException.from_response(http_resp=response, body=data.decode("utf-8", "replace"), data=None)
        return data

    def _json_request(
        self, verb: str, resource: str, method: str, path: str, *, name: str = "", namespace: str = "", **kw: Any
    ) -> Json:
        """`_raw` with retries, decoded as a JSON object."""
        return self._call(verb, resource, lambda: _json(self._raw(method, path, **kw)), name=name, namespace=namespace)

    def _create(self, resource: str, path: str, body: Any, *, name: str, namespace: str) -> Json:
        """POST with retries. A create retried after a lost answer may have landed the first time: an
        AlreadyExists that follows such a retry reads the object back instead of failing."""
        attempts = 0

        def once() -> Json:
            nonlocal attempts
            attempts += 1
            return _json(self._raw("POST", path, body=body))

        try:
            return self._call("create", resource, once, name=name, namespace=namespace)
        except KubeAlreadyExistsError:
            if attempts <= 1:
                raise
            return self._json_request("get", resource, "GET", f"{path}/{_q(name)}", name=name, namespace=namespace)

    # ----------------------------------------------------------------------- nodes

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
            out.extend(node_from_api(item) for item in _items(page))
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

    def gpu_pods_on_node(self, name: str, resource: str = "amd.com/gpu") -> tuple[str, ...]:
        """`namespace/name` of the running or pending pods on a node that request `resource`, DaemonSet
        pods left out (the device plugin and exporters run everywhere): the node is idle when empty."""
        validate_node_name(name)
        query = {"fieldSelector": f"spec.nodeName={name}"}
        page = self._json_request("list", "pods", "GET", "/api/v1/pods", query=query)
        busy: list[str] = []
        for pod in _items(page):
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
        path = f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}/eviction"
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}

        def once() -> str | None:
            try:
                self._raw("POST", path, body=body)
            except ApiException as exc:
                if exc.status != 429:
                    raise
                return one_line(str(status_body(exc.body).get("message") or exc.reason or "TooManyRequests"))
            return None

        try:
            return self._call("create", "pods/eviction", once, name=name, namespace=namespace)
        except KubeNotFoundError:
            return None

    def pod_exists(self, name: str, namespace: str) -> bool:
        """Whether the pod is still there (an evicted pod is gone once its kubelet confirmed it)."""
        validate_node_name(name)
        page = self._json_request(
            "list",
            "pods",
            "GET",
            "/api/v1/pods",
            query={"fieldSelector": f"metadata.namespace={namespace},metadata.name={name}"},
        )
        return bool(_items(page))

    def job_create_failures(self, name: str, namespace: str) -> tuple[str, ...]:
        """Messages of the Job controller's `FailedCreate` events of a Job (its pods were refused)."""
        query = {"fieldSelector": f"involvedObject.kind=Job,involvedObject.name={name},reason=FailedCreate"}
        page = self._json_request(
            "list", "events", "GET", f"/api/v1/namespaces/{_q(namespace)}/events", namespace=namespace, query=query
        )
        return tuple(one_line(str(e.get("message") or "")) for e in _items(page))

    def _read_node(self, name: str) -> Json:
        validate_node_name(name)
        return self._json_request("get", "nodes", "GET", f"/api/v1/nodes/{_q(name)}", name=name)

    def _patch_node(self, name: str, body: Json) -> KubeNode:
        validate_node_name(name)
        node = self._json_request(
            "patch", "nodes", "PATCH", f"/api/v1/nodes/{_q(name)}", name=name, body=body, content_type=MERGE_PATCH
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

    # ----------------------------------------------------------------------- jobs and their pods

    def create_job(self, manifest: Mapping[str, Any], namespace: str) -> JobState:
        """Create a batch/v1 Job from a manifest dict (checked against the batch/v1 schema first)."""
        name = str(manifest.get("metadata", {}).get("name", ""))
        try:
            k8s.V1Job.model_validate(dict(manifest))
        except ValueError as exc:
            raise KubeInvalidError(
                f"Job {name!r}: manifest does not match the batch/v1 schema: {one_line(str(exc))}",
                verb="create", resource="jobs", name=name, namespace=namespace,
            ) from exc  # fmt: skip
        return job_from_api(self._create("jobs", _jobs(namespace), dict(manifest), name=name, namespace=namespace))

    def get_job(self, name: str, namespace: str) -> JobState:
        """One Job's status."""
        job = self._json_request("get", "jobs", "GET", f"{_jobs(namespace)}/{_q(name)}", name=name, namespace=namespace)
        return job_from_api(job)

    def list_jobs(self, namespace: str, selector: str | None = None) -> tuple[JobState, ...]:
        """Jobs in a namespace matching a label selector, oldest first."""
        page = self._json_request(
            "list", "jobs", "GET", _jobs(namespace), namespace=namespace, query={"labelSelector": selector}
        )
        jobs = [job_from_api(item) for item in _items(page)]
        return tuple(sorted(jobs, key=lambda j: (j.creation_time or "", j.name)))

    def wait_job(
        self,
        name: str,
        namespace: str,
        *,
        timeout_s: float,
        poll_s: float = 2.0,
        stop: Callable[[], bool] | None = None,
    ) -> JobState:
        """Poll until the Job's Complete or Failed condition is True; KubeWaitTimeoutError after timeout_s.

        `stop` is polled too: when it returns True the wait ends early with KubeWaitTimeoutError.
        """
        return self._wait("jobs", name, namespace, lambda: self.get_job(name, namespace), timeout_s, poll_s, stop)

    def job_pods(self, name: str, namespace: str) -> tuple[PodState, ...]:
        """The pods of a Job (label `job-name`), oldest first."""
        return self._pods(namespace, f"{JOB_NAME}={name}")

    def _pods(self, namespace: str, selector: str) -> tuple[PodState, ...]:
        page = self._json_request(
            "list", "pods", "GET", f"/api/v1/namespaces/{_q(namespace)}/pods", namespace=namespace,
            query={"labelSelector": selector},
        )  # fmt: skip
        pods = [pod_from_api(item) for item in _items(page)]
        return tuple(sorted(pods, key=lambda p: (p.creation_time or "", p.name)))

    def pod_logs(
        self, pod: str, namespace: str, *, tail_lines: int | None = None, limit_bytes: int | None = None
    ) -> str:
        """The log of a pod's (only) container."""
        path = f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(pod)}/log"
        query = {"tailLines": tail_lines, "limitBytes": limit_bytes}
        data = self._call("get", "pods/log", lambda: self._raw("GET", path, query=query), name=pod, namespace=namespace)
        return data.decode("utf-8", errors="replace")

    def job_logs(
        self, name: str, namespace: str, *, tail_lines: int | None = None, limit_bytes: int | None = None
    ) -> str:
        """The log of the newest pod of a Job; KubeNotFoundError when it has none."""
        pods = self.job_pods(name, namespace)
        if not pods:
            raise _no_pod("job", name, namespace)
        return self.pod_logs(pods[-1].name, namespace, tail_lines=tail_lines, limit_bytes=limit_bytes)

    def delete_job(self, name: str, namespace: str, *, propagation: str = "Background") -> bool:
        """Delete a Job and (by default) its pods; False when it was already gone."""
        return self._delete("jobs", f"{_jobs(namespace)}/{_q(name)}", name, namespace, propagation)

    def _delete(self, resource: str, path: str, name: str, namespace: str, propagation: str) -> bool:
        query = {"propagationPolicy": propagation}
        try:
            self._call(
                "delete", resource, lambda: self._raw("DELETE", path, query=query), name=name, namespace=namespace
            )
        except KubeNotFoundError:
            return False
        return True

    # ----------------------------------------------------------------------- node conditions, CronJobs

    def set_node_condition(self, name: str, condition: Mapping[str, Any]) -> None:
        """Set one node condition by type (strategic merge patch of `nodes/status`, as node-problem-detector
        does); its `lastTransitionTime` is kept while the status does not change."""
        validate_node_name(name)
        body = dict(condition)
        for current in self._read_node(name).get("status", {}).get("conditions") or []:
            if current.get("type") == body.get("type") and current.get("status") == body.get("status"):
                body["lastTransitionTime"] = current.get("lastTransitionTime", body.get("lastTransitionTime"))
        self._json_request(
            "patch", "nodes/status", "PATCH", f"/api/v1/nodes/{_q(name)}/status", name=name,
            body={"status": {"conditions": [body]}}, content_type=STRATEGIC_MERGE_PATCH,
        )  # fmt: skip

    def apply_cronjob(self, manifest: Mapping[str, Any], namespace: str) -> None:
        """Create a batch/v1 CronJob, or replace the one of the same name (checked against the schema first)."""
        name = str(manifest.get("metadata", {}).get("name", ""))
        try:
            k8s.V1CronJob.model_validate(dict(manifest))
        except ValueError as exc:
            raise KubeInvalidError(
                f"CronJob {name!r}: manifest does not match the batch/v1 schema: {one_line(str(exc))}",
                verb="create", resource="cronjobs", name=name, namespace=namespace,
            ) from exc  # fmt: skip
        self.delete_cronjob(name, namespace)
        self._create("cronjobs", _cronjobs(namespace), dict(manifest), name=name, namespace=namespace)

    def delete_cronjob(self, name: str, namespace: str) -> bool:
        """Delete a CronJob and the Jobs it made; False when it was already gone."""
        return self._delete("cronjobs", f"{_cronjobs(namespace)}/{_q(name)}", name, namespace, "Background")

    def prune_jobs(self, namespace: str, selector: str, *, keep: int) -> tuple[str, ...]:
        """Delete finished Jobs matching `selector` except the newest `keep`; returns the deleted names."""
        finished = [j for j in self.list_jobs(namespace, selector) if j.phase is not JobPhase.ACTIVE]
        finished.sort(key=lambda j: (j.completion_time or j.creation_time or "", j.name), reverse=True)
        doomed = [j.name for j in finished[max(keep, 0) :]]
        return tuple(name for name in doomed if self.delete_job(name, namespace))

    def _wait(
        self,
        resource: str,
        name: str,
        namespace: str,
        read: Callable[[], T],
        timeout_s: float,
        poll_s: float,
        stop: Callable[[], bool] | None = None,
    ) -> T:
        deadline = self._clock() + timeout_s
        while True:
            state = read()
            if getattr(state, "phase", None) is not JobPhase.ACTIVE:
                return state
            remaining = deadline - self._clock()
            if remaining <= 0 or (stop is not None and stop()):
                why = "cancelled" if remaining > 0 else f"not finished after {timeout_s:g}s"
                raise KubeWaitTimeoutError(
                    f"{describe('wait', resource, name, namespace)}: {why}",
                    verb="wait", resource=resource, name=name, namespace=namespace,
                )  # fmt: skip
            self._sleep(min(poll_s, remaining))

    # ----------------------------------------------------------------------- MPIJobs (kubeflow.org/v2beta1)

    def create_mpijob(self, manifest: Mapping[str, Any], namespace: str) -> MpiJobState:
        """Create an MPIJob (custom resource kubeflow.org/v2beta1)."""
        name = str(manifest.get("metadata", {}).get("name", ""))
        answer = self._create("mpijobs", _mpijobs(namespace), dict(manifest), name=name, namespace=namespace)
        return mpijob_from_api(answer)

    def get_mpijob(self, name: str, namespace: str) -> MpiJobState:
        """One MPIJob's status."""
        path = f"{_mpijobs(namespace)}/{_q(name)}"
        return mpijob_from_api(self._json_request("get", "mpijobs", "GET", path, name=name, namespace=namespace))

    def wait_mpijob(self, name: str, namespace: str, *, timeout_s: float, poll_s: float = 2.0) -> MpiJobState:
        """Poll until the MPIJob's Succeeded or Failed condition is True."""
        return self._wait("mpijobs", name, namespace, lambda: self.get_mpijob(name, namespace), timeout_s, poll_s)

    def mpijob_logs(self, name: str, namespace: str) -> str:
        """The log of the MPIJob's newest launcher pod."""
        pods = self._pods(namespace, f"{MPI_JOB_NAME}={name},{MPI_JOB_ROLE}=launcher")
        if not pods:
            raise _no_pod("mpijob", name, namespace)
        return self.pod_logs(pods[-1].name, namespace)

    def delete_mpijob(self, name: str, namespace: str, *, propagation: str = "Background") -> bool:
        """Delete an MPIJob and its launcher and workers; False when it was already gone."""
        return self._delete("mpijobs", f"{_mpijobs(namespace)}/{_q(name)}", name, namespace, propagation)

    # ----------------------------------------------------------------------- configmaps

    def get_configmap(self, name: str, namespace: str) -> dict[str, str]:
        """A ConfigMap's `data` (empty when it has none)."""
        path = f"/api/v1/namespaces/{_q(namespace)}/configmaps/{_q(name)}"
        cm = self._json_request("get", "configmaps", "GET", path, name=name, namespace=namespace)
        data = cm.get("data")
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _requests(container: Mapping[str, Any], resource: str) -> bool:
    """True when a container asks for a non-zero amount of `resource` (limits or requests)."""
    res = container.get("resources") or {}
    for part in ("limits", "requests"):
        value = (res.get(part) or {}).get(resource) if isinstance(res, dict) else None
        if value not in (None, "", "0", 0):
            return True
    return False


def _q(segment: str) -> str:
    """One path segment, percent-encoded (names are validated, this is belt and braces)."""
    return urllib.parse.quote(segment, safe="")


def _jobs(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{_q(namespace)}/jobs"


def _cronjobs(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{_q(namespace)}/cronjobs"


def _mpijobs(namespace: str) -> str:
    return f"/apis/{MPI_GROUP}/{MPI_VERSION}/namespaces/{_q(namespace)}/{MPI_PLURAL}"


def _json(raw: bytes) -> Json:
    """Decode a 2xx answer; one that is not a JSON object is a server error (502)."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiException(status=502, reason=f"answer is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ApiException(status=502, reason="answer is not a JSON object")
    return data


def _items(page: Mapping[str, Any]) -> list[Json]:
    items = page.get("items")
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def _no_pod(kind: str, name: str, namespace: str) -> KubeError:
    return KubeNotFoundError(
        f'{kind} "{name}" in namespace "{namespace}" has no pod to read a log from',
        verb="get", resource="pods/log", name=name, namespace=namespace, status=404,
    )  # fmt: skip
