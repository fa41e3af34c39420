"""The node agent's cycle: the cheap probes, judged against the node's published baseline, as a condition.

`upgrade-gate fleet agent` runs as a DaemonSet (deploy/agent.yaml), one light process per node, no
GPU request, read-only host mounts. Each cycle (`Agent.cycle`, every 30 s by default; the loop is
`fleet.agent_loop`):

1. read its Node (one GET): labels, the published baseline's digest, the current condition;
2. get the node's baseline from its ConfigMap, verified against that digest (`fleet.agent_baseline`;
   read again only when the digest changed);
3. capture the agent's probes (`fleet.agent_view.AGENT_PROBES`) under the host root, build the snapshot,
   and judge it against the baseline, both trimmed alike (`agent_views`, `agent_policy`);
4. set `UpgradeGateDrift` on the Node (a strategic-merge patch of `nodes/status`) when it changed or its
   heartbeat is due; the metrics are rendered every cycle.

The condition (node-problem-detector's convention, `report.prometheus.node_condition` for True/False):
| status  | reason                          | when |
|---------|---------------------------------|------|
| False   | NoDrift                         | every observed fact matches the baseline |
| True    | the first blocking rule         | a fact drifted (driver reloaded, VF lost, link downgraded, RAS event) |
| Unknown | NoBaseline / BaselineUnverified | no published baseline, or one that fails its digest or schema |
| Unknown | EvidenceMissing                 | a probe the judge requires failed (missing tool, timeout, unparseable) |
| Unknown | InChangeWindow                  | the node is a canary: its window judges it against the plan |
| Unknown | AgentError / AgentStopped       | the cycle failed, or the agent ended: nothing vouches for it |

Fail closed: only a complete judgement against a verified baseline says False. Alert on `!= False`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from upgrade_gate.errors import GateError
from upgrade_gate.fleet.agent_baseline import BASELINES_NAMESPACE, BaselineUnavailable, PublishedBaseline, read_baseline
from upgrade_gate.fleet.errors import is_temporary
from upgrade_gate.fleet.labels import CANARY, NODE_CLASS
from upgrade_gate.model import Finding, NodeName, NodeReport, RuleId, Severity, Verdict
from upgrade_gate.report.prometheus import CONDITION_TYPE, node_condition

if TYPE_CHECKING:
    from upgrade_gate.collect.bundle import Bundle
    from upgrade_gate.collect.runner import CommandRunner
    from upgrade_gate.fleet.agent_kube import AgentClient, AgentNode
    from upgrade_gate.judge.policy import Policy

_EVIDENCE = RuleId("evidence.missing")
_MAX_MESSAGE = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSettings:
    """What one node's agent watches and how."""

    node: NodeName
    host_root: Path = Path("/host")
    probe_timeout_s: float = 10.0
    namespace: str = BASELINES_NAMESPACE
    heartbeat_s: float = 300.0  # rewrite an unchanged condition this often (0: every cycle)
    class_label: str = NODE_CLASS


@dataclass(frozen=True, slots=True, kw_only=True)
class CycleResult:
    """One cycle: the condition it set (or would have), the node's report, and what it cost."""

    condition: dict[str, str]
    report: NodeReport
    taken_at: datetime | None
    patched: bool
    duration_s: float
    cpu_s: float

    @property
    def status(self) -> str:
        """True / False / Unknown."""
        return self.condition["status"]


def cpu_seconds() -> float:
    """CPU seconds of this process and of its finished children (the probes), user and system."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def unknown(node: NodeName, reason: str, message: str, *, now: datetime) -> tuple[dict[str, str], NodeReport]:
    """An Unknown condition and the BLOCK report (evidence.missing) that the metrics show for it."""
    text = " ".join(message.split())[:_MAX_MESSAGE]
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {"type": CONDITION_TYPE, "status": "Unknown", "reason": reason, "message": text,
                 "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}  # fmt: skip
    finding = Finding(rule=_EVIDENCE, severity=Severity.BLOCK, node=node, message=text)
    return condition, NodeReport(node=node, verdict=Verdict.BLOCK, findings=(finding,))


def judged_condition(report: NodeReport, *, now: datetime) -> dict[str, str]:
    """False / True from the judge; Unknown (EvidenceMissing) when a blocking finding is missing evidence,
    since what else it found may be the missing evidence's shadow."""
    missing = [f for f in report.findings if f.severity is Severity.BLOCK and f.rule == _EVIDENCE]
    if missing:
        more = f" (+{len(missing) - 1} more)" if len(missing) > 1 else ""
        return unknown(report.node, "EvidenceMissing", f"{missing[0].message}{more}", now=now)[0]
    return {k: str(v) for k, v in node_condition(report, now=now).items()}


def _age_s(stamp: str | None, now: datetime) -> float | None:
    if not stamp:
        return None
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (now - then).total_seconds() if then.tzinfo is not None else None


def needs_patch(current: dict[str, str] | None, wanted: dict[str, str], *, now: datetime, heartbeat_s: float) -> bool:
    """True when the Node's condition differs from `wanted` or its heartbeat is older than `heartbeat_s`."""
    if current is None or any(current.get(k) != wanted[k] for k in ("status", "reason", "message")):
        return True
    age = _age_s(current.get("lastHeartbeatTime"), now)
    return age is None or age < 0 or age >= heartbeat_s


def evidence_key(bundle: Bundle, baseline_digest: str, node_class: str | None) -> str:
    """A digest of everything a judgement depends on but the time: the baseline, the node class, and every
    probe's argv, exit, flags and output. Equal keys give equal judgements, so a quiet node's cycle
    (the kernel log unchanged) skips the snapshot build and the judge: a full 1 MiB kernel log costs
    ~0.3 s of CPU to parse (bench/RESULTS-agent.md), every 30 s."""
    h = hashlib.sha256(f"{baseline_digest}\0{node_class}\0".encode())
    for r in bundle.records:
        res = r.result
        head = (r.name, r.parser, r.required, r.skipped, r.note, res.argv, res.returncode, res.timed_out, res.missing,
                res.output_over, r.fallback_for)  # fmt: skip
        for part in (repr(head), res.stdout, res.stderr):
            data = part.encode("utf-8", "surrogateescape")
            h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


class Agent:
    """One node's agent: `cycle` once per cadence slot, `stop` on the way out."""

    def __init__(self, client: AgentClient, settings: AgentSettings, policy: Policy, runner: CommandRunner) -> None:
        self.client = client
        self.settings = settings
        self.policy = policy
        self.runner = runner
        self._baseline: PublishedBaseline | None = None
        self._last: tuple[str, NodeReport] | None = None  # (evidence_key, its judgement)
        self.judgements = 0  # snapshots built and judged (a cycle whose evidence is unchanged reuses the last)

    def cycle(self, now: datetime) -> CycleResult:
        """Observe, judge and set the condition once. A failure to read the Node (KubeError) propagates:
        the loop counts it and tries again next slot (a refusal is first written as Unknown/AgentError
        where the API takes it); any later failure is Unknown/AgentError on the Node, never a stale False."""
        t0, c0 = time.monotonic(), cpu_seconds()
        name = self.settings.node
        try:
            node = self.client.read_agent_node(name)
        except GateError as exc:  # refused for good (RBAC, ...): say so on the Node if it can be said there
            if not is_temporary(exc):
                with contextlib.suppress(GateError):
                    self.client.patch_drift_condition(name, unknown(name, "AgentError", f"{exc}", now=now)[0])
            raise
        taken_at: datetime | None = None
        if CANARY in node.labels:
            why = f"node {name} is a canary of change {node.labels[CANARY]!r}: its window judges it against the plan"
            condition, report = unknown(name, "InChangeWindow", why, now=now)
        else:
            try:
                self._baseline = read_baseline(self.client, node, namespace=self.settings.namespace,
                                               cached=self._baseline)  # fmt: skip
                report, taken_at = self._judge(node, self._baseline, now)
                condition = judged_condition(report, now=now)
            except BaselineUnavailable as exc:
                self._baseline = None
                condition, report = unknown(name, exc.reason, exc.message, now=now)
            except GateError as exc:  # the ConfigMap read refused or failed, a capture that broke: not a pass
                condition, report = unknown(name, "AgentError", f"node {name}: {exc}", now=now)
        patched = self._set(node, condition, now)
        return CycleResult(condition=condition, report=report, taken_at=taken_at, patched=patched,
                           duration_s=time.monotonic() - t0, cpu_s=cpu_seconds() - c0)  # fmt: skip

    def _judge(self, node: AgentNode, baseline: PublishedBaseline, now: datetime) -> tuple[NodeReport, datetime]:
        from upgrade_gate.collect.capture import capture
        from upgrade_gate.fleet.agent_view import agent_policy, agent_probes, agent_views
        from upgrade_gate.judge.judge import judge
        from upgrade_gate.judge.rules.evidence import read_clock
        from upgrade_gate.snapshot.build import build_snapshot

        probes = agent_probes(self.settings.host_root, timeout_s=self.settings.probe_timeout_s)
        bundle = capture(self.runner, node=node.name, host_root=self.settings.host_root, probes=probes, taken_at=now)
        node_class = node.labels.get(self.settings.class_label)
        key = evidence_key(bundle, baseline.digest, node_class)
        if self._last is not None and self._last[0] == key:
            return self._last[1], now  # the same outputs against the same baseline: the same judgement
        candidate = build_snapshot(bundle, node_class=node_class)
        base_view, seen = agent_views(baseline.snapshot, candidate)
        report = judge(
            baselines={self.settings.node: base_view}, candidates=(seen,), plan=None, policy=agent_policy(self.policy),
            now=now.strftime("%Y-%m-%dT%H:%M:%SZ"), clock=read_clock(), workers=1, include_changes=False,
        )  # fmt: skip
        (node_report,) = report.nodes
        self.judgements += 1
        self._last = (key, node_report)
        return node_report, now

    def _set(self, node: AgentNode, condition: dict[str, str], now: datetime) -> bool:
        current = node.condition
        if not needs_patch(current, condition, now=now, heartbeat_s=self.settings.heartbeat_s):
            return False
        body: dict[str, Any] = dict(condition)
        if current is not None and current.get("status") == condition["status"] and current.get("lastTransitionTime"):
            body["lastTransitionTime"] = current["lastTransitionTime"]
        self.client.patch_drift_condition(self.settings.node, body)
        return True

    def stop(self, now: datetime, why: str) -> None:
        """Leave the condition Unknown (AgentStopped): a stale False would vouch for a node no one watches.
        Best effort: the API may be what failed."""
        condition, _ = unknown(self.settings.node, "AgentStopped", f"upgrade-gate agent stopped: {why}", now=now)
        with contextlib.suppress(GateError):
            self.client.patch_drift_condition(self.settings.node, condition)
