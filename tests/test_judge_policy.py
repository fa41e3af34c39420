"""Policy: a closed rule set as data, overlay on the default, CVF thresholds, errors naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from upgrade_gate import schemas
from upgrade_gate.cli.judge_cmds import read_cvf_config
from upgrade_gate.errors import ConfigError, ExitCode
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.judge.rules import REGISTRY
from upgrade_gate.model import Severity

POLICIES = FIXTURES / "judge" / "policies"


def test_policy_schema_enum_is_exactly_the_registry() -> None:
    enum = schemas.load_schema("policy")["properties"]["rules"]["items"]["properties"]["id"]["enum"]
    assert sorted(enum) == sorted(REGISTRY)


def test_policy_default_lists_every_rule_with_its_default_severity() -> None:
    policy = load_policy()
    assert {e.id for e in policy.rules} == set(REGISTRY)
    for entry in policy.rules:
        assert entry.severity is REGISTRY[entry.id].default_severity, entry.id
        assert entry.enabled and entry.applies_to == ()
        assert set(entry.params) == set(REGISTRY[entry.id].params)


def test_policy_overlay_merges_params_and_adds_class_entries() -> None:
    policy = load_policy(POLICIES / "site.yaml")
    assert policy.name == "site-mi300x"
    regression = policy.rule_for("bandwidth.regression", "mi300x-8gpu")
    assert regression is not None
    assert regression.number("tolerance") == 0.05 and regression.number("alpha") == 0.05  # alpha inherited
    assert policy.rule_for("pcie.downgrade", "lab").severity is Severity.WARN  # type: ignore[union-attr]
    assert policy.rule_for("pcie.downgrade", "prod").severity is Severity.BLOCK  # type: ignore[union-attr]
    assert policy.rule_for("identity.unverified", None).severity is Severity.BLOCK  # type: ignore[union-attr]
    assert policy.rule_for("device.order_changed", None) is not None  # not listed: still on
    assert not policy.phase_applies(4, "mi300x-gpu-only") and policy.phase_applies(4, "mi300x-8gpu")
    assert policy.thresholds.mesh_avg_busbw_min_gbs == 110
    assert "thresholds.mesh_avg_busbw_min_gbs" in policy.thresholds.source("mesh_avg_busbw_min_gbs")
    assert policy.ignore_paths == ("node.labels.*",)


def test_policy_without_inherit_runs_only_its_rules_and_names_every_other_off(tmp_path: Path) -> None:
    path = tmp_path / "solo.yaml"
    others = "".join(f"  - {{id: {r}, enabled: false}}\n" for r in sorted(REGISTRY) if r != "device.order_changed")
    path.write_text(f"name: solo\ninherit_default: false\nrules:\n  - {{id: device.order_changed}}\n{others}", "utf-8")
    policy = load_policy(path)
    assert [e.id for e in policy.rules if e.enabled] == ["device.order_changed"]
    entry = policy.rule_for("bandwidth.regression", None)
    assert entry is not None and not entry.enabled
    notice = policy.switched_off()
    assert notice is not None and f"switches off {len(REGISTRY) - 1} rule(s)" in notice
    assert "bandwidth.regression" in notice and "device.order_changed," not in notice


@pytest.mark.parametrize("rules", ["rules: []\n", "rules: [{id: device.order_changed}]\n", ""])
def test_policy_without_inherit_that_leaves_a_rule_out_is_refused(tmp_path: Path, rules: str) -> None:
    """A self-contained policy that forgot rules switched them off without a word: `rules: []` passed a
    reversed GPU order (break test, 2026-12-07). It is refused, naming what it leaves out."""
    path = tmp_path / "solo.yaml"
    path.write_text("name: solo\ninherit_default: false\n" + rules, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_policy(path)
    assert str(err.value).startswith(f"{path}: policy: $.inherit_default: false leaves ")
    assert "bandwidth.regression" in str(err.value) or "and " in str(err.value)
    assert "`enabled: false` switches one off" in str(err.value)


def test_policy_that_switches_rules_off_says_so_and_the_default_does_not(tmp_path: Path) -> None:
    assert load_policy(None).switched_off() is None
    path = tmp_path / "off.yaml"
    path.write_text(
        "name: site\nrules:\n  - {id: device.order_changed, enabled: false}\n"
        "  - {id: pcie.downgrade, enabled: false, applies_to: [lab]}\n",
        encoding="utf-8",
    )
    notice = load_policy(path).switched_off()
    assert notice == (
        f"policy site ({path}) switches off 2 rule(s): device.order_changed, pcie.downgrade for lab; "
        "what they judge is not judged in this verdict"
    )


@pytest.mark.parametrize(
    ("name", "field"),
    [
        ("bad-param.yaml", "$.rules[0].params.tolerence"),
        ("bad-rule.yaml", "$.rules[0].id"),
        ("bad-severity.yaml", "$.rules[0].severity"),
    ],
)
def test_policy_bad_file_is_config_error_naming_file_and_field(name: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_policy(POLICIES / name)
    assert name in str(info.value) and field in str(info.value)
    assert info.value.exit_code is ExitCode.BAD_INPUT


def test_policy_param_types_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("rules: [{id: bandwidth.regression, params: {tolerance: '5%'}}]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"params\.tolerance: expected a number"):
        load_policy(path)
    path.write_text("rules: [{id: metric.threshold, params: {checks: [{metric: x, op: '>=', value: 1}]}}]\n")
    with pytest.raises(ConfigError, match=r"checks\[0\]\.op: '>=' is not one of"):
        load_policy(path)


def test_policy_takes_thresholds_from_the_cvf_configmap() -> None:
    source = FIXTURES / "judge" / "cvf-config.yaml"
    policy = load_policy(None, read_cvf_config(source), cvf_source=str(source))
    t = policy.thresholds
    assert (t.mesh_avg_busbw_min_gbs, t.min_gid_count, t.rail_bw_min_gbits) == (250.0, 2, 380.0)
    assert t.source("mesh_avg_busbw_min_gbs").endswith("cvf-config.yaml: PHASE2_BW_THRESHOLD")
    assert t.cvf_skip_flags == {1: "SKIP_GPU_HW_ACCEPTANCE"}
    assert load_policy().thresholds.source("mesh_avg_busbw_min_gbs") == "CVF default"


def test_policy_file_thresholds_override_the_configmap() -> None:
    policy = load_policy(POLICIES / "site.yaml", {"PHASE2_BW_THRESHOLD": "250"})
    assert policy.thresholds.mesh_avg_busbw_min_gbs == 110


@pytest.mark.parametrize(
    ("mapping", "key"),
    [
        ({"PHASE2_BW_TRESHOLD": "250"}, "PHASE2_BW_TRESHOLD"),
        ({"PHASE2_BW_THRESHOLD": "fast"}, "PHASE2_BW_THRESHOLD"),
        ({"PHASE3_MIN_GID_COUNT": "-1"}, "PHASE3_MIN_GID_COUNT"),
    ],
)
def test_policy_bad_cvf_key_is_config_error_naming_the_key(mapping: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load_policy(None, mapping, cvf_source="cvf.yaml")


def test_policy_cvf_reader_rejects_other_kinds(tmp_path: Path) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text("apiVersion: v1\nkind: Secret\ndata: {}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="expected ConfigMap"):
        read_cvf_config(path)


def test_policy_says_which_rules_it_lowers_so_that_they_cannot_block(tmp_path: Path) -> None:
    # break test 2026-12-07: `severity: info` switched a rule off as surely as `enabled: false`, without a word
    path = tmp_path / "p.yaml"
    path.write_text(
        "name: site\nrules:\n  - {id: workload.throughput, severity: info}\n"
        "  - {id: identity.unverified, severity: info}\n",  # warns by default: lowering it is no news
        encoding="utf-8",
    )
    policy = load_policy(path)
    assert policy.switched_off() == (
        f"policy site ({path}) lowers 1 rule(s) that block by default, so that they cannot block: "
        "workload.throughput (info)"
    )
    assert policy.lowered("workload.throughput", None) and not policy.lowered("identity.unverified", None)
    assert load_policy().switched_off() is None


def test_policy_refuses_a_workload_tolerance_above_one(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("rules: [{id: workload.throughput, params: {tolerance: 5}}]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="tolerance"):
        load_policy(path)
