"""The Kubernetes executor: the same probes and CVF phases, run as Jobs on the nodes.

`KubeLauncher` implements `validate.launcher.Launcher`, so `validate.pipeline.run_pipeline` and every
phase run unchanged on a cluster:
- `runner_for(node).run(argv, timeout)` runs `argv` as one batch/v1 Job pinned to the node
  (`fleet.jobs.run_job`), its stdout brought back in a result frame (`fleet.resultframe`) and turned
  into the `CommandResult` a local run would give: exit code, stdout, the rest of the log as stderr,
  `timed_out` when the Job did not finish in time, `missing` when the wrapper could not exec the tool.
- `mpirun ...` (phase 5) is not a Job on one node: it becomes a Kubeflow MPIJob (kubeflow.org/v2beta1)
  with one worker per node of the `-H` list and the same rccl-tests command line in the launcher; the
  `-H` hosts are rewritten to the workers' DNS names (`<mpijob>-worker-<i>.<mpijob>.<ns>.svc`, the
  names the MPI operator writes into its hostfile), slots unchanged. The launcher log is the stdout.
- `start(node, argv)` (the phase-4 `ib_write_bw` server) creates the Job and waits until its pod runs;
  `stop()` waits for it, deletes it if it is still running, and returns its result.
- `address(node)` is the node's InternalIP: phase Jobs use `hostNetwork`, so a server pod listens there.
Phase 0 reads the Node objects' labels (NFD), which the caller passes to the pipeline as node_labels.

Capture (`capture_nodes`) runs `upgrade-gate capture --node $(UPGRADE_GATE_NODE) --host-root /host
--out -` as one Job per node with the node's GPUs requested (a container sees only the GPUs it was
given, and rocminfo/amd-smi must see all of them; or, with `capture_privileged`, privileged and
without GPUs allocated, so a canary still running a workload can be captured), and reads the
tarball back into a `Bundle` with the collect stage's safe reader.

Design decisions
- A node that disappears during a Job is not a tool failure: the runner raises `LauncherError`
  ("node vanished"), the launcher remembers the node and refuses further commands on it, and
  `run_phases` turns every result of that node that is not `not-run` into an `error` whose first reason
  names the vanished node. A vanished node is never a pass.
- Job names need a unique run id per command: `<run id>-<n>` with a per-launcher counter; purposes are
  derived from the tool (`phase1` rvs/agfhc, `phase2` all_reduce_perf, `phase4` ib_write_bw, else `cmd`)
  so `kubectl get jobs -l upgrade-gate/purpose=phase2` finds them and pruning keeps a few per purpose.
- Thresholds come from the `cluster-validation-config` ConfigMap in the executor's namespace
  (`load_cluster_config`); when it does not exist the CVF defaults apply and the source says so.
- CVF labels and annotations are written exactly as the phase results carry them, one merge patch per
  node, plus `amd.com/cluster-validation-candidate=true` for a node that passed phase 0.
"""

from __future__ import annotations

import itertools
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from upgrade_gate.collect.bundle import Bundle, load_bundle
from upgrade_gate.collect.runner import CommandResult
from upgrade_gate.errors import BundleError, InputError
from upgrade_gate.fleet.errors import KubeError, KubeNotFoundError
from upgrade_gate.fleet.jobs import NodeRunResult, RunStatus, fatal, run_job, run_mpijob, run_on_nodes
from upgrade_gate.fleet.labels import (
    CVF_CANDIDATE,
    CVF_CONFIGMAP,
    MANAGED_BY,
    MANAGER,
    MPI_JOB_NAME,
    NFD_AMD_NIC,
    NODE,
    PHASE_LABELS,
    node_label_value,
)
from upgrade_gate.fleet.manifests import HOST_ROOT, HostAccess, JobSettings, JobSpec, MpiJobSpec, capture_access
from upgrade_gate.fleet.objects import JobPhase, KubeNode
from upgrade_gate.fleet.resultframe import BEGIN, END, PREFIX
from upgrade_gate.model import NodeName, PhaseResult, PhaseStatus, Snapshot
from upgrade_gate.validate.config import CvfConfig, default_config, parse_cvf_config
from upgrade_gate.validate.launcher import LauncherError
from upgrade_gate.validate.phase import GroupPhase, NodePhase
from upgrade_gate.validate.pipeline import Progress, run_pipeline

if TYPE_CHECKING:
    from upgrade_gate.fleet.kube import KubeClient

VANISHED = "node vanished"
_WRAPPER_EXEC_FAILED = "upgrade-gate result wrapper: cannot run"
_PURPOSES = {"rvs": "phase1", "agfhc": "phase1", "all_reduce_perf": "phase2", "ib_write_bw": "phase4"}


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorSettings:
    """How the executor runs things on the cluster."""

    jobs: JobSettings = field(default_factory=JobSettings)
    upgrade_gate_argv: tuple[str, ...] = ("upgrade-gate",)  # the CLI inside the image
    rccl_image: str = "rocm/rccl-tests:latest"  # phase 5's MPIJob image (rccl-tests, OpenMPI, sshd)
    env: tuple[tuple[str, str], ...] = ()  # NCCL_* / RCCL_* for the phase Jobs and the MPIJob
    concurrency: int = 256  # CVF runs every node of a phase at once; bounded so a huge fleet is paced
    poll_s: float = 2.0
    capture_timeout_s: float = 900.0
    server_start_timeout_s: float = 120.0
    keep_finished: int = 20
    capture_privileged: bool = False  # capture without GPUs allocated, privileged (manifests.capture_access)


def load_cluster_config(client: KubeClient, namespace: str) -> CvfConfig:
    """Thresholds from the `cluster-validation-config` ConfigMap; CVF defaults when it does not exist."""
    try:
        data = client.get_configmap(CVF_CONFIGMAP, namespace)
    except KubeNotFoundError:
        return replace(default_config(), source=f"CVF defaults (no ConfigMap {namespace}/{CVF_CONFIGMAP})")
    return parse_cvf_config(data, source=f"ConfigMap {namespace}/{CVF_CONFIGMAP}")


def stop_leftovers(
    client: KubeClient, namespace: str, nodes: Sequence[NodeName], *, poll_s: float = 2.0, timeout_s: float = 120.0
) -> tuple[str, ...]:
    """Delete our still-active Jobs (and phase 5 MPIJobs) on `nodes` left by a run that died (an API
    outage, a killed operator) and wait until their pods are gone: they would hold the nodes' GPUs,
    and a repeated `window validate` must start from a quiet node. Returns the deleted names."""
    wanted = {node_label_value(n) for n in nodes}
    doomed: list[tuple[str, str]] = []  # (kind, name)
    for job in client.list_jobs(namespace, f"{MANAGED_BY}={MANAGER}"):
        if job.phase is not JobPhase.ACTIVE:
            continue
        if job.labels.get(NODE) in wanted:
            doomed.append(("job", job.name))
        elif MPI_JOB_NAME in job.labels:  # the launcher of an MPIJob (phase 5 runs on the canaries)
            doomed.append(("mpijob", job.labels[MPI_JOB_NAME]))
            doomed.append(("job", job.name))
    for kind, name in doomed:
        (client.delete_mpijob if kind == "mpijob" else client.delete_job)(name, namespace)
    deadline = time.monotonic() + timeout_s
    for kind, name in doomed:
        while kind == "job" and client.job_pods(name, namespace) and time.monotonic() < deadline:
            time.sleep(poll_s)
    return tuple(name for _, name in doomed)


# --------------------------------------------------------------------------- capture


def capture_spec(node: KubeNode, settings: ExecutorSettings, run_id: str) -> JobSpec:
    """The capture Job of one node (all its GPUs requested, host access the probes need)."""
    argv = (*settings.upgrade_gate_argv, "capture", "--node", "$(UPGRADE_GATE_NODE)", "--host-root", HOST_ROOT)
    return JobSpec(
        node=node.name,
        purpose="capture",
        run_id=run_id,
        argv=(*argv, "--out", "-"),
        # --capture-privileged: read-only, no GPU allocated, so a busy (--no-drain) canary can be captured
        gpus=0 if settings.capture_privileged else node.gpu_count(),
        access=capture_access(rdma=node.labels.get(NFD_AMD_NIC) == "true", devices=settings.capture_privileged),
        settings=settings.jobs,
    )


def bundle_from_payload(payload: bytes, *, node: str) -> Bundle:
    """A capture tarball (from a result frame) read with the collect stage's safe reader."""
    with tempfile.TemporaryDirectory(prefix="upgrade-gate-bundle-") as tmp:
        path = Path(tmp) / f"{node}.tar.gz"
        path.write_bytes(payload)
        try:
            return load_bundle(path)
        except (BundleError, tarfile.TarError, OSError, EOFError) as exc:
            raise BundleError(f"node {node}: the capture Job returned no readable bundle: {exc}") from exc


def capture_nodes(
    client: KubeClient,
    nodes: Sequence[KubeNode],
    settings: ExecutorSettings,
    *,
    run_id: str,
    on_result: Callable[[NodeRunResult], None] | None = None,
) -> dict[NodeName, Bundle | str]:
    """Capture every node with a Job; per node the Bundle, or why there is none (fail closed)."""
    specs = [capture_spec(n, settings, run_id) for n in nodes]
    results = run_on_nodes(
        client,
        specs,
        concurrency=settings.concurrency,
        timeout_s=settings.capture_timeout_s,
        poll_s=settings.poll_s,
        keep_finished=settings.keep_finished,
        on_result=on_result,
    )
    out: dict[NodeName, Bundle | str] = {}
    for res in results:
        if res.status is RunStatus.NODE_LOST:
            out[res.node] = f"{VANISHED}: {res.reason}"
        elif res.status is not RunStatus.SUCCEEDED or res.payload is None:
            out[res.node] = f"capture Job {res.job} {res.status}: {res.reason or 'no result'}"
        else:
            try:
                out[res.node] = bundle_from_payload(res.payload, node=res.node)
            except InputError as exc:
                out[res.node] = str(exc)
    return out


# --------------------------------------------------------------------------- the launcher


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
        self, client: KubeClient, nodes: Sequence[KubeNode], settings: ExecutorSettings, *, run_id: str
    ) -> None:
        self._client = client
        self._nodes = {n.name: n for n in nodes}
        self._settings = settings
        self._run_id = run_id
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self._addresses: dict[NodeName, str] = {}
        self.vanished: dict[NodeName, str] = {}

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
        tool = Path(argv[0]).name if argv else ""
        purpose = _PURPOSES.get(tool, "cmd")
        rdma = tool == "ib_write_bw"
        return JobSpec(
            node=node,
            purpose=purpose,
            run_id=self._next_id(),
            argv=tuple(argv),
            gpus=kube_node.gpu_count() if purpose in ("phase1", "phase2") else 0,
            access=HostAccess(host_network=True, infiniband=rdma, ipc_lock=rdma) if rdma else HostAccess(),
            env=self._settings.env,
            settings=self._settings.jobs,
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
        stderr = _stderr_of(res.log)
        if res.status is RunStatus.TIMED_OUT:
            return CommandResult(argv=argv, returncode=None, stdout="", stderr=stderr, duration_s=duration,
                                 timed_out=True)  # fmt: skip
        if res.payload is None:
            missing = _WRAPPER_EXEC_FAILED in res.log
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
            image=self._settings.rccl_image,
            gpus_per_node=max(int(s) for _, s in hosts),
            env=self._settings.env,
            settings=self._settings.jobs,
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


# --------------------------------------------------------------------------- phases


def run_phases(
    client: KubeClient,
    nodes: Sequence[KubeNode],
    *,
    phases: Sequence[NodePhase | GroupPhase],
    config: CvfConfig,
    settings: ExecutorSettings,
    run_id: str,
    snapshots: Mapping[NodeName, Snapshot] | None = None,
    samples: int | None = None,
    progress: Progress | None = None,
) -> dict[NodeName, tuple[PhaseResult, ...]]:
    """The CVF pipeline on the nodes through a KubeLauncher; a vanished node's results are errors."""
    launcher = KubeLauncher(client, nodes, settings, run_id=run_id)
    results = run_pipeline(
        [n.name for n in nodes],
        phases=phases,
        config=config,
        launcher=launcher,
        snapshots={str(k): v for k, v in (snapshots or {}).items()},
        node_labels={n.name: n.labels for n in nodes},
        samples=samples,
        progress=progress,
        parallel=settings.concurrency,
    )
    for node, why in launcher.vanished.items():
        results[node] = tuple(_vanished(r, why) for r in results[node])
    return results


def _vanished(result: PhaseResult, why: str) -> PhaseResult:
    if result.status is PhaseStatus.NOT_RUN:
        return result
    reason = f"{VANISHED}: {why}"
    reasons = (reason, *(r for r in result.reasons if r != reason))
    labels = dict.fromkeys(result.labels, "failed")
    annotations = {k: v for k, v in result.annotations.items() if not k.endswith("-measured-bw")}
    for key in result.labels:
        annotations[f"{key}-failure-reason"] = reason
    return replace(result, status=PhaseStatus.ERROR, reason=reason, reasons=reasons, labels=labels,
                   annotations=annotations)  # fmt: skip


def cvf_metadata(
    node: KubeNode | None, results: Sequence[PhaseResult]
) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """The merge patch (labels, annotations) that leaves on `node` exactly the CVF metadata of `results`.

    Every CVF phase label, the candidate label and every `<phase label>-...` annotation the node has
    now is removed unless this run sets it again: a label of a phase that did not run this time, or a
    failure reason of an earlier run, must not outlive the run that wrote it (issue 11, defect 6).
    """
    labels: dict[str, str | None] = {}
    annotations: dict[str, str | None] = {}
    if node is not None:
        keys = tuple(PHASE_LABELS.values())
        labels.update({k: None for k in (*keys, CVF_CANDIDATE) if k in node.labels})
        annotations.update({k: None for k in node.annotations if k.startswith(tuple(f"{key}-" for key in keys))})
    for r in results:
        labels.update(r.labels)
        annotations.update(r.annotations)
        if r.phase == 0:
            labels[CVF_CANDIDATE] = "true" if r.status is PhaseStatus.PASSED else None
    return labels, annotations


def write_cvf_labels(
    client: KubeClient, results: Mapping[NodeName, Sequence[PhaseResult]]
) -> dict[NodeName, str | None]:
    """Patch each node's CVF labels and annotations (one merge patch per node, stale ones removed);
    per node the error, if any."""
    out: dict[NodeName, str | None] = {}
    for node, phase_results in sorted(results.items()):
        try:
            labels, annotations = cvf_metadata(client.get_node(node), phase_results)
            client.patch_node_metadata(node, labels=labels, annotations=annotations)
            out[node] = None
        except KubeNotFoundError as exc:
            out[node] = f"{VANISHED}: {exc}"
    return out
