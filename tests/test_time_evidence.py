"""Time is evidence (issue 26, case 9): a candidate taken after the wall clock, or before its own
baseline, beyond the policy's clock skew, blocks (`evidence.taken_at`), with both times named; the
clock is read by the caller and passed in, so forked `gate` workers judge against the same instant.
The wall clock, not the report's `now`: `--now` dates the report (replays, goldens)."""

from __future__ import annotations

from pathlib import Path

import pytest
from msgspec.structs import replace

from tests.judge_scenarios import NOW, judge_one, mi300x_snapshot
from tests.test_cli_exit_codes import one_error_line, ug
from upgrade_gate.errors import ExitCode
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import Finding, GateReport, Severity, Snapshot, Verdict
from upgrade_gate.snapshot.io import write_snapshot
from upgrade_gate.store.gitstore import BaselineStore

RULE = "evidence.taken_at"
BASE_AT = "2026-11-29T09:00:00Z"  # mi300x_snapshot()'s


def taken(at: str) -> Snapshot:
    return mi300x_snapshot(taken_at=at)


def time_findings(report: GateReport) -> list[Finding]:
    return [f for n in report.nodes for f in n.findings if f.rule == RULE]


@pytest.mark.parametrize("at", ["2099-01-01T00:00:00Z", "2026-11-30T12:05:01Z"])
def test_candidate_from_the_future_blocks_naming_both_times(at: str) -> None:
    report = judge_one(taken(at), clock=NOW)
    (found,) = time_findings(report)
    assert report.verdict is Verdict.BLOCK and found.severity is Severity.BLOCK
    assert at in found.message and NOW in found.message and "clock skew (300 s)" in found.message
    assert found.path == "taken_at" and found.actual == at


@pytest.mark.parametrize("at", ["1970-01-01T00:00:00Z", "2026-11-29T08:54:59Z"])
def test_candidate_older_than_its_baseline_blocks_naming_both_times(at: str) -> None:
    report = judge_one(taken(at), clock=NOW)
    (found,) = time_findings(report)
    assert report.verdict is Verdict.BLOCK and found.severity is Severity.BLOCK
    assert at in found.message and BASE_AT in found.message and "before its baseline" in found.message


@pytest.mark.parametrize("at", ["2026-11-30T12:05:00Z", "2026-11-29T08:55:00Z", BASE_AT, "2026-11-30T11:59:59Z"])
def test_candidate_within_the_clock_skew_is_no_finding(at: str) -> None:
    assert time_findings(judge_one(taken(at), clock=NOW)) == []


def test_a_leap_second_is_a_time_not_a_crash() -> None:
    # break test 2026-12-07: `23:59:60`, which the schema accepts, made the rule raise (a BLOCK on every gate)
    report = judge_one(taken("2026-11-30T11:59:60Z"), clock=NOW)
    assert time_findings(report) == []
    late = judge_one(taken("2026-11-30T23:59:60Z"), clock=NOW)
    (found,) = time_findings(late)
    assert "could not be evaluated" not in found.message and "2026-11-30T23:59:60Z" in found.message


def test_without_a_clock_only_the_baseline_is_compared() -> None:
    assert time_findings(judge_one(taken("2099-01-01T00:00:00Z"))) == []
    assert len(time_findings(judge_one(taken("1970-01-01T00:00:00Z")))) == 1


def test_clock_skew_is_a_policy_parameter(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(f"name: site\nrules:\n  - {{id: {RULE}, params: {{clock_skew_s: 3600}}}}\n", encoding="utf-8")
    policy = load_policy(site)
    cand = taken("2026-11-30T12:59:00Z")  # 59 min ahead of NOW
    base = mi300x_snapshot()
    report = judge(baselines={base.node.name: base}, candidates=[cand], plan=None, policy=policy, now=NOW, clock=NOW)
    assert time_findings(report) == []
    default = judge(
        baselines={base.node.name: base}, candidates=[cand], plan=None, policy=load_policy(), now=NOW, clock=NOW
    )
    assert "clock skew (300 s)" in time_findings(default)[0].message


def test_forked_workers_judge_against_the_callers_clock() -> None:
    from upgrade_gate.judge.judge import PARALLEL_MIN_NODES

    base = mi300x_snapshot()
    names = [f"node-{i:03d}" for i in range(PARALLEL_MIN_NODES + 2)]
    cands = [replace(taken("2099-01-01T00:00:00Z"), node=replace(base.node, name=n)) for n in names]
    report = judge(baselines={}, candidates=cands, plan=None, policy=load_policy(), now=NOW, clock=NOW, workers=2)
    assert sorted(f.node for f in time_findings(report)) == names


# --------------------------------------------------------------------------- through gate


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    with BaselineStore(path) as st:
        st.save([mi300x_snapshot()], tag="v1")
    return path


@pytest.mark.parametrize("at", ["2099-01-01T00:00:00Z", "1970-01-01T00:00:00Z"])
def test_gate_blocks_a_candidate_dated_2099_or_1970(store: Path, tmp_path: Path, at: str) -> None:
    cand = tmp_path / "cand.json"
    write_snapshot(taken(at), cand)
    proc = ug("gate", "--store", str(store), "--candidate", str(cand), "--now", NOW)
    assert proc.returncode == ExitCode.BLOCK, proc.stderr
    assert RULE in proc.stdout and at in proc.stdout


def test_gate_judges_time_by_the_wall_clock_not_the_reports_now(store: Path, tmp_path: Path) -> None:
    cand = tmp_path / "cand.json"
    write_snapshot(taken("2026-11-30T11:00:00Z"), cand)  # after --now, before the wall clock
    proc = ug("gate", "--store", str(store), "--candidate", str(cand), "--now", "2026-11-01T00:00:00Z")
    assert RULE not in proc.stdout, proc.stdout


def test_gate_passes_the_same_candidate_at_its_own_time(store: Path, tmp_path: Path) -> None:
    cand = tmp_path / "cand.json"
    write_snapshot(mi300x_snapshot(), cand)
    proc = ug("gate", "--store", str(store), "--candidate", str(cand), "--now", NOW)
    assert proc.returncode == ExitCode.PASS, proc.stdout + proc.stderr


def test_gate_refuses_a_clock_skew_below_zero(store: Path, tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(f"name: site\nrules:\n  - {{id: {RULE}, params: {{clock_skew_s: -1}}}}\n", encoding="utf-8")
    cand = tmp_path / "cand.json"
    write_snapshot(mi300x_snapshot(), cand)
    proc = ug("gate", "--store", str(store), "--candidate", str(cand), "--policy", str(policy))
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    assert "clock_skew_s" in one_error_line(proc.stderr)
