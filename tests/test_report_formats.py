"""Reporters: every format is mapped, golden outputs, JSON valid against its schema, JUnit parses back."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.conftest import FIXTURES, check_golden
from tests.report_sample import sample_report
from upgrade_gate import schemas
from upgrade_gate.report.interface import ReportContext, ReportFormat
from upgrade_gate.report.registry import render

GOLDEN = FIXTURES / "report"
TEXT_FORMATS = {
    ReportFormat.CONSOLE: "console.txt",
    ReportFormat.JSON: "report.json",
    ReportFormat.JUNIT: "junit.xml",
    ReportFormat.MARKDOWN: "summary.md",
}


def test_registry_maps_every_format_to_a_renderer() -> None:
    ctx = ReportContext(report=sample_report())
    for fmt in ReportFormat:
        assert render(fmt, ctx).strip(), fmt


@pytest.mark.parametrize("fmt", sorted(TEXT_FORMATS, key=str))
def test_report_golden_output(fmt: ReportFormat, update_goldens: bool) -> None:
    check_golden(GOLDEN / TEXT_FORMATS[fmt], render(fmt, ReportContext(report=sample_report())), update_goldens)


def test_json_report_validates_against_schema() -> None:
    data = json.loads(render(ReportFormat.JSON, ReportContext(report=sample_report())))
    schemas.validate("report", data, source="t")
    assert data["verdict"] == "BLOCK"
    assert data["nodes"][0]["findings"][0]["rule"] == "device.order_changed"


def test_junit_report_parses_back_with_one_case_per_node_and_cause() -> None:
    root = ET.fromstring(render(ReportFormat.JUNIT, ReportContext(report=sample_report())))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    node_a = suites["gpu-node-01"]
    cases = {c.get("name"): c for c in node_a.iter("testcase")}
    # one case per cause (device.order, bandwidth.regression), one passing case per quiet rule
    assert set(cases) == {"device.order", "bandwidth.regression", "sriov.vf_count"}
    failure = cases["device.order"].find("failure")
    assert failure is not None and "0000:f5:00.0" in (failure.text or "")
    assert "device.order_changed" in (failure.text or "")  # the cause's findings are in its body
    assert cases["sriov.vf_count"].find("failure") is None
    assert node_a.get("failures") == "2"
    node_b_cases = {c.get("name"): c for c in suites["gpu-node-02"].iter("testcase")}
    assert node_b_cases["identity.unverified"].find("failure") is None
    assert suites["checklist"].get("failures") == "1"  # the optional unattested item does not fail
    assert root.get("failures") == "3"


def test_console_report_respects_no_colour_and_uses_colour_when_asked() -> None:
    plain = render(ReportFormat.CONSOLE, ReportContext(report=sample_report(), color=False))
    coloured = render(ReportFormat.CONSOLE, ReportContext(report=sample_report(), color=True))
    assert "\x1b[" not in plain
    assert "\x1b[" in coloured
    assert "HIP_VISIBLE_DEVICES" in plain


def test_markdown_escapes_pipes_in_cells() -> None:
    text = render(ReportFormat.MARKDOWN, ReportContext(report=sample_report()))
    assert "\\| below tolerance" in text
