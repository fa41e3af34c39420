"""The Kubeflow MPI operator (v2) as the test double simulates it, for kubeflow.org/v2beta1 MPIJobs.

Worker pods `<name>-worker-<i>` come first (they only "run sshd": the kubelet marks them Running
without a process); once every worker runs, the launcher is created as a batch/v1 Job
`<name>-launcher` (owned by the MPIJob) whose container gets the OpenMPI hostfile through
`OMPI_MCA_orte_default_hostfile` and `K_MPI_JOB_ROLE=launcher`. The MPIJob's conditions follow the
operator: Created (MPIJobCreated), Running (MPIJobRunning), Succeeded (MPIJobSucceeded) or Failed
(the launcher Job's reason, or MPIJobFailed when a worker was lost); cleanPodPolicy Running/All
deletes the workers at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.k8s.status import condition, merge_status, owned_by, owner_ref, terminal
from tests.k8s.store import RESOURCES, Obj, now_rfc3339

if TYPE_CHECKING:
    from tests.k8s.kubelet import Kubelet

PODS, JOBS, MPIJOBS = RESOURCES[("", "pods")], RESOURCES[("batch", "jobs")], RESOURCES[("kubeflow.org", "mpijobs")]
MPI_NAME, MPI_ROLE = "training.kubeflow.org/job-name", "training.kubeflow.org/job-role"
_TERMINAL = ("Succeeded", "Failed")


class MpiController:
    """Reconciles MPIJobs on behalf of the simulated control plane."""

    def __init__(self, kubelet: Kubelet) -> None:
        self.kubelet = kubelet
        self.store = kubelet.store
        self._started: set[str] = set()  # MPIJob uids whose workers exist

    def sync(self) -> None:
        """One round: create workers, then the launcher Job, and mirror its conditions."""
        for mpi in self.store.list(MPIJOBS):
            ns, name, uid = mpi["metadata"]["namespace"], mpi["metadata"]["name"], mpi["metadata"]["uid"]
            status = mpi.get("status") or {}
            if terminal(status, "Succeeded", "Failed"):
                continue
            specs = mpi["spec"]["mpiReplicaSpecs"]
            conditions = list(
                status.get("conditions") or [condition("Created", "MPIJobCreated", f"MPIJob {ns}/{name} is created.")]
            )
            workers = [f"{name}-worker-{i}" for i in range(specs["Worker"].get("replicas", 1))]
            pods = {p["metadata"]["name"]: p for p in self.store.list(PODS, ns) if owned_by(p, uid)}
            if uid not in self._started:
                for i, worker in enumerate(workers):
                    if worker not in pods:
                        self.store.create(PODS, ns, self._mpi_pod(mpi, worker, specs["Worker"], "worker", i))
            launcher = self.store.find(JOBS, ns, f"{name}-launcher")
            running = all(pods.get(w, {}).get("status", {}).get("phase") == "Running" for w in workers)
            created = uid in self._started
            lost = [w for w in workers if created and (w not in pods or pods[w]["status"].get("phase") in _TERMINAL)]
            self._started.add(uid)
            ended: Obj | None = None
            if launcher is None and running:
                self._create_launcher(mpi, workers)
            elif launcher is not None:
                lstatus = launcher.get("status") or {}
                if terminal(lstatus, "Complete"):
                    ended = condition("Succeeded", "MPIJobSucceeded", f"MPIJob {ns}/{name} successfully completed.")
                elif terminal(lstatus, "Failed"):
                    reason = next((c.get("reason") for c in lstatus["conditions"] if c["type"] == "Failed"), None)
                    ended = condition("Failed", reason or "MPIJobFailed", f"MPIJob {ns}/{name} has failed")
                elif lost:
                    for pod in self.store.list(PODS, ns):
                        if owned_by(pod, launcher["metadata"]["uid"]):
                            self.kubelet.kill((ns, pod["metadata"]["name"]))
                    ended = condition(
                        "Failed", "MPIJobFailed", f"MPIJob {ns}/{name} has failed: worker {lost[0]} was lost"
                    )
                elif lstatus.get("active") and not any(c["type"] == "Running" for c in conditions):
                    conditions.append(condition("Running", "MPIJobRunning", f"MPIJob {ns}/{name} is running."))
            if ended is not None:
                conditions = [c for c in conditions if c["type"] != "Running"] + [ended]
                if mpi["spec"].get("runPolicy", {}).get("cleanPodPolicy") in ("Running", "All"):
                    for worker in workers:
                        if worker in pods:
                            self.store.delete(PODS, ns, worker)
            new: Obj = {"conditions": conditions, "startTime": status.get("startTime") or now_rfc3339()}
            if ended is not None:
                done = "succeeded" if ended["type"] == "Succeeded" else "failed"
                new["replicaStatuses"] = {"Launcher": {done: 1}, "Worker": {}}
                new["completionTime"] = now_rfc3339()
            self.store.mutate(MPIJOBS, ns, name, merge_status(new))

    def _mpi_pod(self, mpi: Obj, name: str, replica: Obj, role: str, index: int) -> Obj:
        template = replica["template"]
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        labels.update(
            {
                MPI_NAME: mpi["metadata"]["name"],
                MPI_ROLE: role,
                "training.kubeflow.org/operator-name": "mpi-operator",
                "training.kubeflow.org/replica-index": str(index),
            }
        )
        return {
            "metadata": {"name": name, "labels": labels, "ownerReferences": [owner_ref(mpi, "MPIJob")]},
            "spec": {"serviceAccountName": "default", "hostname": name, **template["spec"]},
            "status": {"phase": "Pending", "conditions": []},
        }

    def _create_launcher(self, mpi: Obj, workers: list[str]) -> None:
        ns, name = mpi["metadata"]["namespace"], mpi["metadata"]["name"]
        spec = mpi["spec"]
        hostfile = self.kubelet.workdir / "mpi" / f"{ns}_{name}" / "hostfile"
        hostfile.parent.mkdir(parents=True, exist_ok=True)
        slots = spec.get("slotsPerWorker", 1)
        hostfile.write_text("".join(f"{w}.{name}.{ns}.svc slots={slots}\n" for w in workers), encoding="utf-8")
        launcher = spec["mpiReplicaSpecs"]["Launcher"]
        template = {
            "metadata": dict(launcher["template"].get("metadata") or {}),
            "spec": dict(launcher["template"]["spec"]),
        }
        labels = dict(template["metadata"].get("labels") or {})
        labels.update({MPI_NAME: name, MPI_ROLE: "launcher", "training.kubeflow.org/operator-name": "mpi-operator"})
        template["metadata"]["labels"] = labels
        containers = [dict(c) for c in template["spec"]["containers"]]
        containers[0]["env"] = [
            *(containers[0].get("env") or []),
            {"name": "OMPI_MCA_orte_default_hostfile", "value": str(hostfile)},
            {"name": "K_MPI_JOB_ROLE", "value": "launcher"},
        ]
        template["spec"]["containers"] = containers
        template["spec"]["restartPolicy"] = "OnFailure" if launcher.get("restartPolicy") == "OnFailure" else "Never"
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": f"{name}-launcher",
                "labels": {"app": name},  # mpi-operator v0.7.0 newLauncherJob: only this (issue 28, item 3)
                "ownerReferences": [owner_ref(mpi, "MPIJob")],
            },
            "spec": {"backoffLimit": spec.get("runPolicy", {}).get("backoffLimit", 6), "template": template},
        }
        self.kubelet.api.do_create(JOBS, ns, job)
