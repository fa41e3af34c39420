"""Every report format stays valid and inert for any string a finding can carry.

Tool output reaches finding messages (a probe's stderr line, a device name, a dmesg line), so the
strings here are what a broken or hostile node can print: terminal escapes, NUL, lone surrogates,
characters XML 1.0 forbids, raw HTML, Markdown link and table syntax. JUnit is parsed back with the
standard library's strict parser; Markdown is rendered by markdown-it-py with raw HTML *allowed* (as
GitHub allows some), so only our escaping keeps `<script>` and `<img onerror>` inert.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from upgrade_gate.model import (
    ChecklistRow,
    Finding,
    GateReport,
    NodeName,
    NodeReport,
    RuleId,
    Severity,
    Verdict,
)
from upgrade_gate.report.interface import ReportContext, ReportFormat
from upgrade_gate.report.registry import render

HOSTILE = (
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    "\x1b[31mred\x1b[0m \x1b]0;title\x07",
    "nul\x00byte",
    "lone \ud800 surrogate",
    "not a char \ufffe\uffff",
    "]]> <!-- --> &amp; &#0;",
    "| pipe | `tick` [link](javascript:alert(1)) ![img](http://x/y.png)",
    "line\nbreak\r\ntab\tand \x85 NEL \x9b CSI",
)


def _report(text: str) -> GateReport:
    node = NodeName("gpu-node-01")
    findings = (
        Finding(
            rule=RuleId("evidence.missing"),
            severity=Severity.BLOCK,
            node=node,
            message=f"probe amdsmi_list failed: {text}",
            device=text,
            path="probes[name=amdsmi_list]",
            expected="ok",
            actual=text,
            hint=text,
        ),
        Finding(rule=RuleId("dmesg.fatal"), severity=Severity.WARN, node=node, message=text, actual=[text]),
    )
    row = ChecklistRow(
        checklist="canary",
        item_id="canary.x",
        item=text,
        criterion=text,
        actual=text,
        owner=text,
        status="fail",
    )
    return GateReport(
        verdict=Verdict.BLOCK,
        generated_at="2026-12-01T00:00:00Z",
        tool_version="0.1.0",
        plan_id=text,
        nodes=(NodeReport(node=node, verdict=Verdict.BLOCK, findings=findings),),
        checklist=(row,),
        rules_evaluated=(RuleId("evidence.missing"), RuleId("dmesg.fatal")),
    )


def _markdown_html(text: str) -> str:
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(text)


def test_junit_is_well_formed_for_every_hostile_string() -> None:
    for text in HOSTILE:
        xml = render(ReportFormat.JUNIT, ReportContext(report=_report(text)))
        root = ET.fromstring(xml.encode("utf-8"))  # the strict parser refuses any forbidden character
        failures = [f for f in root.iter("failure")]
        assert failures, text
        assert "\x00" not in xml and "\x1b" not in xml and "\ufffe" not in xml


def test_junit_shows_forbidden_characters_as_escapes_instead_of_dropping_them() -> None:
    xml = render(ReportFormat.JUNIT, ReportContext(report=_report("nul\x00byte \x1b[31m")))
    body = "".join(f.text or "" for f in ET.fromstring(xml).iter("failure"))
    assert "nul\\x00byte \\x1b[31m" in body


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(codec=None), max_size=40))
def test_junit_parses_back_for_any_string(text: str) -> None:
    ET.fromstring(render(ReportFormat.JUNIT, ReportContext(report=_report(text))).encode("utf-8", "surrogatepass"))


def test_markdown_keeps_html_inert_and_links_out() -> None:
    for text in HOSTILE:
        md = render(ReportFormat.MARKDOWN, ReportContext(report=_report(text)))
        page = _markdown_html(md)
        assert "<script" not in page, text
        assert "<img" not in page, text
        assert "javascript:" not in page.replace("javascript:alert(1)", "") or "<a " not in page, text
        assert "<a " not in page, text
        assert "\x1b" not in md and "\x00" not in md, text


def test_markdown_escapes_the_script_tag_as_text() -> None:
    md = render(ReportFormat.MARKDOWN, ReportContext(report=_report("<script>alert(1)</script>")))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in _markdown_html(md)  # shown as text, not run


def test_markdown_table_rows_keep_their_columns() -> None:
    md = render(ReportFormat.MARKDOWN, ReportContext(report=_report("a | b\nc")))
    rows = [line for line in md.splitlines() if line.startswith("| block | gpu-node-01 | `evidence.missing`")]
    assert len(rows) == 1
    assert rows[0].replace("\\|", "").count("|") == 8  # seven cells: no pipe or newline split one


def test_console_never_prints_control_characters() -> None:
    for text in HOSTILE:
        out = render(ReportFormat.CONSOLE, ReportContext(report=_report(text), color=False))
        assert not any(ord(c) < 0x20 and c != "\n" for c in out), repr(text)
        assert "\x1b" not in out and "\x9b" not in out and "\x85" not in out


def test_html_escapes_hostile_strings() -> None:
    page = render(ReportFormat.HTML, ReportContext(report=_report('<img src=x onerror="alert(1)">')))
    assert "<img src=x" not in page
    assert "&lt;img src=x onerror=" in page
