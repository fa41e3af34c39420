"""Issue 28, the node agent without a cluster: its probes, its judged view, its condition, cadence, metrics.

The judgement runs the real chain on fake nodes (real capture with the fake tools and host tree, real
snapshot builder, real judge): the baseline is a full capture, the agent's candidate a capture of the
agent's probes only. The real-control-plane half is tests/test_fleet_agent_real.py.
"""

from __future__ import annotations

import os
import threading
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.test_validate_support import snapshot_of, with_vfs
from upgrade_gate.cli.main import run
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.errors import ConfigError, ExitCode
from upgrade_gate.fakenode import FakeNode, Faults, NodeSpec, build_fake_node, faults, mi300x_node
from upgrade_gate.fakenode.spec import DMESG_ACA_MODE1_RESET
from upgrade_gate.fleet.agent import CycleResult, judged_condition, needs_patch, unknown
from upgrade_gate.fleet.agent_baseline import configmap_name
from upgrade_gate.fleet.agent_loop import AgentStats, Cadence, MetricsEndpoint, render_agent_metrics
from upgrade_gate.fleet.agent_view import (
    AGENT_PROBES,
    LEFT_OUT,
    agent_policy,
    agent_probes,
    agent_views,
    check_catalogue,
)
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import NodeName, NodeReport, Snapshot, replace
from upgrade_gate.snapshot.build import build_snapshot

NOW = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)
NODE = "gpu-01"


def _agent_snapshot(node: FakeNode) -> Snapshot:
    probes = agent_probes(node.host_root, timeout_s=10.0)
    bundle = capture(LocalRunner(env=node.env(os.environ)), node=NODE, host_root=node.host_root, probes=probes)
    return build_snapshot(bundle)


def _judged(baseline: Snapshot, candidate: Snapshot) -> NodeReport:
    base, seen = agent_views(baseline, candidate)
    report = judge(baselines={NodeName(NODE): base}, candidates=(seen,), plan=None, policy=agent_policy(load_policy()),
                   now="2026-12-05T12:00:00Z", workers=1)  # fmt: skip
    (node,) = report.nodes
    return node


@pytest.fixture(scope="module")
def spec() -> NodeSpec:
    return with_vfs(mi300x_node(NODE, seed=3), 4)


@pytest.fixture(scope="module")
def baseline(spec: NodeSpec, tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    return snapshot_of(build_fake_node(tmp_path_factory.mktemp("agent-base") / NODE, spec))


def test_agent_probes_cover_the_catalogue_and_open_no_device() -> None:
    check_catalogue()  # every catalogue probe is the agent's or left out with a reason
    assert not set(AGENT_PROBES) & set(LEFT_OUT)
    gpu_tools = {"rocminfo", "amd-smi", "rocm-smi", "ibv_devinfo", "upgrade-gate"}
    probes = agent_probes(Path("/"), timeout_s=7.0)
    assert {p.name for p in probes} <= set(AGENT_PROBES)
    assert not any(p.argv and p.argv[0] in gpu_tools for p in probes), [p.argv[:2] for p in probes]
    assert {p.timeout_s for p in probes} == {7.0}


def test_agent_view_of_an_unchanged_node_is_no_drift(spec: NodeSpec, baseline: Snapshot, tmp_path: Path) -> None:
    """The agent's partial capture judged against a full baseline: nothing it did not observe is a
    finding (the GPUs, amd-smi, the verbs-only NIC fields and rocm_libs are trimmed alike)."""
    node = _judged(baseline, _agent_snapshot(build_fake_node(tmp_path / NODE, spec)))
    assert [(f.rule, f.message) for f in node.findings if f.severity.value == "block"] == []
    condition = judged_condition(node, now=NOW)
    assert (condition["status"], condition["reason"]) == ("False", "NoDrift")


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        (lambda s: replace(s, driver_version="6.8.5"), "software.driver"),
        (lambda s: faults.downgrade_nic_link(s, 0, width=8), "pcie.downgrade"),
        (lambda s: with_vfs(s, 3), "sriov.vf_count"),
        (lambda s: faults.take_port_down_in_rdma_link_only(s, 2), "nic.port_state"),
        (lambda s: faults.inject_dmesg_event(s, DMESG_ACA_MODE1_RESET), "dmesg.fatal"),
        (lambda s: replace(s, bios_version="2.3"), "host"),
    ],
    ids=["driver", "nic-link", "vfs", "port-down", "ras-event", "bios"],
)
def test_agent_view_drift_sets_the_condition_true(
    spec: NodeSpec, baseline: Snapshot, tmp_path: Path, change: object, rule: str
) -> None:
    drifted = change(spec)  # type: ignore[operator]
    node = _judged(baseline, _agent_snapshot(build_fake_node(tmp_path / NODE, drifted)))
    condition = judged_condition(node, now=NOW)
    assert condition["status"] == "True", [(f.rule, f.message) for f in node.findings]
    blocking = [str(f.rule) for f in node.findings if f.severity.value == "block"]
    assert any(r.startswith(rule) for r in blocking), blocking
    assert condition["reason"] == blocking[0]


@pytest.mark.parametrize("tool", ["lspci", "dmesg", "uname"])
def test_agent_view_missing_evidence_is_unknown_never_no_drift(
    spec: NodeSpec, baseline: Snapshot, tmp_path: Path, tool: str
) -> None:
    """A required probe that cannot run (its tool gone after the change) is Unknown: fail closed."""
    fake = build_fake_node(tmp_path / NODE, spec, Faults(tools={tool: faults.missing()}))
    condition = judged_condition(_judged(baseline, _agent_snapshot(fake)), now=NOW)
    assert (condition["status"], condition["reason"]) == ("Unknown", "EvidenceMissing"), condition


def test_agent_condition_patch_only_on_change_or_heartbeat() -> None:
    wanted = unknown(NodeName(NODE), "NoBaseline", "none", now=NOW)[0]
    assert needs_patch(None, wanted, now=NOW, heartbeat_s=300)
    fresh = {**wanted, "lastHeartbeatTime": "2026-12-05T11:58:00Z"}
    assert not needs_patch(fresh, wanted, now=NOW, heartbeat_s=300)
    assert needs_patch(fresh, wanted, now=NOW, heartbeat_s=60)  # heartbeat due
    assert needs_patch({**fresh, "status": "False"}, wanted, now=NOW, heartbeat_s=300)
    assert needs_patch({**fresh, "lastHeartbeatTime": "garbage"}, wanted, now=NOW, heartbeat_s=300)
    assert needs_patch({**fresh, "lastHeartbeatTime": "2026-12-05T13:00:00Z"}, wanted, now=NOW, heartbeat_s=300)


def test_agent_cadence_slots_jitter_and_overrun() -> None:
    c = Cadence(interval_s=30.0, jitter_s=3.0)
    assert c.next_slot(100.0, 100.0, -1, 0.5) == (0, 101.5, 0)  # the first cycle within the jitter
    assert c.next_slot(100.0, 101.6, 0, 0.0) == (1, 130.0, 0)
    assert c.next_slot(100.0, 195.0, 1, 0.0) == (4, 220.0, 2)  # a 95 s cycle: slots 2 and 3 skipped
    assert c.next_slot(100.0, 130.0, 0, 0.999)[1] < 133.0


@pytest.mark.parametrize(("interval", "jitter"), [(4.9, 0.0), (3601.0, 0.0), (30.0, 15.1), (30.0, -1.0)])
def test_agent_cadence_bounds_are_config_errors(interval: float, jitter: float) -> None:
    with pytest.raises(ConfigError, match=r"agent (interval|jitter)"):
        Cadence(interval_s=interval, jitter_s=jitter)


def test_agent_cli_refuses_a_bad_interval_and_no_node(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["fleet", "agent", "--node", NODE, "--interval", "1"]) == ExitCode.BAD_INPUT
    assert "agent interval 1s: must be 5-3600s" in capsys.readouterr().err
    assert run(["fleet", "agent", "--node", "Bad_Name"]) == ExitCode.BAD_INPUT
    os.environ.pop("NODE_NAME", None)
    assert run(["fleet", "agent"]) == ExitCode.USAGE
    assert "give --node or set NODE_NAME" in capsys.readouterr().err


def _metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_agent_metrics_parse_and_say_unknown_when_a_cycle_failed() -> None:
    condition, report = unknown(NodeName(NODE), "NoBaseline", "no baseline", now=NOW)
    result = CycleResult(condition=condition, report=report, taken_at=None, patched=True, duration_s=0.25, cpu_s=0.1)
    stats = AgentStats(cycles=3, failed=1, skipped=2, last=result)
    m = _metrics(render_agent_metrics(NODE, stats, now=NOW))
    n = ("node", NODE)
    assert m[("upgrade_gate_drift_condition", (n, ("status", "Unknown")))] == 1
    assert m[("upgrade_gate_drift_condition", (n, ("status", "False")))] == 0
    assert m[("upgrade_gate_blocked", (n,))] == 1
    assert m[("upgrade_gate_agent_cycles_total", (n,))] == 3
    assert m[("upgrade_gate_agent_failed_cycles_total", (n,))] == 1
    assert m[("upgrade_gate_agent_skipped_cycles_total", (n,))] == 2
    assert m[("upgrade_gate_agent_cycle_cpu_seconds", (n,))] == 0.1
    no_drift = replace(result, condition={**condition, "status": "False"})
    failed = AgentStats(cycles=4, failed=2, last=no_drift, last_error="API down")
    m = _metrics(render_agent_metrics(NODE, failed, now=NOW))
    assert m[("upgrade_gate_drift_condition", (n, ("status", "Unknown")))] == 1  # not the stale False


def test_agent_metrics_endpoint_serves_and_goes_stale() -> None:
    endpoint = MetricsEndpoint(0, stale_after_s=3600, address="127.0.0.1")
    try:
        base = f"http://127.0.0.1:{endpoint.port}"
        endpoint.publish("upgrade_gate_agent_cycles_total 1\n", cycle_end=None)
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as answer:
            assert answer.read() == b"upgrade_gate_agent_cycles_total 1\n"
            assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        with urllib.request.urlopen(f"{base}/healthz", timeout=10) as answer:
            assert answer.status == 200
        endpoint.publish("x 1\n", cycle_end=-1e9)  # the last cycle ended long ago: a hung loop
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/healthz", timeout=10)
        assert err.value.code == 503
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/other", timeout=10)
        assert err.value.code == 404
    finally:
        endpoint.close()


def test_agent_configmap_names_are_valid_for_any_node_name() -> None:
    assert configmap_name("gpu-01") == "upgrade-gate-baseline-gpu-01"
    long = "n" * 250
    assert len(configmap_name(long)) <= 253 and configmap_name(long) != configmap_name("m" * 250)


def test_agent_baseline_too_large_for_a_configmap_is_refused_by_name() -> None:
    from upgrade_gate.errors import InputError
    from upgrade_gate.fleet.agent_baseline import MAX_PUBLISHED_BYTES, baseline_configmap

    noise = os.urandom(MAX_PUBLISHED_BYTES + 1024)  # incompressible
    with pytest.raises(InputError, match=r"node gpu-01: its baseline is \d+ bytes gzip'd"):
        baseline_configmap(NodeName(NODE), noise, "c0ffee", "upgrade-gate-baselines")
    cm = baseline_configmap(NodeName(NODE), b'{"node": 1}', "c0ffee", "upgrade-gate-baselines")
    assert cm["data"]["digest"].startswith("sha256:") and cm["data"]["node"] == NODE


class _FlakyAgent:
    """A fault double: the API fails in the first cycle, then answers."""

    def __init__(self) -> None:
        self.settings = type("S", (), {"node": NodeName(NODE)})()
        self.calls = 0
        self.stopped: list[str] = []

    def cycle(self, now: datetime) -> CycleResult:
        from upgrade_gate.fleet.errors import KubeConnectionError

        self.calls += 1
        if self.calls == 1:
            raise KubeConnectionError("GET /api/v1/nodes/gpu-01: connection refused")
        condition, report = unknown(NodeName(NODE), "NoBaseline", "none", now=now)
        return CycleResult(condition=condition, report=report, taken_at=None, patched=False, duration_s=0, cpu_s=0)

    def stop(self, now: datetime, why: str) -> None:
        self.stopped.append(why)


class _NoWait(threading.Event):
    """The loop's wait, with the time already passed (no test waits for a cadence)."""

    def wait(self, timeout: float | None = None) -> bool:
        return False


def test_agent_loop_counts_a_failed_cycle_goes_on_and_leaves_unknown_at_the_end(tmp_path: Path) -> None:
    from upgrade_gate.fleet.agent_loop import run_agent

    agent, lines = _FlakyAgent(), []
    stats = run_agent(agent, Cadence(interval_s=5.0, jitter_s=0.0), wall=lambda: NOW, max_cycles=3,  # type: ignore[arg-type]
                      stop=_NoWait(), textfile=tmp_path / "a.prom", log=lines.append)  # fmt: skip
    assert (stats.cycles, stats.failed, agent.calls) == (3, 1, 3)
    assert lines[0] == "upgrade-gate agent: node gpu-01: cycle failed: GET /api/v1/nodes/gpu-01: connection refused"
    assert "UpgradeGateDrift=Unknown NoBaseline: none" in lines[1] and len(lines) == 2  # logged on change only
    assert agent.stopped == ["after 3 cycles"]
    m = _metrics((tmp_path / "a.prom").read_text(encoding="utf-8"))
    assert m[("upgrade_gate_agent_failed_cycles_total", (("node", NODE),))] == 1
