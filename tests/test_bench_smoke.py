"""Smoke test of bench/: the modules import and run on their smallest size (no timing asserts)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench import bench_cli, common, detection, fleetgen
from bench.judge_api import judge_call
from upgrade_gate.model import GateReport, Verdict

IMPORTTIME = """\
import time: self [us] | cumulative | imported package
import time:       100 |        100 |     _io
import time:        50 |        150 |   io
import time:       200 |        200 |     scipy.special
import time:       300 |        500 |   scipy
import time:        10 |        660 | upgrade_gate.judge.stats
"""


def test_bench_cli_importtime_chain_names_the_importer() -> None:
    lines = bench_cli.parse_importtime(IMPORTTIME)
    assert [ln.name for ln in lines][-1] == "upgrade_gate.judge.stats"
    scipy = next(i for i, ln in enumerate(lines) if ln.name == "scipy")
    assert bench_cli.chain_of(lines, scipy) == ["upgrade_gate.judge.stats", "scipy"]


def test_bench_common_time_runs_and_table_render() -> None:
    timing = common.time_runs(lambda: None, repeat=3, warmup=1, label="noop")
    assert len(timing.runs) == 3 and timing.low <= timing.median <= timing.high
    assert common.table(("a", "b"), [(1, 2)]).splitlines()[2] == "| 1 | 2 |"


def test_bench_detection_field_rules_behave_as_documented() -> None:
    cvf = detection.block_rate(detection.cvf_method(), cv=0.03, drop=0.10, trials=200, seed=1)
    superbench = detection.block_rate(detection.superbench_method(), cv=0.01, drop=0.30, trials=200, seed=1)
    assert cvf == 0.0  # 252 GB/s never falls below CVF's 100 GB/s floor
    assert superbench == 1.0
    metrics = detection.node_metrics([("mesh/all_reduce/busbw/1073741824", "GB/s", 300.0)], samples=5, rail_samples=1)
    assert len(metrics) == 36 and metrics[0].group == "mesh-large"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> fleetgen.Template:
    """A small real-format template: one fake node, phases 0 and 2 only (the fast ones)."""
    return fleetgen.build_template(tmp_path_factory.mktemp("bench"), phases=frozenset({0, 2}))


def test_bench_fleetgen_derives_distinct_nodes_and_injects_faults(template: fleetgen.Template, tmp_path: Path) -> None:
    nodes = list(fleetgen.derive_fleet(template, 3, fault_rate=1.0))
    assert [n.fault for n in nodes] == ["order", "vf", "link"]
    assert len({n.candidate.gpus[0].serial for n in nodes}) == 3
    assert nodes[0].candidate.gpus[0].bdf == nodes[0].baseline.gpus[-1].bdf  # reversed order
    path = tmp_path / "template.json"
    fleetgen.save_template(template, path)
    assert fleetgen.load_template(path) == template


def test_bench_judge_call_judges_a_derived_node(template: fleetgen.Template) -> None:
    nodes = list(fleetgen.derive_fleet(template, 1, fault_rate=0.0))
    report = judge_call(include_changes=False)(nodes)
    assert isinstance(report, GateReport) and len(report.nodes) == 1
    assert report.verdict in (Verdict.PASS, Verdict.BLOCK)


def test_bench_detect_judge_default_rule_blocks_a_large_drop() -> None:
    from bench import detect_judge

    params = detect_judge.default_params()
    base = (280.0, 281.0, 279.0, 280.5, 279.5)
    assert detect_judge.stats_blocks(base, tuple(x * 0.7 for x in base), params)
    assert not detect_judge.stats_blocks(base, base, params)
    method = detect_judge.method_for(params)
    blocked = method.decide(np.array([base]), np.array([[x * 0.7 for x in base]]))
    assert blocked.tolist() == [True]


def test_bench_gate_floor_runs_the_real_gate_with_no_rule(tmp_path: Path) -> None:
    """`bench._gate_floor` (the rule-less gate of bench_gate's floor rows) reads and reports every node,
    and judges nothing: a candidate that lost a GPU still passes there, and blocks in `gate`."""
    import json

    from bench import _gate_floor
    from tests.judge_scenarios import named_snapshot, three_node_store
    from upgrade_gate.cli.main import run
    from upgrade_gate.model import replace
    from upgrade_gate.snapshot.io import write_snapshot

    store = three_node_store(tmp_path / "store")
    store.close()
    folder = tmp_path / "candidates"
    folder.mkdir()
    for i in range(3):
        snap = named_snapshot(f"node-{i}", seed=i + 1)
        if i == 1:
            snap = replace(snap, gpus=snap.gpus[:-1])
        write_snapshot(snap, folder / f"node-{i}.json")
    args = ["gate", "--store", str(tmp_path / "store"), "--candidates", str(folder), "--now", "2025-06-08T12:00:00Z"]
    assert _gate_floor.main([*args, "--report", f"json:{tmp_path / 'floor.json'}"]) == 0
    floor = json.loads((tmp_path / "floor.json").read_text())
    assert [(n["node"], n["verdict"], n["findings"]) for n in floor["nodes"]] == [
        (f"node-{i}", "PASS", []) for i in range(3)
    ]
    assert run([*args, "--report", f"json:{tmp_path / 'gate.json'}"]) == 1  # the driver put the judge back
    gate = json.loads((tmp_path / "gate.json").read_text())
    assert [n["verdict"] for n in gate["nodes"]] == ["PASS", "BLOCK", "PASS"]
