"""Phases 6-7 as Kubernetes Jobs (issue 25, item 5), without a cluster: which argv is the workload's,
the Job it becomes (every GPU of the node, the workload image, the shipped script staged in the pod),
the stager run for real, the image's sources, and the CVF-style labels a later run must not leave.

The Jobs on the real control plane, with the shipped script training for real in them, are in
tests/test_fleet_workload_real.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_validate_support import fast_config
from upgrade_gate.fleet.cronjobs import soak_cronjob
from upgrade_gate.fleet.executor import ExecutorSettings, KubeLauncher, cvf_metadata
from upgrade_gate.fleet.labels import NODE_PHASE_LABELS
from upgrade_gate.fleet.manifests import JobSettings
from upgrade_gate.fleet.objects import KubeNode
from upgrade_gate.fleet.resultframe import wrapper_source
from upgrade_gate.fleet.workload_jobs import (
    DEFAULT_IMAGE,
    SCRIPT_ENV,
    STAGER,
    WORKDIR,
    WorkloadJobs,
    workload_image,
)
from upgrade_gate.model import NodeName
from upgrade_gate.validate import cvf
from upgrade_gate.validate.launcher import LauncherError
from upgrade_gate.validate.phases.workload import permuted, shipped_script, workload_argv

CONFIG = fast_config()
SITE = "python3 /opt/site/train.py --ranks {nproc} --steps {steps}"
SETTINGS = JobSettings(python="python3")


def _node(gpus: int = 8, **kw: object) -> KubeNode:
    return KubeNode(name=NodeName("gpu-01"), uid="u1", resource_version="1", capacity={"amd.com/gpu": str(gpus)},
                    allocatable={"amd.com/gpu": str(gpus)}, **kw)  # type: ignore[arg-type]  # fmt: skip


def _ids() -> str:
    return "r1-1"


def _jobs(config: object = CONFIG, image: str = "site/pytorch-rocm:6.2") -> WorkloadJobs:
    return WorkloadJobs(config=config, image=image, env=(("NCCL_DEBUG", "WARN"),), settings=SETTINGS)  # type: ignore[arg-type]


def test_fleet_workload_job_holds_every_gpu_in_the_workload_image_with_the_script_staged() -> None:
    """Phase 6's torchrun becomes a `phase6` Job: all 8 GPUs, the site's image, /dev/shm in memory, the
    shipped script in an env var and staged into an emptyDir; no path of this machine in the Job."""
    argv = workload_argv(CONFIG, 8)
    spec = _jobs().spec(_node(), argv, _ids)
    assert spec is not None and spec.purpose == "phase6" and spec.gpus == 8
    manifest = spec.manifest()
    pod = manifest["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "site/pytorch-rocm:6.2"
    assert container["resources"] == {"limits": {"amd.com/gpu": "8"}}
    staged = f"{WORKDIR}/reference_train.py"
    wrapper = ["python3", "-I", "-S", "-c", wrapper_source(), "--"]
    stager = ["python3", "-I", "-S", "-c", STAGER, staged]
    assert container["command"] == [*wrapper, *stager, *(a.replace(shipped_script(), staged) for a in argv)]
    assert shipped_script() not in json.dumps(manifest)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[SCRIPT_ENV] == Path(shipped_script()).read_text(encoding="utf-8").replace("$", "$$")
    assert env["NCCL_DEBUG"] == "WARN"
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    assert {"name": "workdir", "emptyDir": {}} in pod["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert "hostNetwork" not in pod and pod["nodeName"] == "gpu-01"
    assert "$(" not in STAGER  # Kubernetes expands variable references in a container's arguments


def test_fleet_workload_perturbation_is_phase7_and_keeps_the_env_prefix() -> None:
    """`env HIP_VISIBLE_DEVICES=7,...,0 torchrun ...` (phase 7) is the workload too: a `phase7` Job whose
    argv keeps the permuted list, so the variable is set in the ranks' environment only."""
    order = permuted(8, "reversed")
    argv = ("env", f"HIP_VISIBLE_DEVICES={order}", *workload_argv(CONFIG, 8))
    spec = _jobs().spec(_node(), argv, _ids)
    assert spec is not None and spec.purpose == "phase7" and spec.gpus == 8
    assert spec.argv[6:9] == ("env", f"HIP_VISIBLE_DEVICES={order}", "torchrun")


@pytest.mark.parametrize(
    "argv",
    [
        ("all_reduce_perf", "-b", "1K", "-e", "2G", "-g", "8"),
        ("torchrun", "--standalone", "--nproc-per-node", "8", "/tmp/other.py"),  # not the configured job
        ("env", "FOO=1", *workload_argv(CONFIG, 8)),  # not the visible-device variable
        ("env", "HIP_VISIBLE_DEVICES=1,0"),  # nothing behind it
        (),
    ],
)
def test_fleet_workload_other_commands_are_not_workload_jobs(argv: tuple[str, ...]) -> None:
    assert _jobs().purpose(argv) is None and _jobs().spec(_node(), argv, _ids) is None


def test_fleet_workload_site_command_is_recognised_and_runs_without_the_stager() -> None:
    """A site's own command (UPGRADE_GATE_WORKLOAD_COMMAND, no `{script}`) is its image's: no stager, no script."""
    config = fast_config(UPGRADE_GATE_WORKLOAD_COMMAND=SITE)
    argv = workload_argv(config, 4)
    spec = _jobs(config).spec(_node(4), argv, _ids)
    assert spec is not None and spec.argv == argv and argv[:4] == ("python3", "/opt/site/train.py", "--ranks", "4")
    assert SCRIPT_ENV not in dict(spec.env) and spec.gpus == 4


def test_fleet_workload_launcher_runs_the_workload_as_its_job_and_a_cmd_without() -> None:
    """Through KubeLauncher.spec: with the executor's WorkloadJobs the training holds the node's GPUs;
    without it (before issue 25's item 5) it was a `cmd` Job with no GPU at all."""
    launcher = KubeLauncher(None, [_node()], ExecutorSettings(jobs=SETTINGS), run_id="r1")  # type: ignore[arg-type]
    argv = workload_argv(CONFIG, 8)
    assert (launcher.spec(NodeName("gpu-01"), argv).purpose, launcher.spec(NodeName("gpu-01"), argv).gpus) == ("cmd", 0)
    launcher.workload = _jobs()
    spec = launcher.spec(NodeName("gpu-01"), argv)
    assert (spec.purpose, spec.gpus, spec.image) == ("phase6", 8, "site/pytorch-rocm:6.2")
    assert spec.name.startswith("ug-phase6-gpu-01-r1-")


def test_fleet_workload_stager_writes_the_script_and_execs_the_job(tmp_path: Path) -> None:
    """The stager run for real: it writes the variable's text to the staged path, removes the variable
    from the job's environment and execs the job (its exit code is the job's)."""
    staged = tmp_path / "reference_train.py"
    probe = "import os, sys; print(open(sys.argv[1]).read()); print('SCRIPT' in ''.join(os.environ)); sys.exit(3)"
    env = dict(os.environ, **{SCRIPT_ENV: "print('hello from the pod')\n"})
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", STAGER, str(staged), sys.executable, "-c", probe,
                           str(staged)], env=env, capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "print('hello from the pod')\n\nFalse\n"
    assert staged.read_text() == "print('hello from the pod')\n"


def test_fleet_workload_image_flag_then_configmap_then_default() -> None:
    config = fast_config(UPGRADE_GATE_WORKLOAD_IMAGE="registry.site/pytorch:rocm6.2")
    assert workload_image("flag/image:1", config) == "flag/image:1"
    assert workload_image("", config) == "registry.site/pytorch:rocm6.2"
    assert workload_image("", CONFIG) == DEFAULT_IMAGE == "rocm/pytorch:latest"


def test_fleet_workload_labels_of_an_earlier_run_do_not_outlive_it() -> None:
    """A node that carries the workload labels and failure reason of an earlier run: a run without phases
    6-7 (or a rollback, `cvf_metadata(node, ())`) removes them, as it removes CVF's."""
    key = cvf.WORKLOAD_VALIDATION
    reason, measured = f"{key}-failure-reason", f"{key}-measured-samples-per-s"
    node = _node(
        labels={key: "failed", cvf.PERTURBATION_VALIDATION: "passed"},
        annotations={reason: "collective timeout", measured: "9.0"},
    )
    labels, annotations = cvf_metadata(node, ())
    assert labels == {key: None, cvf.PERTURBATION_VALIDATION: None}
    assert annotations == {reason: None, measured: None}
    assert NODE_PHASE_LABELS[6] == "amd.com/gpu-workload-validation"
    assert NODE_PHASE_LABELS[7] == "amd.com/gpu-device-order-perturbation"


def test_fleet_workload_soak_cronjob_passes_the_workload_image_on() -> None:
    job = soak_cronjob("w1", 3600, SETTINGS, command=("upgrade-gate",), workload_image="site/pt:1")
    argv = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert argv[-2:] == ["--workload-image", "site/pt:1"]
    plain = soak_cronjob("w1", 3600, SETTINGS, command=("upgrade-gate",))
    assert (
        "--workload-image" not in plain["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"]
    )


def test_fleet_workload_window_validate_phases_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    """`window validate --phases 8`: exit 2 before anything touches the cluster or the store."""
    from upgrade_gate.cli.main import run

    assert run(["window", "validate", "--id", "w1", "--store", str(tmp_path), "--phases", "0,8"]) == 2


def test_fleet_workload_node_without_gpus_is_an_error_naming_it() -> None:
    """A node whose device plugin advertises no amd.com/gpu: no Job that cannot hold its GPUs, an error."""
    with pytest.raises(LauncherError, match=r"node gpu-01 advertises no amd\.com/gpu"):
        _jobs().spec(_node(0), workload_argv(CONFIG, 8), _ids)


def test_fleet_workload_job_deadline_outlasts_the_run_deadline() -> None:
    """A run allowed an hour gets a Job deadline past it (the phase then names a timeout, not the Job's)."""
    argv = workload_argv(CONFIG, 8)
    short = _jobs().spec(_node(), argv, _ids)
    config = fast_config(UPGRADE_GATE_WORKLOAD_TIMEOUT_S="3600")
    long = _jobs(config).spec(_node(), workload_argv(config, 8), _ids)
    assert short is not None and short.manifest()["spec"]["activeDeadlineSeconds"] == 1800
    assert long is not None and long.manifest()["spec"]["activeDeadlineSeconds"] == 3660


def test_fleet_workload_bad_site_placeholder_leaves_other_commands_alone() -> None:
    """A site command with an unknown placeholder cannot be matched: every other phase's command still runs
    (the workload phase itself reports the bad command)."""
    jobs = _jobs(fast_config(UPGRADE_GATE_WORKLOAD_COMMAND="train --ranks {gpus}"))
    assert jobs.purpose(("all_reduce_perf", "-g", "8")) is None
