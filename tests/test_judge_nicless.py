"""A node class without RDMA NICs can pass when the policy says so (issue 10, "two false BLOCKs"):
`nics.expected_count: {CLASS: 0}`; a class that declares NICs and shows none blocks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.fakenode import NodeSpec, build_fake_node, mi210_node
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import Policy, load_policy
from upgrade_gate.model import GateReport, Severity, Snapshot, Verdict
from upgrade_gate.snapshot.build import build_snapshot

CLASS = "mi210-4gpu"
BASE_POLICY = """
name: nicless
rules:
  - {id: evidence.missing, params: {required_phases: []}}
  - {id: bandwidth.not_comparable, enabled: false}
  - {id: bandwidth.threshold, enabled: false}
"""


def _snap(spec: NodeSpec, root: Path) -> Snapshot:
    node = build_fake_node(root, spec)
    bundle = capture(
        LocalRunner(env=node.env(os.environ)), node=spec.name, host_root=node.host_root, output_check=parser_check()
    )
    return build_snapshot(bundle, node_class=spec.node_class)


@pytest.fixture(scope="module")
def snaps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Snapshot]:
    root = tmp_path_factory.mktemp("nicless")
    return {
        "none": _snap(mi210_node("mi210-lab-01", seed=5, nic_count=0), root / "none"),
        "none-again": _snap(mi210_node("mi210-lab-01", seed=5, nic_count=0), root / "none-again"),
        "two": _snap(mi210_node("mi210-lab-01", seed=5, nic_count=2), root / "two"),
    }


def _policy(tmp_path: Path, extra: str = "") -> Policy:
    path = tmp_path / "policy.yaml"
    path.write_text(BASE_POLICY + extra, encoding="utf-8")
    return load_policy(path)


def _judge(base: Snapshot, cand: Snapshot, policy: Policy) -> GateReport:
    return judge(
        baselines={base.node.name: base}, candidates=[cand], plan=None, policy=policy, now="2026-12-01T00:00:00Z"
    )


def _blocking(report: GateReport) -> list[tuple[str, str | None]]:
    return sorted((f.rule, f.device) for f in report.findings if f.severity is Severity.BLOCK)


def test_nicless_class_declared_without_nics_passes(snaps: dict[str, Snapshot], tmp_path: Path) -> None:
    policy = _policy(tmp_path, f"nics: {{expected_count: {{{CLASS}: 0}}}}\n")
    report = _judge(snaps["none"], snaps["none-again"], policy)
    assert report.verdict is Verdict.PASS, _blocking(report)
    info = {f.device for f in report.findings if f.rule == "evidence.missing" and f.severity is Severity.INFO}
    assert {"ibv_devinfo", "rdma_link"} <= info  # still reported, just not blocking
    assert not policy.phase_applies(3, CLASS) and not policy.phase_applies(4, CLASS)


def test_nicless_undeclared_class_without_nics_blocks_on_the_nic_probes(
    snaps: dict[str, Snapshot], tmp_path: Path
) -> None:
    report = _judge(snaps["none"], snaps["none-again"], _policy(tmp_path))
    assert ("evidence.missing", "ibv_devinfo") in _blocking(report)


def test_nicless_class_that_declares_nics_and_shows_none_blocks(snaps: dict[str, Snapshot], tmp_path: Path) -> None:
    policy = _policy(tmp_path, f"nics: {{expected_count: {{{CLASS}: 2}}}}\n")
    report = _judge(snaps["none"], snaps["none-again"], policy)
    (f,) = [f for f in report.findings if f.rule == "nic.missing"]
    assert f.severity is Severity.BLOCK and f.expected == 2 and f.actual == 0
    assert f"class {CLASS} declares 2 RDMA NICs" in f.message
    # and with its two NICs it passes
    assert _judge(snaps["two"], snaps["two"], policy).verdict is Verdict.PASS


def test_nicless_class_where_nics_show_up_blocks(snaps: dict[str, Snapshot], tmp_path: Path) -> None:
    policy = _policy(tmp_path, "nics: {expected_count: {'*': 0}}\n")
    report = _judge(snaps["none"], snaps["two"], policy)
    assert "nic.missing" in {rule for rule, _ in _blocking(report)}
    (f,) = [f for f in report.findings if f.rule == "nic.missing"]
    assert "declared without RDMA NICs" in f.message and f.actual == 2
