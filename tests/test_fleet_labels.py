"""CVF / upgrade-gate label keys, node-name validation and Job names (pure).

Label values (the one sanitiser, `validate.cvf.label_value`) are pinned in tests/test_cvf_names.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from upgrade_gate.errors import ConfigError, ExitCode
from upgrade_gate.fleet import labels
from upgrade_gate.fleet.errors import InvalidNameError
from upgrade_gate.model import NodeName, PhaseStatus
from upgrade_gate.validate import cvf


def test_labels_cvf_keys_match_design() -> None:
    assert labels.PHASE_LABELS == {
        1: "amd.com/gpu-hw-acceptance",
        2: "amd.com/gpu-mesh-validation",
        3: "amd.com/nic-health",
        4: "amd.com/rail-bandwidth",
        5: "amd.com/cluster-validation-status",
    }
    assert labels.CVF_CANDIDATE == "amd.com/cluster-validation-candidate"
    assert cvf.failure_reason_key(labels.NIC_HEALTH) == "amd.com/nic-health-failure-reason"
    assert cvf.measured_bw_key(labels.GPU_MESH_VALIDATION) == "amd.com/gpu-mesh-validation-measured-bw"
    assert labels.NFD_AMD_GPU == "feature.node.kubernetes.io/amd-gpu"
    assert labels.NFD_AMD_NIC == "feature.node.kubernetes.io/amd-nic"
    assert {cvf.status_label(s) for s in PhaseStatus} == {"passed", "failed", "skipped", None}
    assert labels.CVF_CONFIGMAP == "cluster-validation-config" and labels.GPU_RESOURCE == "amd.com/gpu"


def test_labels_every_key_is_a_valid_qualified_name() -> None:
    keys = [
        *labels.PHASE_LABELS.values(),
        *(cvf.failure_reason_key(k) for k in labels.PHASE_LABELS.values()),
        *(cvf.measured_bw_key(k) for k in labels.PHASE_LABELS.values()),
        labels.CVF_CANDIDATE,
        labels.CANARY,
        labels.CHANGE_ID,
        labels.WINDOW_STATE,
        labels.NODE_CLASS,
        labels.NODE,
        labels.RUN_ID,
        labels.PURPOSE,
        labels.CORDONED_BY,
    ]
    assert all(labels.is_qualified_name(k) for k in keys)


@pytest.mark.parametrize(
    "name",
    ["gpu-01", "node.rack3.dc1", "a", "x" * 253],
)
def test_labels_validate_node_name_accepts_dns_subdomains(name: str) -> None:
    assert labels.validate_node_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["GPU-01", "gpu_01", "-gpu", "gpu-", "gpu 01", "", "x" * 254, "a..b", "gpu-01,gpu-02", "gpu=1", "a/b"],
)
def test_labels_validate_node_name_rejects_and_names_the_node(name: str) -> None:
    with pytest.raises(InvalidNameError) as info:
        labels.validate_node_name(name)
    assert repr(name) in str(info.value)
    assert isinstance(info.value, ConfigError)
    assert info.value.exit_code == ExitCode.BAD_INPUT


def test_labels_validate_label_value_names_key() -> None:
    with pytest.raises(InvalidNameError, match="upgrade-gate/change-id"):
        labels.validate_label_value("has space", key=labels.CHANGE_ID)


def test_labels_job_name_short_node_kept_verbatim() -> None:
    assert labels.job_name("capture", NodeName("gpu-01"), "r1") == "ug-capture-gpu-01-r1"


def test_labels_job_name_long_or_dotted_node_is_shortened_with_hash() -> None:
    dotted = labels.job_name("phase2", NodeName("gpu-01.rack3.example.com"), "abc123")
    assert labels.is_dns_label(dotted) and len(dotted) <= 63
    long_a = labels.job_name("capture", NodeName("n" * 80 + "a"), "abc123")
    long_b = labels.job_name("capture", NodeName("n" * 80 + "b"), "abc123")
    assert long_a != long_b
    assert all(len(n) <= 63 and labels.is_dns_label(n) for n in (long_a, long_b))


def test_labels_job_name_rejects_bad_node_before_building() -> None:
    with pytest.raises(InvalidNameError, match="'Bad_Node'"):
        labels.job_name("capture", NodeName("Bad_Node"), "r1")


_label = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)


@given(st.lists(_label, min_size=1, max_size=12).map(".".join).filter(lambda n: len(n) <= 253))
def test_labels_job_name_is_always_a_dns_label(node: str) -> None:
    name = labels.job_name("capture", NodeName(node), "r7k2qx")
    assert labels.is_dns_label(name)
    assert name.startswith("ug-capture-") and name.endswith("-r7k2qx")


def test_labels_node_label_value_fits_long_node_names() -> None:
    node = NodeName("gpu-01." + "rack." * 15 + "example.com")
    assert cvf.is_label_value(labels.node_label_value(node))
    assert labels.node_label_value(NodeName("gpu-01")) == "gpu-01"


def test_fleet_modules_do_not_import_kubernetes() -> None:
    code = (
        "import sys\n"
        "import upgrade_gate.fleet.labels, upgrade_gate.fleet.jobs, upgrade_gate.fleet.objects\n"
        "import upgrade_gate.fleet.manifests, upgrade_gate.fleet.executor, upgrade_gate.fleet.launcher\n"
        "import upgrade_gate.fleet.window, upgrade_gate.fleet.window_validate, upgrade_gate.cli.fleet_common\n"
        "import upgrade_gate.fleet.errors, upgrade_gate.fleet.resultframe\n"
        "from upgrade_gate.cli.main import build_app\n"
        "build_app()\n"
        "heavy = sorted(m for m in sys.modules if m == 'kubernetes' or m.startswith('kubernetes.'))\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
