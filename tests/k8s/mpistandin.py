"""The smallest stand-in for the Kubeflow MPI operator (v2) on the real control plane.

Why a stand-in: the operator's controller is a separate Go module (github.com/kubeflow/mpi-operator)
whose Kubernetes dependencies are pinned to another release than the control plane's, and it needs
real sshd/OpenMPI in its pods; the tests need only what upgrade-gate observes. What stays real: the
MPIJob CRD is served by the real API server (kubeflow.org/v2beta1, status subresource), the worker
Pods are created through the real API server (so their spec is validated for real: issue 11, defect
1), scheduled by the real kube-scheduler (required node affinity, pod anti-affinity, `amd.com/gpu`,
the cordon and canary taints), and the launcher is a batch/v1 Job run by the real Job controller.

What this reconciler does (mpi-operator v2 behaviour, as tests.k8s.mpi does for the double):
workers `<name>-worker-<i>` (labels `training.kubeflow.org/job-name|job-role|replica-index`, hostname,
subdomain `<name>`); a worker the API server rejects is retried and reported as a Warning event on the
MPIJob (the operator's `FailedCreatePod`), the MPIJob stays without an end, as the real one does. Once
every worker runs, the launcher Job `<name>-launcher` with the hostfile given through
`OMPI_MCA_orte_default_hostfile`. Conditions Created / Running / Succeeded / Failed follow the launcher
Job; a lost worker fails the MPIJob; cleanPodPolicy Running deletes the workers at the end.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

from tests.k8s.controlplane import ControlPlane
from tests.k8s.nodeagent import now

Obj = dict[str, Any]
MPI_NAME, MPI_ROLE = "training.kubeflow.org/job-name", "training.kubeflow.org/job-role"
MPIJOBS = "/apis/kubeflow.org/v2beta1"

CRD: Obj = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "mpijobs.kubeflow.org"},
    "spec": {
        "group": "kubeflow.org",
        "scope": "Namespaced",
        "names": {"plural": "mpijobs", "singular": "mpijob", "kind": "MPIJob", "shortNames": ["mpij"]},
        "versions": [
            {
                "name": "v2beta1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}


def _condition(kind: str, reason: str, message: str) -> Obj:
    stamp = now()
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": stamp,
        "lastUpdateTime": stamp,
    }


def _owner(obj: Obj, kind: str) -> Obj:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": kind,
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _done(status: Obj, *kinds: str) -> bool:
    return any(c.get("type") in kinds and c.get("status") == "True" for c in status.get("conditions") or ())


class MpiStandIn:
    """Reconciles MPIJobs on the real API server (see the module docstring)."""

    def __init__(self, cp: ControlPlane, workdir: Path) -> None:
        self.cp = cp
        self.workdir = workdir
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="mpi-standin")
        self.rejections: list[str] = []

    def install(self) -> None:
        """Create the CRD and wait until it is served."""
        self.cp.apply(CRD)
        for _ in range(300):
            if self.cp.request("GET", f"{MPIJOBS}/mpijobs", ok404=True) is not None:
                return
            self._stop.wait(0.1)
        raise RuntimeError("the MPIJob CRD is not served")

    def start(self) -> None:
        """Run the reconcile loop."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop."""
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            with contextlib.suppress(Exception):  # the API server may be down (outage tests)
                self.sync()

    def sync(self) -> None:
        """One round over every MPIJob."""
        for mpi in self.cp.request("GET", f"{MPIJOBS}/mpijobs")["items"]:
            status = mpi.get("status") or {}
            if not _done(status, "Succeeded", "Failed") and not mpi["metadata"].get("deletionTimestamp"):
                self._sync_one(mpi, status)

    def _sync_one(self, mpi: Obj, status: Obj) -> None:
        ns, name, uid = mpi["metadata"]["namespace"], mpi["metadata"]["name"], mpi["metadata"]["uid"]
        specs = mpi["spec"]["mpiReplicaSpecs"]
        conditions = list(
            status.get("conditions") or [_condition("Created", "MPIJobCreated", f"MPIJob {ns}/{name} is created.")]
        )
        workers = [f"{name}-worker-{i}" for i in range(specs["Worker"].get("replicas", 1))]
        pods = {
            p["metadata"]["name"]: p
            for p in self.cp.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
            if any(o.get("uid") == uid for o in p["metadata"].get("ownerReferences") or ())
        }
        launcher = self.cp.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/{name}-launcher", ok404=True)
        for i, worker in enumerate(workers):
            if worker not in pods and launcher is None:
                self._create_worker(mpi, worker, i)
        running = all((pods.get(w) or {}).get("status", {}).get("phase") == "Running" for w in workers)
        lost = [
            w
            for w in workers
            if launcher is not None and (w not in pods or pods[w]["status"].get("phase") in ("Succeeded", "Failed"))
        ]
        ended: Obj | None = None
        if launcher is None and running:
            self._create_launcher(mpi, workers)
        elif launcher is not None:
            lstatus = launcher.get("status") or {}
            if _done(lstatus, "Complete"):
                ended = _condition("Succeeded", "MPIJobSucceeded", f"MPIJob {ns}/{name} successfully completed.")
            elif _done(lstatus, "Failed"):
                reason = next((c.get("reason") for c in lstatus["conditions"] if c["type"] == "Failed"), None)
                ended = _condition("Failed", reason or "MPIJobFailed", f"MPIJob {ns}/{name} has failed")
            elif lost:
                ended = _condition(
                    "Failed", "MPIJobFailed", f"MPIJob {ns}/{name} has failed: worker {lost[0]} was lost"
                )
            elif lstatus.get("active") and not any(c["type"] == "Running" for c in conditions):
                conditions.append(_condition("Running", "MPIJobRunning", f"MPIJob {ns}/{name} is running."))
        new: Obj = {
            "conditions": conditions,
            "startTime": status.get("startTime") or now(),
            "replicaStatuses": status.get("replicaStatuses") or {},
        }
        if ended is not None:
            conditions[:] = [c for c in conditions if c["type"] != "Running"] + [ended]
            done = "succeeded" if ended["type"] == "Succeeded" else "failed"
            new.update(replicaStatuses={"Launcher": {done: 1}, "Worker": {}}, completionTime=now())
            if mpi["spec"].get("runPolicy", {}).get("cleanPodPolicy") in ("Running", "All"):
                for worker in workers:
                    self.cp.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{worker}", ok404=True)
            if launcher is not None and not _done(launcher.get("status") or {}, "Complete", "Failed"):
                self.cp.request(
                    "DELETE",
                    f"/apis/batch/v1/namespaces/{ns}/jobs/{name}-launcher?propagationPolicy=Background",
                    ok404=True,
                )
        self.cp.request(
            "PATCH",
            f"{MPIJOBS}/namespaces/{ns}/mpijobs/{name}/status",
            {"status": new},
            content_type="application/merge-patch+json",
            ok404=True,
        )

    def _labels(self, mpi: Obj, template: Obj, role: str) -> dict[str, str]:
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        labels.update(
            {MPI_NAME: mpi["metadata"]["name"], MPI_ROLE: role, "training.kubeflow.org/operator-name": "mpi-operator"}
        )
        return labels

    def _create_worker(self, mpi: Obj, name: str, index: int) -> None:
        ns = mpi["metadata"]["namespace"]
        template = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
        labels = self._labels(mpi, template, "worker")
        labels["training.kubeflow.org/replica-index"] = str(index)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels, "ownerReferences": [_owner(mpi, "MPIJob")]},
            "spec": {**template["spec"], "hostname": name, "subdomain": mpi["metadata"]["name"]},
        }
        try:
            self.cp.request("POST", f"/api/v1/namespaces/{ns}/pods", pod, ok409=True)
        except RuntimeError as exc:  # the operator's FailedCreatePod: an event, and it tries again
            self.rejections.append(str(exc))
            event = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{mpi['metadata']['name']}.", "namespace": ns},
                "involvedObject": {
                    "apiVersion": mpi["apiVersion"],
                    "kind": "MPIJob",
                    "namespace": ns,
                    "name": mpi["metadata"]["name"],
                    "uid": mpi["metadata"]["uid"],
                },
                "reason": "FailedCreatePod",
                "message": str(exc)[:1000],
                "type": "Warning",
                "source": {"component": "mpi-job-controller"},
                "firstTimestamp": now(),
                "lastTimestamp": now(),
                "count": 1,
            }
            with contextlib.suppress(RuntimeError):
                self.cp.request("POST", f"/api/v1/namespaces/{ns}/events", event)

    def _create_launcher(self, mpi: Obj, workers: list[str]) -> None:
        ns, name = mpi["metadata"]["namespace"], mpi["metadata"]["name"]
        spec = mpi["spec"]
        hostfile = self.workdir / "mpi" / f"{ns}_{name}" / "hostfile"
        hostfile.parent.mkdir(parents=True, exist_ok=True)
        slots = spec.get("slotsPerWorker", 1)
        hostfile.write_text("".join(f"{w}.{name}.{ns}.svc slots={slots}\n" for w in workers), encoding="utf-8")
        launcher = spec["mpiReplicaSpecs"]["Launcher"]
        template = {
            "metadata": {"labels": self._labels(mpi, launcher["template"], "launcher")},
            "spec": dict(launcher["template"]["spec"]),
        }
        containers = [dict(c) for c in template["spec"]["containers"]]
        containers[0]["env"] = [
            *(containers[0].get("env") or []),
            {"name": "OMPI_MCA_orte_default_hostfile", "value": str(hostfile)},
            {"name": "K_MPI_JOB_ROLE", "value": "launcher"},
        ]
        template["spec"]["containers"] = containers
        template["spec"]["restartPolicy"] = "Never"
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": f"{name}-launcher",
                "labels": {"app": name},  # mpi-operator v0.7.0 newLauncherJob: only this (issue 28, item 3)
                "ownerReferences": [_owner(mpi, "MPIJob")],
            },
            "spec": {"backoffLimit": spec.get("runPolicy", {}).get("backoffLimit", 6), "template": template},
        }
        self.cp.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job, ok409=True)
