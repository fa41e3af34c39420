"""The Kubernetes error tree: mapping of answers, retryability in the type, exit codes."""

from __future__ import annotations

import json

import pytest

from upgrade_gate.errors import EnvironmentFailure, ExitCode, GateError, InputError, NotFoundError
from upgrade_gate.fleet import errors as fe


def _status(code: int, reason: str, message: str, **details: object) -> str:
    body: dict[str, object] = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
    body.update(reason=reason, message=message)
    if details:
        body["details"] = details
    return json.dumps(body)


def _map(code: int, reason: str = "", message: str = "m", header: str | None = None, **details: object) -> fe.KubeError:
    return fe.error_from_response(
        http_status=code,
        http_reason="HTTP reason",
        body=_status(code, reason, message, **details),
        retry_after_header=header,
        verb="patch",
        resource="nodes",
        name="gpu-01",
    )


@pytest.mark.parametrize(
    ("code", "reason", "cls", "temporary", "exit_code"),
    [
        (401, "Unauthorized", fe.KubeUnauthorizedError, False, ExitCode.ENVIRONMENT),
        (403, "Forbidden", fe.KubeForbiddenError, False, ExitCode.ENVIRONMENT),
        (404, "NotFound", fe.KubeNotFoundError, False, ExitCode.BAD_INPUT),
        (409, "AlreadyExists", fe.KubeAlreadyExistsError, False, ExitCode.ENVIRONMENT),
        (409, "Conflict", fe.KubeConflictError, True, ExitCode.ENVIRONMENT),
        (422, "Invalid", fe.KubeInvalidError, False, ExitCode.BAD_INPUT),
        (400, "BadRequest", fe.KubeInvalidError, False, ExitCode.BAD_INPUT),
        (429, "TooManyRequests", fe.KubeThrottledError, True, ExitCode.ENVIRONMENT),
        (500, "InternalError", fe.KubeServerError, True, ExitCode.ENVIRONMENT),
        (503, "ServiceUnavailable", fe.KubeServerError, True, ExitCode.ENVIRONMENT),
        (0, "", fe.KubeConnectionError, True, ExitCode.ENVIRONMENT),
    ],
)
def test_errors_map_status_to_tree(
    code: int, reason: str, cls: type[fe.KubeError], temporary: bool, exit_code: ExitCode
) -> None:
    err = _map(code, reason)
    assert type(err) is cls
    assert isinstance(err, GateError) and isinstance(err, fe.KubeError)
    assert fe.is_temporary(err) is temporary
    assert isinstance(err, fe.PermanentError) is not temporary
    assert err.exit_code == exit_code
    assert (err.verb, err.resource, err.name, err.status) == ("patch", "nodes", "gpu-01", code)
    assert "\n" not in str(err)


def test_errors_forbidden_names_verb_and_resource() -> None:
    err = _map(403, "Forbidden", 'nodes "gpu-01" is forbidden: User "x" cannot patch resource "nodes"')
    assert str(err).startswith('Kubernetes API refuses to patch nodes "gpu-01" (HTTP 403 Forbidden)')
    assert "deploy/rbac.yaml" in str(err)


def test_errors_not_found_is_bad_input_and_a_not_found_error() -> None:
    err = _map(404, "NotFound")
    assert isinstance(err, NotFoundError) and isinstance(err, InputError) and isinstance(err, EnvironmentFailure)


@pytest.mark.parametrize(
    ("header", "details", "expected"),
    [
        ("7", {}, 7.0),
        (None, {"retryAfterSeconds": 3}, 3.0),
        ("2", {"retryAfterSeconds": 9}, 2.0),
        ("garbage", {}, None),
        (None, {}, None),
    ],
)
def test_errors_retry_after(header: str | None, details: dict[str, int], expected: float | None) -> None:
    assert _map(429, "TooManyRequests", header=header, **details).retry_after_s == expected


def test_errors_retry_after_http_date() -> None:
    got = fe.retry_after_seconds("Wed, 21 Oct 2015 07:28:10 GMT", {}, now=1445412480.0)
    assert got == pytest.approx(10.0)


def test_errors_non_status_body_keeps_http_reason() -> None:
    err = fe.error_from_response(
        http_status=502, http_reason="Bad Gateway", body="<html>proxy</html>", retry_after_header=None,
        verb="get", resource="jobs", name="j", namespace="ug",
    )  # fmt: skip
    assert isinstance(err, fe.KubeServerError)
    assert 'get jobs "j" in namespace "ug"' in str(err) and "Bad Gateway" in str(err)


def test_errors_transport_timeout_vs_refused() -> None:
    timeout = fe.error_from_transport("read timed out", timed_out=True, verb="list", resource="nodes")
    refused = fe.error_from_transport("Connection refused", timed_out=False, verb="list", resource="nodes")
    assert isinstance(timeout, fe.KubeRequestTimeoutError) and fe.is_temporary(timeout)
    assert isinstance(refused, fe.KubeConnectionError) and fe.is_temporary(refused)
    assert not fe.is_temporary(fe.KubeWaitTimeoutError("x"))
    assert isinstance(fe.KubeWaitTimeoutError("x"), fe.KubeTimeoutError)
