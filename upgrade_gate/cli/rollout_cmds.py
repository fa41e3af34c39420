"""After the canary's PASS: `window observe` (one soak round) and `window expand` (the next wave).

    upgrade-gate window observe --id ID --store DIR [--snapshot FILE ...]   one soak round (cron, CI, CronJob)
    upgrade-gate window expand  --id ID --store DIR                         next wave under the class cap

`observe` without `--snapshot` captures the canaries with Jobs (and re-runs phase 2 when the plan's
soak says `mesh: true`); with `--snapshot` it judges snapshots taken by other means (off Kubernetes)
and needs no cluster. Exit codes: 0 the observation passed (or the expand started its wave); 1 the
observation blocked (the window is now `blocked`); 3 the window is in another state, or a snapshot
is unreadable; 4 the API server or the store failed.
"""

from __future__ import annotations

from pathlib import Path

import typer

from upgrade_gate.cli.fleet_common import (
    BY,
    CLASS_LABEL,
    CONCURRENCY,
    CONTEXT,
    ENV,
    IMAGE,
    JOB_COMMAND,
    JOB_PYTHON,
    KUBECONFIG,
    NAMESPACE,
    POLL,
    RCCL_IMAGE,
    SELECTOR,
    STORE,
    TIMEOUT,
    WINDOW_ID,
    WORKLOAD_IMAGE,
    actor_for,
    client_for,
    echo,
    executor_settings,
    new_run_id,
    now_from_actor,
    open_store,
)
from upgrade_gate.errors import ExitCode
from upgrade_gate.report.printable import one_line


def register(window: typer.Typer, fleet: typer.Typer) -> None:
    """Add `observe` and `expand` to the `window` sub-app, `watch` to the `fleet` one."""
    window.command("observe")(window_observe_cmd)
    window.command("expand")(window_expand_cmd)
    fleet.command("watch")(fleet_watch_cmd)


def window_observe_cmd(
    window_id: str = WINDOW_ID, store: Path = STORE,
    policy: Path | None = typer.Option(None, "--policy", help="Policy."),
    snapshot: list[Path] = typer.Option([], "--snapshot", help="A canary's snapshot taken off Kubernetes; repeatable."),
    kubeconfig: Path | None = KUBECONFIG, context: str | None = CONTEXT, image: str = IMAGE,
    rccl_image: str = RCCL_IMAGE, job_python: str = JOB_PYTHON, job_command: str = JOB_COMMAND,
    concurrency: int = CONCURRENCY, poll: float = POLL, timeout: float = TIMEOUT, env: list[str] = ENV,
    by: str | None = BY, workload_image: str = WORKLOAD_IMAGE,
    if_due: bool = typer.Option(False, "--if-due", help="Observe only when `every` has passed (for cron)."),
) -> ExitCode:  # fmt: skip
    """One soak observation of the canaries against their baselines: exit 0 PASS, 1 BLOCK."""
    from upgrade_gate.fleet.rollout import observation_due, soak_status
    from upgrade_gate.fleet.window_rollout import observe_window, rollout_lines
    from upgrade_gate.fleet.window_state import load_window
    from upgrade_gate.judge.policy import load_policy
    from upgrade_gate.snapshot.io import load_snapshot

    actor = actor_for(by)
    with open_store(store) as st:
        if if_due:
            record = load_window(st, window_id)
            now = now_from_actor(actor)
            if record.doc.get("state") == "soaking" and not observation_due(record.doc, now):
                status = soak_status(record.doc, now)
                due = status.next_due.strftime("%Y-%m-%dT%H:%M:%SZ") if status else "?"
                echo(f"window {window_id}: no observation due before {due}")
                return ExitCode.PASS
        if snapshot:
            snaps = {s.node.name: s for s in (load_snapshot(p) for p in snapshot)}
            outcome = observe_window(st, window_id, actor=actor, policy=load_policy(policy), snapshots=snaps)
        else:
            namespace = str(load_window(st, window_id).doc["namespace"])
            settings = executor_settings(namespace=namespace, image=image, rccl_image=rccl_image, job_python=job_python,
                                 job_command=job_command, concurrency=concurrency, poll=poll, timeout=timeout,
                                 env=env, workload_image=workload_image)  # fmt: skip
            with client_for(kubeconfig, context) as client:
                from upgrade_gate.fleet.executor import load_cluster_config

                cvf = load_cluster_config(client, namespace)
                loaded = load_policy(policy, cvf, cvf_source=cvf.source)
                outcome = observe_window(st, window_id, actor=actor, policy=loaded, client=client, settings=settings,
                                         run_id=new_run_id())  # fmt: skip
    last = outcome.record.doc["soak"]["observations"][-1]
    echo(
        one_line(
            f"window {outcome.record.id}: observation {last['verdict']} at {last['at']}; now {outcome.record.state}"
        )
    )
    for node, info in last["nodes"].items():
        echo(one_line(f"  {node}: {info['verdict']}"))
        for cause in info["causes"][:10]:
            echo(one_line(f"    - {cause[:200]}"))
    for line in rollout_lines(outcome.record.doc, now_from_actor(actor)):
        echo(f"  {line}")
    return ExitCode.PASS if outcome.passed else ExitCode.BLOCK


def window_expand_cmd(
    window_id: str = WINDOW_ID, store: Path = STORE, kubeconfig: Path | None = KUBECONFIG,
    context: str | None = CONTEXT,
    by: str | None = BY,
) -> ExitCode:  # fmt: skip
    """After a promote: take the next wave of each class (within the class-wide cap) and start it."""
    from upgrade_gate.fleet.window_rollout import expand_window

    with client_for(kubeconfig, context) as client, open_store(store) as st:
        outcome = expand_window(client, st, window_id, actor=actor_for(by))
    wave = outcome.record.doc["rollout"]["wave"]
    echo(f"window {outcome.record.id}: wave {wave} started on {', '.join(outcome.record.canaries)}")
    for note in outcome.notes:
        echo(f"  {note}")
    echo("apply the change to them, then: upgrade-gate window validate --id " + outcome.record.id)
    return ExitCode.PASS


def fleet_watch_cmd(
    store: Path = STORE, policy: Path | None = typer.Option(None, "--policy", help="Policy."),
    textfile: Path | None = typer.Option(
        None, "--textfile", help="Write Prometheus metrics here (node_exporter's textfile collector: *.prom)."
    ),
    conditions: bool = typer.Option(True, "--conditions/--no-conditions", help="Set UpgradeGateDrift on nodes."),
    kubeconfig: Path | None = KUBECONFIG, context: str | None = CONTEXT, namespace: str = NAMESPACE,
    selector: str | None = SELECTOR, class_label: str = CLASS_LABEL, image: str = IMAGE, rccl_image: str = RCCL_IMAGE,
    job_python: str = JOB_PYTHON, job_command: str = JOB_COMMAND, concurrency: int = CONCURRENCY,
    poll: float = POLL, timeout: float = TIMEOUT,
) -> ExitCode:  # fmt: skip
    """Between changes: capture every node, gate it against its baseline (non-invasive): exit 0, 1 on drift."""
    from upgrade_gate.cli.fleet_common import clock_now
    from upgrade_gate.docio import write_text_atomic
    from upgrade_gate.fleet.executor import load_cluster_config
    from upgrade_gate.fleet.watch import summary_lines, watch_round
    from upgrade_gate.judge.policy import load_policy
    from upgrade_gate.model import Verdict
    from upgrade_gate.report.prometheus import render_metrics

    settings = executor_settings(namespace=namespace, image=image, rccl_image=rccl_image, job_python=job_python,
                         job_command=job_command, concurrency=concurrency, poll=poll, timeout=timeout,
                         env=[])  # fmt: skip
    now = clock_now()
    with client_for(kubeconfig, context) as client, open_store(store) as st:
        cvf = load_cluster_config(client, namespace)
        result = watch_round(client, st, settings=settings, policy=load_policy(policy, cvf, cvf_source=cvf.source),
                             now=now, run_id=new_run_id(), selector=selector, class_label=class_label,
                             set_conditions=conditions)  # fmt: skip
    for line in summary_lines(result):
        echo(line)
    if textfile is not None:
        write_text_atomic(textfile, render_metrics(result.report, now=now, taken_at=result.taken_at))
        echo(f"wrote metrics to {textfile}")
    return ExitCode.PASS if result.report.verdict is Verdict.PASS else ExitCode.BLOCK
