"""The tests' kubelet for the real control plane: fake GPU Nodes whose pods run as local processes.

What it does, and no more:
- `add_node` registers a Node (NFD labels, node-class label, `amd.com/gpu` capacity, Ready, an
  InternalIP of its own in 127.0.0.0/8, the kubelet endpoint of this agent) with the admin token.
- A loop lists every pod, then watches pods for a few seconds (`WATCH_S`), then lists again, as a
  kubelet watches the pods bound to it (issue 14: the 0.1 s list loop it replaced delayed every pod's
  start by ~50 ms on average, a latency of the double a real kubelet does not have, and listed every
  pod ten times a second on the shared CPU); pods of its nodes are handled. A new pod is admitted the
  way the kubelet admits it (its `amd.com/gpu` request must fit beside the running pods': else `Failed`, reason
  `OutOfamd.com/gpu`, as the kubelet rejects it), then its first container runs as a local process
  (argv = command + args, `$(VAR)` expanded, hostPath mounts mapped to the node's host root, the
  node's environment: PATH to its fake tools), with `Running` and then the terminated state posted
  through the pods' status subresource. A pod of an MPI worker (`sshd`) only runs, without a process.
- A pod marked for deletion (a Job deleted, an eviction) is killed and deleted with grace 0, as the
  kubelet confirms a deletion.
- Logs: an HTTPS server on 127.0.0.1 serves `/containerLogs/<ns>/<pod>/<container>` (tailLines,
  limitBytes), the kubelet endpoint the API server calls for `pods/log`.
- A node deleted from the API (or `kill_node`) is a dead kubelet: its processes die, its logs are gone.
"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.k8s.controlplane import ControlPlane
from tests.k8s.kubelet import _expand, _map_path

NODE_CLASS_LABEL = "upgrade-gate/node-class"
GPU = "amd.com/gpu"
MPI_ROLE = "training.kubeflow.org/job-role"
_TERMINAL = ("Succeeded", "Failed")
WATCH_S = 3  # one watch request's timeoutSeconds; a full list follows each
Obj = dict[str, Any]


def now() -> str:
    """RFC 3339, seconds (what the API stores)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class AgentNode:
    """One fake node: its environment, host root, address and GPU count."""

    name: str
    ip: str
    gpus: int
    env: dict[str, str] = field(default_factory=dict)
    host_root: Path | None = None
    alive: bool = True
    die_after_pod: bool = False  # delete the Node once a pod on it finished (a node that vanished)


def _gpus(pod: Obj) -> int:
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or ():
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get(GPU) or (res.get("requests") or {}).get(GPU)
        total += int(value or 0)
    return total


class NodeAgent:
    """Kubelets for the fake nodes of one control plane (see the module docstring)."""

    def __init__(self, cp: ControlPlane, workdir: Path) -> None:
        self.cp = cp
        self.workdir = workdir
        self.nodes: dict[str, AgentNode] = {}
        self._lock = threading.Lock()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}  # pod uid -> process
        self._started: dict[str, str] = {}  # pod uid -> node
        self._logs: dict[tuple[str, str], Path] = {}
        self._deleted: set[str] = set()
        self._pods: dict[str, Obj] = {}  # uid -> the pod as last listed or watched
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="node-agent")
        self._server = self._log_server()
        self.port = int(self._server.server_address[1])
        self._next_ip = 10

    # ----------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Serve logs and run the loop."""
        threading.Thread(target=self._server.serve_forever, daemon=True, name="node-agent-logs").start()
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop and kill every process."""
        self._stop.set()
        self._thread.join(timeout=5)
        self._server.shutdown()
        with self._lock:
            procs = list(self._procs.values())
        for proc in procs:
            _kill(proc)

    # ----------------------------------------------------------------------- nodes

    def add_node(
        self,
        name: str,
        *,
        node_class: str | None = None,
        gpus: int = 8,
        amd_nic: bool = True,
        labels: Mapping[str, str] | None = None,
        taints: Iterable[Mapping[str, str]] = (),
        unschedulable: bool = False,
        env: Mapping[str, str] | None = None,
        host_root: Path | None = None,
        ready: bool = True,
    ) -> None:
        """Register a node, Ready unless `ready` is off (or update the environment of an existing one)."""
        if name in self.nodes:
            self.nodes[name].env = dict(env or {})
            self.nodes[name].host_root = host_root
            return
        self._next_ip += 1
        ip = f"127.0.{self._next_ip // 250}.{self._next_ip % 250 + 1}"  # one InternalIP per node, all loopback
        node = AgentNode(name=name, ip=ip, gpus=gpus, env=dict(env or {}), host_root=host_root)
        all_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "feature.node.kubernetes.io/amd-gpu": "true",
        }
        if amd_nic:
            all_labels["feature.node.kubernetes.io/amd-nic"] = "true"
        if node_class:
            all_labels[NODE_CLASS_LABEL] = node_class
        all_labels.update(labels or {})
        capacity = {"cpu": "128", "memory": "2113472Mi", "pods": "110", GPU: str(gpus)}
        spec: Obj = {"taints": [dict(t) for t in taints]} if taints else {}
        if unschedulable:
            spec["unschedulable"] = True
        stamp = now()
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": all_labels},
            "spec": spec,
            "status": {
                "capacity": capacity,
                "allocatable": dict(capacity),
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "reason": "KubeletReady" if ready else "KubeletNotReady",
                        "message": "kubelet is posting ready status" if ready else "container runtime down",
                        "lastHeartbeatTime": stamp,
                        "lastTransitionTime": stamp,
                    }
                ],
                # the API server dials the kubelet at the Hostname address (--kubelet-preferred-address-types)
                "addresses": [{"type": "InternalIP", "address": node.ip}, {"type": "Hostname", "address": "127.0.0.1"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            },
        }
        self.cp.request("POST", "/api/v1/nodes", body)
        self.nodes[name] = node

    def kill_node(self, name: str, *, delete: bool = True) -> None:
        """The node dies: its processes end, its logs are gone, and (by default) its Node is deleted."""
        node = self.nodes.get(name)
        if node is not None:
            node.alive = False
        with self._lock:
            doomed = [uid for uid, n in self._started.items() if n == name and uid in self._procs]
            procs = [self._procs.pop(uid) for uid in doomed]
        for proc in procs:
            _kill(proc)
        if delete:
            self.cp.request("DELETE", f"/api/v1/nodes/{name}", ok404=True)

    # ----------------------------------------------------------------------- the loop

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                version = self.sync()
                self._watch(version)
            except Exception:  # the API server may be down (outage tests); try again
                self._stop.wait(0.1)

    def sync(self) -> str:
        """One full round (list every pod): start new pods, confirm deletions; the list's resourceVersion."""
        page = self.cp.request("GET", "/api/v1/pods")
        pods = {p["metadata"]["uid"]: p for p in page["items"]}
        with self._lock:
            self._pods = pods
        for pod in list(pods.values()):
            self._handle(pod)
        return str(page["metadata"].get("resourceVersion") or "")

    def _watch(self, version: str) -> None:
        """Pod events from `version` for a few seconds, as a kubelet watches the pods bound to it (it does not
        poll: a 0.1 s list loop here cost every Job ~50 ms on average and the shared CPU a list ten times a
        second); the next `sync` lists again, so a missed event waits at most one watch."""
        query = f"watch=true&resourceVersion={version}&timeoutSeconds={WATCH_S}"
        with self.cp._open("GET", f"/api/v1/pods?{query}", None, None) as stream:
            for line in stream:
                if self._stop.is_set():
                    return
                event = json.loads(line)
                pod = event.get("object") or {}
                if event.get("type") == "ERROR":
                    return  # 410 Gone and the like: list again
                uid = (pod.get("metadata") or {}).get("uid")
                if not uid:
                    continue
                with self._lock:
                    if event.get("type") == "DELETED":
                        self._pods.pop(uid, None)
                        continue
                    self._pods[uid] = pod
                self._handle(pod)

    def _handle(self, pod: Obj) -> None:
        mine = {n for n, node in self.nodes.items() if node.alive}
        node = pod["spec"].get("nodeName")
        if node not in mine:
            return
        uid = pod["metadata"]["uid"]
        if pod["metadata"].get("deletionTimestamp"):
            self._confirm_delete(pod)
        elif uid not in self._started and pod["status"].get("phase") == "Pending":
            with self._lock:
                pods = list(self._pods.values())
            self._admit(pod, self.nodes[node], pods)

    def _admit(self, pod: Obj, node: AgentNode, pods: list[Obj]) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            self._started[uid] = node.name
        want = _gpus(pod)
        if want:
            used = sum(
                _gpus(p)
                for p in pods
                if p["spec"].get("nodeName") == node.name
                and p["metadata"]["uid"] != uid
                and p["metadata"]["uid"] in self._started
                and p["status"].get("phase") not in _TERMINAL
            )
            if used + want > node.gpus:
                message = (
                    f"Pod was rejected: Node didn't have enough resource: {GPU}, requested: {want}, "
                    f"used: {used}, capacity: {node.gpus}"
                )
                self._status(pod, {"phase": "Failed", "reason": f"OutOf{GPU}", "message": message})
                return
        threading.Thread(target=self._run, args=(pod, node), daemon=True, name="node-agent-pod").start()

    def _confirm_delete(self, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        if uid in self._deleted:
            return  # confirmed; a finalizer (the Job controller's) keeps it listed a little longer
        with self._lock:
            proc = self._procs.pop(uid, None)
        if proc is not None:
            _kill(proc)
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        with contextlib.suppress(RuntimeError):
            self.cp.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", body, ok404=True, ok409=True)
        self._deleted.add(uid)

    # ----------------------------------------------------------------------- running a container

    def _status(self, pod: Obj, status: Obj) -> None:
        """Post a pod status; like a kubelet, keep trying while the API server is away."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        path = f"/api/v1/namespaces/{ns}/pods/{name}/status"
        for _ in range(600):
            try:
                self.cp.request(
                    "PATCH", path, {"status": status}, content_type="application/merge-patch+json", ok404=True
                )
                return
            except RuntimeError:
                return  # refused (the pod changed under us): nothing to retry
            except OSError:  # no API server (an outage test): try again
                if self._stop.wait(0.5):
                    return

    def _container_status(self, container: Obj, state: Obj, *, ready: bool) -> Obj:
        return {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "",
            "containerID": "fake://" + container["name"],
            "ready": ready,
            "restartCount": 0,
            "started": ready,
            "state": state,
        }

    def _conditions(self, ready: bool) -> list[Obj]:
        flag = "True" if ready else "False"
        return [
            {"type": t, "status": s}
            for t, s in (
                ("PodReadyToStartContainers", "True"),
                ("Initialized", "True"),
                ("Ready", flag),
                ("ContainersReady", flag),
                ("PodScheduled", "True"),
            )
        ]

    def _run(self, pod: Obj, node: AgentNode) -> None:
        ns, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]
        container = pod["spec"]["containers"][0]
        started = now()
        running = {
            "phase": "Running",
            "hostIP": node.ip,
            "hostIPs": [{"ip": node.ip}],
            "podIP": node.ip,
            "podIPs": [{"ip": node.ip}],
            "startTime": started,
            "conditions": self._conditions(True),
            "containerStatuses": [self._container_status(container, {"running": {"startedAt": started}}, ready=True)],
        }
        poddir = self.workdir / "pods" / f"{ns}_{name}_{uid[:8]}"
        poddir.mkdir(parents=True, exist_ok=True)
        log = poddir / "log"
        log.write_bytes(b"")
        self._logs[(ns, name)] = log
        argv0 = Path((container.get("command") or [""])[0]).name
        if (pod["metadata"].get("labels") or {}).get(MPI_ROLE) == "worker" or argv0 == "sshd":
            self._status(pod, running)  # an MPI worker only runs sshd: no process
            return
        mounts = self._mounts(pod, container, node, poddir)
        env = self._env(pod, container, node, poddir, mounts)
        argv = [
            _map_path(_expand(a, env), mounts) for a in (container.get("command") or []) + (container.get("args") or [])
        ]
        self._status(pod, running)
        with log.open("ab") as out:
            try:
                proc = subprocess.Popen(
                    argv,
                    env=env,
                    cwd=str(poddir),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                out.write(f"exec failed: {exc}\n".encode())
                self._terminated(pod, container, node, 128, "StartError", str(exc), started)
                return
        with self._lock:
            self._procs[uid] = proc
        code = proc.wait()
        with self._lock:
            killed = self._procs.pop(uid, None) is None
        if killed or not node.alive:
            return  # deleted, evicted, or its node died: nobody posts a status
        self._terminated(pod, container, node, code, "Completed" if code == 0 else "Error", "", started)

    def _terminated(
        self, pod: Obj, container: Obj, node: AgentNode, code: int, reason: str, message: str, started: str
    ) -> None:
        state = {
            "terminated": {
                "exitCode": code,
                "reason": reason,
                "message": message,
                "startedAt": started,
                "finishedAt": now(),
                "containerID": "fake://" + container["name"],
            }
        }
        if node.die_after_pod:  # the node is gone (and its logs with it) by the time anyone sees the pod end
            self.kill_node(node.name)
        self._status(
            pod,
            {
                "phase": "Succeeded" if code == 0 else "Failed",
                "conditions": self._conditions(False),
                "containerStatuses": [self._container_status(container, state, ready=False)],
            },
        )

    def _mounts(self, pod: Obj, container: Obj, node: AgentNode, poddir: Path) -> list[tuple[str, str]]:
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
        return sorted(out, key=lambda m: -len(m[0]))

    def _env(
        self, pod: Obj, container: Obj, node: AgentNode, poddir: Path, mounts: list[tuple[str, str]]
    ) -> dict[str, str]:
        env = {
            "PATH": os.pathsep.join((os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin")),
            "HOME": str(poddir),
            "HOSTNAME": pod["metadata"]["name"],
            "LANG": "C.UTF-8",
        }
        if "PYTHONPATH" in os.environ:  # the "image" is this checkout: its upgrade_gate, not an installed one
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        env.update(node.env)
        fields = {
            "metadata.name": pod["metadata"]["name"],
            "metadata.namespace": pod["metadata"]["namespace"],
            "spec.nodeName": node.name,
            "status.hostIP": node.ip,
            "status.podIP": node.ip,
        }
        for var in container.get("env") or ():
            source = var.get("valueFrom") or {}
            value = fields.get(source["fieldRef"]["fieldPath"], "") if "fieldRef" in source else var.get("value", "")
            env[var["name"]] = _map_path(_expand(value, env), mounts)
        return env

    # ----------------------------------------------------------------------- logs (the kubelet endpoint)

    def _log_server(self) -> http.server.ThreadingHTTPServer:
        agent = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                parts = url.path.strip("/").split("/")
                query = urllib.parse.parse_qs(url.query)
                log = agent._logs.get((parts[1], parts[2])) if len(parts) >= 3 and parts[0] == "containerLogs" else None
                node = agent.nodes.get(agent._node_of(parts[1], parts[2])) if log is not None else None
                if log is None or node is None or not node.alive:
                    self.send_error(404, "container not found")
                    return
                data = log.read_bytes()
                if "tailLines" in query:
                    lines = data.splitlines(keepends=True)
                    data = b"".join(lines[-int(query["tailLines"][0]) :]) if int(query["tailLines"][0]) else b""
                if "limitBytes" in query:
                    data = data[: int(query["limitBytes"][0])]
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.cp.pki / "server.crt"), str(self.cp.pki / "server.key"))
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        return server

    def _node_of(self, ns: str, pod: str) -> str:
        log = self._logs.get((ns, pod))
        if log is None:
            return ""
        uid8 = log.parent.name.rsplit("_", 1)[-1]
        with self._lock:
            return next((n for uid, n in self._started.items() if uid.startswith(uid8)), "")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
