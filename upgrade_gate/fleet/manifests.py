"""Job and MPIJob manifests for upgrade-gate's work on nodes (pure: dicts in the API's JSON form).

Design decisions
- One batch/v1 Job per node and purpose (`capture`, `phase1`..`phase4`, `phase6`, `phase7`), named
  `ug-<purpose>-<node>-<run id>` (`labels.job_name`, at most 63 characters because the name becomes
  the pods' `job-name` label). `backoffLimit: 0`: a failed attempt is evidence, not something to retry quietly;
  `activeDeadlineSeconds` bounds a hung tool even if upgrade-gate itself dies.
- Pinning: `nodeName` by default. It bypasses the scheduler, so the Job runs on a canary that we
  cordoned and tainted (exactly when we need it to) and cannot land on another node. With
  `pin="affinity"` the pod goes through the scheduler with a required node affinity on
  `metadata.name` (what the DaemonSet controller uses) and tolerates both the canary taint and
  `node.kubernetes.io/unschedulable` (the taint a cordon implies).
- Host access only where a probe needs it (`HostAccess`): `/` read-only at `/host` for the sysfs and
  version-file probes (`--host-root /host`); `/opt/rocm` read-only at the same path so amd-smi,
  rocm-smi and rocminfo are the node's own (a snapshot of the image's ROCm would be worthless);
  `hostNetwork` for `rdma link` / `ibv_devinfo` / `ib_write_bw` to see the host's RDMA devices;
  `/dev/infiniband` for the verbs devices; CAP_SYSLOG for `dmesg`; CAP_IPC_LOCK for RDMA memory
  registration. GPUs come through the device plugin (limits of the node's vendor's resource, `amd.com/gpu`
  or `nvidia.com/gpu`: `Vendor.kube`), which also keeps other
  workloads off the GPUs while a phase measures them; capture may instead run privileged without
  GPUs allocated (`capture_access(devices=True)`, opt-in). Every other capability is dropped, privilege
  escalation is off, and the pod runs as the `upgrade-gate-job` service account without a token: it
  never talks to the API.
- The container's command is wrapped by `fleet.resultframe` so that its stdout comes back as a
  checksummed frame in the pod log: `python3 -I -S -c <fleet.framewrapper's source> -- ARGV` (issue 14:
  an isolated interpreter without `site` starts in a fraction of `python3 -m upgrade_gate...`'s time,
  and the image needs nothing of ours for it).
- Phases 6-7 (the workload, `fleet.workload_jobs`) run in their own image (`JobSpec.image`, e.g. the
  site's PyTorch-on-ROCm image) with every GPU of the node, an emptyDir work directory for the
  shipped script (`workdir`) and a memory-backed /dev/shm (`shm`): RCCL/NCCL between the ranks'
  processes of one node go through shared memory, and a container's default 64 MiB is too small.
- Phase 5 is a Kubeflow MPIJob (kubeflow.org/v2beta1): a launcher running mpirun, one worker per
  node (required node affinity: one `metadata.name` term per node, because the API server allows a
  single value per field selector; required pod anti-affinity on the hostname),
  `slotsPerWorker` = GPUs per node. Its image is the RCCL image (rccl-tests, OpenMPI, sshd), not ours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from upgrade_gate.fleet.errors import InvalidNameError
from upgrade_gate.fleet.labels import (
    CANARY,
    GPU_RESOURCE,
    MANAGED_BY,
    MANAGER,
    MPI_JOB_NAME,
    MPI_JOB_ROLE,
    NODE,
    NODES,
    PURPOSE,
    RUN_ID,
    job_name,
    node_label_value,
    object_name,
    validate_node_name,
)
from upgrade_gate.fleet.resultframe import wrapper_source
from upgrade_gate.model import NodeName

Json = dict[str, Any]
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
MPI_LAUNCHER_RETRIES = 2  # phase 5's launcher: attempts after the first (the sshd race), never the workers
HOST_ROOT = "/host"
SHM = "/dev/shm"


@dataclass(frozen=True, slots=True, kw_only=True)
class Toleration:
    """A pod toleration."""

    key: str
    operator: str = "Exists"
    value: str | None = None
    effect: str | None = "NoSchedule"

    def tolerates(self, key: str, value: str | None, effect: str) -> bool:
        """Whether this toleration matches a taint (the scheduler's rule: key, operator, effect)."""
        if self.effect and self.effect != effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != key:
            return False
        return self.operator == "Exists" or (self.value or "") == (value or "")

    def to_api(self) -> dict[str, str]:
        """The API form."""
        out = {"key": self.key, "operator": self.operator}
        if self.value is not None:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class HostAccess:
    """Which pieces of the host a Job's container gets (each only where a probe needs it)."""

    host_root: bool = False  # hostPath / read-only at /host (sysfs probes, ROCm version file)
    rocm: bool = False  # hostPath /opt/rocm read-only at /opt/rocm (the node's own ROCm tools)
    host_network: bool = False  # rdma link, ibv_devinfo, ib_write_bw see the host's NICs
    infiniband: bool = False  # hostPath /dev/infiniband (verbs devices)
    syslog: bool = False  # CAP_SYSLOG for dmesg
    ipc_lock: bool = False  # CAP_IPC_LOCK for RDMA memory registration
    devices: bool = False  # privileged: every GPU device node readable without allocating a GPU


def capture_access(*, rdma: bool, devices: bool = False, rocm: bool = True) -> HostAccess:
    """Host access of a capture Job; `rdma` (the node has RDMA NICs) adds /dev/infiniband.

    hostPath volumes are `type: Directory`, so a node without /dev/infiniband would never start a pod
    that mounts it: only NIC nodes (NFD `amd-nic=true`) get that mount.

    `devices` (`--capture-privileged`): capture only reads, so it can do without GPUs allocated, as
    a privileged container that sees every GPU device node (/dev/kfd, /dev/dri) without the device
    plugin; then a canary whose GPUs a workload still holds (`window start --no-drain`) can be
    captured (issue 11, defect 3). Off by default: by default capture requests the node's GPUs with
    every capability but SYSLOG dropped, and `window start` drains the canaries' GPU pods first.

    `rocm`: mount the node's /opt/rocm (`Vendor.kube.mount_rocm`; an NVIDIA node has none, and a hostPath
    of `type: Directory` that does not exist keeps the pod from starting: nvidia-smi comes in through the
    NVIDIA Container Toolkit instead).
    """
    return HostAccess(host_root=True, rocm=rocm, host_network=True, infiniband=rdma, syslog=True, devices=devices)


CAPTURE_ACCESS = capture_access(rdma=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSettings:
    """Cluster-wide knobs of the Jobs upgrade-gate creates."""

    namespace: str = "upgrade-gate"
    image: str = "upgrade-gate:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    service_account: str = "upgrade-gate-job"  # no RBAC at all: the Jobs never talk to the API
    pin: str = "nodeName"  # or "affinity"
    tolerations: tuple[Toleration, ...] = (Toleration(key=CANARY),)
    active_deadline_s: int = 1800
    python: str = "python3"  # interpreter in the image, runs the result-frame wrapper


def parse_toleration(text: str) -> Toleration:
    """`KEY[=VALUE][:EFFECT]` (as kubectl prints a taint) as a toleration; no effect: every effect."""
    body, sep, effect = text.rpartition(":") if ":" in text else (text, "", "")
    key, eq, value = (body if sep else text).partition("=")
    if not key or (sep and effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute")):
        raise InvalidNameError(f"toleration {text!r}: expected KEY[=VALUE][:NoSchedule|PreferNoSchedule|NoExecute]")
    if eq:
        return Toleration(key=key, operator="Equal", value=value, effect=effect or None)
    return Toleration(key=key, effect=effect or None)


def _labels(purpose: str, run_id: str, node: NodeName | None = None) -> dict[str, str]:
    labels = {"app.kubernetes.io/name": "upgrade-gate", MANAGED_BY: MANAGER, PURPOSE: purpose, RUN_ID: run_id}
    if node is not None:
        labels[NODE] = node_label_value(node)
    return labels


def _tolerations(settings: JobSettings, *, scheduled: bool) -> list[dict[str, str]]:
    tolerations = [t.to_api() for t in settings.tolerations]
    if scheduled and not any(t.key == UNSCHEDULABLE for t in settings.tolerations):
        tolerations.append(Toleration(key=UNSCHEDULABLE).to_api())
    return tolerations


def _security(access: HostAccess) -> Json:
    if access.devices:
        return {"privileged": True}  # the API refuses allowPrivilegeEscalation=false beside privileged
    add = [cap for cap, on in (("SYSLOG", access.syslog), ("IPC_LOCK", access.ipc_lock)) if on]
    caps: Json = {"drop": ["ALL"]}
    if add:
        caps["add"] = add
    return {"allowPrivilegeEscalation": False, "capabilities": caps}


def _volumes(access: HostAccess) -> tuple[list[Json], list[Json]]:
    volumes: list[Json] = []
    mounts: list[Json] = []
    for on, name, host, path, ro in (
        (access.host_root, "host-root", "/", HOST_ROOT, True),
        (access.rocm, "rocm", "/opt/rocm", "/opt/rocm", True),
        (access.infiniband, "infiniband", "/dev/infiniband", "/dev/infiniband", False),
    ):
        if on:
            volumes.append({"name": name, "hostPath": {"path": host, "type": "Directory"}})
            mounts.append({"name": name, "mountPath": path, "readOnly": ro})
    return volumes, mounts


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """One upgrade-gate command to run on one node as a batch/v1 Job."""

    node: NodeName
    purpose: str  # capture / phase1 ... phase4 / phase6 / phase7 / monitor / cmd
    run_id: str
    argv: tuple[str, ...]
    gpus: int = 0
    access: HostAccess = HostAccess()
    env: tuple[tuple[str, str], ...] = ()
    settings: JobSettings = JobSettings()
    framed: bool = True  # wrap argv so that its stdout comes back as a result frame
    image: str | None = None  # None: settings.image (the workload Jobs bring their own)
    workdir: str | None = None  # an emptyDir mounted here (the workload's staged script)
    shm: bool = False  # a memory-backed emptyDir at /dev/shm (RCCL/NCCL between processes)
    gpu_resource: str = GPU_RESOURCE  # the node's vendor's device-plugin resource (`Vendor.kube.gpu_resource`)

    @property
    def name(self) -> str:
        """The Job name (validated; raises InvalidNameError naming the node)."""
        return job_name(self.purpose, validate_node_name(self.node), self.run_id)

    def command(self) -> list[str]:
        """The container's command: argv, wrapped for the result frame when `framed`."""
        if not self.framed:
            return list(self.argv)
        return [self.settings.python, "-I", "-S", "-c", wrapper_source(), "--", *self.argv]

    def manifest(self) -> Json:
        """The batch/v1 Job."""
        s = self.settings
        labels = _labels(self.purpose, self.run_id, self.node)
        volumes, mounts = _volumes(self.access)
        for on, name, path, source in (
            (self.workdir is not None, "workdir", self.workdir, {}),
            (self.shm, "dshm", SHM, {"medium": "Memory"}),
        ):
            if on:
                volumes.append({"name": name, "emptyDir": source})
                mounts.append({"name": name, "mountPath": path})
        container: Json = {
            "name": "upgrade-gate",
            "image": self.image or s.image,
            "imagePullPolicy": s.image_pull_policy,
            "command": self.command(),
            "env": [
                {"name": "UPGRADE_GATE_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                *({"name": k, "value": v} for k, v in self.env),
            ],
            "securityContext": _security(self.access),
        }
        if self.gpus > 0:
            container["resources"] = {"limits": {self.gpu_resource: str(self.gpus)}}
        if mounts:
            container["volumeMounts"] = mounts
        pod: Json = {
            "restartPolicy": "Never",
            "serviceAccountName": s.service_account,
            "automountServiceAccountToken": False,
            "tolerations": _tolerations(s, scheduled=s.pin != "nodeName"),
            "containers": [container],
        }
        if s.pin == "nodeName":
            pod["nodeName"] = self.node
        else:
            term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [self.node]}]}
            pod["affinity"] = {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
            }
        if self.access.host_network:
            pod["hostNetwork"] = True
            pod["dnsPolicy"] = "ClusterFirstWithHostNet"
        if volumes:
            pod["volumes"] = volumes
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": self.name, "namespace": s.namespace, "labels": labels},
            "spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": s.active_deadline_s,
                "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
            },
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class MpiJobSpec:
    """Phase 5: one MPI launcher and one worker per node, as a kubeflow.org/v2beta1 MPIJob."""

    run_id: str
    nodes: tuple[NodeName, ...]
    launcher_argv: tuple[str, ...]
    image: str  # the RCCL image (rccl-tests, OpenMPI, sshd)
    gpus_per_node: int
    env: tuple[tuple[str, str], ...] = ()
    worker_command: tuple[str, ...] = ("/usr/sbin/sshd", "-De")
    settings: JobSettings = JobSettings()
    purpose: str = "phase5"
    gpu_resource: str = GPU_RESOURCE  # the nodes' vendor's device-plugin resource

    @property
    def name(self) -> str:
        """`ug-<purpose>-<run id>`; short enough for `<name>-launcher` and `<name>-worker-<i>`."""
        name = object_name(f"ug-{self.purpose}", self.run_id)
        if len(name) > 40:
            raise InvalidNameError(f"MPIJob name {name!r}: at most 40 characters (pod names add suffixes)")
        return name

    def _container(self, name: str, command: tuple[str, ...]) -> Json:
        return {
            "name": name,
            "image": self.image,
            "imagePullPolicy": self.settings.image_pull_policy,
            "command": list(command),
            "env": [{"name": k, "value": v} for k, v in self.env],
        }

    def _stamp(self) -> Json:
        """Our own labels and the `upgrade-gate/nodes` annotation: on the MPIJob and on both pod templates,
        so a leftover is found by what we wrote, whatever labels the operator adds or leaves out (issue 28)."""
        return {"labels": _labels(self.purpose, self.run_id), "annotations": {NODES: ",".join(self.nodes)}}

    def _template(self, spec: Json) -> Json:
        tolerations = _tolerations(self.settings, scheduled=True)  # canaries are cordoned and tainted
        return {"metadata": self._stamp(), "spec": {"tolerations": tolerations, **spec}}

    def manifest(self) -> Json:
        """The MPIJob."""
        if len(self.nodes) < 2:
            raise InvalidNameError(f"MPIJob {self.run_id}: needs at least 2 nodes, got {len(self.nodes)}")
        nodes = [validate_node_name(n) for n in self.nodes]
        worker = self._container("worker", self.worker_command)
        worker["resources"] = {"limits": {self.gpu_resource: str(self.gpus_per_node)}}
        worker["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
        # One term per node (terms are ORed): the API server accepts only one value for a
        # `metadata.name` field selector (issue 11: a single `In [n1, n2]` term is rejected).
        terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]} for n in nodes]
        one_per_node = {
            "labelSelector": {"matchLabels": {MPI_JOB_NAME: self.name, MPI_JOB_ROLE: "worker"}},
            "topologyKey": "kubernetes.io/hostname",
        }
        affinity = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [one_per_node]},
        }
        return {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": {"name": self.name, "namespace": self.settings.namespace, **self._stamp()},
            "spec": {
                "slotsPerWorker": self.gpus_per_node,
                # the launcher starts once every worker is Ready (mpi-operator v0.5+), and may start again
                # MPI_LAUNCHER_RETRIES times: an mpirun that reached a worker before its sshd listened is a
                # race, not a measurement (issue 28, item 7)
                "launcherCreationPolicy": "WaitForWorkersReady",
                "runPolicy": {
                    "cleanPodPolicy": "Running",
                    "backoffLimit": MPI_LAUNCHER_RETRIES,
                    "activeDeadlineSeconds": self.settings.active_deadline_s,
                },
                "mpiImplementation": "OpenMPI",
                "mpiReplicaSpecs": {
                    "Launcher": {
                        "replicas": 1,
                        "template": self._template({"containers": [self._container("launcher", self.launcher_argv)]}),
                    },
                    "Worker": {
                        "replicas": len(nodes),
                        "template": self._template({"affinity": affinity, "containers": [worker]}),
                    },
                },
            },
        }
