"""The real Kubeflow MPI operator (built by tests/controlplane/build-mpi-operator.sh) on the real control plane.

Where tests.k8s.mpistandin imitates the operator, this runs the operator itself: its own CRD (the
release's `manifests/base/kubeflow.org_mpijobs.yaml`, with its validation schema) and its controller
binary with the control plane's admin kubeconfig (leader election in the namespace `mpi-operator`, as
its Deployment does). `RealCluster` keeps the stand-in; `swap_in` stops the stand-in, replaces its CRD
with the real one and starts the operator, and `swap_out` puts the stand-in back, so one test module can
use the real operator on the session's control plane.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from tests.k8s.controlplane import REPO
from tests.k8s.mpistandin import CRD, MPIJOBS
from tests.k8s.realcluster import RealCluster

BUILD = REPO / "tests" / "controlplane" / "build-mpi-operator.sh"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org"


def operator_version() -> str:
    """The pinned release of tests/controlplane/mpi-operator/go.mod."""
    for line in (REPO / "tests" / "controlplane" / "mpi-operator" / "go.mod").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if parts[:2] == ["require", "github.com/kubeflow/mpi-operator"]:
            return parts[2]
    raise RuntimeError("tests/controlplane/mpi-operator/go.mod: no github.com/kubeflow/mpi-operator requirement")


def operator_dir() -> Path:
    """Where build-mpi-operator.sh puts (or put) the binary and the CRD."""
    env = os.environ.get("UPGRADE_GATE_MPI_OPERATOR_DIR")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "upgrade-gate" / f"mpi-operator-{operator_version()}"


def missing_reason() -> str | None:
    """Why the real MPI operator cannot run here (None when it can)."""
    folder = operator_dir()
    if not (folder / "bin" / "mpi-operator").is_file() or not (folder / "kubeflow.org_mpijobs.yaml").is_file():
        return f"real MPI operator not built in {folder} (run tests/controlplane/build-mpi-operator.sh)"
    return None


class RealMpiOperator:
    """The operator process and its CRD on a RealCluster (see the module docstring)."""

    def __init__(self, cluster: RealCluster, workdir: Path) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "mpi-operator.log"

    def _replace_crd(self, crd: dict[str, Any]) -> None:
        cp = self.cluster.cp
        cp.request("DELETE", CRD_PATH, ok404=True)
        for _ in range(600):  # the CRD and every MPIJob go before the new one may take the name
            if cp.request("GET", CRD_PATH, ok404=True) is None:
                break
            time.sleep(0.1)
        cp.apply(crd)
        for _ in range(600):
            if cp.request("GET", f"{MPIJOBS}/mpijobs", ok404=True) is not None:
                return
            time.sleep(0.1)
        raise RuntimeError("the MPIJob CRD is not served")

    def swap_in(self) -> None:
        """Stop the stand-in, install the operator's CRD, start the operator."""
        assert self.cluster.mpi is not None
        self.cluster.mpi.stop()
        crd = yaml.safe_load((operator_dir() / "kubeflow.org_mpijobs.yaml").read_text(encoding="utf-8"))
        self._replace_crd(crd)
        self.cluster.cp.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mpi-operator"}})
        self.workdir.mkdir(parents=True, exist_ok=True)
        kubeconfig = self.cluster.cp.workdir / "admin.kubeconfig"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(operator_dir() / "bin" / "mpi-operator"), "--kubeConfig", str(kubeconfig),
                 "--lock-namespace", "mpi-operator", "--threadiness", "2"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def swap_out(self) -> None:
        """Stop the operator, put the stand-in's CRD and loop back."""
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        self._replace_crd(CRD)
        self.cluster.restart_mpi_standin()

    def log_text(self) -> str:
        """What the operator printed (for assertion messages)."""
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""
