"""`KubeLauncher`: `validate.launcher.Launcher` over Jobs and MPIJobs, and the executor's settings.

Split out of `fleet.executor` (issue 17: rooms of at most ~400 lines); what each launcher call turns
into on the cluster, and why, is in the `fleet.executor` docstring:
- `runner_for(node).run(argv, timeout)`: one Job pinned to the node (`fleet.jobs.run_job`), its result
  frame turned into the CommandResult a local run would give;
- `mpirun ...` (phase 5): a Kubeflow MPIJob with one worker per `-H` host;
- `start(node, argv)` / `stop()`: the phase-4 server Job;
- a node that disappears is remembered (`vanished`) and refused from then on.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from upgrade_gate.collect.runner import CommandResult
from upgrade_gate.fleet.errors import KubeError, KubeNotFoundError, KubeRefusedError
from upgrade_gate.fleet.jobs import NodeRunResult, RunStatus, fatal, run_job, run_mpijob
from upgrade_gate.fleet.manifests import HostAccess, JobSettings, JobSpec, MpiJobSpec
from upgrade_gate.fleet.objects import KubeNode
from upgrade_gate.fleet.resultframe import BEGIN, END, EXEC_FAILED, PREFIX
from upgrade_gate.model import NodeName, replace
from upgrade_gate.validate.launcher import LauncherError
from upgrade_gate.vendors import AMD, VENDORS, Vendor

if TYPE_CHECKING:
    from upgrade_gate.fleet.kube import KubeClient
    from upgrade_gate.fleet.workload_jobs import WorkloadJobs

VANISHED = "node vanished"
_PURPOSES = {
    "rvs": "phase1",
    "agfhc": "phase1",
    "all_reduce_perf": "phase2",
    "ib_write_bw": "phase4",
    "amd-smi": "monitor",
    "rocm-smi": "monitor",
    "dcgmi": "phase1",  # NVIDIA's phase 1 (dcgmi diag)
    "nvidia-smi": "monitor",  # NVIDIA's thermal and utilisation samples
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorSettings:
    """How the executor runs things on the cluster."""

    jobs: JobSettings = field(default_factory=JobSettings)
    upgrade_gate_argv: tuple[str, ...] = ("upgrade-gate",)  # the CLI inside the image
    rccl_image: str = AMD.kube.collective_image  # phase 5's MPIJob image (rccl-/nccl-tests, OpenMPI, sshd)
    workload_image: str = ""  # phases 6-7's Jobs (fleet.workload_jobs); empty: the ConfigMap's, else the default
    env: tuple[tuple[str, str], ...] = ()  # NCCL_* / RCCL_* for the phase Jobs and the MPIJob
    concurrency: int = 256  # CVF runs every node of a phase at once; bounded so a huge fleet is paced
    poll_s: float = 2.0  # reads where no watch serves (fleet.kube.waiting); the server-start wait
    capture_timeout_s: float = 900.0
    server_start_timeout_s: float = 120.0
    keep_finished: int = 20  # finished Jobs kept per node and kind (`--keep-jobs`), the rest pruned
    capture_privileged: bool = False  # capture without GPUs allocated, privileged (manifests.capture_access)


def _monitor_access(settings: ExecutorSettings, vendor: Vendor = AMD) -> HostAccess:
    """Host access of a read-only monitoring call (phase 2's thermal sampling: amd-smi, rocm-smi).

    It runs while the phase 2 Job holds every GPU, so it cannot allocate one (it would stay Pending
    until the deadline). It gets the node's own ROCm (`/opt/rocm`, as capture does), so the tools are
    the node's and read the host's sysfs (hwmon, gpu_metrics); with `capture_privileged` it is
    privileged as capture is, so amd-smi also opens the device nodes. A tool that still sees no GPU
    fails the sample: `thermal.outlier` reports missing evidence, never a pass. On an NVIDIA node there
    is no /opt/rocm (`Vendor.kube.mount_rocm`): nvidia-smi comes through the NVIDIA Container Toolkit,
    asked for by `Vendor.kube.unallocated_env` (`KubeLauncher.spec`).
    """
    return HostAccess(rocm=vendor.kube.mount_rocm, devices=settings.capture_privileged)


def collective_image(settings: ExecutorSettings, vendor: Vendor) -> str:
    """Phase 5's MPIJob image for `vendor`'s nodes; LauncherError when there is none it could use.

    `settings.rccl_image` (`--rccl-image`), else the vendor's default (`Vendor.kube.collective_image`). An
    image that is another vendor's default (AMD's ROCm rccl-tests on NVIDIA nodes: the CLI's default) is
    refused: it cannot drive this vendor's GPUs, and its failure would read as the nodes' own."""
    image = settings.rccl_image or vendor.kube.collective_image
    foreign = {v.kube.collective_image: v for v in VENDORS if v.name != vendor.name and v.kube.collective_image}
    if not image or image in foreign:
        why = f"{image} is {foreign[image].title}'s default" if image in foreign else "no image"
        raise LauncherError(
            f"phase 5 on {vendor.title} nodes: {why}, and {vendor.title} names no default collective-test image; "
            f"pass --rccl-image with an image holding {vendor.title}'s all_reduce_perf and all_gather_perf, "
            "OpenMPI and sshd"
        )
    return image


def refused(node: NodeName, reason: str | None) -> KubeRefusedError:
    """The infrastructure error for a pod the cluster would not run on `node` (exit 4, no CVF label)."""
    return KubeRefusedError(
        f"node {node}: {reason or 'the cluster refused the pod'}; this says nothing about the node's hardware: "
        "free the node (window start drains it) or fix the namespace, quota or image, then run it again"
    )


def _stderr_of(log: str) -> str:
    """The pod log without the result frame (what the tool printed on stderr)."""
    kept, inside = [], False
    for line in log.splitlines(keepends=True):
        bare = line.rstrip("\n")
        if bare.startswith(BEGIN):
            inside = True
        elif inside and bare == END:
            inside = False
        elif not (inside and bare.startswith(PREFIX)):
            kept.append(line)
    return "".join(kept)


class KubeLauncher:
    """`validate.launcher.Launcher` over Jobs and MPIJobs (see the module docstring)."""

    def __init__(
        self,
        client: KubeClient,
        nodes: Sequence[KubeNode],
        settings: ExecutorSettings,
        *,
        run_id: str,
        vendor: Vendor = AMD,
    ) -> None:
        self._client = client
        self.vendor = vendor  # every node's (fleet.executor.run_vendor_phases runs one launcher per vendor)
        self._nodes = {n.name: n for n in nodes}
        self._settings = settings
        self._run_id = run_id
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self._addresses: dict[NodeName, str] = {}
        self.vanished: dict[NodeName, str] = {}
        self.workload: WorkloadJobs | None = None  # phases 6-7's Jobs (set by fleet.executor.run_phases)

    def _next_id(self) -> str:
        with self._lock:
            return f"{self._run_id}-{next(self._counter)}"

    def _check(self, node: NodeName) -> KubeNode:
        if node not in self._nodes:
            raise LauncherError(f"node {node}: not part of this run")
        if node in self.vanished:
            raise LauncherError(f"{VANISHED}: {self.vanished[node]}")
        return self._nodes[node]

    def _lost(self, node: NodeName, why: str) -> LauncherError:
        with self._lock:
            self.vanished.setdefault(node, why)
        return LauncherError(f"{VANISHED}: {why}")

    def spec(self, node: NodeName, argv: Sequence[str]) -> JobSpec:
        """The Job that runs `argv` on `node`."""
        kube_node = self._check(node)
        workload = self.workload.spec(kube_node, argv, self._next_id) if self.workload is not None else None
        if workload is not None:
            return workload
        tool = Path(argv[0]).name if argv else ""
        purpose = _PURPOSES.get(tool, "cmd")
        rdma = tool == "ib_write_bw"
        env = self._settings.env
        if rdma:
            access = HostAccess(host_network=True, infiniband=rdma, ipc_lock=rdma)
        elif purpose == "monitor":
            access = _monitor_access(self._settings, self.vendor)
            env = (*env, *self.vendor.kube.unallocated_env)
        else:
            access = HostAccess()
        resource = self.vendor.kube.gpu_resource
        return JobSpec(
            node=node,
            purpose=purpose,
            run_id=self._next_id(),
            argv=tuple(argv),
            gpus=kube_node.gpu_count(resource) if purpose in ("phase1", "phase2") else 0,
            access=access,
            env=env,
            settings=self._settings.jobs,
            gpu_resource=resource,
        )

    def runner_for(self, node: NodeName) -> _JobRunner:
        """A runner whose commands are Jobs on `node`."""
        self._check(node)
        return _JobRunner(self, node)

    def address(self, node: NodeName, *, device: str | None = None) -> str:
        """The node's InternalIP (hostNetwork pods listen there)."""
        self._check(node)
        if node not in self._addresses:
            try:
                self._addresses[node] = self._client.node_address(node)
            except KubeNotFoundError as exc:
                raise self._lost(node, f"node {node} no longer exists") from exc
            except KubeError as exc:
                if fatal(exc):
                    raise
                raise LauncherError(f"node {node}: cannot read its address: {exc}") from exc
        return self._addresses[node]

    def start(self, node: NodeName, argv: Sequence[str]) -> _JobBackground:
        """Start `argv` as a Job on `node` and wait (bounded) until its pod runs."""
        return _JobBackground(self, self.spec(node, argv))

    def tool_env(self, node: NodeName) -> Mapping[str, str]:
        """The NCCL_* / RCCL_* environment the phase Jobs get."""
        return {k: v for k, v in self._settings.env if k.startswith(("NCCL_", "RCCL_"))}

    # ----------------------------------------------------------------------- one command

    def run_command(self, node: NodeName, argv: Sequence[str], timeout: float) -> CommandResult:
        """Run `argv` on `node` (a Job, or an MPIJob for `mpirun`) and wait at most `timeout` s."""
        if argv and Path(argv[0]).name == "mpirun":
            return self._mpirun(tuple(argv), timeout)
        spec = self.spec(node, argv)
        res = run_job(self._client, spec, timeout_s=timeout, poll_s=self._settings.poll_s)
        return self.to_result(spec, res)

    def to_result(self, spec: JobSpec, res: NodeRunResult) -> CommandResult:
        """A Job's outcome as the CommandResult of its command; LauncherError when the node vanished."""
        argv, duration = spec.argv, res.duration_s
        if res.status is RunStatus.NODE_LOST:
            raise self._lost(spec.node, res.reason or f"node {spec.node} disappeared")
        if res.status is RunStatus.ERROR:
            raise LauncherError(f"node {spec.node}: {res.reason}")
        if res.status is RunStatus.REFUSED:  # not the node's result: the run stops (exit 4), no label
            raise refused(spec.node, res.reason)
        stderr = _stderr_of(res.log)
        if res.status is RunStatus.TIMED_OUT:
            return CommandResult(argv=argv, returncode=None, stdout="", stderr=stderr, duration_s=duration,
                                 timed_out=True)  # fmt: skip
        if res.payload is None:
            missing = EXEC_FAILED in res.log
            why = stderr or (res.reason or "no result frame")
            # no invented exit code: None unless the container's own code is known (issue 11, defect 5)
            return CommandResult(argv=argv, returncode=None if missing else res.exit_code, stdout="",
                                 stderr=why, duration_s=duration, missing=missing)  # fmt: skip
        return CommandResult(
            argv=argv,
            returncode=res.exit_code,
            stdout=res.payload.decode("utf-8", errors="replace"),
            stderr=stderr,
            duration_s=duration,
        )

    def _mpirun(self, argv: tuple[str, ...], timeout: float) -> CommandResult:
        by_address = {addr: node for node, addr in self._addresses.items()}
        opts = list(argv)
        if "-H" not in opts or opts.index("-H") + 1 >= len(opts):
            raise LauncherError("mpirun without -H: the Kubernetes executor needs the hosts of the MPIJob")
        at = opts.index("-H")
        hosts: list[tuple[NodeName, str]] = []
        for item in opts[at + 1].split(","):
            addr, _, slots = item.partition(":")
            node = by_address.get(addr) or (NodeName(addr) if addr in self._nodes else None)
            if node is None:
                raise LauncherError(f"mpirun host {addr!r} is not a node of this run")
            self._check(node)
            hosts.append((node, slots or "1"))
        run_id = self._next_id()
        spec = MpiJobSpec(
            run_id=run_id,
            nodes=tuple(n for n, _ in hosts),
            launcher_argv=(),
            image=collective_image(self._settings, self.vendor),
            gpus_per_node=max(int(s) for _, s in hosts),
            env=self._settings.env,
            settings=self._settings.jobs,
            gpu_resource=self.vendor.kube.gpu_resource,
        )
        ns = self._settings.jobs.namespace
        workers = ",".join(f"{spec.name}-worker-{i}.{spec.name}.{ns}.svc:{s}" for i, (_, s) in enumerate(hosts))
        spec = replace(spec, launcher_argv=(*opts[:at], "-H", workers, *opts[at + 2 :]))
        res = run_mpijob(self._client, spec, timeout_s=timeout, poll_s=self._settings.poll_s)
        if res.status is RunStatus.NODE_LOST:
            for node in res.lost_nodes:
                self._lost(node, res.reason or f"node {node} disappeared")
            raise LauncherError(f"{VANISHED}: {res.reason}")
        if res.status is RunStatus.ERROR:
            raise LauncherError(res.reason or f"MPIJob {spec.name} could not run")
        if res.status is RunStatus.REFUSED:
            raise refused(NodeName(",".join(spec.nodes)), res.reason)
        code = 0 if res.status is RunStatus.SUCCEEDED else None if res.status is RunStatus.TIMED_OUT else 1
        return CommandResult(argv=argv, returncode=code, stdout=res.log, stderr="" if code == 0 else (res.reason or ""),
                             duration_s=res.duration_s, timed_out=res.status is RunStatus.TIMED_OUT)  # fmt: skip


class _JobRunner:
    """CommandRunner over `KubeLauncher.run_command` for one node."""

    def __init__(self, launcher: KubeLauncher, node: NodeName) -> None:
        self._launcher = launcher
        self._node = node

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """Run `argv` on the node as a Job."""
        return self._launcher.run_command(self._node, argv, timeout)


class _JobBackground:
    """A server Job (phase 4): created now, collected by `stop`."""

    def __init__(self, launcher: KubeLauncher, spec: JobSpec) -> None:
        self._launcher = launcher
        self._spec = spec
        self._abort = threading.Event()
        self._result: NodeRunResult | None = None
        self._error: BaseException | None = None
        settings = launcher._settings
        timeout = float(settings.jobs.active_deadline_s)
        self._thread = threading.Thread(target=self._run, args=(timeout,), daemon=True, name="ug-server-job")
        self._thread.start()
        client, ns = launcher._client, spec.settings.namespace
        deadline = time.monotonic() + settings.server_start_timeout_s
        while self._thread.is_alive() and time.monotonic() < deadline:
            try:
                pods = client.job_pods(spec.name, ns)
            except KubeError:
                pods = ()
            if any(p.phase != "Pending" for p in pods):
                break
            time.sleep(min(settings.poll_s, 0.5))

    def _run(self, timeout: float) -> None:
        try:
            self._result = run_job(
                self._launcher._client, self._spec, timeout_s=timeout, poll_s=self._launcher._settings.poll_s,
                stop=self._abort.is_set,
            )  # fmt: skip
        except BaseException as exc:  # reported by stop()
            self._error = exc

    def stop(self, *, timeout: float) -> CommandResult:
        """Wait up to `timeout` s for the server Job, then stop it; never raises for node failures."""
        self._thread.join(max(timeout, 0.0))
        if self._thread.is_alive():
            self._abort.set()
            self._thread.join()
        if self._error is not None and fatal(self._error):
            raise self._error  # the API server is gone: the run stops (exit 4), it is no phase result
        if self._error is not None or self._result is None:
            why = f"server Job {self._spec.name}: {self._error or 'no result'}"
            return CommandResult(argv=self._spec.argv, returncode=None, stdout="", stderr=why, duration_s=0.0)
        try:
            return self._launcher.to_result(self._spec, self._result)
        except LauncherError as exc:
            return CommandResult(argv=self._spec.argv, returncode=None, stdout="", stderr=str(exc), duration_s=0.0)
