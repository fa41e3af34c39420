"""What the `fleet` and `window` commands share: their options, the client, the store, the clock, settings.

Split out of `cli.fleet_cmds` (issue 17: rooms of at most ~400 lines); `cli.rollout_cmds` uses the
same options and helpers. `fleet.kube` (and with it `kubernetes`) is imported inside the functions
only: the package's other commands must start fast.
"""

from __future__ import annotations

import getpass
import os
import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from upgrade_gate.errors import StoreError, UsageError
from upgrade_gate.store.layout import DEFAULT_STORE, STORE_ENV, STORE_HELP

if TYPE_CHECKING:
    from upgrade_gate.fleet.executor import ExecutorSettings
    from upgrade_gate.fleet.jobs import NodeRunResult
    from upgrade_gate.fleet.kube import KubeClient
    from upgrade_gate.fleet.window import Actor
    from upgrade_gate.store.gitstore import BaselineStore
    from upgrade_gate.validate.pipeline import ProgressEvent

KUBECONFIG = typer.Option(None, "--kubeconfig", envvar="KUBECONFIG", help="kubeconfig file (default ~/.kube/config).")
CONTEXT = typer.Option(None, "--context", help="kubeconfig context (default: the current one).")
NAMESPACE = typer.Option("upgrade-gate", "--namespace", "-n", help="Namespace of the Jobs and of the CVF ConfigMap.")
STORE = typer.Option(DEFAULT_STORE, "--store", envvar=STORE_ENV, help=STORE_HELP, show_default=False)
WINDOW_ID = typer.Option(..., "--id", help="Change window id (see `window status`).")
BY = typer.Option(None, "--by", help="Who acts (recorded in the window); default: $USER.")
CLASS_LABEL = typer.Option("upgrade-gate/node-class", "--class-label", help="Node label that names the node class.")
SELECTOR = typer.Option(
    None, "--selector", "-l", show_default=False, help="Label selector of the GPU nodes; default: every vendor's "
    "GPU discovery label (feature.node.kubernetes.io/amd-gpu=true, nvidia.com/gpu.present=true); '' is every node.",
)  # fmt: skip
IMAGE = typer.Option("upgrade-gate:0.1.0", "--image", help="Image of the capture and phase Jobs.")
RCCL_IMAGE = typer.Option("rocm/rccl-tests:latest", "--rccl-image", help="Image of phase 5's MPIJob.")
WORKLOAD_IMAGE = typer.Option(
    "", "--workload-image", show_default=False, help="Image of the workload phases' Jobs (6-7, PyTorch and "
    "torchrun); default: the ConfigMap's UPGRADE_GATE_WORKLOAD_IMAGE, else rocm/pytorch:latest.",
)  # fmt: skip
JOB_PYTHON = typer.Option("python3", "--job-python", help="Python inside the image (runs the result wrapper).")
JOB_COMMAND = typer.Option("upgrade-gate", "--job-command", help="The upgrade-gate command inside the image.")
CONCURRENCY = typer.Option(
    256, "--concurrency", min=1, help="Nodes worked on at once (CVF runs a phase on every node together)."
)
POLL = typer.Option(
    2.0, "--poll-interval", min=0.01,
    help="Seconds between Job status reads where the API server serves no watch (Job waits watch the pods).",
)  # fmt: skip
KEEP_JOBS = typer.Option(20, "--keep-jobs", min=0, help="Finished Jobs kept per node and kind; older ones are deleted.")
TIMEOUT = typer.Option(900.0, "--capture-timeout", min=1.0, help="Seconds a capture Job may take.")
ENV = typer.Option([], "--env", help="NAME=VALUE for the phase Jobs (e.g. NCCL_ALGO=Ring); repeatable.")
CAPTURE_PRIVILEGED = typer.Option(
    False, "--capture-privileged", help="Capture as a privileged pod without GPUs allocated (a canary whose "
    "GPUs a workload still holds can be captured; needs the namespace's Pod Security level privileged).",
)  # fmt: skip
TOLERATE = typer.Option(
    [], "--tolerate", help="KEY[=VALUE][:EFFECT]: a taint the Jobs tolerate (a permanent taint of the fleet); "
    "such nodes stay eligible as canaries. Repeatable; give the same to `window plan` and `window validate`.",
)  # fmt: skip


def echo(text: str, *, err: bool = False) -> None:
    """`typer.echo` of a line that may quote a node, a file or a user: every control character but newline
    and tab shown as `\\xNN` (issue 26: no terminal escape passes, in every command)."""
    from upgrade_gate.report.printable import printable

    typer.echo(printable(text), err=err)


def client_for(kubeconfig: Path | None, context: str | None) -> KubeClient:
    """The API client: --kubeconfig / $KUBECONFIG / ~/.kube/config, else the pod's service account
    (the soak and watch CronJobs run in the cluster without a kubeconfig)."""
    from upgrade_gate.fleet.kube import KubeClient

    default = Path.home() / ".kube" / "config"
    if kubeconfig is None and not default.exists() and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return KubeClient.in_cluster()
    return KubeClient.from_kubeconfig(str(kubeconfig) if kubeconfig is not None else None, context=context)


def open_store(path: Path, *, create: bool = False) -> BaselineStore:
    """The baseline store at `path` (created with `create`); StoreError when there is none."""
    if not create and not path.is_dir():
        raise StoreError(f"{path}: no baseline store here (create one with `upgrade-gate fleet snapshot`)")
    from upgrade_gate.store.gitstore import BaselineStore

    store = BaselineStore(path)
    if create:
        store.init()
    return store


def actor_for(by: str | None) -> Actor:
    """Who acts (`--by`, else $USER) and when (`clock_now`)."""
    from upgrade_gate.fleet.window import Actor

    try:
        who = by or os.environ.get("USER") or getpass.getuser()
    except OSError:
        who = "unknown"
    return Actor(by=who, at=clock_now().strftime("%Y-%m-%dT%H:%M:%SZ"))


def clock_now() -> datetime:
    """The one clock of the window commands: now, or `UPGRADE_GATE_NOW` (ISO 8601) for replays and tests."""
    fixed = os.environ.get("UPGRADE_GATE_NOW")
    if fixed:
        try:
            value = datetime.fromisoformat(fixed.replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(f"UPGRADE_GATE_NOW={fixed!r}: not an ISO 8601 time") from None
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return datetime.now(UTC).replace(microsecond=0)


def now_from_actor(actor: Actor) -> datetime:
    """The actor's time as a datetime."""
    from upgrade_gate.fleet.rollout import parse_time

    return parse_time(actor.at)


def new_run_id() -> str:
    """A short id for this run's Job names (time of day and a random suffix)."""
    return datetime.now(UTC).strftime("%H%M%S") + os.urandom(2).hex()[:3]


def job_tolerations(items: list[str]) -> tuple[Any, ...]:
    """The Jobs' tolerations: upgrade-gate's own plus `--tolerate` ones."""
    from upgrade_gate.errors import ConfigError
    from upgrade_gate.fleet.manifests import JobSettings, parse_toleration

    try:
        return (*JobSettings().tolerations, *(parse_toleration(t) for t in items))
    except ConfigError as exc:
        raise UsageError(f"--tolerate: {exc}") from exc


def executor_settings(*, namespace: str, image: str, rccl_image: str, job_python: str, job_command: str,
              concurrency: int, poll: float, timeout: float, env: list[str],
              tolerate: list[str] | None = None, capture_privileged: bool = False,
              keep_jobs: int = 20, workload_image: str = "") -> ExecutorSettings:  # fmt: skip
    from upgrade_gate.fleet.executor import ExecutorSettings
    from upgrade_gate.fleet.manifests import JobSettings

    pairs: list[tuple[str, str]] = []
    for item in env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--env {item!r}: expected NAME=VALUE")
        pairs.append((name, value))
    argv = tuple(shlex.split(job_command))
    if not argv:
        raise UsageError("--job-command: empty")
    return ExecutorSettings(
        jobs=JobSettings(namespace=namespace, image=image, python=job_python,
                         tolerations=job_tolerations(tolerate or [])),
        upgrade_gate_argv=argv, rccl_image=rccl_image, env=tuple(pairs), concurrency=concurrency,
        poll_s=poll, capture_timeout_s=timeout, capture_privileged=capture_privileged, keep_finished=keep_jobs,
        workload_image=workload_image,
    )  # fmt: skip


class JobProgress:
    """Capture Jobs and pipeline phases as rich progress bars on stderr."""

    def __init__(self, captures: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                             TimeElapsedColumn(), console=Console(stderr=True), transient=True)  # fmt: skip
        self._capture = self._bar.add_task("capture Jobs", total=captures)
        self._phases: dict[int, Any] = {}
        self._bar.start()

    def on_capture(self, result: NodeRunResult) -> None:
        self._bar.advance(self._capture)
        if result.status.value != "succeeded":
            self._bar.console.print(f"capture {result.node}: {result.status.value}: {result.reason}")

    def on_phase(self, event: ProgressEvent) -> None:
        if event.kind == "phase-start":
            self._phases[event.phase] = self._bar.add_task(f"phase {event.phase} {event.name}", total=len(event.nodes))
        elif event.kind == "node-done" and event.phase in self._phases:
            self._bar.advance(self._phases[event.phase])

    def close(self) -> None:
        self._bar.stop()
