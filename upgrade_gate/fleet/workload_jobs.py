"""Phases 6 and 7 on Kubernetes: the workload's command as a Job that holds every GPU of the node.

Phase 6 (`workload`) and phase 7 (`perturbation`, `validate.phases.workload`) run their job through the
node's CommandRunner, as every phase does; on a cluster that runner is `fleet.launcher.KubeLauncher`,
which asks `WorkloadJobs.spec` first whether an argv is the workload's. The result frame, the parsing
(`parse.workload`), the checks of the phase and the judge's rules are the same code as on a node.

Design decisions
- Recognised by the configuration, not by a tool name: an argv is the workload's when it is exactly
  `validate.phases.workload.workload_argv(config, N)` (the shipped `torchrun ... reference_train.py`
  or the site's `UPGRADE_GATE_WORKLOAD_COMMAND`, N any rank count), or that behind `env VAR=LIST` with
  VAR the visible-device variable phase 7 uses on the vendor's nodes (`workload.visible_var`: the config's,
  its default being the vendor's; phase 7's perturbation: purpose `phase7`). Anything else
  is left to the launcher's other rules, so a site's `python3 train.py` is never mistaken for a probe.
- The Job requests every GPU the node advertises (its vendor's resource, `amd.com/gpu` or `nvidia.com/gpu`:
  `Vendor.kube.gpu_resource`): the device plugin gives the
  container all of them in its own order, which is what the ranks (and the perturbation's permuted
  list) index, and no other pod trains beside the measurement.
- The image: `window validate --workload-image`, else the ConfigMap's `UPGRADE_GATE_WORKLOAD_IMAGE`,
  else the vendor's default (`Vendor.kube.workload_image`: AMD's public PyTorch-on-ROCm image; NVIDIA names
  none, so an NVIDIA node needs the site's image, and AMD's default is refused there: `LauncherError`,
  the phase's error, fail closed). It needs Python 3 (the result wrapper and
  the stager run on it), `torchrun` and PyTorch; nothing of upgrade-gate.
- The shipped script travels in the Job, not in the image: its source is the container's
  `SCRIPT_ENV` variable (every `$` doubled, so Kubernetes' `$(VAR)` expansion leaves it unchanged), and
  a stager (`STAGER`, standard library only) writes it into an emptyDir at `WORKDIR`, removes the
  variable from the environment and execs the workload's argv with the script's path there. A site
  command that does not use `{script}` gets no stager: its files are in its image.
- A memory-backed /dev/shm (`manifests.JobSpec.shm`): the ranks' processes exchange through shared
  memory, and a container's default 64 MiB stalls or fails RCCL/NCCL's intra-node transport.
- Every capability dropped, no privilege escalation, no host network: torchrun's `--standalone`
  rendezvous is on the pod's loopback.
- The Job's `activeDeadlineSeconds` is at least the run's deadline (`UPGRADE_GATE_WORKLOAD_TIMEOUT_S`)
  plus a minute, so a long run ends as a timeout the phase names, not as the Job's own deadline.
- A node that advertises none of its vendor's GPU resource cannot hold its GPUs for the run: `LauncherError` naming
  the node and the resource, which the pipeline turns into the phase's error (fail closed).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from upgrade_gate.fleet.manifests import JobSettings, JobSpec
from upgrade_gate.fleet.objects import KubeNode
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.launcher import LauncherError
from upgrade_gate.validate.phases.workload import shipped_script, visible_var, workload_argv
from upgrade_gate.vendors import AMD, VENDORS, Vendor

DEFAULT_IMAGE = AMD.kube.workload_image  # rocm/pytorch:latest
WORKDIR = "/upgrade-gate-workload"
SCRIPT_ENV = "UPGRADE_GATE_WORKLOAD_SCRIPT"
PURPOSE_RUN, PURPOSE_PERTURBATION = "phase6", "phase7"
_NPROC = "\x00nproc\x00"  # stands for the rank count while the config's command line is matched

STAGER = f"""
import os, sys
path = sys.argv[1]
with open(path, "w", encoding="utf-8") as out:
    out.write(os.environ.pop({SCRIPT_ENV!r}))
os.execvp(sys.argv[2], sys.argv[2:])
"""
"""Writes the shipped script (from SCRIPT_ENV) to argv[1], then execs argv[2:] (the workload's argv)."""


def workload_image(settings_image: str, config: CvfConfig, vendor: Vendor = AMD) -> str:
    """The image of the workload Jobs: the flag's, else the ConfigMap's, else the vendor's default ("": none)."""
    return settings_image or config.workload_image or vendor.kube.workload_image


def image_problem(image: str, vendor: Vendor) -> str | None:
    """Why `image` cannot run the workload on `vendor`'s GPUs (none chosen, or another vendor's default)."""
    foreign = {v.kube.workload_image: v for v in VENDORS if v.name != vendor.name and v.kube.workload_image}
    if image and image not in foreign:
        return None
    why = f"{image} is {foreign[image].title}'s default image" if image in foreign else "no workload image"
    return (
        f"{why}, and {vendor.title} names no default: set --workload-image or UPGRADE_GATE_WORKLOAD_IMAGE to an "
        f"image with Python 3, torchrun and PyTorch for {vendor.title} GPUs"
    )


def _pattern(token: str) -> re.Pattern[str]:
    return re.compile(re.escape(token).replace(re.escape(_NPROC), r"[0-9]+"))


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadJobs:
    """Which argv is the workload's, and the Job that runs it (see the module docstring)."""

    config: CvfConfig
    image: str
    env: tuple[tuple[str, str], ...] = ()
    settings: JobSettings = field(default_factory=JobSettings)
    vendor: Vendor = AMD  # the nodes' vendor: the GPU resource the Job requests, the image it may use

    def purpose(self, argv: Sequence[str]) -> str | None:
        """`phase6` for the workload's command line, `phase7` for it behind `env VAR=LIST`, else None."""
        try:
            template = [_pattern(t) for t in workload_argv(self.config, _NPROC)]
        except (KeyError, IndexError, ValueError):  # a site command with a bad placeholder: the phase says so
            return None
        visible = re.compile(re.escape(visible_var(self.config, self.vendor)) + r"=[0-9,]*")

        def same(tokens: Sequence[str]) -> bool:
            return len(tokens) == len(template) and all(p.fullmatch(t) for p, t in zip(template, tokens, strict=True))

        if same(argv):
            return PURPOSE_RUN
        if len(argv) > 2 and argv[0] == "env" and visible.fullmatch(argv[1]) and same(argv[2:]):
            return PURPOSE_PERTURBATION
        return None

    def spec(self, node: KubeNode, argv: Sequence[str], next_id: Callable[[], str]) -> JobSpec | None:
        """The Job of a workload argv on `node` (None: not the workload's; the launcher's rules apply)."""
        purpose = self.purpose(argv)
        if purpose is None:
            return None
        resource = self.vendor.kube.gpu_resource
        gpus = node.gpu_count(resource)
        if gpus < 1:
            raise LauncherError(f"node {node.name} advertises no {resource}: the workload Job cannot hold its GPUs "
                                "(is the device plugin running on it?)")  # fmt: skip
        problem = image_problem(self.image, self.vendor)
        if problem is not None:
            raise LauncherError(f"node {node.name}: {problem}")
        script = shipped_script()
        staged = f"{WORKDIR}/{Path(script).name}"
        command = tuple(a.replace(script, staged) for a in argv)
        deadline = math.ceil(self.config.workload_timeout_s) + 60
        env = list(self.env)
        if command != tuple(argv):
            source = Path(script).read_text(encoding="utf-8")
            env.append((SCRIPT_ENV, source.replace("$", "$$")))
            command = (self.settings.python, "-I", "-S", "-c", STAGER, staged, *command)
        return JobSpec(
            node=node.name,
            purpose=purpose,
            run_id=next_id(),
            argv=command,
            gpus=gpus,
            env=tuple(env),
            settings=replace(self.settings, active_deadline_s=max(self.settings.active_deadline_s, deadline)),
            image=self.image,
            workdir=WORKDIR,
            shm=True,
            gpu_resource=resource,
        )
