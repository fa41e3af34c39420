"""Markdown report, sized for `$GITHUB_STEP_SUMMARY` and merge-request comments: causes first.

Order: the verdict, one table row per cause (node, severity, headline, category, owner, next step),
the few detail lines a cause carries (the permutation of an order change) as indented code, the
per-node verdicts, every finding in a collapsed section, the checklist.

Every string that may come from a tool or a document goes through `markdown_text` (HTML escaped, so
`<script>` and `<img onerror>` stay text; no link or image syntax; one line, pipes escaped) or
`markdown_code` (inside a code span, where HTML is literal and only backticks must go).
"""

from __future__ import annotations

from upgrade_gate.model import Cause, Severity, Verdict
from upgrade_gate.report.interface import ReportContext
from upgrade_gate.report.text import (
    counts,
    markdown_code,
    markdown_text,
    node_summary,
    one_line,
    show_value,
    sorted_findings,
)


def _cell(value: object) -> str:
    return markdown_text(show_value(value))


def _cause_row(cause: Cause) -> str:
    count = len(cause.findings)
    more = f" ({count} findings)" if count > 1 else ""
    step = markdown_code(cause.next_step) if cause.next_step else "-"
    return (
        f"| {_cell(cause.node)} | {cause.severity.value} | {_cell(cause.headline)}{more} "
        f"| {cause.category.value} | {_cell(cause.owner)} | {step} |"
    )


def render_markdown(ctx: ReportContext) -> str:
    """GitHub-flavoured Markdown: verdict, causes, per-node summary, findings, checklist."""
    from upgrade_gate.judge.causes import ensure_causes

    report = ensure_causes(ctx.report, baselines=ctx.baselines, candidates=ctx.candidates)
    tally = counts(report)
    icon = "❌" if report.verdict is Verdict.BLOCK else "✅"
    causes = [c for n in report.nodes for c in n.causes] + list(report.fleet_causes)
    blocking = sum(1 for c in causes if c.severity is Severity.BLOCK)
    plan = f", plan {markdown_code(report.plan_id)}" if report.plan_id else ""
    lines = [
        f"## {icon} upgrade-gate: {report.verdict.value}",
        "",
        f"{len(report.nodes)} node(s), {blocking} blocking cause(s) ({tally[Severity.BLOCK]} blocking finding(s), "
        f"{tally[Severity.WARN]} warning(s)){plan}.",
    ]
    if causes:
        lines += [
            "",
            "### Causes",
            "",
            "| node | severity | cause | category | owner | next step |",
            "|---|---|---|---|---|---|",
        ]
        lines += [_cause_row(c) for c in causes]
        for cause in (c for c in causes if c.details):
            lines += ["", f"**{_cell(cause.node)}**: {_cell(cause.headline)}", ""]
            lines += [f"    {one_line(line)}" for line in cause.details]
    lines += ["", "| node | verdict |", "|---|---|"]
    lines += [f"| {_cell(node.node)} | {node_summary(node)} |" for node in report.nodes]
    findings = sorted_findings(report.findings)
    if findings:
        lines += [
            "",
            f"<details><summary>All {len(findings)} finding(s)</summary>",
            "",
            "| severity | node | rule | device | message | expected | actual |",
            "|---|---|---|---|---|---|---|",
        ]
        for f in findings:
            lines.append(
                f"| {f.severity.value} | {_cell(f.node)} | {markdown_code(f.rule)} | {_cell(f.device)} "
                f"| {_cell(f.message)} | {_cell(f.expected)} | {_cell(f.actual)} |"
            )
        lines += ["", "</details>"]
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
                f"| {_cell(row.status)} |"
            )
    return "\n".join(lines) + "\n"
