"""Issue 28, item 1: a window with one canary gets a peer for phases 4-5 (through the CLI, on the double).

The 16-node cluster and baselines of tests/test_fleet_window.py; the plan is restricted to one class by
`--selector`, so the class's share is one canary. The same on the real control plane:
tests/test_fleet_window_field_real.py.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.test_fleet_window import JOB_OPTS, PLAN, WINDOW, Env, apply_change, baseline, changed, env
from upgrade_gate.cli.main import run
from upgrade_gate.fleet.labels import CORDONED_BY, PEER_OF

__all__ = ["baseline", "env"]  # the fixtures, shared with tests/test_fleet_window.py

pytest_plugins = ["tests.k8s.fixtures"]  # kube_cluster

CLASS_A = "upgrade-gate/node-class=mi300x-8gpu"


def _window(env: Env) -> dict[str, object]:
    text = subprocess.run(["git", "-C", str(env.store), "show", f"HEAD:windows/{WINDOW}.json"], check=True,
                          capture_output=True, text=True).stdout  # fmt: skip
    doc = json.loads(text)
    assert isinstance(doc, dict)
    return doc


def test_window_one_canary_pairs_with_a_held_and_released_peer(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    """plan names the peer; validate cordons and taints it only for phases 4-5 (audited), passes, and the
    peer ends with no cordon, taint, annotation or label of ours; rollback clears the canary's CVF labels."""
    st = ["--store", str(env.store)]
    assert env.cli("window", "plan", "--plan", str(PLAN), *st, "--selector", CLASS_A) == 0
    out = capsys.readouterr().out
    assert "canary gpu-a-02  class mi300x-8gpu  idle" in out  # gpu-a-01 runs a workload
    assert "peer gpu-a-03  class mi300x-8gpu  for phases 4-5 only" in out, out
    assert env.cli("window", "start", "--id", WINDOW, *st) == 0
    assert env.cluster.node("gpu-a-03")["spec"].get("unschedulable") is None  # not held before phase 4
    apply_change(env.cluster, env.root, changed("gpu-a-02"))
    capsys.readouterr()
    code = env.cli("window", "validate", "--id", WINDOW, *st, *JOB_OPTS, "--keep-jobs", "1")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "validation PASS" in out and "4:passed 5:passed" in out, out
    kinds = [(j["metadata"]["labels"].get("upgrade-gate/purpose"), j["metadata"]["labels"].get("upgrade-gate/node"))
             for j in env.cluster.objects("jobs", "upgrade-gate", "batch")]  # fmt: skip
    assert ("phase4", "gpu-a-03") in kinds and len(kinds) == len(set(kinds)), kinds  # newest 1 per node and kind
    doc = _window(env)
    actions = [(h["action"], h.get("note", "")) for h in doc["history"]]  # type: ignore[union-attr]
    assert ("hold-peer", "peer gpu-a-03 cordoned and tainted for phases 4-5") in actions, actions
    assert ("release-peer", "peer gpu-a-03 released (taint and cordon removed)") in actions, actions
    assert doc["peer"] == {"node": "gpu-a-03", "class": "mi300x-8gpu", "phases": [4, 5]}
    peer = env.cluster.node("gpu-a-03")
    assert peer["spec"].get("unschedulable") is None and not peer["spec"].get("taints")
    assert PEER_OF not in peer["metadata"]["annotations"] and CORDONED_BY not in peer["metadata"]["annotations"]
    ours = [
        k for k in peer["metadata"]["labels"] if k.startswith(("amd.com/", "upgrade-gate/canary", "upgrade-gate/w"))
    ]
    assert ours == []  # labels describe the canary only
    canary = env.cluster.node("gpu-a-02")["metadata"]
    assert canary["labels"]["amd.com/rail-bandwidth"] == "passed"
    assert env.cli("window", "rollback", "--id", WINDOW, *st, "--reason", "vendor recall") == 0
    canary = env.cluster.node("gpu-a-02")["metadata"]
    assert [k for k in canary["labels"] if k.startswith("amd.com/")] == []
    assert [k for k in canary["annotations"] if k.startswith("amd.com/")] == []
    assert canary["labels"]["upgrade-gate/window-state"] == "rolled-back"


def test_window_one_canary_without_a_peer_is_refused_at_plan(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    """The only other node of the selection runs a workload: exit 3 at plan time naming why, no window."""
    st = ["--store", str(env.store)]
    selector = "kubernetes.io/hostname in (gpu-a-01,gpu-a-02)"
    assert env.cli("window", "plan", "--plan", str(PLAN), *st, "--selector", selector) == 3
    err = capsys.readouterr().err
    assert "one canary (gpu-a-02, class mi300x-8gpu) and no peer for phases 4-5" in err, err
    assert "gpu-a-01: busy: team-a/training-0" in err, err
    assert run(["window", "status", "--id", WINDOW, *st]) == 3  # no window recorded


def test_window_peer_not_held_once_the_window_has_partners(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    """A later wave (`expand`) that took the peer as a canary, with two canaries of its own: the plan's peer
    is not held (holding a canary of the same window would refuse the run)."""
    from upgrade_gate.fleet.window_state import load_window, save_window
    from upgrade_gate.store.gitstore import BaselineStore

    st = ["--store", str(env.store)]
    assert env.cli("window", "plan", "--plan", str(PLAN), *st, "--selector", CLASS_A) == 0
    with BaselineStore(env.store) as store:  # what expand records: the next wave's canaries
        doc = dict(load_window(store, WINDOW).doc)
        doc["canaries"] = [
            *doc["canaries"],
            {"node": "gpu-a-03", "class": "mi300x-8gpu", "idle": True, "busy_pods": []},
        ]
        save_window(store, doc, "test: a wave of two canaries")
    assert env.cli("window", "start", "--id", WINDOW, *st) == 0
    for name in ("gpu-a-02", "gpu-a-03"):
        apply_change(env.cluster, env.root, changed(name))
    capsys.readouterr()
    code = env.cli("window", "validate", "--id", WINDOW, *st, *JOB_OPTS)
    out = capsys.readouterr().out
    assert code == 0 and "hold-peer" not in out, out
