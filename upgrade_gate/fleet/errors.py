"""Kubernetes API errors as the project's own error tree (kopf-style), with retryability in the type.

Design decisions
- Every error the fleet stage raises for an API call derives from `KubeError`, itself a
  `GateError` (via `EnvironmentFailure`), so the CLI maps it to an exit code in its one place and
  nothing downstream ever sees a `kubernetes.client.ApiException`. The client exception is kept as
  `__cause__` (raise ... from exc) for `--debug` tracebacks.
- The tree follows HTTP semantics the way kopf's `APIError` -> `APIClientError` ->
  `APINotFoundError` / `APIConflictError` does: 4xx under `KubeClientError`, 5xx as
  `KubeServerError`, plus transport failures (`KubeConnectionError`) and timeouts.
- Retryability lives in the type: each concrete error mixes in `TemporaryError` (repeat the operation
  after a back-off: 409 Conflict on an optimistic write once the object is re-read, 429, 5xx, request
  timeouts, a refused connection) or `PermanentError` (403, 404, 400/422, AlreadyExists, a wait that
  ran out of time). The client's generic retry loop resends a request only for temporary errors other
  than conflicts; a conflict means "re-read, re-apply, write again", which only the read-modify-write
  helpers can do.
- Exit codes per docs/architecture.md: an unreachable or forbidding API server is an environment failure (4); a
  named object that does not exist (404) and an object the server rejects as invalid (400/422) are bad
  input (3). Messages are one line and name the verb, the resource and the object.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Mapping
from typing import Any

from upgrade_gate.errors import ConfigError, EnvironmentFailure, ExitCode, InputError, NotFoundError


class TemporaryError(Exception):
    """Mixin: the operation may succeed if repeated after a back-off."""


class PermanentError(Exception):
    """Mixin: repeating the same operation cannot help."""


def is_temporary(exc: BaseException) -> bool:
    """True when `exc` is marked retryable by its type."""
    return isinstance(exc, TemporaryError)


class KubeError(EnvironmentFailure):
    """Root of every Kubernetes API failure; carries what was attempted.

    `verb` is the Kubernetes verb (get, list, create, patch, delete, ...), `resource` the plural
    resource with any subresource (`nodes`, `pods/log`, `mpijobs`), `name` the object (or ""),
    `status` the HTTP status (0 when no response came back) and `reason` the Status reason.
    """

    exit_code = ExitCode.ENVIRONMENT

    def __init__(
        self,
        message: str,
        *,
        verb: str = "",
        resource: str = "",
        name: str = "",
        namespace: str = "",
        status: int = 0,
        reason: str = "",
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.verb = verb
        self.resource = resource
        self.name = name
        self.namespace = namespace
        self.status = status
        self.reason = reason
        self.retry_after_s = retry_after_s  # the server's Retry-After, when it sent one


class KubeClientError(KubeError):
    """The server refused the request as the client's fault (HTTP 4xx)."""


class KubeNotFoundError(KubeClientError, NotFoundError, PermanentError):
    """The named object does not exist (404): bad input when the user named it."""

    exit_code = ExitCode.BAD_INPUT


class KubeAlreadyExistsError(KubeClientError, PermanentError):
    """A create hit an existing object of the same name (409 AlreadyExists)."""


class KubeConflictError(KubeClientError, TemporaryError):
    """An optimistic write used a stale resourceVersion (409 Conflict): re-read and write again."""


class KubeForbiddenError(KubeClientError, PermanentError):
    """The service account may not do this (403; 401 is the subclass below); exit 4 naming verb and resource."""

    exit_code = ExitCode.ENVIRONMENT


class KubeInvalidError(KubeClientError, InputError, PermanentError):
    """The server rejected the object as malformed (400 BadRequest / 422 Invalid)."""

    exit_code = ExitCode.BAD_INPUT


class KubeThrottledError(KubeClientError, TemporaryError):
    """The API server asked the client to slow down (429 TooManyRequests, honour Retry-After)."""


class KubeServerError(KubeError, TemporaryError):
    """The API server failed (HTTP 5xx) or answered with something that is not the API."""


class KubeConnectionError(KubeError, TemporaryError):
    """No HTTP response at all: connection refused, reset, DNS or TLS failure."""


class KubeTLSError(KubeError, PermanentError):
    """The TLS handshake failed (the server's certificate does not verify): repeating cannot help."""


class KubeUnauthorizedError(KubeForbiddenError):
    """401: the server does not accept the credentials (expired or wrong token, unknown client cert)."""


class KubeTimeoutError(KubeError):
    """Something did not finish in time (a request, or a Job/MPIJob wait)."""


class KubeRequestTimeoutError(KubeTimeoutError, TemporaryError):
    """One API request got no answer within the request timeout."""


class KubeWaitTimeoutError(KubeTimeoutError, PermanentError):
    """A Job or MPIJob reached neither its Complete/Succeeded nor its Failed condition in time."""


class KubeRefusedError(KubeError, PermanentError):
    """The cluster refused to run our pod for a reason that says nothing about the node's hardware
    (issue 28): admission (Pod Security, quota), the kubelet's `OutOf*` while other pods hold the
    node's GPUs, an image that cannot be pulled, a pod no node would take in time. Exit 4, no CVF label."""

    exit_code = ExitCode.ENVIRONMENT


class KubeAnswerTooLargeError(KubeError, PermanentError):
    """An API answer or pod log longer than the tool reads (issue 26: every reader has a cap). Exit 4:
    the answer says nothing about the node; docs/limits.md names the caps."""

    exit_code = ExitCode.ENVIRONMENT


def describe(verb: str, resource: str, name: str = "", namespace: str = "") -> str:
    """`patch nodes "gpu-07"` / `create jobs in namespace "ug"`: the subject of an error message."""
    what = f"{verb} {resource}"
    if name:
        what += f' "{name}"'
    if namespace:
        what += f' in namespace "{namespace}"'
    return what


class InvalidNameError(ConfigError):
    """A node name, label key/value or object name is not valid for Kubernetes; names the offender."""


# --------------------------------------------------------------------------- mapping HTTP answers


def one_line(text: str, limit: int = 300) -> str:
    """Collapse whitespace (server messages span lines) and cap the length."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def status_body(body: object) -> dict[str, Any]:
    """The `Status` object of an error answer, or {} when the body is not one."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if not isinstance(body, str) or not body.strip().startswith("{"):
        return {}
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def retry_after_seconds(header: str | None, status: Mapping[str, Any], *, now: float | None = None) -> float | None:
    """Seconds the server asked us to wait: `Retry-After` (seconds or HTTP date), else details.retryAfterSeconds."""
    if header:
        raw = header.strip()
        if raw.isascii() and raw.isdigit():  # "²" is a digit to isdigit, not to float
            return float(raw)
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            when = None
        if when is not None:
            return max(0.0, when.timestamp() - (time.time() if now is None else now))
    details = status.get("details")
    if isinstance(details, dict):
        seconds = details.get("retryAfterSeconds")
        if isinstance(seconds, int) and not isinstance(seconds, bool):
            return float(seconds)
    return None


def error_from_response(
    *,
    http_status: int,
    http_reason: str,
    body: object,
    retry_after_header: str | None,
    verb: str,
    resource: str,
    name: str = "",
    namespace: str = "",
) -> KubeError:
    """The error-tree member for one non-2xx answer (HTTP status 0: no answer at all)."""
    status = status_body(body)
    reason = str(status.get("reason") or http_reason or "")
    message = one_line(str(status.get("message") or http_reason or "no message"))
    subject = describe(verb, resource, name, namespace)
    kw: dict[str, Any] = {
        "verb": verb,
        "resource": resource,
        "name": name,
        "namespace": namespace,
        "status": http_status,
        "reason": reason,
        "retry_after_s": retry_after_seconds(retry_after_header, status),
    }
    if http_status == 401:
        return KubeUnauthorizedError(
            f"Kubernetes API does not accept the credentials to {subject} (HTTP 401 {reason}): {message}; "
            "the kubeconfig's token or client certificate is wrong or expired (get a new one)",
            **kw,
        )
    if http_status == 403:
        return KubeForbiddenError(
            f"Kubernetes API refuses to {subject} (HTTP {http_status} {reason}): {message}; "
            "check the service account's RBAC (deploy/rbac.yaml)",
            **kw,
        )
    if http_status == 404:
        return KubeNotFoundError(f"{subject}: not found ({message})", **kw)
    if http_status == 409 and reason == "AlreadyExists":
        return KubeAlreadyExistsError(f"{subject}: already exists ({message})", **kw)
    if http_status == 409:
        return KubeConflictError(f"{subject}: conflict ({message})", **kw)
    if http_status == 429:
        return KubeThrottledError(f"{subject}: throttled by the API server (HTTP 429): {message}", **kw)
    if http_status >= 500:
        return KubeServerError(f"{subject}: API server error (HTTP {http_status} {reason}): {message}", **kw)
    if http_status == 0 and http_reason.startswith("SSLError"):  # the client's REST layer wraps urllib3's SSLError
        return error_from_transport(message, timed_out=False, tls=True, verb=verb, resource=resource, name=name,
                                    namespace=namespace)  # fmt: skip
    if http_status == 0:
        return KubeConnectionError(f"{subject}: no answer from the Kubernetes API: {message}", **kw)
    return KubeInvalidError(f"{subject}: rejected by the API server (HTTP {http_status} {reason}): {message}", **kw)


def error_from_transport(
    detail: str, *, timed_out: bool, verb: str, resource: str, name: str = "", namespace: str = "", tls: bool = False
) -> KubeError:
    """The error-tree member when no HTTP answer came back (timeout, refused, reset, TLS failure)."""
    subject = describe(verb, resource, name, namespace)
    kw: dict[str, Any] = {"verb": verb, "resource": resource, "name": name, "namespace": namespace}
    if tls:
        return KubeTLSError(
            f"{subject}: TLS with the Kubernetes API failed ({one_line(detail)}); check the kubeconfig's "
            "server address and certificate-authority",
            **kw,
        )
    if timed_out:
        return KubeRequestTimeoutError(f"{subject}: the Kubernetes API did not answer in time ({detail})", **kw)
    return KubeConnectionError(f"{subject}: Kubernetes API unreachable: {one_line(detail)}", **kw)
