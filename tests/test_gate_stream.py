"""The streaming gate's workers: node reports travel back msgpack-encoded and decode to the same reports."""

from __future__ import annotations

from pathlib import Path

from tests.judge_scenarios import mi300x_snapshot, set_firmware, upgraded
from upgrade_gate.cli.gate_stream import gate_streaming
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import replace
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


def test_gate_stream_json_report_streamed_node_by_node_is_the_canonical_document(tmp_path: Path) -> None:
    import json

    from upgrade_gate.judge.judge import judge
    from upgrade_gate.report.interface import ReportContext
    from upgrade_gate.report.json_report import render_json, report_to_dict, write_json

    bases = {}
    cands = []
    for i in range(3):
        base = replace(mi300x_snapshot(seed=i + 1), node=replace(mi300x_snapshot().node, name=f"n{i}"))
        bases[base.node.name] = base
        cand = replace(upgraded(seed=i + 5), node=base.node)
        cands.append(set_firmware(cand, "PLDM_BUNDLE", "01.25.17.07") if i == 1 else cand)
    report = judge(baselines=bases, candidates=cands, plan=None, policy=load_policy(), now="2026-12-01T00:00:00Z")
    ctx = ReportContext(report=report, baselines=bases, candidates={c.node.name: c for c in cands})
    path = tmp_path / "report.json"
    write_json(ctx, path)
    text = path.read_text(encoding="utf-8")
    assert text == render_json(ctx)
    # the layout every other file uses (json.dumps sort_keys, indent 2), for a report without exponent floats
    assert text == json.dumps(report_to_dict(report), sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    empty = replace(report, nodes=())
    assert render_json(ReportContext(report=empty)) == (
        json.dumps(report_to_dict(empty), sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    )


def test_gate_stream_ends_its_workers_without_signalling_them(tmp_path: Path) -> None:
    """The CLI installs Python SIGTERM handlers that forked workers inherit; `Pool.terminate` signalled
    them at the end of every run and a worker could hang on the task queue's lock. Now a run that
    completes ends its pool by close/join: no process of the tree receives SIGTERM."""
    import os
    import signal

    marker = tmp_path / "signalled"

    def record(signum: int, frame: object) -> None:
        marker.write_text(f"{os.getpid()}\n", encoding="utf-8")
        raise SystemExit(143)

    names = [f"node-{i:02d}" for i in range(4)]
    bases = [
        replace(mi300x_snapshot(seed=i + 1), node=replace(mi300x_snapshot().node, name=n)) for i, n in enumerate(names)
    ]
    paths = []
    for i, base in enumerate(bases):
        path = tmp_path / f"{base.node.name}.json"
        write_snapshot(replace(upgraded(seed=i + 7), node=base.node), path)
        paths.append(path)
    previous = signal.signal(signal.SIGTERM, record)
    try:
        with BaselineStore(tmp_path / "store") as st:
            st.save(bases, message="baselines")
            report = gate_streaming(
                st, None, paths, plan=None, policy=load_policy(), now="2026-12-01T00:00:00Z", workers=2
            )
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert [n.node for n in report.nodes] == names
    assert not marker.exists(), f"a worker was sent SIGTERM: {marker.read_text(encoding='utf-8')}"
