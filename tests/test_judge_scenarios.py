"""Golden scenarios on a realistic 8 x MI300X node: the incident and the faults the gate must block.

Each scenario judges one candidate against the node's baseline under the ROCm 6.1.3 -> 6.2.0 plan
with the shipped default policy; the whole report (schema-checked JSON form) is compared with
`tests/fixtures/judge/scenarios/<name>.expected.json` (`pytest --update-goldens` rewrites them).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import FIXTURES, check_golden
from tests.judge_scenarios import (
    SERIALS,
    judge_one,
    lose_vf,
    narrow_link,
    reverse_order,
    scale_metrics,
    set_firmware,
    upgraded,
    with_software,
)
from upgrade_gate.model import GateReport, Severity, Snapshot, Verdict
from upgrade_gate.report.json_report import report_to_dict

GOLDEN = FIXTURES / "judge" / "scenarios"

SCENARIOS: dict[str, tuple[Callable[[], Snapshot], Verdict, set[str]]] = {
    "incident-order-reversed": (lambda: reverse_order(upgraded()), Verdict.BLOCK, {"device.order_changed"}),
    "order-intact": (upgraded, Verdict.PASS, set()),
    "healthy-noise-3pct": (lambda: upgraded(seed=41), Verdict.PASS, set()),
    "vf-lost": (lambda: lose_vf(upgraded()), Verdict.BLOCK, {"sriov.vf_count"}),
    "link-x16-to-x8": (lambda: narrow_link(upgraded()), Verdict.BLOCK, {"pcie.downgrade"}),
    "firmware-outside-plan": (
        lambda: set_firmware(upgraded(), "PLDM_BUNDLE", "01.25.17.07"),
        Verdict.BLOCK,
        {"firmware.unplanned"},
    ),
    "mesh-bandwidth-drop-15pct": (
        lambda: scale_metrics(upgraded(), 0.85, lambda key: key.startswith("mesh/")),
        Verdict.BLOCK,
        {"bandwidth.regression"},
    ),
    "rocm-wrong-version": (
        lambda: with_software(upgraded(), rocm_version="6.2.1", rocm_build="6.2.1-112"),
        Verdict.BLOCK,
        {"software.rocm"},
    ),
}


def _judge(candidate: Snapshot) -> GateReport:
    return judge_one(candidate, tool_version="test")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_judge_scenario_matches_golden(name: str, update_goldens: bool) -> None:
    make, verdict, rules = SCENARIOS[name]
    report = _judge(make())
    assert report.verdict is verdict
    assert {f.rule for f in report.findings if f.severity is Severity.BLOCK} == rules
    check_golden(GOLDEN / f"{name}.expected.json", report_to_dict(report), update_goldens)


def test_judge_incident_prints_the_permutation() -> None:
    report = _judge(reverse_order(upgraded()))
    (finding,) = [f for f in report.findings if f.severity is not Severity.WARN]  # + one inconclusive size
    assert finding.message.startswith(
        f"GPU enumeration order changed: index 0 was 0000:05:00.0 (serial {SERIALS[0]}), "
        f"now 0000:f5:00.0 (serial {SERIALS[7]}); index 1 was 0000:15:00.0"
    )
    assert finding.hint is not None and finding.hint.startswith(
        "pin the baseline order by UUID: export ROCR_VISIBLE_DEVICES=GPU-28246ce5673b4aa0,"
    )


def test_judge_upgrade_changes_are_all_expected_by_the_plan() -> None:
    (node,) = _judge(upgraded()).nodes
    assert node.changes and all(c.expected for c in node.changes)
