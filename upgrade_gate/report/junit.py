"""JUnit XML report: one testsuite per node, one testcase per cause, the cause's findings in its body.

A cause with a BLOCK finding is a `<failure>` whose message is the cause's headline and whose text
lists every finding it owns; a cause that only warns writes its findings to `<system-out>`, so CI shows
them without failing. Each rule that ran on a node without a finding there is a passing testcase of
its own (named by the rule id), so a green run still shows what was checked. Fleet-level causes form
their own suite; checklist rows are testcases of a `checklist` suite.

Built with ElementTree, which escapes markup but not the characters XML 1.0 forbids outright (NUL,
ESC and the other C0 controls, lone surrogates): tool output reaches finding messages, so every
string goes through `xml_text` first and the document is well-formed for any input.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from upgrade_gate.model import Cause, Finding, RuleId, Severity
from upgrade_gate.report.interface import ReportContext
from upgrade_gate.report.text import show_value, xml_text


def _message(f: Finding) -> str:
    device = f" [{f.device}]" if f.device else ""
    extra = ""
    if f.expected is not None or f.actual is not None:
        extra = f" (expected {show_value(f.expected)}, actual {show_value(f.actual)})"
    return xml_text(f"{f.severity.value}: {f.rule}{device}: {f.message}{extra}")


def _element(parent: ET.Element, tag: str, **attrs: str) -> ET.Element:
    return ET.SubElement(parent, tag, {k: xml_text(v) for k, v in attrs.items()})


def _cause_case(suite: ET.Element, name: str, cause: Cause, findings: Sequence[Finding]) -> bool:
    case = _element(suite, "testcase", classname=f"upgrade-gate.{name}", name=cause.key)
    owned = [findings[i] for i in cause.findings]
    head = f"{cause.headline} [{cause.category.value}; {cause.owner}]"
    body = [_message(f) for f in owned]
    body += [xml_text(line) for line in cause.details]
    if cause.next_step:
        body.append(xml_text(f"next step: {cause.next_step}"))
    if cause.severity is Severity.BLOCK:
        failure = _element(case, "failure", message=head, type="BLOCK")
        failure.text = "\n".join(body)
        return True
    out = ET.SubElement(case, "system-out")
    out.text = "\n".join([xml_text(head), *body])
    return False


def _suite(
    parent: ET.Element, name: str, rules: Sequence[RuleId], causes: Sequence[Cause], findings: Sequence[Finding]
) -> None:
    suite = _element(parent, "testsuite", name=name)
    failures = sum(_cause_case(suite, name, cause, findings) for cause in causes)
    with_findings = {f.rule for f in findings}
    quiet = sorted(set(rules) - with_findings)
    for rule in quiet:
        _element(suite, "testcase", classname=f"upgrade-gate.{name}", name=rule)
    suite.set("tests", str(len(causes) + len(quiet)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")


def render_junit(ctx: ReportContext) -> str:
    """JUnit XML text (UTF-8 declaration included)."""
    from upgrade_gate.judge.causes import ensure_causes

    report = ensure_causes(ctx.report, baselines=ctx.baselines, candidates=ctx.candidates)
    root = ET.Element("testsuites", name="upgrade-gate")
    if report.fleet_findings:
        _suite(root, "fleet", (), report.fleet_causes, report.fleet_findings)
    for node in report.nodes:
        _suite(root, node.node, report.rules_evaluated, node.causes, node.findings)
    if report.checklist:
        suite = _element(root, "testsuite", name="checklist", tests=str(len(report.checklist)))
        failed = 0
        for row in report.checklist:
            case = _element(suite, "testcase", classname="upgrade-gate.checklist", name=row.item_id)
            if row.status in ("fail", "unverified", "unattested") and row.required:
                failed += 1
                failure = _element(case, "failure", message=f"{row.item}: {row.actual}", type="BLOCK")
                failure.text = xml_text(f"criterion: {row.criterion}; owner: {row.owner}")
        suite.set("failures", str(failed))
        suite.set("errors", "0")
    tests = sum(int(s.get("tests", "0")) for s in root)
    root.set("tests", str(tests))
    root.set("failures", str(sum(int(s.get("failures", "0")) for s in root)))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
