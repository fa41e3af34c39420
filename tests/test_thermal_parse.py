"""The thermal readers of phase 2 on real outputs: `amd-smi monitor` tables and rocm-smi's JSON.

Their goldens (`<case>.thermal.expected.json` beside the copied corpus file) are checked by the parser
harness, tests/test_parse_corpus.py (second readings of those outputs); here: values by column and the
rejections a fail-closed sampler relies on: garbage, error texts, a mangled unit,
a card without its bus address.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.errors import ParseError
from upgrade_gate.fakenode import faults, mi300x_cpx_node, mi300x_node
from upgrade_gate.fakenode._replay.main import GARBAGE
from upgrade_gate.fakenode.render_thermal import render_amdsmi_monitor, render_rocmsmi_thermal
from upgrade_gate.parse.amdsmi_monitor import parse_amdsmi_monitor
from upgrade_gate.parse.registry import all_parsers
from upgrade_gate.parse.rocmsmi_thermal import parse_rocmsmi_thermal

AMDSMI = FIXTURES / "amd-smi"
ROCMSMI = FIXTURES / "rocm-smi"
MONITOR_CASES = (
    "mi350x-8gpu-monitor-putm-rocm7.0.txt",
    "monitor-watch-timestamp-mi300x-8gpu-under-stress.txt",
    "monitor-mi300a-4apu-gtt-usage-doc-example.txt",
)
ROCMSMI_CASES = ("mi100-6gpu-json-all-rocm5.7.1-telegraf.json", "rx6700xt-json-all-rocm4.3.0-telegraf.json")

# AMD ROCm blog "Getting to Know Your GPU: A Deep Dive into AMD SMI" (17 Sep 2024), `amd-smi monitor
# -putm` on 8 MI300X, first three rows: the ROCm 6.2-era header names (GPU_TEMP, MEM_TEMP). Not in the
# corpus; quoted here as published.
BLOG_2024 = (
    "GPU  POWER  GPU_TEMP  MEM_TEMP  GFX_UTIL  GFX_CLOCK  MEM_UTIL  MEM_CLOCK\n"
    "  0  182 W     42 \u00b0C     41 \u00b0C      83 %   1613 MHz       0 %   1230 MHz\n"
    "  1  143 W     40 \u00b0C     39 \u00b0C      13 %    358 MHz       0 %   1173 MHz\n"
    "  2  117 W     41 \u00b0C     40 \u00b0C       0 %    120 MHz       0 %    900 MHz\n"
)


def _golden(folder: Path, name: str) -> Path:
    return folder / (Path(name).stem + ".thermal.expected.json")


def test_thermal_parse_amdsmi_monitor_reads_values_by_column() -> None:
    putm = parse_amdsmi_monitor((AMDSMI / MONITOR_CASES[0]).read_text(encoding="utf-8"))
    assert [r.hotspot_c for r in putm.rows] == [55.0, 58.0, 54.0, 61.0, 55.0, 61.0, 56.0, 59.0]
    assert (putm.rows[3].power_w, putm.rows[3].power_cap_w, putm.rows[3].memory_c) == (257.0, 1000.0, 48.0)
    watch = parse_amdsmi_monitor((AMDSMI / MONITOR_CASES[1]).read_text(encoding="utf-8"))
    assert watch.watch and watch.rows[0].timestamp == 1753969973
    assert (watch.rows[0].power_w, watch.rows[0].hotspot_c) == (750.0, 69.0)  # GPU 0 under rvs gst
    blog = parse_amdsmi_monitor(BLOG_2024)
    assert [(r.gpu, r.power_w, r.hotspot_c, r.memory_c) for r in blog.rows] == [
        (0, 182.0, 42.0, 41.0), (1, 143.0, 40.0, 39.0), (2, 117.0, 41.0, 40.0),
    ]  # fmt: skip


def test_thermal_parse_amdsmi_monitor_partitions_print_na() -> None:
    text = (AMDSMI / "monitor-mi300x-cpx-nps4-doc-example.txt").read_text(encoding="utf-8")
    with pytest.raises(ParseError, match="GPU"):
        parse_amdsmi_monitor(text)  # the doc's "..." elision is no row
    rows = parse_amdsmi_monitor(text.replace("...\n", "")).rows
    assert [(r.gpu, r.xcp, r.hotspot_c) for r in rows[:2]] == [(0, 0, 49.0), (1, 1, None)]
    assert rows[1].na_fields == ("power_w", "hotspot_c", "memory_c", "gfx_util_pct", "mem_util_pct")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GARBAGE.decode("utf-8", errors="replace"), ""),
        ("ERROR:root:Driver not initialized (amdgpu not found in modules)\n", "header"),
        ("GPU  POWER   GPU_T\n  0  251 W   55 C\n", "in \u00b0C"),  # a mangled degree sign is no unit
        ("GPU  POWER   GPU_T\n  0  251 W  155 \u00b0C0\n", ""),
        ("GPU  POWER   GPU_T\n", "without rows"),
        ("GPU  POWER   GPU_T\n  0  251 W   55 \u00b0C\n  0  251 W   55 \u00b0C\n", "twice"),
        ("", "no monitor table"),
    ],
)
def test_thermal_parse_amdsmi_monitor_rejects_what_it_cannot_read(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message or None):
        parse_amdsmi_monitor(text)


def test_thermal_parse_rocmsmi_rejects_cards_it_cannot_place() -> None:
    legacy = (ROCMSMI / "legacy-2019-json-f-t-P-single-line.json").read_text(encoding="utf-8")
    with pytest.raises(ParseError, match="PCI Bus"):
        parse_rocmsmi_thermal(legacy)  # `-f -t -P` without --showbus: no BDF, readings cannot be placed
    error = (ROCMSMI / "error-driver-not-initialized-amdgpu-not-in-modules-4x-mi210-rocm6.2.3.txt").read_text()
    with pytest.raises(ParseError):
        parse_rocmsmi_thermal(error)


def test_thermal_parse_reads_the_fake_tools_and_is_registered() -> None:
    spec = faults.run_hot(mi300x_node("n1"), 3, 14.0)
    monitor = render_amdsmi_monitor(spec)
    corpus_header = (AMDSMI / MONITOR_CASES[0]).read_text(encoding="utf-8").splitlines()[0]
    assert corpus_header.startswith(monitor.splitlines()[0])  # the corpus layout, fewer columns
    rows = parse_amdsmi_monitor(monitor).rows
    assert [r.hotspot_c for r in rows] == [63.0, 66.0, 62.0, 83.0, 63.0, 69.0, 64.0, 67.0]
    cards = parse_rocmsmi_thermal(render_rocmsmi_thermal(spec))
    assert [(c.bdf, c.junction_c) for c in cards][3] == ("0000:75:00.0", 83.0)
    cpx = parse_amdsmi_monitor(render_amdsmi_monitor(mi300x_cpx_node("c1"))).rows
    assert [r.hotspot_c is not None for r in cpx] == [r.xcp == 0 for r in cpx]
    assert {"amd-smi-monitor", "rocm-smi-thermal"} <= set(all_parsers())


def test_thermal_sampler_skips_known_preambles_and_maps_amdsmi_indexes_to_bdfs() -> None:
    from upgrade_gate.validate.phases.thermal import ROCMSMI_ARGV, ThermalRecord, _read

    spec = mi300x_node("n1")
    banner = "WARNING: User is missing the following required groups: render. Please add user to these groups.\n"
    record = ThermalRecord(bdfs={i: g.bdf for i, g in enumerate(spec.enumerated_gpus)})
    readings = _read(record, banner + render_amdsmi_monitor(spec))
    assert readings["0000:75:00.0"].hotspot_c == 69.0 and len(readings) == 8
    record.tool = ROCMSMI_ARGV
    low_power = "WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status\n"
    assert _read(record, low_power + render_rocmsmi_thermal(spec))["0000:75:00.0"].power_w == 708.0
