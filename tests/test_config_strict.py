"""Strict reading of CVF's TESTS_JSON / GPU_VALIDATION_STAGES_JSON and of empty policy documents.

A typo in a test name, a key or a stage must be a ConfigError (exit 3) naming the key, the entry and
the problem, never a threshold or a stage setting silently left out; an empty policy file is not the
default policy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from upgrade_gate.cli.main import run
from upgrade_gate.errors import ConfigError, ExitCode
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.validate import config

EXCERPT = Path(__file__).parent / "fixtures" / "validate" / "cluster-validation-config-excerpt.yaml"
STAGE = {"Name": "gpu-stress", "Framework": "RVS", "Recipe": "gst_single", "TimeoutSeconds": 60}


def _tests(*items: object, **top: object) -> dict[str, str]:
    return {"TESTS_JSON": json.dumps({"tests": list(items), **top})}


def _stages(*items: object) -> dict[str, str]:
    return {"GPU_VALIDATION_STAGES_JSON": json.dumps(list(items))}


def test_config_strict_real_configmap_still_loads() -> None:
    cfg = config.load_cvf_config(EXCERPT)  # CVF's shipped TESTS_JSON, and stages with their `Image`
    assert cfg.rccl_thresholds == {"all_reduce_perf": 5.0, "broadcast_perf": 5.0, "reduce_scatter_perf": 5.0}
    assert [s.name for s in cfg.stages] == ["gpu-stress", "xgmi-lvl1", "pcie-lvl1", "hbm-lvl1"]


def test_config_strict_every_rccl_tests_program_is_a_test_name() -> None:
    items = [{"name": name, "threshold": 1} for name in sorted(config.RCCL_TESTS)]
    assert set(config.parse_cvf_config(_tests(*items), source="s").rccl_thresholds) == set(config.RCCL_TESTS)


def test_config_strict_stage_optional_keys_are_read() -> None:
    stage = {**STAGE, "Image": "docker.io/rocm/test-runner:v1.4.0", "Iterations": 2, "Arguments": "", "Skip": True}
    (read,) = config.parse_cvf_config(_stages(stage), source="s").stages
    assert (read.iterations, read.skip) == (2, True)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            _tests({"name": "all_reduce_pref", "threshold": 500}),
            "cvf.yaml: TESTS_JSON.tests[0].name: 'all_reduce_pref' is not an rccl-tests program (",
        ),
        (
            _tests({"name": ["all_reduce_perf"], "threshold": 5}),
            "cvf.yaml: TESTS_JSON.tests[0].name: ['all_reduce_perf'] is not an rccl-tests program (",
        ),
        (
            _tests(),
            "cvf.yaml: TESTS_JSON.tests: no tests, so phase 5 would have no bandwidth threshold (set SKIP_RCCL_TEST",
        ),
        (
            _tests({"name": "all_reduce_perf", "threshold": 5, "thresold_gbs": 500}),
            "cvf.yaml: TESTS_JSON.tests[0].thresold_gbs: unknown key (expected name, threshold)",
        ),
        (
            _tests({"name": "all_reduce_perf", "threshold": 5}, extra=1),
            "cvf.yaml: TESTS_JSON.extra: unknown key (expected tests)",
        ),
        (
            _tests({"name": "all_reduce_perf", "threshold": 500}, {"name": "all_reduce_perf", "threshold": 0}),
            "cvf.yaml: TESTS_JSON.tests[1].name: 'all_reduce_perf' is listed twice (also tests[0])",
        ),
        (
            _stages({**STAGE, "Iteratons": 10}),
            "cvf.yaml: GPU_VALIDATION_STAGES_JSON[0].Iteratons: unknown key (expected Name, Image, Framework,",
        ),
        (_stages({**STAGE, "skip": True}), "cvf.yaml: GPU_VALIDATION_STAGES_JSON[0].skip: unknown key"),
        (
            _stages(STAGE, {**STAGE, "Framework": "AGFHC", "Recipe": "hbm_lvl1"}),
            "cvf.yaml: GPU_VALIDATION_STAGES_JSON[1].Name: 'gpu-stress' is listed twice (also [0])",
        ),
        (_stages({**STAGE, "Image": ["x"]}), "cvf.yaml: GPU_VALIDATION_STAGES_JSON[0].Image: expected a scalar"),
    ],
)
def test_config_strict_typo_is_a_config_error_naming_key_entry_and_problem(data: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config.parse_cvf_config(data, source="cvf.yaml")
    assert str(info.value).startswith(message), str(info.value)


def test_config_strict_empty_test_list_is_allowed_when_phase5_is_skipped() -> None:
    cfg = config.parse_cvf_config({**_tests(), "SKIP_RCCL_TEST": "true"}, source="s")
    assert cfg.rccl_thresholds == {} and 5 in cfg.skip


@pytest.mark.parametrize("text", ["", "~\n", "null\n", "# truncated by a failed copy\n"])
def test_config_strict_empty_policy_file_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "strict.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{path}: policy: the document is empty$"):
        load_policy(path)


def test_config_strict_empty_policy_exits_3_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "strict.yaml"
    path.write_text("", encoding="utf-8")
    snaps = [str(tmp_path / "before.json"), str(tmp_path / "after.json")]  # the policy is read first
    assert run(["diff", *snaps, "--policy", str(path)]) == ExitCode.BAD_INPUT
    assert f"{path}: policy: the document is empty" in capsys.readouterr().err
