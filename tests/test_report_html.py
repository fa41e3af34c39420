"""HTML report: self-contained, device-order table marks changes, charts draw in headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.report_sample import sample_report
from upgrade_gate.model import Gpu, Measurement, NodeInfo, NodeName, Snapshot, Software
from upgrade_gate.report.interface import ReportContext, ReportFormat
from upgrade_gate.report.registry import render

BDFS = ("0000:05:00.0", "0000:15:00.0")


def _snap(order: tuple[int, ...], factor: float) -> Snapshot:
    gpus = tuple(
        Gpu(index=i, bdf=BDFS[j], serial=f"SER{j}")
        for i, j in enumerate(order)  # type: ignore[arg-type]
    )
    sizes = [1 << k for k in range(10, 31, 2)]
    meas = tuple(
        Measurement(key=f"mesh/all_reduce/busbw/{s}", unit="GB/s", samples=(factor * min(300.0, s / 4e6),))
        for s in sizes
    )
    return Snapshot(
        node=NodeInfo(name=NodeName("gpu-node-01")),
        taken_at="2026-11-30T09:00:00Z",
        tool_version="0.1.0",
        software=Software(),
        gpus=gpus,
        measurements=meas,
    )


def _ctx() -> ReportContext:
    node = NodeName("gpu-node-01")
    return ReportContext(
        report=sample_report(), baselines={node: _snap((0, 1), 1.0)}, candidates={node: _snap((1, 0), 0.8)}
    )


def test_html_report_is_self_contained_with_marked_order_changes() -> None:
    page = render(ReportFormat.HTML, _ctx())
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)=["']https?://""", page), "the report must not load anything remote"
    assert page.count('<tr class="changed">') == 2
    assert page.count("<svg") == 1
    assert "Every device index checked against its PCIe bus id" in page


def test_html_report_renders_identically_twice() -> None:
    assert render(ReportFormat.HTML, _ctx()) == render(ReportFormat.HTML, _ctx())


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.chromium
@pytest.mark.skipif(_chromium() is None, reason="headless Chromium not installed (CI installs Debian's chromium)")
def test_html_report_charts_draw_in_headless_chromium(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render(ReportFormat.HTML, _ctx()), encoding="utf-8")
    argv = [
        str(_chromium()),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=3000",
        "--dump-dom",
        page.as_uri(),
    ]
    dom = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
    match = re.search(r'data-charts-drawn="(\d+)"', dom)
    assert match is not None, dom[:500]
    assert int(match.group(1)) >= 2, "expected the baseline and candidate curves to draw"


def test_html_order_table_shows_the_judges_decision_not_a_rederived_one() -> None:
    # Indices 0 and 1 swap slots and the board in slot 5 is replaced: the judge counts 0 and 1 as
    # moved and leaves slot 5 to device.replaced; a table rebuilt from "BDF or serial differs at an
    # index" would mark index 5 too.
    from tests.judge_scenarios import NODE, NOW, mi300x_snapshot, upgraded
    from upgrade_gate.judge.judge import judge
    from upgrade_gate.judge.policy import load_policy
    from upgrade_gate.model import GpuSerial, replace

    base, cand = mi300x_snapshot(), upgraded()
    gpus = list(cand.gpus)
    gpus[0], gpus[1] = replace(gpus[1], index=0), replace(gpus[0], index=1)
    gpus[5] = replace(gpus[5], serial=GpuSerial("NEWBOARD"), unique_id="0x1")
    cand = replace(cand, gpus=tuple(gpus))
    report = judge(baselines={NODE: base}, candidates=[cand], plan=None, policy=load_policy(), now=NOW)
    rules = {f.rule for f in report.findings}
    assert {"device.order_changed", "device.replaced"} <= rules
    page = render(ReportFormat.HTML, ReportContext(report=report, baselines={NODE: base}, candidates={NODE: cand}))
    table = page.split('<table class="order">', 1)[1].split("</table>", 1)[0]
    marked = re.findall(r'<tr class="changed"><td>(\d+)</td>', table)
    assert marked == ["0", "1"]
