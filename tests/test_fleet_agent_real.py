"""Issue 28, the node agent on the real control plane (kube-apiserver with RBAC, controller-manager with
the DaemonSet controller, the tests' kubelet running pods as local processes).

The agent runs as `upgrade-gate-agent` and the publisher as `upgrade-gate`, with exactly the rights of
deploy/rbac.yaml + deploy/agent.yaml (bound tokens; the audit log says what each did). The node is a
fake GPU node (its tools on PATH, its sysfs under its host root); the baseline a full capture of it,
saved in a real git store and published with `fleet publish-baselines`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.controlplane import REPO, write_kubeconfig
from tests.k8s.realcluster import NS, RealCluster
from tests.test_validate_support import snapshot_of, with_vfs
from upgrade_gate.cli.main import run
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.fakenode import FakeNode, NodeSpec, build_fake_node, faults, mi300x_node
from upgrade_gate.fakenode.spec import DMESG_ACA_MODE1_RESET
from upgrade_gate.fleet.agent import Agent, AgentSettings
from upgrade_gate.fleet.agent_baseline import BASELINES_NAMESPACE, DIGEST_ANNOTATION, configmap_name
from upgrade_gate.fleet.agent_kube import AgentClient
from upgrade_gate.fleet.errors import KubeForbiddenError
from upgrade_gate.fleet.kube import RetryPolicy
from upgrade_gate.fleet.labels import CANARY
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import NodeName, replace
from upgrade_gate.report.prometheus import CONDITION_TYPE
from upgrade_gate.store.gitstore import BaselineStore

pytest_plugins = ["tests.k8s.fixtures"]  # real_cluster

NODE = "gpu-01"
AGENT_SA = "upgrade-gate-agent"
FAST = RetryPolicy(max_attempts=3, base_delay_s=0.05, max_delay_s=0.2, max_total_s=5.0)
AGENT_DOCS = [d for d in yaml.safe_load_all((REPO / "deploy" / "agent.yaml").read_text(encoding="utf-8")) if d]


@dataclass
class Env:
    """The cluster, the fake node, the store, and a kubeconfig per service account."""

    cluster: RealCluster
    spec: NodeSpec
    fake: FakeNode
    store: Path
    publisher: Path  # kubeconfig of `upgrade-gate`
    agent: Path  # kubeconfig of `upgrade-gate-agent`
    root: Path

    def condition(self, node: str = NODE) -> dict[str, Any] | None:
        conditions = self.cluster.node(node)["status"].get("conditions") or []
        return next((c for c in conditions if c["type"] == CONDITION_TYPE), None)

    def publish(self) -> int:
        return run(["fleet", "publish-baselines", "--store", str(self.store), "--kubeconfig", str(self.publisher)])

    def agent_of(self, fake: FakeNode | None = None, **kw: Any) -> Agent:
        fake = fake or self.fake
        settings = AgentSettings(node=NodeName(NODE), host_root=fake.host_root, **{"heartbeat_s": 300.0, **kw})
        client = AgentClient.from_kubeconfig(str(self.agent), retry=FAST)
        return Agent(client, settings, load_policy(), LocalRunner(env=fake.env(os.environ)))

    def change(self, spec: NodeSpec) -> FakeNode:
        """What happens to the node behind everyone's back: it now runs `spec`."""
        return build_fake_node(self.root / "changed" / NODE, spec)


def _delete_baselines(cluster: RealCluster) -> None:
    for cm in cluster.list(f"/api/v1/namespaces/{BASELINES_NAMESPACE}/configmaps"):
        name = cm["metadata"]["name"]
        if name.startswith("upgrade-gate-baseline-"):
            cluster.cp.request("DELETE", f"/api/v1/namespaces/{BASELINES_NAMESPACE}/configmaps/{name}", ok404=True)


@pytest.fixture
def env(real_cluster: RealCluster, tmp_path: Path) -> Iterator[Env]:
    for doc in AGENT_DOCS:
        if doc["kind"] != "DaemonSet":
            real_cluster.cp.apply(doc)
    spec = with_vfs(mi300x_node(NODE, seed=5), 2)
    fake = build_fake_node(tmp_path / "nodes" / NODE, spec)
    real_cluster.add_node(NODE, node_class="mi300x-8gpu", env=fake.env(os.environ), host_root=fake.host_root)
    store = tmp_path / "store"
    with BaselineStore(store) as st:
        st.init()
        st.save([snapshot_of(fake)], message="baseline of gpu-01")
    global T0  # the agent's clock starts after the baseline was taken (a loaded machine took 20 s to get here)
    T0 = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    agent_kc = write_kubeconfig(tmp_path / "agent.kubeconfig", real_cluster.url, real_cluster.ca,
                                real_cluster.cp.token_for(NS, AGENT_SA))  # fmt: skip
    try:
        yield Env(cluster=real_cluster, spec=spec, fake=fake, store=store, root=tmp_path, agent=agent_kc,
                  publisher=real_cluster.kubeconfig(tmp_path / "publisher.kubeconfig"))  # fmt: skip
    finally:
        real_cluster.cp.request("DELETE", f"/apis/apps/v1/namespaces/{NS}/daemonsets/upgrade-gate-agent", ok404=True)
        _delete_baselines(real_cluster)


def test_real_agent_no_drift_then_drift_on_a_real_node(env: Env) -> None:
    """Published baseline, unchanged node: False/NoDrift on the Node; unchanged again: no write (heartbeat
    not due) and no new judgement (same outputs). A RAS event in dmesg: True/dmesg.fatal. The driver then
    reloads at another version: True/software.driver, the transition time still the RAS event's."""
    assert env.publish() == 0
    digest = env.cluster.annotations(NODE)[DIGEST_ANNOTATION]
    assert digest.startswith("sha256:")
    agent = env.agent_of()
    first = agent.cycle(_now(0))
    assert (first.status, first.patched) == ("False", True), first.condition
    cond = env.condition()
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "NoDrift")
    again = agent.cycle(_now(30))
    assert (again.status, again.patched) == ("False", False)  # nothing changed, heartbeat not due
    assert agent.judgements == 1  # the same probe outputs: the last judgement, no snapshot build
    build_fake_node(env.fake.root, faults.inject_dmesg_event(env.spec, DMESG_ACA_MODE1_RESET))  # in place
    ras = agent.cycle(_now(45))
    assert (ras.status, ras.condition["reason"], agent.judgements) == ("True", "dmesg.fatal", 2), ras.condition

    drifted = env.agent_of(env.change(replace(env.spec, driver_version="6.8.5")))
    result = drifted.cycle(_now(60))
    cond = env.condition()
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", "software.driver"), cond
    assert "6.8.5" in cond["message"] and cond["lastTransitionTime"] == _now(45).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )  # True since the RAS event
    assert result.report.verdict.value == "BLOCK"
    assert env.publish() == 0  # publishing the same store again writes nothing
    assert env.cluster.annotations(NODE)[DIGEST_ANNOTATION] == digest


def test_real_agent_without_a_verified_baseline_is_unknown(env: Env) -> None:
    """No publication: Unknown/NoBaseline. A ConfigMap edited by hand, or one of another node: Unknown/
    BaselineUnverified. Never False without a baseline whose digest the Node names."""
    agent = env.agent_of()
    assert agent.cycle(_now(0)).status == "Unknown"
    cond = env.condition()
    assert cond is not None and (cond["status"], cond["reason"]) == ("Unknown", "NoBaseline"), cond
    assert DIGEST_ANNOTATION in cond["message"]

    assert env.publish() == 0
    path = f"/api/v1/namespaces/{BASELINES_NAMESPACE}/configmaps/{configmap_name(NODE)}"
    cm = env.cluster.cp.request("GET", path)
    forged = snapshot_of(env.change(replace(env.spec, driver_version="6.9.9")))
    import base64
    import gzip

    from upgrade_gate.snapshot.io import dumps_snapshot

    packed = gzip.compress(dumps_snapshot(forged).encode("utf-8"), mtime=0)
    cm["binaryData"]["snapshot.json.gz"] = base64.b64encode(packed).decode("ascii")
    env.cluster.cp.request("PUT", path, cm)
    assert agent.cycle(_now(30)).status == "Unknown"
    cond = env.condition()
    assert cond is not None and (cond["status"], cond["reason"]) == ("Unknown", "BaselineUnverified"), cond
    assert "publication incomplete or the ConfigMap edited" in cond["message"]

    cm = env.cluster.cp.request("GET", path)
    cm["data"]["node"] = "gpu-02"
    env.cluster.cp.request("PUT", path, cm)
    fresh = env.agent_of()  # no cached baseline
    assert fresh.cycle(_now(60)).condition["reason"] == "BaselineUnverified"
    assert "names node 'gpu-02'" in (env.condition() or {}).get("message", "")


def test_real_agent_refused_baseline_read_replaces_a_stale_false(env: Env) -> None:
    """The baseline's read refused (here: a namespace the agent may not read, as after an RBAC mistake)
    after a False: the Node says Unknown/AgentError naming the refusal, not the stale False."""
    assert env.publish() == 0
    assert env.agent_of().cycle(_now(0)).status == "False"
    stale = {"metadata": {"annotations": {DIGEST_ANNOTATION: "sha256:0"}}}  # a new publication to read
    env.cluster.cp.request("PATCH", f"/api/v1/nodes/{NODE}", stale, content_type="application/merge-patch+json")
    result = env.agent_of(namespace="kube-system").cycle(_now(30))
    cond = env.condition()
    assert cond is not None and (cond["status"], cond["reason"]) == ("Unknown", "AgentError"), cond
    assert "refuses to get configmaps" in cond["message"] and result.patched


def test_real_publish_brings_back_a_deleted_baseline(env: Env) -> None:
    """The Node still names the digest but its ConfigMap was deleted: publishing again rewrites it
    (`unchanged`: the Node is not patched) and the agent, which said NoBaseline meanwhile, says False."""
    assert env.publish() == 0
    env.cluster.cp.request("DELETE", f"/api/v1/namespaces/{BASELINES_NAMESPACE}/configmaps/{configmap_name(NODE)}")
    agent = env.agent_of()
    assert agent.cycle(_now(0)).condition["reason"] == "NoBaseline"
    assert env.publish() == 0
    assert agent.cycle(_now(30)).status == "False"


def test_real_agent_canary_is_unknown_in_change_window(env: Env) -> None:
    assert env.publish() == 0
    env.cluster.cp.request("PATCH", f"/api/v1/nodes/{NODE}", {"metadata": {"labels": {CANARY: "rocm-6.2.0"}}},
                           content_type="application/merge-patch+json")  # fmt: skip
    assert env.agent_of().cycle(_now(0)).condition["reason"] == "InChangeWindow"
    cond = env.condition()
    assert cond is not None and cond["status"] == "Unknown" and "rocm-6.2.0" in cond["message"]


def test_real_agent_once_exit_codes(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`fleet agent --once`: 1 while the baseline is missing (Unknown blocks), 0 once published (False)."""
    tools = env.fake.env(os.environ)["PATH"]  # the node's tools first, as in its pod (git after them: the store)
    monkeypatch.setenv("PATH", os.pathsep.join((tools, os.environ.get("PATH", ""))))
    argv = ["fleet", "agent", "--once", "--node", NODE, "--host-root", str(env.fake.host_root),
            "--kubeconfig", str(env.agent)]  # fmt: skip
    assert run(argv) == 1
    assert "UpgradeGateDrift=Unknown NoBaseline" in capsys.readouterr().out
    assert env.publish() == 0
    assert run(argv) == 0
    assert "UpgradeGateDrift=False NoDrift" in capsys.readouterr().out


def test_real_agent_process_sigterm_ends_cleanly_and_leaves_unknown(env: Env, tmp_path: Path) -> None:
    """`fleet agent` as a process: it sets False, then SIGTERM ends it with 143 and one error line, and the
    Node's condition is Unknown/AgentStopped (a stale False would vouch for an unwatched node)."""
    assert env.publish() == 0
    prom = tmp_path / "agent.prom"
    argv = [sys.executable, "-m", "upgrade_gate", "fleet", "agent", "--node", NODE, "--interval", "5", "--jitter",
            "0", "--host-root", str(env.fake.host_root), "--metrics-port", "0", "--textfile", str(prom),
            "--kubeconfig", str(env.agent)]  # fmt: skip
    proc = subprocess.Popen(argv, env=env.fake.env(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        env.cluster.wait_for("the agent's first condition", lambda: (env.condition() or {}).get("status") == "False")
        env.cluster.wait_for("the metrics file", prom.exists)
        assert 'upgrade_gate_drift_condition{node="gpu-01",status="False"} 1' in prom.read_text(encoding="utf-8")
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    errors = [line for line in err.decode().splitlines() if line.startswith("upgrade-gate: error:")]
    assert errors == ["upgrade-gate: error: terminated (SIGTERM)"], err
    assert "Traceback" not in err.decode()
    cond = env.condition()
    assert cond is not None and (cond["status"], cond["reason"]) == ("Unknown", "AgentStopped"), cond


def test_real_agent_daemonset_from_deploy_sets_the_condition(env: Env) -> None:
    """deploy/agent.yaml's DaemonSet itself: the DaemonSet controller puts one pod on the GPU node, the
    pod (the tests' kubelet runs its command, with the node's host root at /host) sets the condition.
    Two changes for the test bed: the kubelet mounts no token, so the agent reads a kubeconfig of the
    same service account from $KUBECONFIG; and its port is 0, as the bed's pods share one network."""
    (daemonset,) = [d for d in AGENT_DOCS if d["kind"] == "DaemonSet"]
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    assert "resources" in container and "amd.com/gpu" not in str(container["resources"])
    assert all(m.get("readOnly") for m in container["volumeMounts"] if m["name"] == "host-root")
    command = [a if a != "9847" else "0" for a in container["command"]]
    daemonset = _with_command(daemonset, command)
    assert env.publish() == 0
    bin_path = os.pathsep.join((str(env.fake.bin_dir), os.path.dirname(sys.executable)))
    env.cluster.add_node(NODE, env={**env.fake.env(os.environ), "PATH": bin_path, "KUBECONFIG": str(env.agent),
                                    "PYTHONPATH": str(REPO)},
                         host_root=env.fake.host_root)  # fmt: skip
    env.cluster.cp.request("POST", f"/apis/apps/v1/namespaces/{NS}/daemonsets", daemonset)
    try:
        cond = env.cluster.wait_for("the DaemonSet's agent to set the condition", env.condition, timeout=120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {_pods_and_logs(env)}") from None
    assert (cond["status"], cond["reason"]) == ("False", "NoDrift"), cond
    pods = env.cluster.list(f"/api/v1/namespaces/{NS}/pods?labelSelector=app.kubernetes.io/component%3Dagent")
    assert [p["spec"]["nodeName"] for p in pods] == [NODE]


def _pods_and_logs(env: Env) -> str:
    out = []
    for pod in env.cluster.list(f"/api/v1/namespaces/{NS}/pods"):
        name = pod["metadata"]["name"]
        try:
            log = env.cluster.cp.request("GET", f"/api/v1/namespaces/{NS}/pods/{name}/log", ok404=True)
        except ValueError as exc:  # the log is text, not JSON: the decoder's message quotes it
            log = str(getattr(exc, "doc", exc))[-2000:]
        out.append(f"{name} {pod['status'].get('phase')} {pod['status'].get('containerStatuses')} log={log!r}")
    return "; ".join(out) or "no pods"


def _with_command(doc: dict[str, Any], command: list[str]) -> dict[str, Any]:
    import copy

    out = copy.deepcopy(doc)
    out["spec"]["template"]["spec"]["containers"][0]["command"] = command
    return out


def test_real_agent_rbac_is_sufficient_and_least_privilege(env: Env) -> None:
    """The audit log: every agent and publisher request succeeded, each grant of deploy/agent.yaml was
    used, and the agent may not list nodes (nor read a ConfigMap outside its namespace). The audit log
    is the session's: only this test's events count."""
    agent_user, publisher_user = f"system:serviceaccount:{NS}:{AGENT_SA}", f"system:serviceaccount:{NS}:upgrade-gate"
    before = {u: len(env.cluster.cp.audit(u)) for u in (agent_user, publisher_user)}
    assert env.publish() == 0
    agent = env.agent_of(heartbeat_s=0.0)
    agent.cycle(_now(0))
    env.cluster.cp.request("PATCH", f"/api/v1/nodes/{NODE}", {"metadata": {"annotations": {DIGEST_ANNOTATION: "x"}}},
                           content_type="application/merge-patch+json")  # fmt: skip
    assert env.publish() == 0  # the annotation no longer matches: the ConfigMap is replaced (update)
    with pytest.raises(KubeForbiddenError):
        agent.client.list_nodes()
    with pytest.raises(KubeForbiddenError):
        agent.client.read_configmap("cluster-validation-config", NS)
    agent.client.close()
    agent_events = env.cluster.cp.audit(agent_user)[before[agent_user] :]
    used = {_grant(e) for e in agent_events if e["responseStatus"]["code"] < 300}
    assert used == {("nodes", "get"), ("nodes/status", "patch"), ("configmaps", "get")}, used
    denied = {_grant(e) for e in agent_events if e["responseStatus"]["code"] == 403}
    assert denied == {("nodes", "list"), ("configmaps", "get")}
    publisher = env.cluster.cp.audit(publisher_user)[before[publisher_user] :]
    writes = [(e["verb"], e["responseStatus"]["code"]) for e in publisher
              if (e.get("objectRef") or {}).get("namespace") == BASELINES_NAMESPACE]  # fmt: skip
    assert writes == [("create", 201), ("create", 409), ("update", 200)], writes  # replaced when it exists


def _grant(event: dict[str, Any]) -> tuple[str, str]:
    ref = event.get("objectRef") or {}
    return ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else ""), event["verb"]


T0 = datetime.now(UTC).replace(microsecond=0)


def _now(offset_s: int) -> datetime:
    """The agent's clock: the real one (the judge refuses a candidate from the future), stepped by tests."""
    return T0 + timedelta(seconds=offset_s)
