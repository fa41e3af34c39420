"""The CVF ConfigMap reader: defaults, the real ConfigMap, upgrade-gate keys, every malformed value."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.errors import ConfigError, NotFoundError
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import default_config, load_cvf_config, parse_cvf_config

REAL = FIXTURES / "validate" / "cluster-validation-config-excerpt.yaml"


def test_validate_config_defaults_are_cvfs() -> None:
    cfg = default_config()
    assert cfg.phase2_bw_threshold == 100.0
    assert (cfg.phase2_start_msg_size, cfg.phase2_start_bytes) == ("1K", 1024)
    assert (cfg.phase2_end_msg_size, cfg.phase2_end_bytes) == ("2G", 2 << 30)
    assert (cfg.phase2_step_factor, cfg.phase2_iter_count, cfg.phase2_warmup_iter_count) == (2, 6, 20)
    assert cfg.phase3_expected_nic_count == 8 and cfg.phase3_amd_nic_pci_ids == ("1dd8:1002",)
    assert cfg.phase3_min_gid_count == 1
    assert (cfg.phase4_rail_count, cfg.phase4_bw_threshold, cfg.phase5_min_workers) == (8, 380.0, 2)
    assert cfg.node_selector_labels == ((cvf.NFD_AMD_GPU, "true"),)
    assert [s.name for s in cfg.stages] == ["gpu-stress", "xgmi-lvl1", "pcie-lvl1", "hbm-lvl1"]
    assert cfg.skip == frozenset() and cfg.samples == 5
    assert cfg.label_keys == dict(cvf.PHASE_LABELS)


def test_validate_config_reads_the_real_configmap_manifest() -> None:
    cfg = load_cvf_config(REAL)
    assert cfg.source == str(REAL)
    assert cfg.phase2_bw_threshold == 100.0 and cfg.mpijob_wait_s == 240.0
    assert cfg.roce_workload_image.endswith("ainic-1.117.1-a-63")
    assert cfg.rccl_thresholds == {"all_reduce_perf": 5.0, "broadcast_perf": 5.0, "reduce_scatter_perf": 5.0}
    assert [(s.framework, s.recipe, s.timeout_s) for s in cfg.stages][:2] == [
        ("RVS", "gst_single", 1800.0),
        ("AGFHC", "xgmi_lvl1", 300.0),
    ]
    assert cfg.skip == frozenset()
    assert "PHASE_NODE_LABEL_SCRIPT" in cfg.ignored_keys and "JOB_NAME" in cfg.ignored_keys
    assert "PHASE2_BW_THRESHOLD" not in cfg.ignored_keys


def test_validate_config_reads_a_plain_mapping_with_yaml_scalars(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(
        "PHASE2_BW_THRESHOLD: 250\nPHASE2_END_MSG_SIZE: 8M\nSKIP_GPU_HW_ACCEPTANCE: true\n"
        "PHASE3_AMD_NIC_PCI_IDS: '1DD8:1002, 15b3:1019'\nNODE_SELECTOR_LABELS: |\n  - a.io/x=1\n  b=2\n"
        "UPGRADE_GATE_NIC_PCIE_GEN: 5\nUPGRADE_GATE_PHASE2_TIMEOUT_S: '30'\nPHASE3_LABEL_KEY: example.com/nic\n",
        encoding="utf-8",
    )
    cfg = load_cvf_config(path)
    assert cfg.phase2_bw_threshold == 250.0 and cfg.phase2_end_bytes == 8 << 20
    assert cfg.skip == frozenset({1})
    assert cfg.phase3_amd_nic_pci_ids == ("1dd8:1002", "15b3:1019")
    assert cfg.node_selector_labels == (("a.io/x", "1"), ("b", "2"))
    assert cfg.nic_pcie_speed_gts == 32.0 and cfg.phase_timeouts_s == {2: 30.0}
    assert cfg.label_keys[3] == "example.com/nic"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("PHASE2_BW_THRESHOLD", "fast", "expected a number"),
        ("PHASE2_BW_THRESHOLD", "-1", "expected a number >= 0"),
        ("PHASE2_START_MSG_SIZE", "1KB", "expected a size"),
        ("PHASE2_STEP_FACTOR", "1", "whole number >= 2"),
        ("PHASE2_ITER_COUNT", "6.5", "expected a whole number"),
        ("PHASE3_AMD_NIC_PCI_IDS", "pensando", "vendor:device"),
        ("SKIP_RCCL_TEST", "yes", "expected true or false"),
        ("NODE_SELECTOR_LABELS", "amd-gpu", "key=value"),
        ("GPU_VALIDATION_STAGES_JSON", "[{", "invalid JSON"),
        (
            "GPU_VALIDATION_STAGES_JSON",
            '[{"Name": "x", "Framework": "DCGM", "Recipe": "r", "TimeoutSeconds": 1}]',
            "RVS",
        ),
        ("TESTS_JSON", '{"tests": [{"name": "all_reduce_perf"}]}', "name and threshold"),
        ("UPGRADE_GATE_NIC_PCIE_GEN", "7", "generation 1-6"),
        ("UPGRADE_GATE_PHASE2_TIMEOUT_S", "0", "positive number"),
        ("PHASE1_LABEL_KEY", "not a key", "label key"),
    ],
)
def test_validate_config_malformed_value_names_key_and_source(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_cvf_config({key: value}, source="cvf.yaml")
    text = str(info.value)
    assert text.startswith(f"cvf.yaml: {key}") and message in text


@pytest.mark.parametrize("key", ["PHASE2_BW_TRESHOLD", "SKIP_NIC_CHECK", "UPGRADE_GATE_NIC_FW", "PHASE6_RAIL_COUNT"])
def test_validate_config_unknown_threshold_like_key_is_an_error(key: str) -> None:
    with pytest.raises(ConfigError, match=rf"cvf.yaml: {key}: unknown key"):
        parse_cvf_config({key: "1"}, source="cvf.yaml")


def test_validate_config_plumbing_keys_are_ignored_and_listed() -> None:
    cfg = parse_cvf_config(
        {"PHASE9_SCRIPT": "#!/bin/bash", "SOME_IMAGE": "x", "PHASE4_NAD_NAME_PREFIX": "n-"}, source="s"
    )
    assert cfg.ignored_keys == ("PHASE4_NAD_NAME_PREFIX", "PHASE9_SCRIPT", "SOME_IMAGE")


def test_validate_config_start_size_above_end_is_an_error() -> None:
    with pytest.raises(ConfigError, match="PHASE2_START_MSG_SIZE: 4G is larger than PHASE2_END_MSG_SIZE 2G"):
        parse_cvf_config({"PHASE2_START_MSG_SIZE": "4G"}, source="s")


def test_validate_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        load_cvf_config(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not YAML"):
        load_cvf_config(bad)
    other = tmp_path / "other.yaml"
    other.write_text("apiVersion: v1\nkind: Secret\ndata: {}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="kind: expected ConfigMap"):
        load_cvf_config(other)
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="expected a ConfigMap"):
        load_cvf_config(listed)


def test_validate_config_stage_skip_and_iterations() -> None:
    stages = (
        '[{"Name": "hbm-lvl1", "Framework": "agfhc", "Recipe": "hbm_lvl1", "TimeoutSeconds": 5,'
        ' "Iterations": 2, "Skip": true}]'
    )
    cfg = parse_cvf_config({"GPU_VALIDATION_STAGES_JSON": stages}, source="s")
    (stage,) = cfg.stages
    assert (stage.framework, stage.iterations, stage.skip) == ("AGFHC", 2, True)


def test_validate_config_skip_flags_remember_which_flag_was_set() -> None:
    cfg = parse_cvf_config({"SKIP_GPU_VALIDATION": "true", "SKIP_RCCL_TEST": "false"}, source="s")
    assert cfg.skip == frozenset({1}) and cfg.skip_flags == {1: "SKIP_GPU_VALIDATION"}
