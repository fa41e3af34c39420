"""Console report with rich: the verdict first, one line per cause, a pointer to the full report.

Three levels (`ReportContext.detail`):
- `causes` (the default): the verdict line; per node with causes, one line per cause (severity,
  headline, category and owner) within the terminal width, with the few lines a person needs at once
  under it (the permutation table of an order change, the next step); nodes without causes in one
  line; the checklist as one line per checklist; then where the full report is.
- `verbose`: the same, with every finding under its cause and the checklist table.
- `summary`: the verdict and one line per node (its first cause), for CI logs.

Colour is decided by the CLI (terminal detection and `NO_COLOR`) and passed in `ctx.color`, the width
in `ctx.width`, so the renderer stays pure and its golden output is stable. Every string from a
finding goes through `one_line`: tool output never reaches the terminal as control characters.
"""

from __future__ import annotations

import io

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from upgrade_gate.model import Cause, ChecklistRow, Finding, GateReport, NodeReport, Severity, Verdict
from upgrade_gate.report.interface import ConsoleDetail, ReportContext
from upgrade_gate.report.text import counts, one_line, show_value

_STYLE = {Severity.BLOCK: "bold red", Severity.WARN: "yellow", Severity.INFO: "cyan"}
_INDENT = "    "
_NAME_COLUMN = 32  # node names up to this long share the line of their first cause


def _fit(text: str, width: int) -> str:
    """`text` cut to `width` terminal cells, with "..." where it was cut."""
    if cell_len(text) <= width:
        return text
    out = ""
    for ch in text:
        if cell_len(out + ch) > width - 3:
            break
        out += ch
    return out + "..."


def _cause_line(node: str, cause: Cause, name_width: int, width: int) -> Text:
    count = len(cause.findings)
    more = f" ({count} findings)" if count > 1 else ""
    lead = f"{node:<{name_width}}  "
    sev = f"{cause.severity.value.upper():5}  "
    text = Text(lead, style="bold")
    text.append(sev, style=_STYLE[cause.severity])
    text.append(_fit(one_line(cause.headline) + more, width - cell_len(lead) - len(sev)))
    return text


def _who(cause: Cause) -> str:
    rules = f"; {', '.join(cause.rules)}" if cause.rules else ""
    return f"{cause.category.value}, {one_line(cause.owner)}{rules}"


def _step_lines(who: str, step: str, width: int) -> list[str]:
    """Who acts and the next step, within `width` where it breaks safely (at "; ", or a long comma list)."""
    lines: list[str] = []
    parts = one_line(step).split("; ")
    if cell_len(f"{_INDENT}{who}: next: {parts[0]}") > width:
        lines.append(_fit(_INDENT + who, width))
    for part in parts:
        lead = (
            f"{_INDENT}{who}: next: "
            if not lines
            else _INDENT + ("next: " if len(lines) == 1 and part is parts[0] else "    ")
        )
        name, eq, value = part.removeprefix("export ").partition("=")
        if cell_len(lead + part) > width and part.startswith("export ") and eq and "," in value:
            lines.append(f"{lead}set {name} (in baseline order, by UUID):")
            lines += _export_lines(name, value.split(","), width)
        else:
            lines.append(lead + part)  # a command cannot be cut safely elsewhere: the terminal wraps it
    return lines


def _export_lines(name: str, items: list[str], width: int) -> list[str]:
    """`U=a,b` / `U=$U,c,d` / `export NAME=$U`: a long list as shell lines that paste as one value."""
    lines: list[str] = []
    chunk: list[str] = []
    for item in items:
        prefix = "U=" if not lines else "U=$U,"
        if chunk and cell_len(_INDENT * 2 + prefix + ",".join([*chunk, item])) > width:
            lines.append(_INDENT * 2 + prefix + ",".join(chunk))
            chunk = []
        chunk.append(item)
    lines.append(_INDENT * 2 + ("U=" if not lines else "U=$U,") + ",".join(chunk))
    return [*lines, f"{_INDENT * 2}export {name}=$U"]


def _finding_line(finding: Finding, width: int) -> Text:
    text = Text(_INDENT)
    text.append(f"{finding.severity.value.upper():5} ", style=_STYLE[finding.severity])
    text.append(f"{finding.rule}", style="bold")
    if finding.device:
        text.append(f" [{one_line(finding.device)}]")
    text.append(f": {one_line(finding.message)}")
    if finding.expected is not None or finding.actual is not None:
        value = f"expected {show_value(finding.expected)}, actual {show_value(finding.actual)}"
        text.append(f"\n{_INDENT}      " + _fit(one_line(value), width - 10))
    return text


def _headline(report: GateReport) -> Text:
    tally = counts(report)
    causes = [c for n in report.nodes for c in n.causes] + list(report.fleet_causes)
    blocking = sum(1 for c in causes if c.severity is Severity.BLOCK)
    blocked = sum(1 for n in report.nodes if n.verdict is Verdict.BLOCK)
    style = "bold white on red" if report.verdict is Verdict.BLOCK else "bold white on green"
    text = Text(f" {report.verdict.value} ", style=style)
    text.append(
        f" {blocked} of {len(report.nodes)} node(s) blocked; {blocking} blocking cause(s) "
        f"({tally[Severity.BLOCK]} blocking finding(s), {tally[Severity.WARN]} warning(s))"
    )
    if report.plan_id:
        text.append(f"; plan {one_line(report.plan_id)}")
    return text


def _node_block(
    console: Console,
    ctx: ReportContext,
    node: str,
    causes: tuple[Cause, ...],
    findings: tuple[Finding, ...],
    name_width: int,
) -> None:
    long_name = len(node) > name_width
    if long_name:  # a long name (a path) gets its own line, so the causes keep their column
        console.print(Text(_fit(node, ctx.width), style="bold"))
    for i, cause in enumerate(causes):
        console.print(_cause_line(node if i == 0 and not long_name else "", cause, name_width, ctx.width))
        if ctx.detail is ConsoleDetail.VERBOSE:
            for index in cause.findings:
                console.print(_finding_line(findings[index], ctx.width))
        for line in cause.details:
            console.print(Text(_fit(_INDENT + one_line(line), ctx.width)))
        if cause.next_step:
            for line in _step_lines(_who(cause), cause.next_step, ctx.width):
                console.print(Text(line, style="green"))
        else:
            console.print(Text(_fit(_INDENT + _who(cause), ctx.width), style="dim"))


def _passing(nodes: list[NodeReport], width: int) -> str:
    names = [one_line(n.node) for n in nodes]
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return _fit(f"PASS with nothing to report: {len(names)} node(s): {shown}", width)


def _checklist_lines(rows: tuple[ChecklistRow, ...], width: int) -> list[str]:
    by_list: dict[str, dict[str, int]] = {}
    for row in rows:
        tally = by_list.setdefault(row.checklist, {})
        tally[row.status] = tally.get(row.status, 0) + 1
    return [
        _fit(one_line(f"checklist {name}: " + ", ".join(f"{n} {status}" for status, n in sorted(tally.items()))), width)
        for name, tally in sorted(by_list.items())
    ]


def _summary(console: Console, ctx: ReportContext, name_width: int) -> None:
    for node in ctx.report.nodes:
        if not node.causes:
            console.print(Text(f"{one_line(node.node):<{name_width}}  {node.verdict.value}"))
            continue
        first = node.causes[0]
        more = f" (+{len(node.causes) - 1} more)" if len(node.causes) > 1 else ""
        lead = f"{one_line(node.node):<{name_width}}  {node.verdict.value:5}  "
        console.print(Text(lead + _fit(one_line(first.headline) + more, ctx.width - cell_len(lead))))
    if ctx.report.fleet_causes:
        first = ctx.report.fleet_causes[0]
        lead = f"{'fleet':<{name_width}}  {first.severity.value.upper():5}  "
        console.print(Text(lead + _fit(one_line(first.headline), ctx.width - cell_len(lead))))


def render_console(ctx: ReportContext) -> str:
    """Human-readable report for a terminal or a CI log (see the module docstring)."""
    from upgrade_gate.judge.causes import ensure_causes

    report = ensure_causes(ctx.report, baselines=ctx.baselines, candidates=ctx.candidates)
    buf = io.StringIO()
    console = Console(
        file=buf, force_terminal=ctx.color, no_color=not ctx.color, width=ctx.width, highlight=False, soft_wrap=True
    )
    console.print(_headline(report))
    names = [one_line(n.node) for n in report.nodes] + ["fleet"]
    name_width = max(len(n) for n in names if len(n) <= _NAME_COLUMN)  # "fleet" always fits
    if ctx.detail is ConsoleDetail.SUMMARY:
        _summary(console, ctx, name_width)
        return buf.getvalue()
    quiet: list[NodeReport] = []
    for node in report.nodes:
        if node.causes:
            _node_block(console, ctx, one_line(node.node), node.causes, node.findings, name_width)
        else:
            quiet.append(node)
    if report.fleet_causes:
        _node_block(console, ctx, "fleet", report.fleet_causes, report.fleet_findings, name_width)
    if quiet:
        console.print(Text(_passing(quiet, ctx.width)))
    if ctx.detail is ConsoleDetail.VERBOSE and report.checklist:
        table = Table(title="checklist", show_lines=False, expand=False)
        for col in ("item", "pass criterion", "actual result", "owner", "status"):
            table.add_column(col, overflow="fold")
        for row in report.checklist:
            table.add_row(*(one_line(v) for v in (row.item, row.criterion, row.actual, row.owner, row.status)))
        console.print(table)
    else:
        for line in _checklist_lines(report.checklist, ctx.width):
            console.print(Text(line))
        total = len(report.findings)
        if total:
            console.print(
                Text(
                    _fit(
                        f"More: --verbose lists all {total} finding(s); --report html:PATH writes the full report.",
                        ctx.width,
                    ),
                    style="dim",
                )
            )
    return buf.getvalue()
