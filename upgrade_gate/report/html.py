"""Self-contained HTML report: verdict banner, causes, findings, device-order tables, bandwidth curves, checklist.

Charts are drawn with matplotlib (a well-kept library) as inline SVG, so the file opens offline with
no script or font downloads. SVG ids are salted with a fixed string and metadata dates are dropped so
the same report renders to the same bytes. A small inline script counts the chart paths that have a
non-empty bounding box and writes the number to `<body data-charts-drawn=...>`, which the Chromium
test reads to prove the charts actually drew.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping

from upgrade_gate.judge.order_table import OrderRow, OrderSide, rows_of
from upgrade_gate.model import Finding, GateReport, NodeName, Severity, Snapshot, Verdict, measurements_of, replace
from upgrade_gate.report.interface import ReportContext
from upgrade_gate.report.printable import html_text, printable
from upgrade_gate.report.text import show_value, sorted_findings

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d232a}
.banner{padding:14px 18px;border-radius:6px;color:#fff;font-size:22px;font-weight:700}
.PASS{background:#1b7f3b}.BLOCK{background:#b3261e}
table{border-collapse:collapse;margin:8px 0 18px}td,th{border:1px solid #ccd;padding:4px 8px;font-size:13px}
th{background:#eef}tr.changed td{background:#fde2e0}.sev-block{color:#b3261e;font-weight:700}
.sev-warn{color:#9a6700}.sev-info{color:#0b5cad}code{font-size:12px}
h2{margin-top:28px;border-bottom:1px solid #ccd}.chart svg{max-width:720px;height:auto}
"""

_SCRIPT = """
document.addEventListener('DOMContentLoaded', function () {
  var drawn = 0;
  document.querySelectorAll('.chart svg path').forEach(function (p) {
    var b = p.getBBox(); if (b.width > 0 || b.height > 0) { drawn += 1; }
  });
  document.body.setAttribute('data-charts-drawn', String(drawn));
});
"""

_SIZE_KEY = re.compile(r"^(?P<scope>mesh|cluster)/(?P<op>[a-z_]+)/busbw/(?P<bytes>\d+)$")


def _e(value: object) -> str:
    return html_text(show_value(value))


def _curves(snapshot: Snapshot | None) -> dict[str, dict[int, float]]:
    """(scope/op) -> {message bytes: median busbw} from a snapshot's measurements."""
    out: dict[str, dict[int, float]] = {}
    if snapshot is None:
        return out
    for m in measurements_of(snapshot):
        match = _SIZE_KEY.match(m.key)
        if match and m.samples:
            samples = sorted(m.samples)
            median = samples[len(samples) // 2]
            out.setdefault(f"{match['scope']}/{match['op']}", {})[int(match["bytes"])] = median
    return out


def _chart_svg(title: str, series: Mapping[str, Mapping[int, float]]) -> str:
    import matplotlib

    matplotlib.rcParams["svg.hashsalt"] = "upgrade-gate"
    matplotlib.rcParams["svg.fonttype"] = "none"
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.2, 3.2))
    ax = fig.add_subplot()
    styles = {"baseline": ("#0b5cad", "o"), "candidate": ("#b3261e", "s")}
    for name, points in series.items():
        xs = sorted(points)
        colour, marker = styles.get(name, ("#555", "."))
        ax.plot(xs, [points[x] for x in xs], marker=marker, markersize=3, color=colour, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(printable(title))  # a node name: no control character into the SVG
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]


def _order_finding(ctx: ReportContext, node: NodeName) -> Finding | None:
    return next((f for f in ctx.report.findings if f.node == node and f.rule == "device.order_changed"), None)


def _listed_rows(base: Snapshot | None, cand: Snapshot | None) -> tuple[OrderRow, ...]:
    """Both snapshots' GPUs by index, nothing marked: the judge found no order change to show."""

    def side(s: Snapshot | None, idx: int) -> OrderSide | None:
        gpu = next((g for g in s.gpus if g.index == idx), None) if s else None
        if gpu is None:
            return None
        return OrderSide(bdf=None if gpu.bdf is None else str(gpu.bdf), ident=gpu.serial or gpu.unique_id)

    indices = sorted({g.index for s in (base, cand) if s for g in s.gpus})
    return tuple(OrderRow(index=i, baseline=side(base, i), candidate=side(cand, i), moved=False) for i in indices)


def _order_table(ctx: ReportContext, node: NodeName) -> str:
    order = _order_finding(ctx, node)
    judged = rows_of(order) if order is not None else None
    rows_in = judged if judged is not None else _listed_rows(ctx.baselines.get(node), ctx.candidates.get(node))
    note = (
        "<p>The judge found the order changed (see its finding); this report carries no order table.</p>"
        if order is not None and judged is None
        else ""
    )
    rows = []
    for row in rows_in:
        b, c = row.baseline, row.candidate
        mark = "changed" if row.moved else ""
        rows.append(
            f'<tr class="{mark}"><td>{row.index}</td><td>{_e(b.bdf if b else None)}</td>'
            f"<td>{_e(b.ident if b else None)}</td><td>{_e(c.bdf if c else None)}</td>"
            f"<td>{_e(c.ident if c else None)}</td><td>{'&#9888; moved' if row.moved else ''}</td></tr>"
        )
    if not rows:
        return "<p>No GPUs in either snapshot.</p>"
    head = (
        "<tr><th>index</th><th>baseline BDF</th><th>baseline serial</th>"
        "<th>candidate BDF</th><th>candidate serial</th><th></th></tr>"
    )
    return f'{note}<table class="order">{head}{"".join(rows)}</table>'


def _node_section(ctx: ReportContext, node: NodeName) -> str:
    base, cand = ctx.baselines.get(node), ctx.candidates.get(node)
    parts = [f"<h3>Device order: {html_text(node)}</h3>", _order_table(ctx, node)]
    b_curves, c_curves = _curves(base), _curves(cand)
    for name in sorted(set(b_curves) | set(c_curves)):
        series = {k: v for k, v in (("baseline", b_curves.get(name)), ("candidate", c_curves.get(name))) if v}
        parts.append(f'<div class="chart">{_chart_svg(f"{node}: {name} bus bandwidth", series)}</div>')
    return "\n".join(parts)


def _findings_table(ctx: ReportContext) -> str:
    report = ctx.report
    rows = []
    for f in sorted_findings(report.findings):
        rows.append(
            f'<tr><td class="sev-{f.severity.value}">{f.severity.value}</td><td>{html_text(f.node)}</td>'
            f"<td><code>{html_text(f.rule)}</code></td><td>{_e(f.device)}</td><td>{html_text(f.message)}"
            + (f"<br><code>{html_text(f.hint)}</code>" if f.hint else "")
            + f"</td><td>{_e(f.expected)}</td><td>{_e(f.actual)}</td></tr>"
        )
    if not rows:
        return "<p>No findings.</p>"
    head = (
        "<tr><th>severity</th><th>node</th><th>rule</th><th>device</th><th>message</th>"
        "<th>expected</th><th>actual</th></tr>"
    )
    return f"<table>{head}{''.join(rows)}</table>"


def _causes_table(report: GateReport) -> str:
    causes = [c for n in report.nodes for c in n.causes] + list(report.fleet_causes)
    rows = []
    for c in causes:
        more = f" ({len(c.findings)} findings)" if len(c.findings) > 1 else ""
        details = f"<pre>{html_text(chr(10).join(c.details))}</pre>" if c.details else ""
        step = f"<code>{html_text(c.next_step)}</code>" if c.next_step else ""
        rows.append(
            f'<tr><td class="sev-{c.severity.value}">{c.severity.value}</td><td>{html_text(c.node)}</td>'
            f"<td>{html_text(c.headline)}{more}{details}</td><td>{html_text(c.category.value)}</td>"
            f"<td>{html_text(c.owner)}</td><td>{step}</td></tr>"
        )
    if not rows:
        return "<p>No causes: nothing to report.</p>"
    head = "<tr><th>severity</th><th>node</th><th>cause</th><th>category</th><th>owner</th><th>next step</th></tr>"
    return f'<table class="causes">{head}{"".join(rows)}</table>'


def _checklist_table(ctx: ReportContext) -> str:
    rows = [
        f"<tr><td>{html_text(r.item)}</td><td>{html_text(r.criterion)}</td><td>{html_text(r.actual)}</td>"
        f"<td>{html_text(r.owner)}</td><td>{html_text(r.status)}</td></tr>"
        for r in ctx.report.checklist
    ]
    if not rows:
        return "<p>No checklist was evaluated.</p>"
    head = "<tr><th>item</th><th>pass criterion</th><th>actual result</th><th>owner</th><th>status</th></tr>"
    return f"<table>{head}{''.join(rows)}</table>"


def render_html(ctx: ReportContext) -> str:
    """One self-contained HTML page."""
    from upgrade_gate.judge.causes import ensure_causes

    report = ensure_causes(ctx.report, baselines=ctx.baselines, candidates=ctx.candidates)
    ctx = replace(ctx, report=report)
    blocks = sum(1 for f in report.findings if f.severity is Severity.BLOCK)
    verdict = report.verdict.value
    subtitle = f"{len(report.nodes)} node(s), {blocks} blocking finding(s)"
    if report.plan_id:
        subtitle += f", plan {html_text(report.plan_id)}"
    summary = "".join(
        f'<tr><td>{html_text(n.node)}</td><td class="{"sev-block" if n.verdict is Verdict.BLOCK else ""}">'
        f"{n.verdict.value}</td><td>{len(n.findings)}</td></tr>"
        for n in report.nodes
    )
    nodes = "\n".join(_node_section(ctx, n.node) for n in report.nodes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>upgrade-gate: {verdict}</title>
<style>{_CSS}</style><script>{_SCRIPT}</script></head>
<body data-charts-drawn="0">
<div class="banner {verdict}">upgrade-gate: {verdict}</div>
<p>{subtitle}. Generated {html_text(report.generated_at)} by upgrade-gate {html_text(report.tool_version)}.</p>
<h2>Causes</h2>{_causes_table(report)}
<h2>Nodes</h2><table><tr><th>node</th><th>verdict</th><th>findings</th></tr>{summary}</table>
<h2>All findings</h2>{_findings_table(ctx)}
<h2>Devices and bandwidth</h2>{nodes}
<h2>Checklist</h2>{_checklist_table(ctx)}
</body></html>
"""
