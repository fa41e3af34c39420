"""The request, retry, error-mapping and watch loop: the one module of upgrade-gate that imports `kubernetes`.

Design decisions
- Only this module imports the official `kubernetes` client (docs/style.md guideline 1; the import contract names
  `upgrade_gate.fleet.kube.api`). It is heavy, so the CLI imports `fleet.kube` inside the command bodies
  that talk to a cluster; the verb modules beside this one (`nodes`, `workloads`, `waiting`) and
  `fleet.objects` never import it.
- Requests go through the client's `ApiClient` (its Configuration from a kubeconfig or the in-cluster
  service account, auth headers, TLS, urllib3 REST layer and `ApiException`), addressed by their REST
  paths (`/api/v1/nodes/{name}`, `/apis/batch/v1/namespaces/{ns}/jobs`, ...). Not through the generated
  `CoreV1Api` / `BatchV1Api` classes: (2026-11, kubernetes 37.0.2) importing them costs 0.85-3 s on
  every CLI invocation, and every generated call re-validates its arguments; the paths in the verb
  modules are the whole API surface the fleet uses, which also makes deploy/rbac.yaml easy to audit.
  Manifests are still checked against the generated `V1Job` / `V1CronJob` models (strict: unknown
  fields rejected) before they are sent (`check_manifest`), because a real API server's default
  `fieldValidation=Warn` would silently drop a misspelt field.
- Client models and `ApiException` never leave this module. Every `ApiException` and every transport
  error (urllib3) is mapped to the `fleet.errors` tree, naming the verb, the resource and the object,
  with the original exception as `__cause__`.
- Retries: one loop (`_call`) resends a request after a *temporary* error (429, 5xx, a request timeout,
  a refused connection) with bounded exponential back-off and jitter; when the server sends
  `Retry-After` (429 and some 5xx) that delay is used instead. Attempts and total time are capped by
  `RetryPolicy`; a delay that would overrun the total budget ends the loop at once. urllib3's own
  retries and the client's `client_go_retries` are switched off so that this is the only retry layer
  and its bounds are the real ones. A 409 Conflict is *not* resent as is: the read-modify-write helpers
  (taints) re-read the node and patch again.
- Watches (`_watch`): `kubernetes.watch.Watch` over a list request of ours (label/field selector,
  `resourceVersion`, `timeoutSeconds`, bookmarks), so the client's own event framing and its `ERROR`
  event handling (410 Gone: the resourceVersion expired) are used, without the generated API classes.
  One watch request is one bounded attempt, never retried here: whatever ends it (its timeout, the
  server closing it, 410, a dropped connection) the caller falls back to a read, which goes through
  the retry loop and its error mapping; a watch the server refuses (no `watch` verb granted, a server
  without watch) is reported as `WatchRefused`, so the caller polls instead. See `fleet.kube.waiting`.
- A create that is retried after a timeout may have landed the first time; a following AlreadyExists
  is then read back as our own object instead of failing.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Self, TypeVar

import urllib3
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from upgrade_gate.fleet.errors import (
    KubeAlreadyExistsError,
    KubeAnswerTooLargeError,
    KubeConflictError,
    KubeConnectionError,
    KubeInvalidError,
    KubeNotFoundError,
    TemporaryError,
    describe,
    error_from_response,
    error_from_transport,
    one_line,
    status_body,
)
from upgrade_gate.fleet.kube.shapes import (
    Json,
    RetryPolicy,
    WatchEvent,
    WatchExpired,
    WatchRefused,
    q,
)
from upgrade_gate.fleet.resultframe import MAX_PAYLOAD_BYTES

T = TypeVar("T")

_MODELS = {"Job": "V1Job", "CronJob": "V1CronJob"}
# Issue 26, every reader has a cap (docs/limits.md). An object is at most etcd's 1.5 MiB request and
# every list is paged, so 64 MiB is far past any honest answer; a pod log is read to what the largest
# result frame (fleet.resultframe.MAX_PAYLOAD_BYTES, gzip then base64: 4/3) needs, plus 16 MiB of lines
# around it, asked of the kubelet as `limitBytes` and enforced here as well.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
MAX_LOG_BYTES = MAX_PAYLOAD_BYTES * 4 // 3 + 16 * 1024 * 1024
_READ_CHUNK = 1 << 16


class _TooLarge(Exception):
    """Raised inside a request; `_call` turns it into KubeAnswerTooLargeError naming the request."""

    def __init__(self, cap: int) -> None:
        super().__init__(cap)
        self.cap = cap


def _read_capped(response: Any, cap: int) -> bytes:
    """The body of `response` (the client's RESTResponse over a streamed urllib3 response), refused past
    `cap` bytes while it is read: a stated Content-Length over the cap before anything is read."""
    raw = response.response
    stated = str(raw.headers.get("Content-Length") or "")
    if stated.isdigit() and int(stated) > cap:
        raw.close()
        raise _TooLarge(cap)
    buf = bytearray()
    for chunk in raw.stream(_READ_CHUNK, decode_content=True):
        buf += chunk
        if len(buf) > cap:
            raw.close()
            raise _TooLarge(cap)
    raw.release_conn()
    data = bytes(buf)
    response.data = data  # what RESTResponse.read() would have returned
    return data


_WATCH_REFUSED = (400, 403, 405, 501)  # no watch verb granted, or a server without watch


class ApiBase:
    """One API server connection: requests, retries, error mapping, watches (see the module docstring)."""

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
        self.watch_chunk_s = 5.0  # one watch request's timeoutSeconds; `stop` callbacks are checked between
        self.watch_refused: dict[str, str] = {}  # resource -> why the server refused to watch it (waits poll)

    # ----------------------------------------------------------------------- construction

    @staticmethod
    def _prepare(cfg: k8s.Configuration) -> k8s.ApiClient:
        cfg.retries = False  # this module is the only retry layer
        cfg.client_go_retries = False
        # run_on_nodes shares one client between its threads (ExecutorSettings.concurrency, default 256), each
        # holding one connection at a time (a read, or its watch): a smaller pool would discard connections
        cfg.connection_pool_maxsize = 264
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
    ) -> Self:
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
    ) -> Self:
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
    def in_cluster(cls, *, retry: RetryPolicy | None = None) -> Self:
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

    def __enter__(self) -> Self:
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
            except _TooLarge as exc:
                subject = describe(verb, resource, name, namespace)
                raise KubeAnswerTooLargeError(
                    f"{subject}: the answer is over the {exc.cap >> 20} MiB upgrade-gate reads (docs/limits.md)",
                    verb=verb, resource=resource, name=name, namespace=namespace,
                ) from None  # fmt: skip
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

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | None] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | tuple[float, float] | None = None,
    ) -> Any:
        """Send one request; the client's RESTResponse (not read yet)."""
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
        return self._api.call_api(*request, _request_timeout=timeout or self.retry.request_timeout_s)

    def _raw(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | None] | None = None,
        body: Any = None,
        content_type: str | None = None,
        max_bytes: int | None = None,
    ) -> bytes:
        """One REST call (one attempt) through the client's ApiClient; the body of a 2xx answer, read to
        at most `max_bytes`.

        Raises the client's ApiException for any other answer and urllib3 errors for no answer;
        `_call` maps and retries them.
        """
        response = self._send(method, path, query=query, body=body, content_type=content_type)
        data = _read_capped(response, MAX_ANSWER_BYTES if max_bytes is None else max_bytes)
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
            return self._json_request("get", resource, "GET", f"{path}/{q(name)}", name=name, namespace=namespace)

    def _post_tolerating(
        self, resource: str, path: str, body: Json, *, tolerate: int, name: str, namespace: str
    ) -> str | None:
        """POST with retries; an answer with status `tolerate` is no error: its Status message is returned."""

        def once() -> str | None:
            try:
                self._raw("POST", path, body=body)
            except ApiException as exc:
                if exc.status != tolerate:
                    raise
                return one_line(str(status_body(exc.body).get("message") or exc.reason or "refused"))
            return None

        return self._call("create", resource, once, name=name, namespace=namespace)

    def _delete(self, resource: str, path: str, name: str, namespace: str, propagation: str) -> bool:
        """DELETE with a propagation policy; False when the object was already gone."""
        query = {"propagationPolicy": propagation}
        try:
            self._call(
                "delete", resource, lambda: self._raw("DELETE", path, query=query), name=name, namespace=namespace
            )
        except KubeNotFoundError:
            return False
        return True

    # ----------------------------------------------------------------------- watches

    def _watch(
        self, path: str, query: Mapping[str, str | None], *, resource_version: str, timeout_s: float
    ) -> Iterator[WatchEvent]:
        """The events of one watch request on the collection `path` (selectors in `query`) after
        `resource_version`, for at most `timeout_s` (the server's timeoutSeconds, whole seconds).

        Ends quietly when the server ends the watch or the connection drops; raises `WatchExpired` on
        410 Gone (list again) and `WatchRefused` when the server refuses to watch (poll instead).
        """
        seconds = max(1, math.ceil(timeout_s))
        read_timeout = seconds + max(5.0, self.retry.request_timeout_s / 3)

        def open_watch(*, watch: bool, _preload_content: bool, resource_version: str, timeout_seconds: int) -> Any:
            params = {**query, "watch": "true", "allowWatchBookmarks": "true"}
            params.update(resourceVersion=resource_version, timeoutSeconds=str(timeout_seconds))
            response = self._send("GET", path, query=params, timeout=(self.retry.request_timeout_s, read_timeout))
            if not 200 <= response.status <= 299:
                data = _read_capped(response, MAX_ANSWER_BYTES).decode("utf-8", "replace")
                if response.status == 410:
                    raise WatchExpired()
                if response.status in _WATCH_REFUSED:
                    raise WatchRefused(response.status, one_line(str(status_body(data).get("message") or data)))
                ApiException.from_response(http_resp=response, body=data, data=None)
            return response.response  # the urllib3 response, streamed by Watch

        watcher = k8s_watch.Watch()  # type: ignore[no-untyped-call]
        stream = watcher.stream(open_watch, resource_version=resource_version, timeout_seconds=seconds)  # type: ignore[no-untyped-call]
        try:
            for raw in stream:
                obj = raw.get("raw_object") if isinstance(raw, dict) else None
                if isinstance(obj, dict):
                    yield WatchEvent(str(raw.get("type", "")), obj)
        except ApiException as exc:  # an ERROR event: 410 Gone means "list again"; any other ends the watch
            if exc.status == 410:
                raise WatchExpired() from exc
        except (urllib3.exceptions.HTTPError, OSError, ValueError):
            return  # the connection dropped: the caller's read tells what happened
        finally:
            watcher.stop()  # type: ignore[no-untyped-call]
            stream.close()

    # ----------------------------------------------------------------------- manifests

    @staticmethod
    def check_manifest(manifest: Mapping[str, Any], *, kind: str, resource: str, namespace: str) -> str:
        """The manifest's name, once it matches the client's batch/v1 model of `kind` (strict)."""
        name = str(manifest.get("metadata", {}).get("name", ""))
        try:
            getattr(k8s, _MODELS[kind]).model_validate(dict(manifest))
        except ValueError as exc:
            raise KubeInvalidError(
                f"{kind} {name!r}: manifest does not match the batch/v1 schema: {one_line(str(exc))}",
                verb="create", resource=resource, name=name, namespace=namespace,
            ) from exc  # fmt: skip
        return name


def _json(raw: bytes) -> Json:
    """Decode a 2xx answer; one that is not a JSON object is a server error (502)."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiException(status=502, reason=f"answer is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ApiException(status=502, reason="answer is not a JSON object")
    return data
