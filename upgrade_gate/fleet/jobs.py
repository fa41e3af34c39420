"""Running upgrade-gate's Jobs across a fleet: one Job per node, bounded concurrency, results as values.

Design decisions
- `run_on_nodes` runs many Jobs (built by `fleet.manifests`) with a bounded thread pool sharing one
  `KubeClient` (its urllib3 pool is thread-safe). A node's own failure - Job failed, timed out,
  node deleted mid-run, Job vanished, no valid result frame - is that node's `NodeRunResult`, never
  an exception for the whole fleet; only errors that doom every node (the API forbids a verb: exit 4
  naming it; the API is unreachable) propagate, after telling the other workers to stop waiting.
- Results come back through the pod log in a checksummed frame (`fleet.resultframe`, where the choice
  of logs over ConfigMaps is explained). A Job that completed without a valid frame is FAILED: fail
  closed.
- A timed-out Job is deleted (its pods with it) so that it stops loading the node; finished Jobs are
  pruned at the end, keeping the newest `keep_finished` per purpose for debugging. Pruning is
  housekeeping: its failures never change the results.
- `run_mpijob` runs phase 5's MPIJob the same way: the launcher log (rank 0's rccl-tests output) is
  the result; a node of the MPIJob that disappeared turns the outcome into NODE_LOST naming it.
- `on_result` is called from the calling thread as nodes finish, so a CLI can drive a progress display
  without locking.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

from upgrade_gate.errors import ParseError
from upgrade_gate.fleet.errors import (
    InvalidNameError,
    KubeConnectionError,
    KubeError,
    KubeForbiddenError,
    KubeNotFoundError,
    KubeRequestTimeoutError,
    KubeServerError,
    KubeThrottledError,
    KubeWaitTimeoutError,
)
from upgrade_gate.fleet.labels import MANAGED_BY, MANAGER, MPI_JOB_NAME
from upgrade_gate.fleet.manifests import JobSpec, MpiJobSpec
from upgrade_gate.fleet.objects import JobPhase, PodState, pull_failure
from upgrade_gate.fleet.resultframe import extract
from upgrade_gate.model import NodeName

if TYPE_CHECKING:
    from upgrade_gate.fleet.kube import KubeClient

T = TypeVar("T")


class RunStatus(StrEnum):
    """How one node's Job ended, from upgrade-gate's point of view."""

    SUCCEEDED = "succeeded"  # Complete, and (when framed) a valid result frame came back
    FAILED = "failed"  # Failed, or Complete without a valid result frame
    TIMED_OUT = "timed-out"  # neither condition within the timeout; the Job was deleted
    NODE_LOST = "node-lost"  # the node disappeared during the run
    ERROR = "error"  # the Job could not be created or vanished
    REFUSED = "refused"  # the cluster would not run the pod; says nothing about the node (issue 28)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRunResult:
    """One node's outcome: never a PASS by itself, only evidence for the phase/snapshot code."""

    node: NodeName
    job: str
    status: RunStatus
    reason: str | None = None
    exit_code: int | None = None
    log: str = ""
    payload: bytes | None = None
    duration_s: float = 0.0


def fatal(exc: BaseException) -> bool:
    """True for an error that dooms the whole run, not one node (the CLI exits 4, nothing is labelled):
    the API forbids a verb or rejects the credentials, or does not answer (connection refused or reset,
    TLS failure, request timeouts, 5xx and 429 that outlasted the retries). A 5xx on `pods/log` is the
    node's own: the API server could not reach that node's kubelet."""
    if isinstance(exc, KubeForbiddenError | KubeConnectionError | KubeRequestTimeoutError):
        return True
    return isinstance(exc, KubeServerError | KubeThrottledError) and exc.resource != "pods/log"


def _node_gone(client: KubeClient, node: NodeName) -> bool:
    try:
        client.get_node(node)
    except KubeNotFoundError:
        return True
    except KubeError as exc:
        if fatal(exc):
            raise
        return False
    return False


def _log(client: KubeClient, name: str, namespace: str, pods: Sequence[PodState] = ()) -> tuple[str, str | None]:
    """The newest pod's log (of `pods` when given, saving a list request), or why there is none."""
    try:
        if pods:
            return client.pod_logs(pods[-1].name, namespace), None
        return client.job_logs(name, namespace), None
    except KubeError as exc:
        if fatal(exc):
            raise
        return "", f"log unavailable: {exc}"


def _rejection(pods: Sequence[PodState]) -> str | None:
    """Why the kubelet refused or evicted the newest pod (e.g. `OutOfamd.com/gpu: Pod was rejected: ...`)."""
    pod = pods[-1] if pods else None
    if pod is None or pod.phase != "Failed" or pod.exit_code is not None or not (pod.reason or pod.message):
        return None
    return f"pod {pod.name} {pod.reason or 'Failed'}: {pod.message or 'no message'}"


def _busy_refusal(client: KubeClient, node: NodeName, pods: Sequence[PodState]) -> str | None:
    """The kubelet's `OutOf<resource>` admission refusal while other pods hold the node's GPUs: the node is
    busy, which says nothing about its hardware (issue 28). An `OutOf*` on an idle node stays a failure:
    the node advertises fewer GPUs than it has, which is evidence about the node."""
    pod = pods[-1] if pods else None
    if pod is None or pod.phase != "Failed" or pod.exit_code is not None or not (pod.reason or "").startswith("OutOf"):
        return None
    holders = _quietly(lambda: client.gpu_pods_on_node(node))
    if not holders:
        return None
    return (f"the kubelet refused pod {pod.name} ({pod.reason}: {pod.message or 'no message'}) while "
            f"{', '.join(holders[:3])}{' ...' if len(holders) > 3 else ''} hold the node's GPUs")  # fmt: skip


def _unscheduled(pods: Sequence[PodState]) -> str | None:
    """Why the newest pod never started when no node would take it or its image cannot be had, else None."""
    pod = pods[-1] if pods else None
    if pod is None or pod.phase != "Pending":
        return None
    if pull_failure(pod) is not None:
        return pull_failure(pod)
    return f"pod {pod.name} was not scheduled ({pod.unscheduled})" if pod.unscheduled else None


class _CreateWatch:
    """`stop` for wait_job: ends the wait at once when the Job controller cannot create the pod
    (FailedCreate events: Pod Security admission, quota, a missing service account, ...)."""

    def __init__(self, client: KubeClient, name: str, namespace: str, stop: Callable[[], bool] | None) -> None:
        self._client, self._name, self._ns, self._stop = client, name, namespace, stop
        self.refused: str | None = None
        self._next = time.monotonic() + 0.5

    def __call__(self) -> bool:
        if self._stop is not None and self._stop():
            return True
        if time.monotonic() < self._next:
            return False
        self._next = time.monotonic() + 1.0
        try:
            failures = self._client.job_create_failures(self._name, self._ns)
        except KubeError as exc:
            if fatal(exc):
                raise
            return False
        if failures:
            self.refused = failures[-1]
        return self.refused is not None


class _LogPrefetch:
    """The log of a pod a watch event said Succeeded, read while the wait's read confirms it (issue 14:
    one round trip less per Job). Only a read decides: `take` returns it only for the newest pod of the
    read that ended the wait, Succeeded; else (or when it failed) the caller reads the log as before."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self._client, self._ns = client, namespace
        self._pod: str | None = None
        self._thread: threading.Thread | None = None
        self._log: str | None = None
        self._error: KubeError | None = None

    def start(self, pod: PodState) -> None:
        if self._thread is not None:
            return
        self._pod = pod.name
        self._thread = threading.Thread(target=self._read, daemon=True, name="ug-log-prefetch")
        self._thread.start()

    def _read(self) -> None:
        try:
            self._log = self._client.pod_logs(self._pod or "", self._ns)
        except KubeError as exc:
            self._error = exc

    def take(self, pods: Sequence[PodState]) -> tuple[str, str | None] | None:
        if self._thread is None or not pods or pods[-1].name != self._pod or pods[-1].phase != "Succeeded":
            return None
        self._thread.join()
        if self._error is not None and fatal(self._error):
            raise self._error
        return None if self._log is None else (self._log, None)


def run_job(
    client: KubeClient,
    spec: JobSpec,
    *,
    timeout_s: float,
    poll_s: float = 2.0,
    stop: Callable[[], bool] | None = None,
) -> NodeRunResult:
    """Create one Job, wait for it, bring its log (and result frame) back; node failures are values."""
    start = time.monotonic()
    ns, name = spec.settings.namespace, spec.name

    def result(status: RunStatus, reason: str | None, **kw: Any) -> NodeRunResult:
        return NodeRunResult(
            node=spec.node, job=name, status=status, reason=reason, duration_s=time.monotonic() - start, **kw
        )

    try:
        client.create_job(spec.manifest(), ns)
    except KubeError as exc:
        if fatal(exc):
            raise
        return result(RunStatus.ERROR, f"could not create Job {name}: {exc}")
    watch = _CreateWatch(client, name, ns, stop)
    prefetch = _LogPrefetch(client, ns)
    try:
        state, pods = client.wait_job_pods(
            name, ns, timeout_s=timeout_s, poll_s=poll_s, stop=watch, settle_on_pod=True, on_succeeded=prefetch.start
        )
    except KubeWaitTimeoutError:
        log, _ = _log(client, name, ns)
        lost = _node_gone(client, spec.node)
        stuck = _unscheduled(_quietly(lambda: client.job_pods(name, ns)) or ())
        _quietly(lambda: client.delete_job(name, ns))  # stop it; a leftover is pruned or expires
        if lost:
            return result(RunStatus.NODE_LOST, f"node {spec.node} disappeared during the run", log=log)
        if watch.refused is not None:
            return result(RunStatus.REFUSED, f"Job {name}: the Job controller cannot create its pod: {watch.refused}")
        if stuck is not None:
            return result(RunStatus.REFUSED, f"Job {name} did not start within {timeout_s:g}s: {stuck}")
        return result(RunStatus.TIMED_OUT, f"Job {name} did not finish within {timeout_s:g}s", log=log)
    except KubeNotFoundError:
        return result(RunStatus.ERROR, f"Job {name} disappeared before it finished")
    except KubeError as exc:
        if fatal(exc):
            raise
        return result(RunStatus.ERROR, f"Job {name}: {exc}")
    if state.phase is JobPhase.ACTIVE:  # the wait ended on a pod whose image cannot be pulled
        _quietly(lambda: client.delete_job(name, ns))
        return result(RunStatus.REFUSED, f"Job {name}: {_unscheduled(pods) or 'its pod cannot start'}")
    # the pods of the read that ended the wait (no second list); the log read while that read ran, if it
    # is the log of the pod that read shows Succeeded as the newest
    log, problem = prefetch.take(pods) or _log(client, name, ns, pods)
    exit_code = pods[-1].exit_code if pods else None
    payload: bytes | None = None
    if spec.framed and problem is None:
        try:
            payload, exit_code = extract(log)
        except ParseError as exc:
            problem = str(exc)
    # A node that vanished - deleted, or its pods disrupted (PodGC, taint eviction) - however and
    # whenever it went, also after its pod finished but before the log was read (issue 11, defect 5).
    disrupted = [p for p in pods if p.disruption is not None]
    if (problem is not None or state.phase is not JobPhase.SUCCEEDED) and (disrupted or _node_gone(client, spec.node)):
        how = f"pod {disrupted[-1].name}: {disrupted[-1].disruption}" if disrupted else f"Job {state.reason or 'ended'}"
        return result(
            RunStatus.NODE_LOST, f"node {spec.node} disappeared during the run ({how})", log=log, payload=payload
        )
    if state.phase is JobPhase.SUCCEEDED:
        if problem is not None:
            return result(RunStatus.FAILED, f"Job {name} completed but {problem}", exit_code=exit_code, log=log)
        return result(RunStatus.SUCCEEDED, None, exit_code=exit_code, log=log, payload=payload)
    busy = _busy_refusal(client, spec.node, pods)
    if busy is not None:
        return result(RunStatus.REFUSED, f"Job {name}: {busy}", log=log)
    why = f"Job {name} failed ({state.reason}: {state.message})"
    rejected = _rejection(pods)
    if rejected is not None:
        why += f"; {rejected}"
    if exit_code is not None:
        why += f", exit code {exit_code}"
    return result(RunStatus.FAILED, why, exit_code=exit_code, log=log, payload=payload)


def _quietly(fn: Callable[[], T]) -> T | None:
    """Best-effort follow-up call: a node-local API failure must not turn into a fleet-wide one."""
    try:
        return fn()
    except KubeError as exc:
        if fatal(exc):
            raise
        return None


def run_on_nodes(
    client: KubeClient,
    specs: Sequence[JobSpec],
    *,
    concurrency: int = 8,
    timeout_s: float = 1800.0,
    poll_s: float = 2.0,
    keep_finished: int | None = 20,
    on_result: Callable[[NodeRunResult], None] | None = None,
) -> tuple[NodeRunResult, ...]:
    """Run every spec with at most `concurrency` at once; results in input order."""
    names = [s.name for s in specs]  # validates every node name before anything is created
    if len(set(names)) != len(names):
        raise InvalidNameError("two Jobs for the same node, purpose and run id: " + ", ".join(sorted(names)))
    abort = threading.Event()
    results: dict[int, NodeRunResult] = {}
    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="ug-job") as pool:
        futures: dict[Future[NodeRunResult], int] = {
            pool.submit(run_job, client, spec, timeout_s=timeout_s, poll_s=poll_s, stop=abort.is_set): i
            for i, spec in enumerate(specs)
        }
        try:
            for future in as_completed(futures):
                res = future.result()
                results[futures[future]] = res
                if on_result is not None:
                    on_result(res)
        except BaseException:
            abort.set()
            for future in futures:
                future.cancel()
            raise
    if keep_finished is not None:
        ended = (RunStatus.SUCCEEDED, RunStatus.FAILED)
        settled = frozenset(r.job for r in results.values() if r.status in ended)
        for namespace in sorted({s.settings.namespace for s in specs}):
            # housekeeping only: a failure leaves old Jobs visible with kubectl and changes no result
            with contextlib.suppress(KubeError):
                client.prune_finished(namespace, f"{MANAGED_BY}={MANAGER}", keep=keep_finished, settled=settled)
    return tuple(results[i] for i in range(len(specs)))


@dataclass(frozen=True, slots=True, kw_only=True)
class MpiRunResult:
    """Phase 5's outcome across its nodes: the launcher's log is rank 0's output (rccl-tests table)."""

    name: str
    nodes: tuple[NodeName, ...]
    status: RunStatus
    reason: str | None = None
    log: str = ""
    lost_nodes: tuple[NodeName, ...] = ()
    duration_s: float = 0.0


def run_mpijob(client: KubeClient, spec: MpiJobSpec, *, timeout_s: float, poll_s: float = 2.0) -> MpiRunResult:
    """Create the MPIJob, wait for Succeeded/Failed, bring the launcher log back; then delete it."""
    start = time.monotonic()
    ns, name = spec.settings.namespace, spec.name

    def result(status: RunStatus, reason: str | None, log: str = "") -> MpiRunResult:
        lost = tuple(n for n in spec.nodes if status is not RunStatus.SUCCEEDED and _node_gone(client, n))
        if lost:
            status, reason = RunStatus.NODE_LOST, f"node(s) {', '.join(lost)} disappeared during the run ({reason})"
        return MpiRunResult(name=name, nodes=spec.nodes, status=status, reason=reason, log=log,
                            lost_nodes=lost, duration_s=time.monotonic() - start)  # fmt: skip

    try:
        client.create_mpijob(spec.manifest(), ns)
    except KubeError as exc:
        if fatal(exc):
            raise
        return result(RunStatus.ERROR, f"could not create MPIJob {name}: {exc}")
    try:
        state = client.wait_mpijob(name, ns, timeout_s=timeout_s, poll_s=poll_s)
    except KubeWaitTimeoutError:
        partial = _quietly(lambda: client.mpijob_logs(name, ns)) or ""
        pods = _quietly(lambda: client.pods(ns, f"{MPI_JOB_NAME}={name}")) or ()
        stuck = next((why for p in pods if (why := _unscheduled((p,))) is not None), None)
        _quietly(lambda: client.delete_mpijob(name, ns))
        if stuck is not None:  # no node took a worker, or an image cannot be pulled: not the canaries' fault
            return result(RunStatus.REFUSED, f"MPIJob {name} did not start within {timeout_s:g}s: {stuck}")
        return result(RunStatus.TIMED_OUT, f"MPIJob {name} did not finish within {timeout_s:g}s", partial)
    except KubeNotFoundError:
        return result(RunStatus.ERROR, f"MPIJob {name} disappeared before it finished")
    except KubeError as exc:
        if fatal(exc):
            raise
        return result(RunStatus.ERROR, f"MPIJob {name}: {exc}")
    log = _quietly(lambda: client.mpijob_logs(name, ns))
    _quietly(lambda: client.delete_mpijob(name, ns))
    if state.phase is JobPhase.SUCCEEDED and log is None:
        return result(RunStatus.FAILED, f"MPIJob {name} succeeded but its launcher log is unavailable")
    if state.phase is JobPhase.SUCCEEDED:
        return result(RunStatus.SUCCEEDED, None, log or "")
    return result(RunStatus.FAILED, f"MPIJob {name} failed ({state.reason}: {state.message})", log or "")
