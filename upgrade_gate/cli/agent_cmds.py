"""The node agent's commands: `fleet agent` (the DaemonSet's process) and `fleet publish-baselines`.

    upgrade-gate fleet agent [--node NAME] [--interval 30] [--once]    watch this node (deploy/agent.yaml)
    upgrade-gate fleet publish-baselines --store DIR [--selector SEL]   baselines -> ConfigMaps for the agents

`fleet agent` runs until SIGTERM (exit 143, condition left Unknown/AgentStopped); with `--once` it runs
one cycle and exits 0 when the condition is False, 1 when True or Unknown (missing evidence blocks), 4
when the API failed. `publish-baselines` exits 0, 3 for a baseline too large to publish, 4 when the API
or the store failed. Design: docs/agent.md, `fleet.agent` and `fleet.agent_baseline`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from upgrade_gate.cli.fleet_common import CLASS_LABEL, CONTEXT, KUBECONFIG, SELECTOR, STORE, clock_now, open_store
from upgrade_gate.errors import ExitCode, UsageError
from upgrade_gate.fleet.node_vendor import gpu_nodes

if TYPE_CHECKING:
    from upgrade_gate.fleet.agent_kube import AgentClient

BASELINES_NS = typer.Option(
    "upgrade-gate-baselines", "--baselines-namespace", help="Namespace of the published baselines (ConfigMaps)."
)


def register(fleet: typer.Typer) -> None:
    """Add `agent` and `publish-baselines` to the `fleet` sub-app."""
    fleet.command("agent")(fleet_agent_cmd)
    fleet.command("publish-baselines")(fleet_publish_cmd)


def agent_client(kubeconfig: Path | None, context: str | None) -> AgentClient:
    """As `fleet_common.client_for`, an `AgentClient`: the kubeconfig, else the pod's service account."""
    from upgrade_gate.fleet.agent_kube import AgentClient

    default = Path.home() / ".kube" / "config"
    if kubeconfig is None and not default.exists() and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return AgentClient.in_cluster()
    return AgentClient.from_kubeconfig(str(kubeconfig) if kubeconfig is not None else None, context=context)


def fleet_agent_cmd(
    node: str = typer.Option("", "--node", envvar="NODE_NAME", help="This node's name (the DaemonSet sets "
                             "NODE_NAME from spec.nodeName).", show_default=False),
    interval: float = typer.Option(30.0, "--interval", help="Seconds between cycles (5-3600)."),
    jitter: float = typer.Option(3.0, "--jitter", help="Up to this many seconds added to each slot (0 - interval/2)."),
    heartbeat: float = typer.Option(300.0, "--heartbeat", help="Rewrite an unchanged condition this often (s)."),
    host_root: Path = typer.Option(Path("/host"), "--host-root", help="The host's / (mounted read-only)."),
    probe_timeout: float = typer.Option(10.0, "--probe-timeout", help="Seconds each probe may run."),
    metrics_port: int = typer.Option(9847, "--metrics-port", help="Serve /metrics and /healthz here (0: off)."),
    textfile: Path | None = typer.Option(None, "--textfile", help="Also write the metrics to this .prom file."),
    policy: Path | None = typer.Option(None, "--policy", help="Policy (default: the shipped one)."),
    once: bool = typer.Option(False, "--once", help="One cycle; exit 0 no drift, 1 drift or missing evidence."),
    baselines_namespace: str = BASELINES_NS, class_label: str = CLASS_LABEL,
    kubeconfig: Path | None = KUBECONFIG, context: str | None = CONTEXT,
) -> ExitCode:  # fmt: skip
    """Watch this node every --interval seconds: cheap probes vs its baseline -> condition UpgradeGateDrift."""
    from upgrade_gate.collect.capture import check_node_name
    from upgrade_gate.collect.runner import LocalRunner
    from upgrade_gate.docio import write_text_atomic
    from upgrade_gate.fleet.agent import Agent, AgentSettings
    from upgrade_gate.fleet.agent_loop import (
        AgentStats,
        Cadence,
        MetricsEndpoint,
        once_verdict,
        render_agent_metrics,
        run_agent,
    )
    from upgrade_gate.judge.policy import load_policy
    from upgrade_gate.model import Verdict

    if not node:
        raise UsageError("fleet agent: no node name: give --node or set NODE_NAME (the DaemonSet sets it)")
    cadence = Cadence(interval_s=interval, jitter_s=jitter)  # ConfigError (exit 3) outside the bounds
    settings = AgentSettings(node=check_node_name(node), host_root=host_root, probe_timeout_s=probe_timeout,
                             namespace=baselines_namespace, heartbeat_s=heartbeat, class_label=class_label)  # fmt: skip
    with agent_client(kubeconfig, context) as client:
        agent = Agent(client, settings, load_policy(policy), LocalRunner())
        if once:
            result = agent.cycle(clock_now())
            c = result.condition
            typer.echo(f"{node}: UpgradeGateDrift={c['status']} {c['reason']}: {c['message']}")
            if textfile is not None:
                write_text_atomic(
                    textfile, render_agent_metrics(node, AgentStats(cycles=1, last=result), now=clock_now())
                )
            return ExitCode.PASS if once_verdict(result) is Verdict.PASS else ExitCode.BLOCK
        stale = 3 * interval + 16 * probe_timeout  # three slots, or one with every probe at its timeout
        endpoint = MetricsEndpoint(metrics_port, stale_after_s=stale) if metrics_port else None
        typer.echo(f"upgrade-gate agent: node {node}: every {interval:g}s (+<= {jitter:g}s)"
                   + (f", metrics on :{endpoint.port}/metrics" if endpoint else ""), err=True)  # fmt: skip
        run_agent(agent, cadence, wall=clock_now, endpoint=endpoint, textfile=textfile)
    return ExitCode.PASS  # not reached in a daemon's life: SIGTERM ends it with 143


def fleet_publish_cmd(
    store: Path = STORE, selector: str | None = SELECTOR, baselines_namespace: str = BASELINES_NS,
    kubeconfig: Path | None = KUBECONFIG, context: str | None = CONTEXT,
) -> ExitCode:  # fmt: skip
    """Publish each node's baseline (store HEAD) for the node agents: a ConfigMap + a digest on the Node."""
    from upgrade_gate.fleet.agent_baseline import publish_baselines

    with agent_client(kubeconfig, context) as client, open_store(store) as st:
        nodes = gpu_nodes(client, selector)
        results = publish_baselines(client, st, [n.name for n in nodes], namespace=baselines_namespace,
                                    annotations={n.name: n.annotations for n in nodes})  # fmt: skip
    for r in results:
        typer.echo(f"{r.node:<24} {r.outcome}" + (f"  {r.digest[:19]}..." if r.digest else ""))
    return ExitCode.PASS
