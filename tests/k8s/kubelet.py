"""A simulated control plane and kubelets for the API server double: Jobs and MPIJobs really run.

One reconcile loop (woken by every store change, and every 20 ms) plays the controllers:
- Job controller (batch/v1): creates a pod `<job>-<5 chars>` from the template (owner reference,
  `job-name` labels), counts succeeded/failed pods - a pod that vanishes before finishing (its node
  was deleted) counts as failed - and writes the status the way Kubernetes 1.31+ does: `startTime`,
  `active`/`ready`/`succeeded`/`failed`, then `SuccessCriteriaMet` + `Complete` (CompletionsReached)
  or `FailureTarget` + `Failed` (BackoffLimitExceeded, DeadlineExceeded for activeDeadlineSeconds),
  `completionTime`. A failed pod below the backoff limit is replaced by a new pod (restartPolicy
  OnFailure is treated like Never: a new pod rather than an in-place restart).
- scheduler (`tests.k8s.scheduler`): binds pending pods without `nodeName`;
- pod GC: a pod bound to a node that no longer exists is marked Failed (DisruptionTarget,
  DeletionByPodGC) and deleted, its process killed;
- MPIJob controller (kubeflow mpi-operator v2 behaviour): worker pods `<name>-worker-<i>` (they only
  "run sshd", no process), then - once every worker runs - the launcher as a batch/v1 Job
  `<name>-launcher`, whose pod gets the OpenMPI hostfile through `OMPI_MCA_orte_default_hostfile`;
  the MPIJob's conditions Created / Running / Succeeded / Failed mirror the launcher Job; a lost
  worker fails the MPIJob.
The kubelet of each simulated node runs the pod's first container as a local subprocess: argv is
`command + args` (no shell) with `$(VAR)` expansion, the environment is the node's base environment
(`SimNode.env`, e.g. PATH to that node's fake tools) plus the container's env (`value`, `fieldRef`
for metadata.name/namespace, spec.nodeName, `configMapKeyRef`). hostPath volumes are simulated by
rewriting argv elements and env values that start with a volume's mountPath to the node's
`host_root` + hostPath. stdout and stderr lines are appended to the pod log in arrival order.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.k8s.apiserver import ApiServerDouble
from tests.k8s.mpi import MPI_ROLE, MpiController
from tests.k8s.scheduler import fit_reason
from tests.k8s.status import (
    bind,
    condition,
    merge_status,
    owned_by,
    owner_ref,
    running,
    terminal,
    terminated,
    unschedulable,
)
from tests.k8s.store import RESOURCES, ApiStatusError, Obj, now_rfc3339

NODES, PODS, JOBS, MPIJOBS, CONFIGMAPS = (
    RESOURCES[("", "nodes")],
    RESOURCES[("", "pods")],
    RESOURCES[("batch", "jobs")],
    RESOURCES[("kubeflow.org", "mpijobs")],
    RESOURCES[("", "configmaps")],
)
_TERMINAL = ("Succeeded", "Failed")


@dataclass
class SimNode:
    """A node's kubelet: the environment its containers start with and its host filesystem root."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    host_root: Path | None = None


class Kubelet:
    """Controllers + kubelets; `start()` runs the reconcile loop in a thread."""

    def __init__(self, api: ApiServerDouble, workdir: Path) -> None:
        self.api = api
        self.store = api.store
        self.workdir = workdir
        self.nodes: dict[str, SimNode] = {}
        self._procs: dict[tuple[str, str], subprocess.Popen[bytes]] = {}
        self._started: set[str] = set()  # uids of pods whose container was started
        self._outcomes: dict[tuple[str, str], str] = {}  # pod -> Succeeded / Failed, kept after deletion
        self._job_pods: dict[str, set[str]] = {}  # job uid -> pod names it created
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._lock = threading.Lock()
        self.mpi = MpiController(self)

    def start(self) -> None:
        """Run the reconcile loop."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop and kill every container process still running."""
        self._stop.set()
        with self.store.changed:
            self.store.changed.notify_all()
        self._thread.join(timeout=5)
        with self._lock:
            procs = list(self._procs.values())
        for proc in procs:
            _kill(proc)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self.store.changed:
                self.store.changed.wait(timeout=0.02)
            if self._stop.is_set():
                return
            try:
                self.reconcile()
            except ApiStatusError:
                continue  # an object vanished mid-reconcile: the next round sees the new state

    def reconcile(self) -> None:
        """One round of every controller."""
        self._pod_gc()
        self.mpi.sync()
        self._sync_jobs()
        self._schedule()
        self._start_pods()

    # ----------------------------------------------------------------------- pod GC and scheduling

    def _pod_gc(self) -> None:
        nodes = {n["metadata"]["name"] for n in self.store.list(NODES)}
        live = set()
        for pod in self.store.list(PODS):
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            live.add(key)
            node = pod["spec"].get("nodeName")
            if node and node not in nodes and pod["status"].get("phase") not in _TERMINAL:
                self._finish(key, "Failed", None, "DeletionByPodGC", f"PodGC: node {node} no longer exists")
                self.store.delete(PODS, *key)
                live.discard(key)
        with self._lock:
            gone = [k for k in self._procs if k not in live]
        for key in gone:  # deleted pods: the kubelet kills their containers
            self.kill(key)

    def _schedule(self) -> None:
        nodes = self.store.list(NODES)
        pods = self.store.list(PODS)
        for pod in pods:
            if pod["spec"].get("nodeName") or pod["status"].get("phase") != "Pending":
                continue
            reasons: list[str] = []
            for node in nodes:
                name = node["metadata"]["name"]
                bound = [
                    p for p in pods if p["spec"].get("nodeName") == name and p["status"].get("phase") not in _TERMINAL
                ]
                why = fit_reason(pod, node, bound)
                if why is None:
                    pod["spec"]["nodeName"] = name
                    self.store.mutate(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], bind(name))
                    break
                reasons.append(why)
            else:
                message = f"0/{len(nodes)} nodes are available: " + ", ".join(sorted(set(reasons)))
                self.store.mutate(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], unschedulable(message))

    def _start_pods(self) -> None:
        ready = {n["metadata"]["name"] for n in self.store.list(NODES)}
        for pod in self.store.list(PODS):
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            node = pod["spec"].get("nodeName")
            if not node or node not in ready or node not in self.nodes or pod["metadata"]["uid"] in self._started:
                continue
            if pod["status"].get("phase") != "Pending":
                continue
            self._started.add(pod["metadata"]["uid"])
            labels = pod["metadata"].get("labels") or {}
            if labels.get(MPI_ROLE) == "worker":
                self.store.mutate(PODS, *key, running(node))  # an MPI worker only runs sshd
                continue
            threading.Thread(target=self._run, args=(pod, self.nodes[node]), daemon=True).start()

    # ----------------------------------------------------------------------- running a container

    def _run(self, pod: Obj, node: SimNode) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        key = (ns, name)
        container = pod["spec"]["containers"][0]
        poddir = self.workdir / "pods" / f"{ns}_{name}"
        poddir.mkdir(parents=True, exist_ok=True)
        mounts = self._mounts(pod, container, node, poddir)
        env = self._env(pod, container, node, poddir, mounts)
        argv = [
            _map_path(_expand(a, env), mounts) for a in (container.get("command") or []) + (container.get("args") or [])
        ]
        cwd = _map_path(container["workingDir"], mounts) if container.get("workingDir") else str(poddir)
        if self.store.mutate(PODS, ns, name, running(node.name)) is None:
            return
        self.api.open_log(ns, name)
        try:
            proc = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            self.api.append_log(ns, name, f"exec failed: {exc}\n")
            self._finish(key, "Failed", 128, "StartError", str(exc))
            return
        with self._lock:
            self._procs[key] = proc
        readers = [
            threading.Thread(target=self._pump, args=(stream, ns, name), daemon=True)
            for stream in (proc.stdout, proc.stderr)
        ]
        for reader in readers:
            reader.start()
        code = proc.wait()
        for reader in readers:
            reader.join(timeout=5)
        with self._lock:
            killed = self._procs.pop(key, None) is None
        if not killed:
            self._finish(key, "Succeeded" if code == 0 else "Failed", code, "Completed" if code == 0 else "Error", "")

    def _pump(self, stream: Any, ns: str, name: str) -> None:
        for raw in iter(stream.readline, b""):
            self.api.append_log(ns, name, raw.decode("utf-8", errors="replace"))
        stream.close()

    def _mounts(self, pod: Obj, container: Obj, node: SimNode, poddir: Path) -> list[tuple[str, str]]:
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or ()}
        out: list[tuple[str, str]] = []
        for vm in container.get("volumeMounts") or ():
            vol = volumes.get(vm["name"], {})
            if "hostPath" in vol:
                root = node.host_root or (self.workdir / "hosts" / node.name)
                local = str(root / vol["hostPath"]["path"].lstrip("/")).rstrip("/")
            else:
                local = str(poddir / "volumes" / vm["name"])
                Path(local).mkdir(parents=True, exist_ok=True)
            out.append((vm["mountPath"].rstrip("/") or "/", local))
        return sorted(out, key=lambda m: -len(m[0]))  # longest mountPath first

    def _env(
        self, pod: Obj, container: Obj, node: SimNode, poddir: Path, mounts: list[tuple[str, str]]
    ) -> dict[str, str]:
        ns = pod["metadata"]["namespace"]
        env = {
            "PATH": os.pathsep.join((os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin")),
            "HOME": str(poddir),
            "HOSTNAME": pod["metadata"]["name"],
            "LANG": "C.UTF-8",
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        }
        env.update(node.env)
        fields = {
            "metadata.name": pod["metadata"]["name"],
            "metadata.namespace": ns,
            "spec.nodeName": node.name,
            "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
        }
        for var in container.get("env") or ():
            source = var.get("valueFrom") or {}
            if "fieldRef" in source:
                value = fields.get(source["fieldRef"]["fieldPath"], "")
            elif "configMapKeyRef" in source:
                ref = source["configMapKeyRef"]
                cm = self.store.find(CONFIGMAPS, ns, ref["name"]) or {}
                value = (cm.get("data") or {}).get(ref["key"], "")
            else:
                value = _expand(var.get("value", ""), env)
            env[var["name"]] = _map_path(value, mounts)
        return env

    # ----------------------------------------------------------------------- pod endings

    def _finish(self, key: tuple[str, str], phase: str, code: int | None, reason: str, message: str) -> None:
        with self.store.lock:  # outcome and pod phase change together, as the Job controller sees them
            with self._lock:
                self._outcomes[key] = phase
            self.store.mutate(PODS, *key, terminated(phase, code, reason, message))

    def kill(self, key: tuple[str, str]) -> None:
        with self._lock:
            proc = self._procs.pop(key, None)
        if proc is not None:
            _kill(proc)
            with self._lock:
                self._outcomes.setdefault(key, "Failed")

    # ----------------------------------------------------------------------- Job controller

    def _sync_jobs(self) -> None:
        for job in self.store.list(JOBS):
            ns, name, uid = job["metadata"]["namespace"], job["metadata"]["name"], job["metadata"]["uid"]
            status = job.get("status") or {}
            if terminal(status, "Complete", "Failed") or job["spec"].get("suspend"):
                continue
            created = self._job_pods.setdefault(uid, set())
            with self.store.lock:  # a consistent view of pods and their recorded outcomes
                pods = {p["metadata"]["name"]: p for p in self.store.list(PODS, ns) if owned_by(p, uid)}
                with self._lock:
                    outcomes = {p: self._outcomes.get((ns, p)) for p in created}
            # a pod another party ended (the kubelet's admission refusal written by a test) counts by its phase
            outcomes = {p: o or (pods[p]["status"].get("phase") if p in pods else None) for p, o in outcomes.items()}
            succeeded = sum(1 for o in outcomes.values() if o == "Succeeded")
            lost = sum(1 for p in created if p not in pods and outcomes[p] is None)
            failed = sum(1 for o in outcomes.values() if o == "Failed") + lost
            active = [p for p in pods.values() if p["status"].get("phase") not in _TERMINAL]
            spec = job["spec"]
            started = status.get("startTime")
            deadline = spec.get("activeDeadlineSeconds")
            new: Obj = {
                "active": len(active),
                "succeeded": succeeded,
                "failed": failed,
                "terminating": 0,
                "uncountedTerminatedPods": {},
            }
            new["ready"] = sum(1 for p in active if p["status"].get("phase") == "Running")
            new["startTime"] = started or now_rfc3339()
            conditions: list[Obj] = []
            if succeeded >= spec.get("completions", 1):
                msg = "Reached expected number of succeeded pods"
                conditions = [
                    condition("SuccessCriteriaMet", "CompletionsReached", msg),
                    condition("Complete", "CompletionsReached", msg),
                ]
            elif failed > spec.get("backoffLimit", 6):
                msg = "Job has reached the specified backoff limit"
                conditions = [
                    condition("FailureTarget", "BackoffLimitExceeded", msg),
                    condition("Failed", "BackoffLimitExceeded", msg),
                ]
            elif deadline is not None and started and _age_s(started) >= deadline:
                msg = "Job was active longer than specified deadline"
                conditions = [
                    condition("FailureTarget", "DeadlineExceeded", msg),
                    condition("Failed", "DeadlineExceeded", msg),
                ]
            if conditions:
                for pod in active:
                    self.kill((ns, pod["metadata"]["name"]))
                    self.store.delete(PODS, ns, pod["metadata"]["name"])
                new.update(active=0, ready=0, conditions=conditions, completionTime=now_rfc3339())
                if conditions[-1]["type"] == "Failed":
                    del new["completionTime"]
            elif not active:
                pod_name = self._create_job_pod(job)
                created.add(pod_name)
                new["active"] = 1
            self.store.mutate(JOBS, ns, name, merge_status(new))

    def _create_job_pod(self, job: Obj) -> str:
        template = job["spec"]["template"]
        name = f"{job['metadata']['name']}-{''.join(random.choices('bcdfghjklmnpqrstvwxz2456789', k=5))}"
        pod = {
            "metadata": {
                "name": name,
                "labels": dict(template["metadata"].get("labels") or {}),
                "annotations": dict(template["metadata"].get("annotations") or {}),
                "ownerReferences": [owner_ref(job, "Job")],
            },
            "spec": {"serviceAccountName": "default", **template["spec"]},
            "status": {"phase": "Pending", "conditions": []},
        }
        self.store.create(PODS, job["metadata"]["namespace"], pod)
        return name

    # ----------------------------------------------------------------------- MPIJob controller


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion (`$$(VAR)` escapes)."""
    return re.sub(
        r"\$\$\(|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$(" if m.group(0) == "$$(" else env.get(m.group(1), m.group(0)),
        text,
    )


def _map_path(value: str, mounts: list[tuple[str, str]]) -> str:
    """Rewrite a container path (or `--opt=path`) that lies under a mount to the node-local path."""
    prefix, sep, rest = value.partition("=") if value.startswith("-") else ("", "", value)
    for mount, local in mounts:
        if rest == mount or rest.startswith(mount.rstrip("/") + "/"):
            return f"{prefix}{sep}{local}{rest[len(mount.rstrip('/')) :]}"
    return value


def _age_s(timestamp: str) -> float:
    from datetime import UTC, datetime

    return (datetime.now(UTC) - datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)).total_seconds()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
