"""Golden console output (120 columns, no colour) of the gate on four real-path faults, one cause each.

The issue's cases, each on one node of a three-node mi300x-8gpu fleet whose baselines and class
reference come from the same fake nodes: a uniform 20% all_reduce drop, amd-smi broken with rocm-smi
standing in, a missing GPU, the GPU order reversed. Every snapshot is made the way the demo makes
them: fake tools on PATH, `collect.capture`, `snapshot.build_snapshot`, CVF phases 0-3 (see
`upgrade_gate.demo.fleet`). Rewrite the goldens with `pytest --update-goldens` and review the diff.

Each case also proves that grouping changes what is shown, never what blocks: every finding belongs to
exactly one cause, and the report without its causes has the same verdict and the same BLOCK findings.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, check_golden
from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.demo import fleet as demo_fleet
from upgrade_gate.demo.plan import read_policy, write_policy
from upgrade_gate.fakenode import Faults, NodeSpec, build_fake_node, faults
from upgrade_gate.judge.causes import group_causes
from upgrade_gate.judge.judge import judge
from upgrade_gate.model import GateReport, NodeName, Severity, Snapshot, Verdict, replace
from upgrade_gate.report.interface import ConsoleDetail, ReportContext, ReportFormat
from upgrade_gate.report.registry import render
from upgrade_gate.store.aggregate import aggregate_class
from upgrade_gate.validate.config import default_config

GOLDEN = FIXTURES / "console"
NOW = "2026-12-01T00:00:00Z"
TARGET = NodeName("gpu-node-01")
WIDTH = 120


@dataclass(frozen=True)
class Fleet:
    root: Path
    baselines: dict[NodeName, Snapshot]
    gated: dict[str, tuple[GateReport, ReportContext]]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    root = tmp_path_factory.mktemp("console-golden")
    names = demo_fleet.node_names(3)
    before = demo_fleet.gather(
        {n: demo_fleet.node_spec(n, demo_fleet.ROCM_6_1_3) for n in names},
        fleet_root=root / "fleet",
        out=root / "before",
        config=default_config(),
        output_check=parser_check(),
    )
    return Fleet(root=root, baselines={n: e.snapshot for n, e in before.items()}, gated={})


def _missing_gpu(spec: NodeSpec) -> NodeSpec:
    gpus = spec.gpus[:3] + spec.gpus[4:]
    return replace(spec, gpus=gpus, enumeration_order=tuple(range(len(gpus))))


CASES = {
    "bandwidth-drop": (lambda s: faults.scale_mesh_bandwidth(s, 0.8), Faults()),
    "amdsmi-fallback": (lambda s: s, Faults(tools={"amd-smi": faults.nonzero(1, "amd-smi: broken")})),
    "missing-gpu": (_missing_gpu, Faults()),
    "order-reversed": (faults.reverse_enumeration, Faults()),
}


def _gate(fleet: Fleet, case: str) -> tuple[GateReport, ReportContext]:
    if case not in fleet.gated:
        fleet.gated[case] = _judge_case(fleet, case)
    return fleet.gated[case]


def _judge_case(fleet: Fleet, case: str) -> tuple[GateReport, ReportContext]:
    change, tool_faults = CASES[case]
    spec = change(demo_fleet.node_spec(TARGET, demo_fleet.ROCM_6_1_3))
    work = fleet.root / case
    node = build_fake_node(work / "node", spec, tool_faults)
    with contextlib.redirect_stdout(io.StringIO()):
        evidence = demo_fleet._gather_one(TARGET, node, out=work, config=default_config(), output_check=parser_check())
    policy = read_policy(write_policy(work / "policy.yaml"))  # CVF phases 4-5 need networked nodes
    reference = aggregate_class(demo_fleet.NODE_CLASS, list(fleet.baselines.values()))
    report = judge(
        baselines={TARGET: fleet.baselines[TARGET]},
        candidates=[evidence.snapshot],
        plan=None,
        policy=policy,
        references={demo_fleet.NODE_CLASS: reference},
        now=NOW,
    )
    ctx = ReportContext(report=report, baselines=fleet.baselines, candidates={TARGET: evidence.snapshot}, width=WIDTH)
    return report, ctx


@pytest.mark.parametrize("case", sorted(CASES))
def test_console_golden_one_cause_per_fault(fleet: Fleet, case: str, update_goldens: bool) -> None:
    report, ctx = _gate(fleet, case)
    text = render(ReportFormat.CONSOLE, ctx)
    check_golden(GOLDEN / f"{case}.txt", text, update_goldens)
    node = next(n for n in report.nodes if n.node == TARGET)
    assert len(node.causes) == 1, [c.headline for c in node.causes]
    assert not report.fleet_causes
    assert all(len(line) <= WIDTH for line in text.splitlines())
    assert "\x1b" not in text


@pytest.mark.parametrize("case", sorted(CASES))
def test_console_grouping_never_changes_what_blocks(fleet: Fleet, case: str) -> None:
    report, _ = _gate(fleet, case)
    bare = replace(report, nodes=tuple(replace(n, causes=()) for n in report.nodes), fleet_causes=())
    regrouped = group_causes(bare)
    assert regrouped.verdict is report.verdict is Verdict.BLOCK
    for before, after in zip(bare.nodes, regrouped.nodes, strict=True):
        assert before.findings == after.findings
        owned = sorted(i for c in after.causes for i in c.findings)
        assert owned == list(range(len(after.findings)))  # every finding in exactly one cause
        blocking = {i for i, f in enumerate(after.findings) if f.severity is Severity.BLOCK}
        in_block_causes = {i for c in after.causes if c.severity is Severity.BLOCK for i in c.findings}
        assert blocking <= in_block_causes


def test_console_golden_order_reversed_shows_the_permutation_table(fleet: Fleet) -> None:
    _, ctx = _gate(fleet, "order-reversed")
    text = render(ReportFormat.CONSOLE, ctx)
    assert "    was    05:00.0  15:00.0  65:00.0  75:00.0  85:00.0  95:00.0  e5:00.0  f5:00.0" in text
    assert "    now    f5:00.0  e5:00.0  95:00.0  85:00.0  75:00.0  65:00.0  15:00.0  05:00.0" in text


def test_console_summary_prints_one_line_per_node_and_verbose_every_finding(fleet: Fleet) -> None:
    report, ctx = _gate(fleet, "bandwidth-drop")
    summary = render(ReportFormat.CONSOLE, replace(ctx, detail=ConsoleDetail.SUMMARY)).splitlines()
    assert len(summary) == 1 + len(report.nodes)
    assert summary[1].startswith("gpu-node-01  BLOCK  intra-node all_reduce bus bandwidth -20%")
    verbose = render(ReportFormat.CONSOLE, replace(ctx, detail=ConsoleDetail.VERBOSE))
    for finding in report.findings:
        assert f"{finding.rule} [{finding.device}]" in verbose
