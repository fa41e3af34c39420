"""`ApiServerDouble`: a small in-process Kubernetes API server for tests (stdlib HTTP, 127.0.0.1).

It serves the subset of the API that upgrade-gate's fleet code uses, with the semantics of the
Kubernetes API reference, so that the *real* `kubernetes` client talks to it over HTTP:
- core/v1 nodes (get, list with labelSelector/fieldSelector/limit/continue, patch with JSON merge,
  strategic merge and JSON patch, update with a resourceVersion precondition, delete), pods (get,
  list, `log` subresource with tailLines/limitBytes), configmaps (get, list, create, update);
- batch/v1 jobs (create, get, list, delete with propagationPolicy; the API default for Jobs orphans
  their pods, Background/Foreground delete them) and kubeflow.org/v2beta1 mpijobs through the custom
  objects paths (create, get, list, delete);
- every object gets uid, resourceVersion (one global counter) and creationTimestamp; errors are
  `Status` objects with the real reasons and messages (NotFound, AlreadyExists, Conflict, Forbidden,
  Invalid, BadRequest, TooManyRequests, InternalError, ...);
- watch is not implemented (`?watch=true` answers 400): the client polls, see `fleet.kube`.
Test knobs: `inject()` queues error answers per (verb, resource) (429 with Retry-After, 5xx, 403,
404, 409), `slow()` delays answers, `authorize()` enforces RBAC rules (e.g. those of deploy/rbac.yaml)
and `requests` records every request for assertions. Controllers and the simulated kubelet that run
Jobs live in `tests.k8s.kubelet`.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.k8s import admission, patch, selectors
from tests.k8s.store import RESOURCES, ApiStatusError, Obj, ResourceType, Store, invalid

SA_USER = "system:serviceaccount:upgrade-gate:upgrade-gate"
_PATCH_TYPES = ", ".join((patch.JSON_PATCH, patch.MERGE, patch.STRATEGIC))


@dataclass
class Fault:
    """One injected answer: an error Status (status > 0) and/or a delay before answering."""

    status: int = 0
    reason: str = ""
    message: str = ""
    retry_after: int | None = None
    delay_s: float = 0.0
    name: str | None = None  # only requests for this object


@dataclass(frozen=True)
class Request:
    """One request as the double saw it."""

    verb: str
    resource: str  # plural, or plural/subresource
    group: str
    namespace: str
    name: str
    status: int
    content_type: str = ""
    query: Mapping[str, str] = field(default_factory=dict)
    authorization: str = ""  # the Authorization header as sent (the double does not check tokens)


@dataclass(frozen=True)
class Rule:
    """An RBAC PolicyRule, with the namespace its binding grants it in (None: cluster-wide)."""

    api_groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    namespace: str | None = None
    resource_names: frozenset[str] = frozenset()  # empty: any name

    def allows(self, verb: str, group: str, resource: str, namespace: str, name: str = "") -> bool:
        """RBAC matching, including the `*` wildcards and resourceNames."""
        if self.namespace is not None and self.namespace != namespace:
            return False
        if self.resource_names and name not in self.resource_names:
            return False
        return (
            (group in self.api_groups or "*" in self.api_groups)
            and (resource in self.resources or "*" in self.resources)
            and (verb in self.verbs or "*" in self.verbs)
        )


class ApiServerDouble:
    """The API server double; start() binds 127.0.0.1 on a free port."""

    def __init__(self) -> None:
        self.store = Store()
        self.logs: dict[tuple[str, str], list[str]] = {}  # (namespace, pod) -> log lines, by the kubelet
        self.requests: list[Request] = []
        self._faults: dict[tuple[str, str], deque[Fault]] = {}
        self._rules: tuple[Rule, ...] | None = None
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.stopping = threading.Event()

    # ----------------------------------------------------------------------- lifecycle

    def start(self) -> str:
        """Serve in a background thread; returns the base URL."""
        server = self

        class Handler(_Handler):
            api = server

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        httpd.block_on_close = False
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop serving (slow answers in flight are cut short)."""
        self.stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT`."""
        assert self._httpd is not None, "not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    # ----------------------------------------------------------------------- test knobs

    def inject(
        self,
        verb: str,
        resource: str,
        status: int,
        *,
        times: int = 1,
        retry_after: int | None = None,
        reason: str | None = None,
        message: str | None = None,
        name: str | None = None,
    ) -> None:
        """Queue `times` error answers for (verb, resource); `*` matches any verb or resource."""
        reason = reason or _REASONS.get(status, "InternalError")
        message = message or _MESSAGES.get(status, f"injected {status}")
        with self._lock:
            queue = self._faults.setdefault((verb, resource), deque())
            for _ in range(times):
                queue.append(Fault(status=status, reason=reason, message=message, retry_after=retry_after, name=name))

    def slow(self, verb: str, resource: str, delay_s: float, *, times: int = 1) -> None:
        """Delay the next `times` answers for (verb, resource) by `delay_s` seconds."""
        with self._lock:
            queue = self._faults.setdefault((verb, resource), deque())
            for _ in range(times):
                queue.append(Fault(delay_s=delay_s))

    def authorize(self, rules: Iterable[Rule] | None) -> None:
        """Enforce RBAC: only requests some rule allows succeed (None: allow everything)."""
        self._rules = tuple(rules) if rules is not None else None

    def seen(self, verb: str | None = None, resource: str | None = None) -> list[Request]:
        """Recorded requests, filtered."""
        with self._lock:
            return [
                r
                for r in self.requests
                if (verb is None or r.verb == verb) and (resource is None or r.resource == resource)
            ]

    def _take_fault(self, verb: str, resource: str, name: str) -> Fault | None:
        with self._lock:
            for key in ((verb, resource), ("*", resource), (verb, "*"), ("*", "*")):
                queue = self._faults.get(key)
                if queue and (queue[0].name in (None, name)):
                    return queue.popleft()
        return None

    def _record(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)

    def _forbidden(self, verb: str, rt: ResourceType, resource: str, namespace: str, name: str) -> ApiStatusError:
        what = f'{rt.qualified} "{name}"' if name else rt.qualified
        scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        return ApiStatusError(
            403,
            "Forbidden",
            f'{what} is forbidden: User "{SA_USER}" cannot {verb} resource "{resource}" in API group '
            f'"{rt.group}" {scope}',
            details={"name": name, "group": rt.group, "kind": rt.plural},
        )

    def check_access(self, verb: str, rt: ResourceType, resource: str, namespace: str, name: str) -> None:
        """Raise 403 unless the RBAC rules (when set) allow the request."""
        rules = self._rules
        if rules is not None and not any(r.allows(verb, rt.group, resource, namespace, name) for r in rules):
            raise self._forbidden(verb, rt, resource, namespace, name)

    # ----------------------------------------------------------------------- verbs

    def do_list(self, rt: ResourceType, namespace: str | None, query: Mapping[str, str]) -> Obj:
        """GET on a collection: selectors, limit/continue pagination."""
        if query.get("watch") in ("true", "1"):
            raise ApiStatusError(400, "BadRequest", "watch is not implemented by this test double; poll instead")
        try:
            reqs = selectors.parse_label_selector(query.get("labelSelector"))
            fields = selectors.parse_field_selector(query.get("fieldSelector"), rt.plural)
        except selectors.SelectorError as exc:
            raise ApiStatusError(400, "BadRequest", f"unable to parse requirement: {exc}") from exc
        with self.store.lock:
            rv = self.store.resource_version
            items = [
                o
                for o in self.store.list(rt, namespace)
                if selectors.match_labels(reqs, o["metadata"].get("labels")) and fields(o)
            ]
        start = 0
        if query.get("continue"):
            try:
                start = int(json.loads(base64.b64decode(query["continue"]))["start"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ApiStatusError(410, "Expired", "The provided continue parameter is too old") from exc
        limit = int(query.get("limit") or 0)
        page = items[start : start + limit] if limit > 0 else items[start:]
        meta: Obj = {"resourceVersion": rv}
        if limit > 0 and start + limit < len(items):
            meta["continue"] = base64.b64encode(json.dumps({"start": start + limit, "rv": rv}).encode()).decode()
            meta["remainingItemCount"] = len(items) - start - limit
        if rt.group != "kubeflow.org":  # built-in list items carry no kind/apiVersion
            for item in page:
                item.pop("kind", None)
                item.pop("apiVersion", None)
        return {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta, "items": page}

    def do_create(self, rt: ResourceType, namespace: str, body: Any) -> Obj:
        """POST: admission, then store."""
        if not isinstance(body, dict):
            raise ApiStatusError(400, "BadRequest", "the request body is not a JSON object")
        if rt.namespaced and body.get("metadata", {}).get("namespace") not in (None, namespace):
            raise ApiStatusError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        uid = admission.admit_create(rt, body)
        return self.store.create(rt, namespace, body, uid=uid)

    def do_update(self, rt: ResourceType, namespace: str, name: str, body: Any) -> Obj:
        """PUT: replace with the body's resourceVersion as precondition."""
        if not isinstance(body, dict) or body.get("metadata", {}).get("name") != name:
            raise ApiStatusError(400, "BadRequest", "the name of the object does not match the name on the URL")
        admission.admit_update(rt, body)
        precondition = body.get("metadata", {}).get("resourceVersion")
        return self.store.update(rt, namespace, name, body, precondition_rv=precondition)

    def do_patch(self, rt: ResourceType, namespace: str, name: str, content_type: str, body: Any) -> Obj:
        """PATCH: apply by content type; a resourceVersion in the patch is a precondition."""
        with self.store.lock:
            current = self.store.get(rt, namespace, name)
            try:
                patched = patch.apply_patch(content_type, current, body)
            except LookupError as exc:
                raise ApiStatusError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types include: {_PATCH_TYPES}",
                ) from exc
            except patch.PatchError as exc:
                raise ApiStatusError(422, "Invalid", str(exc)) from exc
            meta = patched.setdefault("metadata", {})
            for fixed in ("name", "uid"):
                if meta.get(fixed) != current["metadata"][fixed]:
                    raise invalid(rt, name, f"metadata.{fixed}", "field is immutable")
            wanted = meta.get("resourceVersion") or current["metadata"]["resourceVersion"]
            if wanted != current["metadata"]["resourceVersion"]:
                raise ApiStatusError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again",
                    details={"name": name, "group": rt.group, "kind": rt.plural},
                )
            admission.admit_update(rt, patched)
            if "status" in current:
                patched["status"] = current["status"]  # status changes only through the status subresource
            return self.store.update(rt, namespace, name, patched, precondition_rv=wanted)

    def do_delete(self, rt: ResourceType, namespace: str, name: str, policy: str | None) -> Obj:
        """DELETE with garbage collection of dependents by propagationPolicy."""
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise ApiStatusError(400, "BadRequest", f"unsupported propagationPolicy {policy!r}")
        default = "Orphan" if rt.plural == "jobs" else "Background"  # batch/v1 Jobs orphan by default
        with self.store.lock:
            obj = self.store.delete(rt, namespace, name)
            self._collect(obj["metadata"]["uid"], namespace, orphan=(policy or default) == "Orphan")
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "group": rt.group, "kind": rt.plural, "uid": obj["metadata"]["uid"]},
        }

    def _collect(self, owner_uid: str, namespace: str, *, orphan: bool) -> None:
        for rt in RESOURCES.values():
            if not rt.namespaced:
                continue
            for obj in self.store.list(rt, namespace):
                refs = obj["metadata"].get("ownerReferences") or []
                if not any(r.get("uid") == owner_uid for r in refs):
                    continue
                name = obj["metadata"]["name"]
                if orphan:
                    self.store.mutate(
                        rt,
                        namespace,
                        name,
                        lambda o: o["metadata"].__setitem__(
                            "ownerReferences",
                            [r for r in o["metadata"]["ownerReferences"] if r.get("uid") != owner_uid],
                        ),
                    )
                else:
                    gone = self.store.delete(rt, namespace, name)
                    self._collect(gone["metadata"]["uid"], namespace, orphan=False)

    def pod_log(self, namespace: str, name: str, query: Mapping[str, str]) -> str:
        """The `log` subresource."""
        pod = self.store.get(RESOURCES[("", "pods")], namespace, name)
        containers = [c["name"] for c in pod["spec"]["containers"]]
        container = query.get("container") or containers[0]
        if container not in containers:
            raise ApiStatusError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        if (namespace, name) not in self.logs:
            raise ApiStatusError(
                400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
            )
        with self._lock:
            lines = list(self.logs[(namespace, name)])
        if query.get("tailLines"):
            lines = lines[-int(query["tailLines"]) :] if int(query["tailLines"]) > 0 else []
        text = "".join(lines)
        if query.get("limitBytes"):
            text = text.encode("utf-8")[: int(query["limitBytes"])].decode("utf-8", errors="ignore")
        return text

    def open_log(self, namespace: str, pod: str) -> None:
        """Called by the kubelet when a container starts (its log becomes readable)."""
        with self._lock:
            self.logs.setdefault((namespace, pod), [])

    def append_log(self, namespace: str, pod: str, line: str) -> None:
        """Called by the kubelet for each line a container prints."""
        with self._lock:
            self.logs.setdefault((namespace, pod), []).append(line)


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
_MESSAGES = {
    403: f'is forbidden: User "{SA_USER}" cannot perform this action (injected)',
    404: "not found (injected)",
    409: "the object has been modified; please apply your changes to the latest version and try again",
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: injected failure",
    503: "the server is currently unable to handle the request",
}


def _route(path: str) -> tuple[ResourceType, str, str, str, str]:
    """(resource type, namespace, name, subresource, resource-with-subresource) of a URL path."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        raise ApiStatusError(404, "NotFound", "the server could not find the requested resource")
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest:
        raise ApiStatusError(404, "NotFound", "the server could not find the requested resource")
    rt = RESOURCES.get((group, rest[0]))
    if rt is None or (rt.namespaced and not namespace and len(rest) > 1):
        raise ApiStatusError(404, "NotFound", "the server could not find the requested resource")
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if sub and not (rt.plural == "pods" and sub == "log"):
        raise ApiStatusError(404, "NotFound", "the server could not find the requested resource")
    return rt, namespace, name, sub, f"{rt.plural}/{sub}" if sub else rt.plural


class _Handler(BaseHTTPRequestHandler):
    api: ApiServerDouble
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's urllib3 pool expects
    disable_nagle_algorithm = True  # headers and body go out in separate writes: avoid 40 ms delayed ACKs

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        content_type = self.headers.get("Content-Type", "")
        verb, resource, group, namespace, name = method.lower(), "", "", "", ""
        headers: dict[str, str] = {}
        answer: Obj | str
        try:
            if url.path == "/version":
                self._send(200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0-upgrade-gate-double"})
                return
            rt, namespace, name, sub, resource = _route(url.path)
            group = rt.group
            verb = _verb(method, name, query)
            fault = self.api._take_fault(verb, resource, name)
            if fault is not None and fault.delay_s and self.api.stopping.wait(fault.delay_s):
                return
            if fault is not None and fault.status:
                if fault.retry_after is not None:
                    headers["Retry-After"] = str(fault.retry_after)
                details = {"retryAfterSeconds": fault.retry_after} if fault.retry_after is not None else None
                raise ApiStatusError(fault.status, fault.reason, fault.message, details=details)
            self.api.check_access(verb, rt, resource, namespace, name)
            body = json.loads(raw) if raw else None
            if sub == "log":
                status, answer = 200, self.api.pod_log(namespace, name, query)
            else:
                status, answer = self._dispatch(verb, rt, namespace, name, content_type, body, query)
        except ApiStatusError as exc:
            status, answer = exc.code, exc.status()
            headers |= exc.headers
        except json.JSONDecodeError as exc:
            status, answer = 400, ApiStatusError(400, "BadRequest", f"invalid JSON: {exc}").status()
        # recorded before answering, so a test that saw the answer also sees the record
        auth = self.headers.get("Authorization", "")
        self.api._record(Request(verb, resource, group, namespace, name, status, content_type, query, auth))
        try:
            self._send(status, answer, headers=headers)
        except (BrokenPipeError, ConnectionResetError):
            return

    def _dispatch(
        self,
        verb: str,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        query: Mapping[str, str],
    ) -> tuple[int, Obj]:
        api = self.api
        if verb == "list":
            return 200, api.do_list(rt, namespace or None, query)
        if verb == "get":
            return 200, api.store.get(rt, namespace, name)
        if verb == "create":
            return 201, api.do_create(rt, namespace, body)
        if verb == "update":
            return 200, api.do_update(rt, namespace, name, body)
        if verb == "patch":
            return 200, api.do_patch(rt, namespace, name, content_type, body)
        if verb == "delete":
            policy = query.get("propagationPolicy") or (body or {}).get("propagationPolicy")
            return 200, api.do_delete(rt, namespace, name, policy)
        raise ApiStatusError(405, "MethodNotAllowed", f"{verb} is not supported on {rt.plural}")

    def _send(self, status: int, payload: Obj | str, *, headers: Mapping[str, str] | None = None) -> None:
        if isinstance(payload, str):
            data, ctype = payload.encode("utf-8"), "text/plain"
        else:
            data, ctype = json.dumps(payload).encode("utf-8"), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


def _verb(method: str, name: str, query: Mapping[str, str]) -> str:
    if method == "GET":
        if not name:
            return "watch" if query.get("watch") in ("true", "1") else "list"
        return "get"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method) or (
        "delete" if name else "deletecollection"
    )


def wait_until(predicate: Any, timeout_s: float = 10.0, interval_s: float = 0.01) -> bool:
    """Poll `predicate()` until true or the timeout passes (test helper, no timed asserts)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())
