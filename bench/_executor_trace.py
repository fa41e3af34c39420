"""Where a Job's time goes, for `python -m bench.bench_executor --trace` (issue 14).

A trace of one run of `fleet.executor.run_phases`, all on the bench process's clock:
- the executor's own steps, by wrapping (in this process only) `run_job` as the launcher calls it and
  the client's `create_job` / `wait_job`: when a Job was asked for, created, its wait returned, and its
  result was back with the phase code;
- what the cluster did, by an observer with its own connection that watches the namespace's pods:
  when the Job controller's pod appeared, when it was `Running` (the node agent started it) and when it
  `Succeeded` or failed (the node agent posted the end);
- every request the executor's client sent, counted by verb and resource (watches apart).

Per Job the stages are: `create` (run_job called -> create answered), `controller` (-> pod seen),
`start` (-> Running), `run` (-> Succeeded: the wrapper and the tool, `tool_s` of it sleeping),
`notice` (-> the wait returned), `collect` (-> the result back: pod list, log, frame) and `next`
(the node's next Job asked for: the phase code between two tool calls; the last Job of a phase has
none, the phase barrier is counted apart). Only `create`, `notice`, `collect` and `next` are the
executor's own; `controller` is kube-controller-manager's, `start` the node agent's (a kubelet's), `run`
the pod's (the wrapper's start-up is ours, the rest the tool's).
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STAGES = ("create", "controller", "start", "run", "notice", "collect", "next")


class Trace:
    """Timestamps per Job and request counts (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.jobs: dict[str, dict[str, Any]] = {}
        self.calls: Counter[str] = Counter()
        self._stop = threading.Event()

    def mark(self, job: str, what: str, **extra: Any) -> None:
        """Record the first time `what` happened to `job`."""
        now = time.perf_counter()
        with self._lock:
            row = self.jobs.setdefault(job, {})
            row.setdefault(what, now)
            row.update(extra)

    # ----------------------------------------------------------------------- hooks

    @contextmanager
    def installed(self, client: Any, kubeconfig: str, namespace: str) -> Iterator[None]:
        """Wrap the executor's calls and watch the pods while the block runs."""
        import upgrade_gate.fleet.launcher as launcher

        original_run_job = launcher.run_job
        original_send = client._send
        wait_name = "wait_job_pods" if hasattr(client, "wait_job_pods") else "wait_job"  # the code before it
        original_create, original_wait = client.create_job, getattr(client, wait_name)

        def run_job(cl: Any, spec: Any, **kw: Any) -> Any:
            self.mark(spec.name, "asked", node=str(spec.node))
            try:
                return original_run_job(cl, spec, **kw)
            finally:
                self.mark(spec.name, "returned")

        def create_job(manifest: Any, ns: str) -> Any:
            state = original_create(manifest, ns)
            self.mark(str(manifest["metadata"]["name"]), "created")
            return state

        def wait_job_pods(name: str, ns: str, **kw: Any) -> Any:
            try:
                return original_wait(name, ns, **kw)
            finally:
                self.mark(name, "waited")

        def send(method: str, path: str, *, query: Any = None, **kw: Any) -> Any:
            with self._lock:
                self.calls[_kind(method, path, query or {})] += 1
            return original_send(method, path, query=query, **kw)

        import urllib3.connectionpool as pools

        original_new_conn = pools.HTTPSConnectionPool._new_conn

        def new_conn(pool: Any) -> Any:
            with self._lock:
                self.calls["(new TLS connections)"] += 1
            return original_new_conn(pool)

        pools.HTTPSConnectionPool._new_conn = new_conn  # type: ignore[method-assign]
        launcher.run_job = run_job  # type: ignore[assignment]
        client._send, client.create_job = send, create_job
        setattr(client, wait_name, wait_job_pods)
        observer = threading.Thread(target=self._observe, args=(kubeconfig, namespace), daemon=True)
        observer.start()
        try:
            yield
        finally:
            launcher.run_job = original_run_job  # type: ignore[assignment]
            pools.HTTPSConnectionPool._new_conn = original_new_conn  # type: ignore[method-assign]
            client._send, client.create_job = original_send, original_create
            setattr(client, wait_name, original_wait)
            self._stop.set()
            observer.join(timeout=10)

    def _observe(self, kubeconfig: str, namespace: str) -> None:
        from upgrade_gate.fleet.kube import KubeClient
        from upgrade_gate.fleet.kube.shapes import WatchExpired

        client = KubeClient.from_kubeconfig(kubeconfig)
        path = f"/api/v1/namespaces/{namespace}/pods"
        try:
            _, version = client._pods_page(namespace, "job-name")
            while not self._stop.is_set():
                try:
                    for event in client._watch(path, {"labelSelector": "job-name"}, resource_version=version,
                                               timeout_s=2):  # fmt: skip
                        version = event.resource_version or version
                        obj = event.object
                        job = ((obj.get("metadata") or {}).get("labels") or {}).get("job-name")
                        if event.type == "BOOKMARK" or not job:
                            continue
                        self.mark(job, "pod")
                        phase = (obj.get("status") or {}).get("phase")
                        if phase in ("Running", "Succeeded", "Failed"):
                            self.mark(job, "running")
                        if phase in ("Succeeded", "Failed"):
                            self.mark(job, "ended")
                except WatchExpired:
                    _, version = client._pods_page(namespace, "job-name")
        finally:
            client.close()

    # ----------------------------------------------------------------------- summary

    def nodes(self) -> set[str]:
        """The nodes that ran Jobs."""
        return {str(r["node"]) for r in self.jobs.values() if "node" in r}

    def stages(self) -> dict[str, list[float]]:
        """Seconds per stage over every complete Job."""
        rows = [r for r in self.jobs.values() if all(k in r for k in ("asked", "created", "pod", "running", "ended",
                                                                       "waited", "returned"))]  # fmt: skip
        out: dict[str, list[float]] = {s: [] for s in STAGES}
        by_node: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            by_node.setdefault(r["node"], []).append(r)
            out["create"].append(r["created"] - r["asked"])
            out["controller"].append(r["pod"] - r["created"])
            out["start"].append(r["running"] - r["pod"])
            out["run"].append(r["ended"] - r["running"])
            out["notice"].append(r["waited"] - r["ended"])
            out["collect"].append(r["returned"] - r["waited"])
        for jobs in by_node.values():
            jobs.sort(key=lambda r: r["asked"])
            for a, b in itertools.pairwise(jobs):
                gap = b["asked"] - a["returned"]
                if gap < 1.0:  # the same phase's next call; a longer gap is the phase barrier
                    out["next"].append(gap)
        return out

    def render(self, *, tool_s: float) -> str:
        """A markdown table: median / max per stage, and the request counts per Job."""
        jobs = self.calls.get("create jobs", 0)
        rows = []
        for stage, values in self.stages().items():
            if not values:
                continue
            med = statistics.median(values)
            note = f" (of which the tool sleeps {tool_s:g} s)" if stage == "run" else ""
            rows.append(f"| {stage}{note} | {med * 1000:.0f} ms | {max(values) * 1000:.0f} ms | {len(values)} |")
        calls = ", ".join(f"{k} {v / max(jobs, 1):.2f}" for k, v in sorted(self.calls.items()))
        return "\n".join(
            [
                "| stage | median | max | Jobs |",
                "|---|---|---|---|",
                *rows,
                "",
                f"Requests per Job (client, {jobs} Jobs, {len(self.nodes())} nodes): {calls}",
            ]
        )


def _kind(method: str, path: str, query: Any) -> str:
    parts = [p for p in path.split("?")[0].split("/") if p]
    if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2:
        rest = parts[parts.index("namespaces") + 2 :]
    elif parts[:2] == ["api", "v1"]:
        rest = parts[2:]
    else:
        rest = parts[3:]
    resource = rest[0] if rest else "?"
    if len(rest) > 2:
        resource += "/" + rest[2]
    one = len(rest) >= 2
    watch = "watch" in dict(query) if not isinstance(query, list) else any(k == "watch" for k, _ in query)
    verb = {"GET": "get" if one else ("watch" if watch else "list"), "POST": "create", "DELETE": "delete",
            "PATCH": "patch"}.get(method, method)  # fmt: skip
    return f"{verb} {resource}"
