"""The streaming gate's workers: node reports travel back msgpack-encoded and decode to the same reports."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tests.judge_scenarios import mi300x_snapshot, set_firmware, upgraded
from upgrade_gate.cli.gate_stream import gate_streaming
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.snapshot.io import write_snapshot
from upgrade_gate.store.gitstore import BaselineStore


def test_gate_stream_forked_workers_give_the_reports_of_a_single_process(tmp_path: Path) -> None:
    names = [f"node-{i:02d}" for i in range(6)]
    bases = [
        replace(mi300x_snapshot(seed=i + 1), node=replace(mi300x_snapshot().node, name=n)) for i, n in enumerate(names)
    ]
    paths = []
    for i, base in enumerate(bases):
        cand = replace(upgraded(seed=i + 7), node=base.node)
        if i == 3:
            cand = set_firmware(cand, "PLDM_BUNDLE", "01.25.17.07")  # a node with a blocking finding
        path = tmp_path / f"{base.node.name}.json"
        write_snapshot(cand, path)
        paths.append(path)
    with BaselineStore(tmp_path / "store") as st:
        st.save(bases, message="baselines")
        policy = load_policy()
        one = gate_streaming(st, None, paths, plan=None, policy=policy, now="2026-12-01T00:00:00Z", workers=1)
        two = gate_streaming(st, None, paths, plan=None, policy=policy, now="2026-12-01T00:00:00Z", workers=2)
    assert two == one
    assert [n.node for n in two.nodes] == names
    assert any(n.changes for n in two.nodes) and any(n.findings for n in two.nodes)
