"""A change window as one self-contained HTML page: state, soak, and each canary's observations over time.

A slow drift shows before it blocks: per canary, the key metrics of every soak observation (the phase 2
mesh bus bandwidth and thermal gap where the soak runs it, the number of kernel events, and where the
soak runs the workload - `soak.workload_every`, `fleet.soak_workload` - the reference training run's
throughput, init time and collective timeouts, beside the thermal gap) are drawn against the value
in the canary's baseline, with the observations' verdicts and causes in a table below. A metric an
observation did not measure is no point on its chart (never a zero). Charts are
inline SVG from matplotlib, as in `report.html`.

Date-times are read by `codec.parse_date_time` (bad ones are exit 3 naming the field).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from upgrade_gate.codec import parse_date_time
from upgrade_gate.report.printable import html_text, printable

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d232a}
table{border-collapse:collapse;margin:8px 0 18px}td,th{border:1px solid #ccd;padding:4px 8px;font-size:13px}
th{background:#eef}.BLOCK{color:#b3261e;font-weight:700}.PASS{color:#1b7f3b}
h2{margin-top:28px;border-bottom:1px solid #ccd}.chart svg{max-width:720px;height:auto}
"""
_LABELS = {
    "mesh/all_reduce/avg_busbw": "mesh all_reduce avg bus bandwidth (GB/s)",
    "kernel_events": "kernel events",
    "thermal/gap_c": "hottest GPU above the others' median under the phase 2 load (°C)",
    "workload/samples_per_s": "reference training run: samples/s (median step)",
    "workload/init_s": "reference training run: process start to first step (s)",
    "workload/collective_timeouts": "reference training run: NCCL/RCCL timeouts in its log",
}


def _at(doc: Mapping[str, Any], index: int) -> str:
    return f"windows/{doc.get('id')}.json: soak.observations[{index}].at"


def _chart(title: str, points: list[tuple[datetime, float]], baseline: float | None) -> str:
    import matplotlib

    matplotlib.rcParams["svg.hashsalt"] = "upgrade-gate"
    matplotlib.rcParams["svg.fonttype"] = "none"
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.2, 2.6))
    ax = fig.add_subplot()
    days = [p[0].timestamp() / 86400.0 for p in points]
    ax.plot(days, [p[1] for p in points], marker="o", markersize=3, color="#b3261e", label="observations")
    if baseline is not None:
        ax.axhline(baseline, color="#0b5cad", linestyle="--", label="baseline")
    ax.xaxis_date()  # x values are days since 1970-01-01, matplotlib's default date epoch
    ax.set_title(printable(title))  # a node name: no control character into the SVG
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]


def _verdict(observation: Mapping[str, Any], node: str) -> str:
    return html_text(str(observation["nodes"][node]["verdict"]))


def render_window_html(doc: Mapping[str, Any], baselines: Mapping[str, Mapping[str, float]]) -> str:
    """The window's page; `baselines` holds node -> metric -> the baseline's value."""
    e = html_text
    soak = doc.get("soak") or {}
    observations = soak.get("observations") or []
    sections = []
    for canary in doc["canaries"]:
        node = canary["node"]
        charts = []
        for metric, label in _LABELS.items():
            points = [
                (parse_date_time(o["at"], where=_at(doc, i)), float(o["metrics"][node][metric]))
                for i, o in enumerate(observations)
                if metric in (o.get("metrics") or {}).get(node, {})
            ]
            if points:
                svg = _chart(f"{node}: {label}", points, baselines.get(node, {}).get(metric))
                charts.append(f'<div class="chart">{svg}</div>')
        rows = "".join(
            f'<tr><td>{e(o["at"])}</td><td class="{_verdict(o, node)}">{_verdict(o, node)}</td>'
            f"<td>{'<br>'.join(e(c) for c in o['nodes'][node]['causes']) or '&nbsp;'}</td></tr>"
            for o in observations
            if node in o["nodes"]
        )
        table = f"<table><tr><th>observed</th><th>verdict</th><th>causes</th></tr>{rows}</table>" if rows else ""
        sections.append(
            f"<h2>{e(node)} (class {e(canary['class'])})</h2>{''.join(charts)}{table or '<p>no observation yet</p>'}"
        )
    history = "".join(
        f"<tr><td>{e(h['at'])}</td><td>{e(h['action'])}</td><td>{e(h['by'])}</td><td>{e(h.get('note', ''))}</td></tr>"
        for h in doc["history"]
    )
    soak_line = (
        f"soak from {e(soak['started_at'])}: {len(observations)} observation(s), every {soak['every_s']:g} s "
        f"for {soak['duration_s']:g} s" if soak else "no soak recorded"
    )  # fmt: skip
    if soak.get("workload_every_s"):
        soak_line += f"; the reference training run (phase 6) every {float(soak['workload_every_s']):g} s"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>upgrade-gate window {e(doc["id"])}</title>
<style>{_CSS}</style></head><body>
<h1>Change window {e(doc["id"])}: {e(doc["state"])}</h1>
<p>change {e(doc["change_id"])}; {soak_line}</p>
{"".join(sections)}
<h2>History</h2><table><tr><th>at</th><th>action</th><th>by</th><th>note</th></tr>{history}</table>
</body></html>
"""
