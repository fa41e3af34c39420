"""Markdown report, sized for `$GITHUB_STEP_SUMMARY` and merge-request comments."""

from __future__ import annotations

from upgrade_gate.model import Severity, Verdict
from upgrade_gate.report.interface import ReportContext
from upgrade_gate.report.text import counts, node_summary, show_value, sorted_findings


def _cell(value: object) -> str:
    return show_value(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(ctx: ReportContext) -> str:
    """GitHub-flavoured Markdown: verdict, per-node summary, findings table, checklist table."""
    report = ctx.report
    tally = counts(report)
    icon = "❌" if report.verdict is Verdict.BLOCK else "✅"
    lines = [
        f"## {icon} upgrade-gate: {report.verdict.value}",
        "",
        f"{len(report.nodes)} node(s), {tally[Severity.BLOCK]} blocking finding(s), "
        f"{tally[Severity.WARN]} warning(s)" + (f", plan `{report.plan_id}`" if report.plan_id else "") + ".",
        "",
        "| node | verdict |",
        "|---|---|",
    ]
    lines += [f"| {node.node} | {node_summary(node)} |" for node in report.nodes]
    findings = sorted_findings(report.findings)
    if findings:
        lines += [
            "",
            "### Findings",
            "",
            "| severity | node | rule | device | message | expected | actual |",
            "|---|---|---|---|---|---|---|",
        ]
        for f in findings:
            lines.append(
                f"| {f.severity.value} | {f.node} | `{f.rule}` | {_cell(f.device)} | {_cell(f.message)} "
                f"| {_cell(f.expected)} | {_cell(f.actual)} |"
            )
        hints = [f for f in findings if f.hint]
        if hints:
            lines += ["", "### Remediation hints", ""]
            lines += [f"- **{f.node}** `{f.rule}`: `{f.hint}`" for f in hints]
    if report.checklist:
        lines += [
            "",
            "### Checklist",
            "",
            "| item | pass criterion | actual result | owner | status |",
            "|---|---|---|---|---|",
        ]
        for row in report.checklist:
            lines.append(
                f"| {_cell(row.item)} | {_cell(row.criterion)} | {_cell(row.actual)} | {_cell(row.owner)} "
                f"| {row.status} |"
            )
    return "\n".join(lines) + "\n"
