"""Watch faults the real control plane cannot be made to produce on demand, against a tiny scripted server.

A 410 Gone in the middle of a watch, a watch connection that drops, an event that says more than the
objects do, a server that refuses to watch: `KubeClient.wait_job` must re-list, fall back to a read,
never let an event decide, and time out (fail closed) when no read shows a final state. The server
below is a double of our own for these faults only (a few routes of the API, plain HTTP); the
behaviour on the real thing is in tests/test_fleet_watch_real.py.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.k8s.cluster import FAST_RETRY
from upgrade_gate.fleet.errors import KubeWaitTimeoutError
from upgrade_gate.fleet.kube import KubeClient
from upgrade_gate.fleet.objects import JobPhase

NS, JOB = "upgrade-gate", "ug-cmd-gpu-01-w1"
JOB_PATH = f"/apis/batch/v1/namespaces/{NS}/jobs/{JOB}"
PODS_PATH = f"/api/v1/namespaces/{NS}/pods"


def _pod(phase: str, rv: int) -> dict[str, Any]:
    meta = {"name": f"{JOB}-abcde", "namespace": NS, "resourceVersion": str(rv), "labels": {"job-name": JOB}}
    return {"metadata": meta, "spec": {"nodeName": "gpu-01"}, "status": {"phase": phase}}


@dataclass
class Script:
    """What the server answers: successive Job states and pod phases (the last repeats), per watch request
    a list of actions: `("event", type, pod phase)`, `("raw", line)`, `("error", code)`, `("refuse", status)`,
    `("close",)`."""

    jobs: list[str]
    pods: list[str]
    watches: list[list[tuple[Any, ...]]] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    list_versions: list[str] = field(default_factory=list)
    rv: int = 100

    def next(self, seq: list[str]) -> str:
        return seq.pop(0) if len(seq) > 1 else seq[0]


def _server(script: Script) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
            script.requests.append((url.path, query))
            script.rv += 1
            if url.path == JOB_PATH:
                done = script.next(script.jobs) == "complete"
                conditions = [{"type": "Complete", "status": "True"}] if done else []
                self._send(200, {"metadata": {"name": JOB, "namespace": NS, "uid": "u1",
                                              "resourceVersion": str(script.rv)},
                                 "spec": {"completions": 1}, "status": {"conditions": conditions}})  # fmt: skip
            elif url.path == PODS_PATH and query.get("watch") != "true":
                pod = _pod(script.next(script.pods), script.rv)
                script.list_versions.append(str(script.rv))
                self._send(200, {"metadata": {"resourceVersion": str(script.rv)}, "items": [pod]})
            elif url.path == PODS_PATH:
                self._watch(script.watches.pop(0) if script.watches else [], int(query.get("timeoutSeconds", "1")))
            else:
                self._send(404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": url.path})

        def _watch(self, actions: list[tuple[Any, ...]], timeout: int) -> None:
            if actions and actions[0][0] == "refuse":
                self._send(actions[0][1], {"kind": "Status", "code": actions[0][1], "reason": "Forbidden",
                                           "message": "pods is forbidden: cannot watch"})  # fmt: skip
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()  # HTTP/1.0: the stream ends when the connection closes
            for action in actions:
                if action[0] == "event":
                    event: dict[str, Any] = {"type": action[1], "object": _pod(action[2], script.rv + 1)}
                elif action[0] == "raw":  # a line as is: garbled JSON, an object of the wrong shape
                    self.wfile.write(action[1] + b"\n")
                    continue
                elif action[0] == "error":
                    event = {"type": "ERROR", "object": {"kind": "Status", "code": action[1], "reason": "Expired",
                                                         "message": "too old resource version"}}  # fmt: skip
                else:  # close: end the watch at once
                    return
                self.wfile.write(json.dumps(event).encode() + b"\n")
                self.wfile.flush()
            time.sleep(timeout)  # nothing more happens until the watch's timeoutSeconds

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    return server


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(script: Script) -> KubeClient:
        server = _server(script)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        client = KubeClient.from_url(f"http://127.0.0.1:{server.server_address[1]}", retry=FAST_RETRY)
        client.watch_chunk_s = 1.0
        return client

    yield start
    for server in servers:
        server.shutdown()


def _watches(script: Script) -> list[dict[str, str]]:
    return [q for path, q in script.requests if path == PODS_PATH and q.get("watch") == "true"]


def _lists(script: Script) -> list[dict[str, str]]:
    return [q for path, q in script.requests if path == PODS_PATH and q.get("watch") != "true"]


def test_kube_watch_410_gone_lists_again_and_watches_from_the_new_version(serve: Any) -> None:
    script = Script(jobs=["active", "active", "complete"], pods=["Running", "Running", "Succeeded"],
                    watches=[[("error", 410)], [("event", "MODIFIED", "Succeeded")]])  # fmt: skip
    state = serve(script).wait_job(JOB, NS, timeout_s=20, poll_s=5)
    assert state.phase is JobPhase.SUCCEEDED
    lists, watches = _lists(script), _watches(script)
    assert len(lists) == 3 and len(watches) == 2
    # every watch starts from the list read just before it, never from the expired version again
    assert [w["resourceVersion"] for w in watches] == script.list_versions[:2]
    assert all(w["labelSelector"] == f"job-name={JOB}" and w["allowWatchBookmarks"] == "true" for w in watches)


def test_kube_watch_event_alone_never_decides_and_the_wait_fails_closed(serve: Any) -> None:
    """An event claims the pod Succeeded; every read says the Job runs on: the wait times out, no PASS."""
    script = Script(jobs=["active"], pods=["Running"], watches=[[("event", "MODIFIED", "Succeeded")]])
    client = serve(script)
    with pytest.raises(KubeWaitTimeoutError, match=r"not finished after 2\.5s"):
        client.wait_job(JOB, NS, timeout_s=2.5, poll_s=0.2, settle_on_pod=True)
    assert len(_watches(script)) >= 2  # woke on the event, read, and watched again


def test_kube_watch_dropped_connection_falls_back_to_a_read(serve: Any) -> None:
    script = Script(jobs=["active", "complete"], pods=["Running"], watches=[[("close",)]])
    state = serve(script).wait_job(JOB, NS, timeout_s=20, poll_s=0.1)
    assert state.phase is JobPhase.SUCCEEDED
    assert len(_lists(script)) == 2 and len(_watches(script)) == 1


def test_kube_watch_pod_succeeded_settles_a_one_completion_job(serve: Any) -> None:
    """settle_on_pod: the read shows the pod Succeeded before the Job controller wrote Complete."""
    script = Script(jobs=["active"], pods=["Running", "Succeeded"], watches=[[("event", "MODIFIED", "Succeeded")]])
    client = serve(script)
    state = client.wait_job(JOB, NS, timeout_s=20, poll_s=5, settle_on_pod=True)
    assert state.phase is JobPhase.SUCCEEDED and "Succeeded" in (state.settled_by or "")
    script2 = Script(jobs=["active"], pods=["Running", "Succeeded"], watches=[[("event", "MODIFIED", "Succeeded")]])
    with pytest.raises(KubeWaitTimeoutError):  # without settle_on_pod only the Job's own condition ends it
        serve(script2).wait_job(JOB, NS, timeout_s=1.5, poll_s=0.2)


def test_kube_watch_refused_is_remembered_and_the_wait_polls(serve: Any) -> None:
    script = Script(jobs=["active", "active", "active", "complete"], pods=["Running"], watches=[[("refuse", 403)]])
    client = serve(script)
    state = client.wait_job(JOB, NS, timeout_s=20, poll_s=0.05)
    assert state.phase is JobPhase.SUCCEEDED
    assert "403" in client.watch_refused["pods"] and len(_watches(script)) == 1  # asked once, then polled


def test_kube_watch_garbled_events_neither_crash_nor_decide(serve: Any) -> None:
    bad = [("raw", b"not json"), ("raw", b'{"type": "MODIFIED", "object": {"status": ["Succeeded"]}}'),
           ("raw", b'{"type": "MODIFIED", "object": "Succeeded"}'), ("event", "MODIFIED", "Succeeded")]  # fmt: skip
    script = Script(jobs=["active", "complete"], pods=["Running"], watches=[bad])
    state = serve(script).wait_job(JOB, NS, timeout_s=20, poll_s=5, settle_on_pod=True)
    assert state.phase is JobPhase.SUCCEEDED and state.settled_by is None  # the read's Complete decided
    assert len(_watches(script)) == 1 and len(_lists(script)) == 2


def test_kube_watch_a_pods_read_settles_without_reading_the_job_again(serve: Any) -> None:
    """After the first read, a read with settle_on_pod lists the pods and reads the Job only when no pod
    settled it: one round trip less between the pod's end and the result (issue 14)."""
    script = Script(jobs=["active"], pods=["Running", "Running", "Succeeded"],
                    watches=[[("close",)], [("event", "MODIFIED", "Succeeded")]])  # fmt: skip
    state, pods = serve(script).wait_job_pods(JOB, NS, timeout_s=20, poll_s=0.1, settle_on_pod=True)
    assert state.phase is JobPhase.SUCCEEDED and "Succeeded" in (state.settled_by or "")
    assert [p.phase for p in pods] == ["Succeeded"]  # the pods of the read that decided
    job_reads = [q for path, q in script.requests if path == JOB_PATH]
    assert len(_lists(script)) == 3 and len(job_reads) == 2  # the second read still read the Job: no pod ended
