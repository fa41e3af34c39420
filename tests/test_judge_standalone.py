"""Issue 27: README workflow 1 on an unchanged healthy node passes with the default policy.

The newcomer's path, followed as written: capture and snapshot the node, `validate` it (phases 0-3:
there is no peer for 4-5), save the baseline, validate again after "the change" (nothing changed) and
`gate` with the shipped default policy. Phases 4-5 are waived only for a stand-alone node (a
validated baseline and a candidate that both lack them); a configuration-only baseline, or one side
that ran them, keeps them required (rules.standalone).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.test_validate_support import FAST, healthy_spec, make_node
from upgrade_gate.cli.main import run
from upgrade_gate.fakenode import FakeNode
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import (
    NodeName,
    PhaseResult,
    PhaseStatus,
    Severity,
    Snapshot,
    Verdict,
    replace,
)
from upgrade_gate.snapshot.io import load_snapshot

NODE = "node-01"


def _cli(node: FakeNode, args: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    with monkeypatch.context() as patch:  # the fake tools alone on PATH, as on the node
        patch.setenv("PATH", str(node.bin_dir))
        return run(args)


@pytest.fixture(scope="module")
def validated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Workflow 1 before the change (capture, snapshot, validate, save) and validate after it."""
    tmp = tmp_path_factory.mktemp("workflow1")
    config = tmp / "cvf.yaml"
    config.write_text(yaml.safe_dump(dict(FAST)), encoding="utf-8")
    node = make_node(tmp / "before", healthy_spec(NODE))
    patch = pytest.MonkeyPatch()
    try:
        bundle, snap, before = tmp / f"{NODE}.tar.gz", tmp / f"{NODE}-snap.json", tmp / f"{NODE}.json"
        host = ["--host-root", str(node.host_root)]
        assert _cli(node, ["capture", "--node", NODE, *host, "--out", str(bundle)], patch) == 0
        assert _cli(node, ["snapshot", str(bundle), "--class", "mi300x-8gpu", "--out", str(snap)], patch) == 0
        validate = ["validate", "--node", NODE, "--class", "mi300x-8gpu", "--config", str(config), *host]
        assert _cli(node, [*validate, "--samples", "5", "--out", str(before)], patch) == 0
        store = tmp / "baselines"
        assert run(["baseline", "save", str(before), "--store", str(store), "--tag", "rocm-6.1.3", "-m", "before"]) == 0
        after = tmp / f"{NODE}-after.json"
        again = make_node(tmp / "after", healthy_spec(NODE))
        validate_again = [*validate[:-2], "--host-root", str(again.host_root)]
        assert _cli(again, [*validate_again, "--samples", "5", "--out", str(after)], patch) == 0
    finally:
        patch.undo()
    return store, before, after


def test_standalone_readme_workflow_1_unchanged_node_passes_with_the_default_policy(
    validated: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    store, _, after = validated
    capsys.readouterr()
    assert run(["gate", "--store", str(store), "--ref", "rocm-6.1.3", "--candidate", str(after)]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out


def _judge(baseline: Snapshot, candidate: Snapshot) -> list[tuple[Severity, str]]:
    report = judge(
        baselines={NodeName(NODE): baseline},
        candidates=[candidate],
        plan=None,
        policy=load_policy(),
        now="2026-12-05T12:00:00Z",
    )
    peer = ("phases[phase=4]", "phases[phase=5]", "baseline.phases[phase=4]", "baseline.phases[phase=5]")
    found = [(f.severity, f.message) for f in report.findings if f.path in peer]
    assert (report.verdict is Verdict.BLOCK) == any(f.severity is Severity.BLOCK for f in report.findings)
    return found


def test_standalone_phases_4_5_are_info_when_neither_side_ran_them(validated: tuple[Path, Path, Path]) -> None:
    _, before, after = validated
    found = _judge(load_snapshot(before), load_snapshot(after))
    assert found and all(s is Severity.INFO and "stand-alone" in m for s, m in found)


def test_standalone_configuration_only_baseline_still_requires_phases_4_5(validated: tuple[Path, Path, Path]) -> None:
    _, before, after = validated
    found = _judge(replace(load_snapshot(before), phases=()), load_snapshot(after))
    assert any(s is Severity.BLOCK and "phase 4" in m for s, m in found)
    assert any(s is Severity.BLOCK and "phase 5" in m for s, m in found)


def test_standalone_a_baseline_that_ran_phase_4_keeps_it_required(validated: tuple[Path, Path, Path]) -> None:
    _, before, after = validated
    base = load_snapshot(before)
    ran = PhaseResult(phase=4, name="rail-bandwidth", status=PhaseStatus.PASSED)
    found = _judge(replace(base, phases=(*base.phases, ran)), load_snapshot(after))
    assert any(s is Severity.BLOCK and "phase 4" in m and "no result" in m for s, m in found)
