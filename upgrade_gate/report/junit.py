"""JUnit XML report: one testsuite per node, one testcase per node x rule evaluated.

A rule with a BLOCK finding on a node is a `<failure>` carrying every message of that rule; warnings
go to `<system-out>` so CI shows them without failing. Fleet-level findings form their own suite.
Checklist rows are testcases of a `checklist` suite. Built with ElementTree so escaping is correct.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from upgrade_gate.model import Finding, RuleId, Severity
from upgrade_gate.report.interface import ReportContext
from upgrade_gate.report.text import show_value, sorted_findings


def _message(f: Finding) -> str:
    device = f" [{f.device}]" if f.device else ""
    extra = ""
    if f.expected is not None or f.actual is not None:
        extra = f" (expected {show_value(f.expected)}, actual {show_value(f.actual)})"
    return f"{f.rule}{device}: {f.message}{extra}"


def _suite(parent: ET.Element, name: str, rules: Sequence[RuleId], findings: Sequence[Finding]) -> None:
    by_rule: dict[str, list[Finding]] = {}
    for finding in sorted_findings(findings):
        by_rule.setdefault(finding.rule, []).append(finding)
    all_rules = sorted(set(rules) | set(by_rule))
    failures = sum(1 for r in all_rules if any(f.severity is Severity.BLOCK for f in by_rule.get(r, [])))
    suite = ET.SubElement(parent, "testsuite", name=name, tests=str(len(all_rules)), failures=str(failures), errors="0")
    for rule in all_rules:
        case = ET.SubElement(suite, "testcase", classname=f"upgrade-gate.{name}", name=rule)
        rule_findings = by_rule.get(rule, [])
        blocks = [f for f in rule_findings if f.severity is Severity.BLOCK]
        others = [f for f in rule_findings if f.severity is not Severity.BLOCK]
        if blocks:
            failure = ET.SubElement(case, "failure", message=_message(blocks[0]), type="BLOCK")
            failure.text = "\n".join(_message(f) for f in blocks)
        if others:
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join(f"{f.severity.value}: {_message(f)}" for f in others)


def render_junit(ctx: ReportContext) -> str:
    """JUnit XML text (UTF-8 declaration included)."""
    report = ctx.report
    root = ET.Element("testsuites", name="upgrade-gate")
    if report.fleet_findings:
        _suite(root, "fleet", (), report.fleet_findings)
    for node in report.nodes:
        _suite(root, node.node, report.rules_evaluated, node.findings)
    if report.checklist:
        suite = ET.SubElement(root, "testsuite", name="checklist", tests=str(len(report.checklist)))
        failed = 0
        for row in report.checklist:
            case = ET.SubElement(suite, "testcase", classname="upgrade-gate.checklist", name=row.item_id)
            if row.status in ("fail", "unattested") and row.required:
                failed += 1
                failure = ET.SubElement(case, "failure", message=f"{row.item}: {row.actual}", type="BLOCK")
                failure.text = f"criterion: {row.criterion}; owner: {row.owner}"
        suite.set("failures", str(failed))
        suite.set("errors", "0")
    tests = sum(int(s.get("tests", "0")) for s in root)
    root.set("tests", str(tests))
    root.set("failures", str(sum(int(s.get("failures", "0")) for s in root)))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
