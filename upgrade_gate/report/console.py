"""Console report with rich: verdict banner, findings grouped by node, severity in colour.

Colour is decided by the CLI (terminal detection and `NO_COLOR`) and passed in `ctx.color`, so the
renderer stays pure and its golden output is stable.
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table
from rich.text import Text

from upgrade_gate.model import Finding, Severity, Verdict
from upgrade_gate.report.interface import ReportContext
from upgrade_gate.report.text import counts, node_summary, show_value, sorted_findings

_STYLE = {Severity.BLOCK: "bold red", Severity.WARN: "yellow", Severity.INFO: "cyan"}


def _finding_line(finding: Finding) -> Text:
    text = Text()
    text.append(f"  {finding.severity.value.upper():5} ", style=_STYLE[finding.severity])
    text.append(f"{finding.rule}", style="bold")
    if finding.device:
        text.append(f" [{finding.device}]")
    text.append(f": {finding.message}")
    if finding.expected is not None or finding.actual is not None:
        text.append(f"\n        expected {show_value(finding.expected)}, actual {show_value(finding.actual)}")
    if finding.hint:
        text.append(f"\n        hint: {finding.hint}", style="green")
    return text


def render_console(ctx: ReportContext) -> str:
    """Human-readable report for a terminal or a CI log."""
    report = ctx.report
    buf = io.StringIO()
    console = Console(
        file=buf, force_terminal=ctx.color, no_color=not ctx.color, width=120, highlight=False, soft_wrap=True
    )
    tally = counts(report)
    style = "bold white on red" if report.verdict is Verdict.BLOCK else "bold white on green"
    banner = f" {report.verdict.value} "
    console.print(
        Text(banner, style=style),
        f"{len(report.nodes)} node(s), {tally[Severity.BLOCK]} blocking, {tally[Severity.WARN]} warning(s)",
        f"plan {report.plan_id}" if report.plan_id else "",
    )
    if report.fleet_findings:
        console.print(Text("fleet", style="bold"))
        for finding in sorted_findings(report.fleet_findings):
            console.print(_finding_line(finding))
    for node in report.nodes:
        console.print(Text(f"{node.node}: ", style="bold"), node_summary(node))
        for finding in sorted_findings(node.findings):
            console.print(_finding_line(finding))
    if report.checklist:
        table = Table(title="checklist", show_lines=False, expand=False)
        for col in ("item", "pass criterion", "actual result", "owner", "status"):
            table.add_column(col, overflow="fold")
        for row in report.checklist:
            table.add_row(row.item, row.criterion, row.actual, row.owner, row.status)
        console.print(table)
    return buf.getvalue()
