"""The fleet commands on Kubernetes: `fleet status|snapshot` and the change window `window ...`.

    upgrade-gate fleet status   [--selector SEL]                    CVF and upgrade-gate labels per node
    upgrade-gate fleet snapshot --store DIR [--tag TAG]             capture Jobs -> baselines in the store
    upgrade-gate window plan     --plan PLAN --store DIR [--id ID]  choose canaries, record the window
    upgrade-gate window start    --id ID --store DIR                cordon + taint + label the canaries
    upgrade-gate window validate --id ID --store DIR                capture + CVF phases + judge
    upgrade-gate window promote  --id ID --store DIR                PASS only: baselines, untaint
    upgrade-gate window rollback --id ID --store DIR --reason TEXT  keep them tainted, record why
    upgrade-gate window status   [--id ID] --store DIR              from the store (no cluster needed)

Every cluster command takes `--kubeconfig` (default $KUBECONFIG, then ~/.kube/config) and `--context`.
Exit codes: 0 done / PASS; 1 BLOCK (validate found reasons, promote of a blocked window); 3 bad input
(plan, node name, a window in the wrong state); 4 the API server or the store failed (a forbidden
verb names the verb and the resource). `fleet.kube` (and with it `kubernetes`) is imported inside the
command bodies only: the package's other commands must start fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from upgrade_gate.cli.fleet_common import (
    BY,
    CAPTURE_PRIVILEGED,
    CLASS_LABEL,
    CONCURRENCY,
    CONTEXT,
    ENV,
    IMAGE,
    JOB_COMMAND,
    JOB_PYTHON,
    KEEP_JOBS,
    KUBECONFIG,
    NAMESPACE,
    POLL,
    RCCL_IMAGE,
    SELECTOR,
    STORE,
    TIMEOUT,
    TOLERATE,
    WINDOW_ID,
    WORKLOAD_IMAGE,
    JobProgress,
    actor_for,
    client_for,
    clock_now,
    echo,
    executor_settings,
    job_tolerations,
    new_run_id,
    open_store,
)
from upgrade_gate.errors import ExitCode, UsageError
from upgrade_gate.fleet.node_vendor import describe_selector, gpu_nodes
from upgrade_gate.validate.cvf import PHASE_LABELS

if TYPE_CHECKING:
    from upgrade_gate.fleet.objects import KubeNode
    from upgrade_gate.fleet.window_state import WindowRecord
    from upgrade_gate.store.gitstore import BaselineStore

CVF_COLUMNS = tuple(PHASE_LABELS.values())
UG_COLUMNS = ("upgrade-gate/canary", "upgrade-gate/window-state", "upgrade-gate/change-id")


def register(app: typer.Typer) -> None:
    """Add the `fleet` and `window` sub-apps to the app."""
    fleet = typer.Typer(name="fleet", help="GPU nodes on Kubernetes: labels, snapshots as Jobs.",
                        no_args_is_help=True, rich_markup_mode=None)  # fmt: skip
    fleet.command("status")(fleet_status_cmd)
    fleet.command("snapshot")(fleet_snapshot_cmd)
    app.add_typer(fleet, name="fleet")
    window = typer.Typer(name="window", help="The canary change window: plan, start, validate, promote, rollback.",
                         no_args_is_help=True, rich_markup_mode=None)  # fmt: skip
    window.command("plan")(window_plan_cmd)
    window.command("start")(window_start_cmd)
    window.command("validate")(window_validate_cmd)
    window.command("promote")(window_promote_cmd)
    window.command("rollback")(window_rollback_cmd)
    window.command("status")(window_status_cmd)
    from upgrade_gate.cli import agent_cmds, rollout_cmds

    rollout_cmds.register(window, fleet)
    agent_cmds.register(fleet)  # `fleet agent`, `fleet publish-baselines` (issue 28: the node agent)
    app.add_typer(window, name="window")


# --------------------------------------------------------------------------- fleet


def _status_cell(node: KubeNode) -> str:
    ready = {True: "Ready", False: "NotReady", None: "Unknown"}[node.ready]
    return ready + (",SchedulingDisabled" if node.unschedulable else "")


def fleet_table(nodes: list[KubeNode], class_label: str) -> str:
    """`kubectl get nodes -L ...`-style table of the CVF and upgrade-gate labels."""
    keys = (class_label, *CVF_COLUMNS, *UG_COLUMNS)
    header = ["NAME", "STATUS", *(k.rsplit("/", 1)[-1].upper() for k in keys)]
    rows = [[n.name, _status_cell(n), *(n.labels.get(k, "") for k in keys)] for n in nodes]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows])


def fleet_status_cmd(
    kubeconfig: Path | None = KUBECONFIG, context: str | None = CONTEXT, selector: str | None = SELECTOR,
    class_label: str = CLASS_LABEL,
) -> ExitCode:  # fmt: skip
    """Show every GPU node with its CVF phase labels and upgrade-gate window labels."""
    with client_for(kubeconfig, context) as client:
        nodes = list(gpu_nodes(client, selector))
    echo(fleet_table(nodes, class_label) if nodes else f"no nodes match {describe_selector(selector)}")
    return ExitCode.PASS


def fleet_snapshot_cmd(
    store: Path = STORE, tag: str | None = typer.Option(None, "--tag", help="Tag the saved baselines."),
    kubeconfig: Path | None = KUBECONFIG, context: str | None = CONTEXT, namespace: str = NAMESPACE,
    selector: str | None = SELECTOR, class_label: str = CLASS_LABEL, image: str = IMAGE, rccl_image: str = RCCL_IMAGE,
    job_python: str = JOB_PYTHON, job_command: str = JOB_COMMAND, concurrency: int = CONCURRENCY,
    poll: float = POLL, timeout: float = TIMEOUT, keep_jobs: int = KEEP_JOBS,
) -> ExitCode:  # fmt: skip
    """Capture every matching node with a Job and save the snapshots as baselines (exit 1 if any failed)."""
    from upgrade_gate.fleet.executor import capture_nodes
    from upgrade_gate.snapshot.build import build_snapshot

    settings = executor_settings(
        namespace=namespace,
        image=image,
        rccl_image=rccl_image,
        job_python=job_python,
        job_command=job_command,
        concurrency=concurrency,
        poll=poll,
        timeout=timeout,
        env=[],
        keep_jobs=keep_jobs,
    )
    with client_for(kubeconfig, context) as client, open_store(store, create=True) as st:
        nodes = list(gpu_nodes(client, selector))
        if not nodes:
            raise UsageError(f"--selector {describe_selector(selector)}: no node matches")
        progress = JobProgress(len(nodes))
        try:
            bundles = capture_nodes(client, nodes, settings, run_id=new_run_id(), on_result=progress.on_capture)
        finally:
            progress.close()
        classes = {n.name: n.labels.get(class_label) for n in nodes}
        snaps = [build_snapshot(b, node_class=classes[n]) for n, b in bundles.items() if not isinstance(b, str)]
        failed = {n: b for n, b in bundles.items() if isinstance(b, str)}
        for name, why in sorted(failed.items()):
            echo(f"{name}: no snapshot: {why}", err=True)
        if snaps:
            sha = st.save(snaps, tag=tag, message=f"fleet snapshot of {len(snaps)} node(s)")
            echo(f"saved {len(snaps)} baseline(s) at {sha[:12]}" + (f", tagged {tag}" if tag else ""))
    return ExitCode.BLOCK if failed else ExitCode.PASS


# --------------------------------------------------------------------------- window


def window_plan_cmd(
    plan: Path = typer.Option(..., "--plan", help="Change plan (YAML/JSON) with its `canaries` settings."),
    store: Path = STORE, window_id: str | None = typer.Option(None, "--id", help="Window id (default: the plan id)."),
    kubeconfig: Path | None = KUBECONFIG, context: str | None = CONTEXT, namespace: str = NAMESPACE,
    selector: str | None = SELECTOR, class_label: str = CLASS_LABEL, by: str | None = BY,
    tolerate: list[str] = TOLERATE,
) -> ExitCode:  # fmt: skip
    """Choose the canaries per node class (<= 10% by default, idle first) and record the window."""
    from upgrade_gate.fleet.window import plan_window

    tolerations = job_tolerations(tolerate)
    with client_for(kubeconfig, context) as client, open_store(store, create=True) as st:
        record, selection = plan_window(client, st, plan, window_id=window_id, actor=actor_for(by), namespace=namespace,
                                        class_label=class_label, selector=selector,
                                        tolerations=tolerations)  # fmt: skip
    echo(f"window {record.id} (change {record.doc['change_id']}): planned")
    for share in selection.classes:
        echo(f"  class {share.node_class}: {share.chosen} of {share.size} node(s) "
                   f"(share {share.allowed}, {share.eligible} eligible)")  # fmt: skip
    for c in selection.canaries:
        echo(f"  canary {c.node}  class {c.node_class}  " + ("idle" if c.idle else f"busy: {', '.join(c.busy_pods)}"))
    if "peer" in record.doc:  # issue 28: one canary, so phases 4-5 pair it with a known-good node
        peer = record.doc["peer"]
        echo(f"  peer {peer['node']}  class {peer['class']}  for phases 4-5 only: cordoned and tainted while "
                   "they run, released after, never labelled")  # fmt: skip
    echo(f"next: upgrade-gate window start --id {record.id} --store {store}")
    return ExitCode.PASS


def window_start_cmd(
    window_id: str = WINDOW_ID, store: Path = STORE, kubeconfig: Path | None = KUBECONFIG,
    context: str | None = CONTEXT,
    by: str | None = BY,
    no_drain: bool = typer.Option(False, "--no-drain", help="Do not evict the canaries' GPU pods."),
    drain_timeout: float = typer.Option(300.0, "--drain-timeout", min=0.0, help="Seconds to wait for evictions."),
    poll: float = POLL,
) -> ExitCode:  # fmt: skip
    """Cordon and taint the canaries (upgrade-gate/canary=<change>:NoSchedule), evict their GPU pods
    through the Eviction API (PodDisruptionBudgets respected; --no-drain skips it), record the start."""
    from upgrade_gate.fleet.window import start_window

    with client_for(kubeconfig, context) as client, open_store(store) as st:
        record = start_window(client, st, window_id, actor=actor_for(by), drain=not no_drain,
                              drain_timeout_s=drain_timeout, poll_s=poll)  # fmt: skip
    echo(f"window {record.id}: started; cordoned and tainted {', '.join(record.canaries)}")
    echo(f"  {record.doc['history'][-1].get('note', '')}")
    echo("apply the change to the canaries, then: upgrade-gate window validate --id " + record.id)
    return ExitCode.PASS


def window_validate_cmd(
    window_id: str = WINDOW_ID, store: Path = STORE,
    policy: Path | None = typer.Option(None, "--policy", help="Policy."),
    samples: int | None = typer.Option(None, "--samples", min=1, help="Repeats of the phase 2/5 sweeps."),
    kubeconfig: Path | None = KUBECONFIG, context: str | None = CONTEXT, image: str = IMAGE,
    rccl_image: str = RCCL_IMAGE, job_python: str = JOB_PYTHON, job_command: str = JOB_COMMAND,
    concurrency: int = CONCURRENCY, poll: float = POLL, timeout: float = TIMEOUT, env: list[str] = ENV,
    by: str | None = BY, tolerate: list[str] = TOLERATE, capture_privileged: bool = CAPTURE_PRIVILEGED,
    keep_jobs: int = KEEP_JOBS, workload_image: str = WORKLOAD_IMAGE,
    phases: str | None = typer.Option(
        None, "--phases", help="Phases to run: numbers or names, 0-7 (6 workload, 7 perturbation); default 0-5."
    ),
    checklists: list[str] = typer.Option(
        [], "--checklist", help="Checklist: pre-change, canary, observe, a file, or a folder of them; repeatable."
    ),
    attest: list[str] = typer.Option([], "--attest", help="Attest a manual checklist item: ITEM=NAME; repeatable."),
    reports: list[str] = typer.Option(
        [], "--report", help="Also write a report: FORMAT:PATH (console, json, junit, markdown, html); repeatable."
    ),
    vendor: str | None = typer.Option(
        None, "--vendor", help="GPU vendor: amd, nvidia; default: each canary's baseline's, else its GPU resource."
    ),
) -> ExitCode:  # fmt: skip
    """Capture and run the CVF phases on the canaries as Jobs, judge them: exit 0 PASS, 1 BLOCK."""
    from upgrade_gate.cli.judge_cmds import (
        attested_against,
        parse_attestations,
        parse_reports,
        refuse_overwriting_inputs,
        write_reports,
    )
    from upgrade_gate.cli.validate_cmds import parse_phases
    from upgrade_gate.fleet.executor import load_cluster_config
    from upgrade_gate.fleet.window_state import load_window
    from upgrade_gate.fleet.window_validate import validate_window
    from upgrade_gate.judge.checklist import load_checklists
    from upgrade_gate.judge.policy import load_policy
    from upgrade_gate.vendors import vendor_named

    gpu_vendor = vendor_named(vendor) if vendor is not None else None  # exit 2 naming the choices
    attestations = parse_attestations(attest)
    outputs = parse_reports(reports)
    refuse_overwriting_inputs(outputs, map(Path, checklists), store=store)
    selected = parse_phases(phases) if phases is not None else None
    loaded_checklists = load_checklists(checklists)
    attested_against(attestations, loaded_checklists)

    with client_for(kubeconfig, context) as client, open_store(store) as st:
        namespace = str(load_window(st, window_id).doc["namespace"])
        settings = executor_settings(
            namespace=namespace,
            image=image,
            rccl_image=rccl_image,
            job_python=job_python,
            job_command=job_command,
            concurrency=concurrency,
            poll=poll,
            timeout=timeout,
            env=env,
            tolerate=tolerate,
            capture_privileged=capture_privileged,
            keep_jobs=keep_jobs,
            workload_image=workload_image,
        )
        cvf = load_cluster_config(client, namespace)
        loaded_policy = load_policy(policy, cvf, cvf_source=cvf.source)
        progress = JobProgress(len(load_window(st, window_id).canaries))
        try:
            outcome = validate_window(client, st, window_id, actor=actor_for(by), settings=settings,
                                      run_id=new_run_id(),
                                      policy=loaded_policy, samples=samples, on_capture=progress.on_capture,
                                      progress=progress.on_phase, checklists=loaded_checklists,
                                      attestations=attestations, phases=selected, vendor=gpu_vendor)  # fmt: skip
        finally:
            progress.close()
    _print_record(outcome.record)
    write_reports(outputs, outcome.report, baselines=outcome.baselines, candidates=outcome.candidates)
    return ExitCode.PASS if outcome.record.doc["validation"]["verdict"] == "PASS" else ExitCode.BLOCK


def window_promote_cmd(
    window_id: str = WINDOW_ID, store: Path = STORE, kubeconfig: Path | None = KUBECONFIG,
    context: str | None = CONTEXT,
    by: str | None = BY,
    skip_soak: bool = typer.Option(False, "--skip-soak", help="Promote before the soak completed (needs --reason)."),
    reason: str | None = typer.Option(None, "--reason", help="Why the soak is cut short (recorded)."),
) -> ExitCode:  # fmt: skip
    """After a PASS (and the plan's soak): save the new baselines tagged with the target, untaint, uncordon."""
    from upgrade_gate.fleet.window import promote_window

    if skip_soak and not (reason or "").strip():
        raise UsageError("--skip-soak needs --reason TEXT (it is recorded in the window's history)")
    if reason is not None and not skip_soak:
        raise UsageError("--reason goes with --skip-soak")
    with client_for(kubeconfig, context) as client, open_store(store) as st:
        record = promote_window(
            client, st, window_id, actor=actor_for(by), skip_soak_reason=reason if skip_soak else None
        )
    base = record.doc["baseline"]
    echo(f"window {record.id}: promoted; baselines saved at {base['commit'][:12]} tagged {base['tag']}; "
               f"{', '.join(record.canaries)} schedulable again")  # fmt: skip
    return ExitCode.PASS


def window_rollback_cmd(
    window_id: str = WINDOW_ID, store: Path = STORE,
    reason: str = typer.Option(..., "--reason", help="Why the change is rolled back (recorded)."),
    kubeconfig: Path | None = KUBECONFIG, context: str | None = CONTEXT, by: str | None = BY,
) -> ExitCode:  # fmt: skip
    """Keep the canaries cordoned and tainted and record the reason."""
    from upgrade_gate.fleet.window import rollback_window

    with client_for(kubeconfig, context) as client, open_store(store) as st:
        record = rollback_window(client, st, window_id, reason=reason, actor=actor_for(by))
    echo(f"window {record.id}: rolled back; {', '.join(record.canaries)} stay cordoned and tainted")
    return ExitCode.PASS


def window_status_cmd(
    store: Path = STORE,
    window_id: str | None = typer.Option(None, "--id", help="One window (default: all)."),
    html: Path | None = typer.Option(
        None, "--html", help="With --id: write the window's page (soak observations over time) here."
    ),
) -> ExitCode:
    """Show a window's state (or every window's) from the baseline store."""
    from upgrade_gate.fleet.window_state import list_windows, load_window

    if html is not None and window_id is None:
        raise UsageError("--html needs --id")
    with open_store(store) as st:
        if window_id is not None:
            record = load_window(st, window_id)
            _print_record(record)
            if html is not None:
                _write_window_html(st, record, html)
            return ExitCode.PASS
        records = list_windows(st)
    if not records:
        echo("no change windows")
    for r in records:
        last = r.doc["history"][-1] if r.doc["history"] else {}
        echo(f"{r.id:<28} {r.state!s:<12} change {r.doc['change_id']:<20} canaries {','.join(r.canaries)}  "
                   f"{last.get('at', '')} by {last.get('by', '?')}")  # fmt: skip
    return ExitCode.PASS


def _print_record(record: WindowRecord) -> None:
    """The window as lines; its texts (notes, errors, findings) came from nodes and users: shown, not sent."""
    doc = record.doc
    _say(f"window {record.id}: {record.state}  (change {doc['change_id']}, plan {doc['plan']['source']})")
    for c in doc["canaries"]:
        _say(f"  canary {c['node']}  class {c['class']}  {'idle' if c['idle'] else 'busy'}")
    if "peer" in doc:
        _say(f"  peer {doc['peer']['node']}  class {doc['peer']['class']}  (phases 4-5 only)")
    validation = doc.get("validation")
    if validation is not None:
        _say(f"  validation {validation['verdict']} at {validation['at']} by {validation['by']} "
                   f"(thresholds: {validation['config_source']})")  # fmt: skip
        for node, info in sorted(validation["nodes"].items()):
            phases = " ".join(f"{p}:{s}" for p, s in sorted(info["phases"].items()))
            _say(f"    {node}: {info['verdict']}  {phases}")
            for err in info["errors"]:
                _say(f"      error: {err}")
        for finding in validation["findings"]:
            _say(f"    - {finding}")
    if "rollback_reason" in doc:
        _say(f"  rollback reason: {doc['rollback_reason']}")
    if "baseline" in doc:
        _say(f"  baselines: {doc['baseline']['commit'][:12]} tagged {doc['baseline']['tag']}")
    for h in doc["history"]:
        _say(f"  {h['at']}  {h['action']:<9} {h['by']}" + (f"  ({h['note']})" if h.get("note") else ""))
    from upgrade_gate.fleet.window_rollout import rollout_lines

    for line in rollout_lines(doc, clock_now()):
        _say(f"  {line}")


def _say(text: str) -> None:
    from upgrade_gate.report.printable import one_line

    echo(one_line(text))


def _write_window_html(store: BaselineStore, record: WindowRecord, path: Path) -> None:
    from upgrade_gate.docio import write_text_atomic
    from upgrade_gate.errors import NotFoundError
    from upgrade_gate.fleet.window_rollout import key_metrics
    from upgrade_gate.report.window_html import render_window_html

    baselines: dict[str, dict[str, float]] = {}
    for node in record.canaries:
        try:
            baselines[node] = key_metrics(store.load(node))
        except NotFoundError:
            continue
    write_text_atomic(path, render_window_html(record.doc, baselines))
    echo(f"wrote the window's page to {path}")
