"""The one home of CVF names and label values (issue 17): `validate.cvf`, used by the phases and the fleet.

Label values follow the Kubernetes rule (apimachinery `IsValidLabelValue`): at most 63 characters of
`[A-Za-z0-9._-]`, alphanumeric at both ends, empty allowed. CVF writes only `passed` / `failed` /
`skipped` as values (free text goes into its `-failure-reason` annotations), so the seed has no
sanitiser of CVF's to match; `label_value` keeps every valid value as it is and is pinned below.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from upgrade_gate.fleet import labels
from upgrade_gate.model import NodeName
from upgrade_gate.validate import cvf

RULE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
PACKAGE = Path(__file__).resolve().parent.parent / "upgrade_gate"


@pytest.mark.parametrize(
    "value", ["", "passed", "failed", "skipped", "rocm-6.2.0", "ROCm_6.2.0", "a", "x" * 63, "1.2.3", "a--b", "A_._Z"]
)
def test_cvf_label_value_keeps_every_valid_value(value: str) -> None:
    assert cvf.is_label_value(value)
    assert cvf.label_value(value) == value


@pytest.mark.parametrize("value", ["x" * 64, "-a", "a-", "_a", "a.", "a b", "a/b", "é", "a:b", " "])
def test_cvf_is_label_value_rejects_what_kubernetes_rejects(value: str) -> None:
    assert not cvf.is_label_value(value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # runs of other characters become one '-', '-' runs collapse, ends trimmed, `-<sha256[:8]>` appended
        ("ROCm 6.1.3 -> 6.2.0 (driver 6.8.5)", "ROCm-6.1.3-6.2.0-driver-6.8.5-"),
        ("  gpu 01 ", "gpu-01-"),
        ("x" * 70 + "a", "x" * 54 + "-"),
        ("--", ""),
        ("é", ""),
    ],
)
def test_cvf_label_value_cleans_cuts_and_hashes(text: str, expected: str) -> None:
    import hashlib

    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    assert cvf.label_value(text) == expected + digest


def test_cvf_label_value_keeps_texts_that_clean_up_alike_distinct() -> None:
    assert cvf.label_value("a b") != cvf.label_value("a/b")
    assert cvf.label_value("x" * 70 + "a") != cvf.label_value("x" * 70 + "b")


@given(st.text(max_size=200))
def test_cvf_label_value_is_always_valid_and_stable(text: str) -> None:
    value = cvf.label_value(text)
    assert len(value) <= cvf.MAX_LABEL_VALUE and RULE.fullmatch(value) is not None
    assert cvf.label_value(value) == value  # a value it made is kept as is


def test_fleet_uses_the_one_sanitiser_and_the_cvf_keys() -> None:
    """The duplicates are gone: fleet.labels has no sanitiser or annotation-key helper of its own."""
    for gone in ("sanitize_label_value", "failure_reason_key", "measured_bw_key", "CvfValue", "WindowState",
                 "phase_label", "validate_taint_effect"):  # fmt: skip
        assert not hasattr(labels, gone), gone
    long_node = NodeName("gpu-01." + "rack." * 15 + "example.com")
    assert labels.node_label_value(long_node) == cvf.label_value(long_node)
    assert labels.PHASE_LABELS is cvf.PHASE_LABELS and labels.CVF_CONFIGMAP == cvf.CVF_CONFIGMAP


def _imports_kubernetes(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "kubernetes" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "kubernetes" and not node.level:
            return True
    return False


def test_exactly_one_module_imports_kubernetes() -> None:
    importers = sorted(str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py") if _imports_kubernetes(p))
    assert importers == ["upgrade_gate/fleet/kube/api.py"]
