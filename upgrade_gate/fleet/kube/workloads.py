"""Workload calls: Jobs and their pods and logs, MPIJobs, CronJobs, the CVF ConfigMap.

Design decisions
- Waiting on a Job watches its pods (label `job-name`) and reads the Job and its pods whenever one
  ends or goes away (`fleet.kube.waiting`). The Job is finished by its `Complete` or `Failed`
  condition (kubectl's `wait --for=condition=...`). With `settle_on_pod` (what `fleet.jobs.run_job`
  asks for) a Job of one completion whose pod has Succeeded is settled at once: the Job controller
  batches pod updates for a second before it writes `Complete` (measured on kube-controller-manager
  1.33: pod Succeeded -> Complete 1.0-1.1 s), and the pod's success is the evidence anyway - the
  result frame in its log still decides. A failed pod is not settled early: the wait goes on until
  the Job's own `Failed` condition, whose reason (BackoffLimitExceeded, DeadlineExceeded) the result
  names. The returned state says when it was settled by the pod (`JobState.settled_by`). After the
  first read, a read with `settle_on_pod` lists the pods first and reads the Job only when no pod
  settles it (the Job's completions were read already and do not change): one round trip less
  between a pod's end and the result (issue 14). `wait_job_pods` also returns the pods of the read
  that ended the wait, so `fleet.jobs.run_job` finds the pod whose log it reads without a second list.
- Deleting a Job sends `propagationPolicy=Background`: the API's default for batch/v1 Jobs is to orphan
  their pods.
- An MPIJob (kubeflow.org/v2beta1) is waited on by watching that one object (`metadata.name` field
  selector) until its `Succeeded` or `Failed` condition.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from upgrade_gate.fleet.errors import KubeError, KubeNotFoundError, one_line
from upgrade_gate.fleet.kube.api import MAX_LOG_BYTES, ApiBase
from upgrade_gate.fleet.kube.shapes import WatchEvent, items, list_version, object_version, q
from upgrade_gate.fleet.kube.waiting import Watched, await_final
from upgrade_gate.fleet.labels import JOB_NAME, MPI_JOB_NAME, MPI_JOB_ROLE, NODE, PURPOSE
from upgrade_gate.fleet.objects import (
    JobPhase,
    JobState,
    MpiJobState,
    PodState,
    job_from_api,
    mpijob_from_api,
    pod_from_api,
    pull_failure,
)
from upgrade_gate.model import replace

MPI_GROUP, MPI_VERSION, MPI_PLURAL = "kubeflow.org", "v2beta1", "mpijobs"
_ENDED = ("Succeeded", "Failed")


class WorkloadCalls(ApiBase):
    """The Job, pod, MPIJob, CronJob and ConfigMap verbs of `KubeClient`."""

    # ----------------------------------------------------------------------- jobs and their pods

    def create_job(self, manifest: Mapping[str, Any], namespace: str) -> JobState:
        """Create a batch/v1 Job from a manifest dict (checked against the batch/v1 schema first)."""
        name = self.check_manifest(manifest, kind="Job", resource="jobs", namespace=namespace)
        return job_from_api(self._create("jobs", _jobs(namespace), dict(manifest), name=name, namespace=namespace))

    def get_job(self, name: str, namespace: str) -> JobState:
        """One Job's status."""
        job = self._json_request("get", "jobs", "GET", f"{_jobs(namespace)}/{q(name)}", name=name, namespace=namespace)
        return job_from_api(job)

    def list_jobs(self, namespace: str, selector: str | None = None) -> tuple[JobState, ...]:
        """Jobs in a namespace matching a label selector, oldest first."""
        page = self._json_request(
            "list", "jobs", "GET", _jobs(namespace), namespace=namespace, query={"labelSelector": selector}
        )
        jobs = [job_from_api(item) for item in items(page)]
        return tuple(sorted(jobs, key=lambda j: (j.creation_time or "", j.name)))

    def wait_job(
        self,
        name: str,
        namespace: str,
        *,
        timeout_s: float,
        poll_s: float = 2.0,
        stop: Callable[[], bool] | None = None,
        settle_on_pod: bool = False,
    ) -> JobState:
        """Wait until the Job is finished (see the module docstring); KubeWaitTimeoutError after timeout_s.

        `stop` is asked too: when it returns True the wait ends early with KubeWaitTimeoutError.
        `poll_s` paces the reads where no watch serves (a server or RBAC without `watch`).
        """
        return self.wait_job_pods(
            name, namespace, timeout_s=timeout_s, poll_s=poll_s, stop=stop, settle_on_pod=settle_on_pod
        )[0]

    def wait_job_pods(
        self,
        name: str,
        namespace: str,
        *,
        timeout_s: float,
        poll_s: float = 2.0,
        stop: Callable[[], bool] | None = None,
        settle_on_pod: bool = False,
        on_succeeded: Callable[[PodState], None] | None = None,
    ) -> tuple[JobState, tuple[PodState, ...]]:
        """`wait_job`, with the Job's pods (oldest first) as the read that ended the wait saw them: the
        caller needs no second list to find the pod whose log holds the result (issue 14).

        `on_succeeded(pod)` is called (in the waiting thread) when a watch event says one of the Job's pods
        Succeeded, before the read that decides: a caller may start reading that pod's log meanwhile."""

        known: list[JobState] = []  # the Job as first read: its spec (completions) does not change

        def read() -> tuple[tuple[JobState, tuple[PodState, ...]], str]:
            if known and settle_on_pod:  # a read of the pods alone settles it when one Succeeded (issue 14)
                pods, version = self._pods_page(namespace, f"{JOB_NAME}={name}")
                if _pod_settles(known[0], pods) is not None:
                    return (known[0], pods), version
                return (self.get_job(name, namespace), pods), version
            job = self.get_job(name, namespace)
            known.append(job)
            pods, version = self._pods_page(namespace, f"{JOB_NAME}={name}")
            return (job, pods), version

        def final(state: tuple[JobState, tuple[PodState, ...]]) -> bool:
            if state[1] and pull_failure(state[1][-1]) is not None:
                return True  # its image cannot be pulled: waiting longer cannot help (issue 28)
            return state[0].phase is not JobPhase.ACTIVE or (settle_on_pod and _pod_settles(*state) is not None)

        def watchable(state: tuple[JobState, tuple[PodState, ...]]) -> bool:
            return not any(p.phase in _ENDED for p in state[1])  # no pod event announces the Job's condition

        def wake(event: WatchEvent) -> bool:
            if event.type == "DELETED":
                return True
            pod = pod_from_api(event.object)  # untrusted: typed first
            if pod.phase == "Succeeded" and on_succeeded is not None:
                on_succeeded(pod)
            return pod.phase in _ENDED or pull_failure(pod) is not None

        path = f"/api/v1/namespaces/{q(namespace)}/pods"
        watched = Watched(path=path, query={"labelSelector": f"{JOB_NAME}={name}"}, wake=wake)
        job, pods = await_final(
            self, resource="jobs", name=name, namespace=namespace, read=read, final=final, watched=watched,
            timeout_s=timeout_s, poll_s=poll_s, stop=stop, watchable=watchable,
        )  # fmt: skip
        if job.phase is JobPhase.ACTIVE and _pod_settles(job, pods) is not None:
            job = replace(job, phase=JobPhase.SUCCEEDED, succeeded=max(job.succeeded, 1),
                          settled_by=_pod_settles(job, pods))  # fmt: skip
        return job, pods

    def job_pods(self, name: str, namespace: str) -> tuple[PodState, ...]:
        """The pods of a Job (label `job-name`), oldest first."""
        return self._pods_page(namespace, f"{JOB_NAME}={name}")[0]

    def pods(self, namespace: str, selector: str) -> tuple[PodState, ...]:
        """The pods matching a label selector, oldest first."""
        return self._pods_page(namespace, selector)[0]

    def _pods_page(self, namespace: str, selector: str) -> tuple[tuple[PodState, ...], str]:
        page = self._json_request(
            "list", "pods", "GET", f"/api/v1/namespaces/{q(namespace)}/pods", namespace=namespace,
            query={"labelSelector": selector},
        )  # fmt: skip
        pods = [pod_from_api(item) for item in items(page)]
        return tuple(sorted(pods, key=lambda p: (p.creation_time or "", p.name))), list_version(page)

    def pod_logs(
        self, pod: str, namespace: str, *, tail_lines: int | None = None, limit_bytes: int | None = None
    ) -> str:
        """The log of a pod's (only) container, at most `limit_bytes` (and never over MAX_LOG_BYTES): a
        longer log is KubeAnswerTooLargeError, never a cut log read as if whole. The kubelet is asked for
        one byte more than the cap (`limitBytes`), so a log of exactly the cap still reads."""
        cap = min(limit_bytes or MAX_LOG_BYTES, MAX_LOG_BYTES)
        path = f"/api/v1/namespaces/{q(namespace)}/pods/{q(pod)}/log"
        query = {"tailLines": tail_lines, "limitBytes": cap + 1}
        data = self._call(
            "get", "pods/log", lambda: self._raw("GET", path, query=query, max_bytes=cap), name=pod, namespace=namespace
        )
        return data.decode("utf-8", errors="replace")

    def job_logs(
        self, name: str, namespace: str, *, tail_lines: int | None = None, limit_bytes: int | None = None
    ) -> str:
        """The log of the newest pod of a Job; KubeNotFoundError when it has none."""
        pods = self.job_pods(name, namespace)
        if not pods:
            raise _no_pod("job", name, namespace)
        return self.pod_logs(pods[-1].name, namespace, tail_lines=tail_lines, limit_bytes=limit_bytes)

    def delete_job(self, name: str, namespace: str, *, propagation: str = "Background") -> bool:
        """Delete a Job and (by default) its pods; False when it was already gone."""
        return self._delete("jobs", f"{_jobs(namespace)}/{q(name)}", name, namespace, propagation)

    def job_create_failures(self, name: str, namespace: str) -> tuple[str, ...]:
        """Messages of the Job controller's `FailedCreate` events of a Job (its pods were refused)."""
        query = {"fieldSelector": f"involvedObject.kind=Job,involvedObject.name={name},reason=FailedCreate"}
        page = self._json_request(
            "list", "events", "GET", f"/api/v1/namespaces/{q(namespace)}/events", namespace=namespace, query=query
        )
        return tuple(one_line(str(e.get("message") or "")) for e in items(page))

    def prune_jobs(self, namespace: str, selector: str, *, keep: int, settled: Collection[str] = ()) -> tuple[str, ...]:
        """Delete finished Jobs matching `selector` except the newest `keep`; returns the deleted names.

        `settled` names Jobs known to be over although the Job controller may not have written their
        condition yet (a wait settled by the pod)."""
        jobs = self.list_jobs(namespace, selector)
        finished = [j for j in jobs if j.phase is not JobPhase.ACTIVE or j.name in settled]
        finished.sort(key=lambda j: (j.completion_time or j.creation_time or "", j.name), reverse=True)
        doomed = [j.name for j in finished[max(keep, 0) :]]
        return tuple(name for name in doomed if self.delete_job(name, namespace))

    def prune_finished(
        self, namespace: str, selector: str, *, keep: int, settled: Collection[str] = ()
    ) -> tuple[str, ...]:
        """Delete finished Jobs matching `selector` except the newest `keep` per node and purpose (labels
        `upgrade-gate/node`, `upgrade-gate/purpose`): every kind of Job we create, capture, phase 1-4,
        monitor, is bounded on every node (issue 28, item 6). Returns the deleted names."""
        groups: dict[tuple[str, str], list[JobState]] = {}
        for job in self.list_jobs(namespace, selector):
            if job.phase is not JobPhase.ACTIVE or job.name in settled:
                groups.setdefault((job.labels.get(PURPOSE, ""), job.labels.get(NODE, "")), []).append(job)
        doomed: list[str] = []
        for group in groups.values():
            group.sort(key=lambda j: (j.completion_time or j.creation_time or "", j.name), reverse=True)
            doomed += [j.name for j in group[max(keep, 0) :]]
        return tuple(name for name in sorted(doomed) if self.delete_job(name, namespace))

    # ----------------------------------------------------------------------- CronJobs, ConfigMaps

    def apply_cronjob(self, manifest: Mapping[str, Any], namespace: str) -> None:
        """Create a batch/v1 CronJob, or replace the one of the same name (checked against the schema first)."""
        name = self.check_manifest(manifest, kind="CronJob", resource="cronjobs", namespace=namespace)
        self.delete_cronjob(name, namespace)
        self._create("cronjobs", _cronjobs(namespace), dict(manifest), name=name, namespace=namespace)

    def delete_cronjob(self, name: str, namespace: str) -> bool:
        """Delete a CronJob and the Jobs it made; False when it was already gone."""
        return self._delete("cronjobs", f"{_cronjobs(namespace)}/{q(name)}", name, namespace, "Background")

    def get_configmap(self, name: str, namespace: str) -> dict[str, str]:
        """A ConfigMap's `data` (empty when it has none)."""
        path = f"/api/v1/namespaces/{q(namespace)}/configmaps/{q(name)}"
        cm = self._json_request("get", "configmaps", "GET", path, name=name, namespace=namespace)
        data = cm.get("data")
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def claim_phase(self, name: str, namespace: str) -> str:
        """A PersistentVolumeClaim's phase (Pending / Bound / Lost); KubeNotFoundError when there is none."""
        path = f"/api/v1/namespaces/{q(namespace)}/persistentvolumeclaims/{q(name)}"
        pvc = self._json_request("get", "persistentvolumeclaims", "GET", path, name=name, namespace=namespace)
        status = pvc.get("status")
        return str(status.get("phase") or "Pending") if isinstance(status, dict) else "Pending"

    # ----------------------------------------------------------------------- MPIJobs (kubeflow.org/v2beta1)

    def create_mpijob(self, manifest: Mapping[str, Any], namespace: str) -> MpiJobState:
        """Create an MPIJob (custom resource kubeflow.org/v2beta1)."""
        name = str(manifest.get("metadata", {}).get("name", ""))
        answer = self._create("mpijobs", _mpijobs(namespace), dict(manifest), name=name, namespace=namespace)
        return mpijob_from_api(answer)

    def list_mpijobs(self, namespace: str, selector: str) -> tuple[MpiJobState, ...]:
        """The MPIJobs matching a label selector (ours: `app.kubernetes.io/managed-by=upgrade-gate`)."""
        page = self._json_request(
            "list", "mpijobs", "GET", _mpijobs(namespace), namespace=namespace, query={"labelSelector": selector}
        )
        return tuple(mpijob_from_api(item) for item in items(page))

    def get_mpijob(self, name: str, namespace: str) -> MpiJobState:
        """One MPIJob's status."""
        return mpijob_from_api(self._read_mpijob(name, namespace))

    def _read_mpijob(self, name: str, namespace: str) -> dict[str, Any]:
        path = f"{_mpijobs(namespace)}/{q(name)}"
        return self._json_request("get", "mpijobs", "GET", path, name=name, namespace=namespace)

    def wait_mpijob(self, name: str, namespace: str, *, timeout_s: float, poll_s: float = 2.0) -> MpiJobState:
        """Wait (watching the object) until the MPIJob's Succeeded or Failed condition is True."""

        def read() -> tuple[MpiJobState, str]:
            raw = self._read_mpijob(name, namespace)
            return mpijob_from_api(raw), object_version(raw)

        watched = Watched(
            path=_mpijobs(namespace), query={"fieldSelector": f"metadata.name={name}"}, wake=lambda _event: True
        )
        return await_final(
            self, resource="mpijobs", name=name, namespace=namespace, read=read,
            final=lambda s: s.phase is not JobPhase.ACTIVE, watched=watched, timeout_s=timeout_s, poll_s=poll_s,
        )  # fmt: skip

    def mpijob_logs(self, name: str, namespace: str) -> str:
        """The log of the MPIJob's newest launcher pod."""
        pods = self._pods_page(namespace, f"{MPI_JOB_NAME}={name},{MPI_JOB_ROLE}=launcher")[0]
        if not pods:
            raise _no_pod("mpijob", name, namespace)
        return self.pod_logs(pods[-1].name, namespace)

    def delete_mpijob(self, name: str, namespace: str, *, propagation: str = "Background") -> bool:
        """Delete an MPIJob and its launcher and workers; False when it was already gone."""
        return self._delete("mpijobs", f"{_mpijobs(namespace)}/{q(name)}", name, namespace, propagation)


def _pod_settles(job: JobState, pods: tuple[PodState, ...]) -> str | None:
    """Why the Job's outcome is already known from its pod (one completion, a pod Succeeded), else None."""
    if job.completions != 1:
        return None
    done = [p for p in pods if p.phase == "Succeeded"]
    return f"pod {done[-1].name} Succeeded (the Job's Complete condition was not written yet)" if done else None


def _jobs(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{q(namespace)}/jobs"


def _cronjobs(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{q(namespace)}/cronjobs"


def _mpijobs(namespace: str) -> str:
    return f"/apis/{MPI_GROUP}/{MPI_VERSION}/namespaces/{q(namespace)}/{MPI_PLURAL}"


def _no_pod(kind: str, name: str, namespace: str) -> KubeError:
    return KubeNotFoundError(
        f'{kind} "{name}" in namespace "{namespace}" has no pod to read a log from',
        verb="get", resource="pods/log", name=name, namespace=namespace, status=404,
    )  # fmt: skip
