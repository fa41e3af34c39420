"""Every `ReportFormat` mapped to its renderer; `render` is what the CLI calls."""

from __future__ import annotations

from collections.abc import Callable

from upgrade_gate.report.interface import ReportContext, ReportFormat

Renderer = Callable[[ReportContext], str]


def _renderer(fmt: ReportFormat) -> Renderer:
    # Imported per format so that writing JSON never pays for rich or the chart library.
    if fmt is ReportFormat.CONSOLE:
        from upgrade_gate.report.console import render_console

        return render_console
    if fmt is ReportFormat.JSON:
        from upgrade_gate.report.json_report import render_json

        return render_json
    if fmt is ReportFormat.JUNIT:
        from upgrade_gate.report.junit import render_junit

        return render_junit
    if fmt is ReportFormat.MARKDOWN:
        from upgrade_gate.report.markdown import render_markdown

        return render_markdown
    if fmt is ReportFormat.HTML:
        from upgrade_gate.report.html import render_html

        return render_html
    raise AssertionError(f"unhandled report format {fmt!r}")  # pragma: no cover - exhaustive


def render(fmt: ReportFormat, ctx: ReportContext) -> str:
    """Render the report in one format."""
    return _renderer(fmt)(ctx)
