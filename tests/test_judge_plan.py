"""Change plans: loading, strict validation naming file and field, what a plan explains."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.judge_scenarios import NOW, mi300x_snapshot, upgrade_plan, upgraded
from upgrade_gate.errors import ConfigError, ExitCode, NotFoundError
from upgrade_gate.judge.diff import diff_snapshots
from upgrade_gate.judge.plan import explain, glob_match, load_plan, mark_expected, plan_from_dict, version_matches

PLANS = FIXTURES / "judge" / "plans"


def test_plan_load_reads_every_section() -> None:
    plan = load_plan(PLANS / "rocm-6.2.0.yaml")
    assert plan.id == "rocm-6.2.0"
    assert plan.change.rocm is not None and plan.change.rocm.to_version == "6.2.0"
    assert plan.change.rocm.from_version == "6.1.3"
    assert plan.accept_paths[0].path == "gpus[*].firmware.RLC" and not plan.accept_paths[0].has_to
    assert plan.accept_metrics[0].shift == -0.02 and plan.accept_metrics[0].tolerance == 0.08
    assert (plan.canaries.max_fraction, plan.canaries.min_nodes, plan.canaries.cap) == (0.10, 1, 4)


@pytest.mark.parametrize(
    ("name", "field"),
    [
        ("bad-unknown-key.yaml", "targt"),
        ("bad-version-float.yaml", "$.change.rocm.to"),
        ("bad-canary-fraction.yaml", "$.canaries.max_fraction"),
    ],
)
def test_plan_bad_file_is_config_error_naming_file_and_field(name: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_plan(PLANS / name)
    assert name in str(info.value) and field in str(info.value)
    assert info.value.exit_code is ExitCode.BAD_INPUT


def test_plan_unknown_accept_field_is_named() -> None:
    doc = {"id": "p", "change": {}, "accept": [{"metric": "mesh/**", "tolerance": 0.1, "tolerence": 0.2}]}
    with pytest.raises(ConfigError, match=r"accept\[0\]\.tolerence"):
        plan_from_dict(doc, source="x.yaml")


def test_plan_rejects_a_change_to_the_same_version() -> None:
    with pytest.raises(ConfigError, match=r"change\.rocm: from and to"):
        plan_from_dict({"id": "p", "change": {"rocm": {"from": "6.2.0", "to": "6.2.0"}}}, source="x.yaml")


def test_plan_missing_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        load_plan(tmp_path / "nope.yaml")


def test_plan_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("id: x\nchange: {rocm: [\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"plan\.yaml: not YAML/JSON at line"):
        load_plan(path)


@pytest.mark.parametrize(
    ("actual", "target", "ok"),
    [
        ("6.2.0", "6.2.0", True),
        ("6.2.0-66", "6.2.0", True),
        ("6.2.0+build7", "6.2.0", True),
        ("6.8.5-2009582.24.04", "6.8.5", True),
        ("6.2.0-rc1", "6.2.0", False),  # a pre-release is not the release the plan names
        ("6.2.0-ERROR", "6.2.0", False),  # an error text glued to a version
        ("6.2.0-command not found", "6.2.0", False),
        ("6.2.0-", "6.2.0", False),
        ("6.2.0+", "6.2.0", False),
        ("6.2.01", "6.2.0", False),
        ("6.2.1", "6.2.0", False),
        (None, "6.2.0", False),
    ],
)
def test_plan_version_matches_only_exactly_or_with_build_suffix(actual: str | None, target: str, ok: bool) -> None:
    assert version_matches(actual, target, release=True) is ok


def test_plan_firmware_versions_keep_their_vendors_lettered_builds() -> None:
    assert version_matches("1.117.1-a-63", "1.117.1")  # a NIC's firmware build, as ionic spells it
    assert not version_matches("1.117.1-a-63", "1.117.1", release=True)
    assert not version_matches("1.117.10", "1.117.1")


def test_plan_glob_brackets_are_literal() -> None:
    assert glob_match("gpus[*].firmware.RLC", "gpus[serial=692409006566].firmware.RLC")
    assert not glob_match("gpus[*].firmware.RLC", "gpus[serial=1].firmware.RLC_X")
    assert glob_match("pcie[*].width", "pcie[bdf=0000:05:00.0].width")
    assert glob_match("mesh/**", "mesh/all_reduce/busbw/1024")


def _glob_by_backtracking(pattern: str, text: str) -> bool:
    """The glob's meaning as a regular expression (what plan.py compiled before): the reference for small
    patterns, where backtracking is harmless."""
    parts = re.split(r"(\*\*|\*|\?)", pattern)
    table = {"**": ".*", "*": r"[^\[\]]*", "?": "."}
    return re.fullmatch("".join(table.get(p, re.escape(p)) for p in parts), text) is not None


def test_plan_glob_means_what_the_regular_expression_meant() -> None:
    rng = random.Random(29)
    for _ in range(20_000):
        pattern = "".join(rng.choice("ab[]*?./") for _ in range(rng.randint(0, 7)))
        text = "".join(rng.choice("ab[]./*?") for _ in range(rng.randint(0, 9)))
        assert glob_match(pattern, text) == _glob_by_backtracking(pattern, text), (pattern, text)


def test_plan_glob_of_many_stars_does_not_backtrack() -> None:
    """A plan's `accept` globs are input: `**` written 1,500 times before a literal the path lacks made the
    backtracking regular expression run for minutes (break test, 2026-12-07). The automaton keeps one state
    for a run of `**`, and one bit a position otherwise: these return at once."""
    assert not glob_match("*" * 3000 + "X", "gpus[serial=692409006566].firmware.RLC" * 4)
    assert not glob_match("**?" * 500 + "X", "a" * 400)
    assert not glob_match("*a" * 60 + "X", "a" * 200)
    assert glob_match("*a" * 60, "a" * 200)


def test_plan_marks_planned_changes_expected() -> None:
    changes = mark_expected(diff_snapshots(mi300x_snapshot(), upgraded()), upgrade_plan())
    assert {c.path: c.expected_by for c in changes} == {
        "software.amdsmi_version": "change.rocm",
        "software.driver_version": "change.driver",
        "software.rocm_build": "change.rocm",
        "software.rocm_version": "change.rocm",
    }


def test_plan_does_not_explain_a_version_off_target() -> None:
    plan = upgrade_plan()
    assert explain(plan, "software.rocm_version", "6.1.3", "6.2.1") is None
    assert explain(plan, "software.rocm_version", "6.1.2", "6.2.0") is None  # wrong starting point
    assert explain(None, "software.rocm_version", "6.1.3", "6.2.0") is None


def test_plan_firmware_and_accept_entries_explain_changes() -> None:
    plan = upgrade_plan(
        change={"firmware": [{"block": "PLDM_*", "to": "01.25.17.07"}]},
        accept=[{"path": "gpus[*].firmware.RLC", "to": "105"}],
    )
    path = "gpus[serial=1].firmware.PLDM_BUNDLE"
    assert explain(plan, path, "01.25.03.12", "01.25.17.07") == "change.firmware[0]"
    assert explain(plan, path, "01.25.03.12", "01.25.16.00") is None
    assert explain(plan, "gpus[serial=1].firmware.RLC", "104", "105") == "accept[0]"
    assert explain(plan, "gpus[serial=1].firmware.RLC", "104", "106") is None


@pytest.mark.parametrize("after", ["N/A", "Error: -2", "", None])
def test_plan_accept_covers_a_change_of_value_not_a_lost_reading(after: str | None) -> None:
    """`accept: gpus[*].firmware.RLC` accepts RLC at another version; RLC unreadable ("N/A", an error
    text, absent) after the change is no version at all, and still blocks (it passed as "accepted")."""
    from tests.judge_scenarios import set_firmware
    from upgrade_gate.judge.judge import judge
    from upgrade_gate.judge.policy import load_policy
    from upgrade_gate.model import Snapshot, Verdict, replace

    plan = load_plan(FIXTURES / "judge" / "plans" / "rocm-6.2.0.yaml")
    base = mi300x_snapshot()

    def verdict(cand: Snapshot) -> Verdict:
        report = judge(baselines={base.node.name: base}, candidates=[cand], plan=plan, policy=load_policy(), now=NOW)
        return report.verdict

    assert verdict(set_firmware(upgraded(), "RLC", "105")) is Verdict.PASS  # a new version: accepted
    if after is None:
        gpus = tuple(
            replace(g, firmware={k: v for k, v in g.firmware.items() if k != "RLC"}) if i == 3 else g
            for i, g in enumerate(upgraded().gpus)
        )
        lost = replace(upgraded(), gpus=gpus)
    else:
        lost = set_firmware(upgraded(), "RLC", after)
    assert verdict(lost) is Verdict.BLOCK
    assert explain(plan, "gpus[serial=X].firmware.RLC", "104", after) is None
    assert explain(plan, "gpus[serial=X].firmware.RLC", "104", "105") == "accept[0]"
    # what ships with ROCm is explained by the ROCm change only when it is a value
    assert explain(plan, "software.amdsmi_version", "24.5.1", "24.6.2") == "change.rocm"
    assert explain(plan, "software.amdsmi_version", "24.5.1", after) is None
