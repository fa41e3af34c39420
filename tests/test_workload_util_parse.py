"""The utilisation columns of `amd-smi monitor` (GFX%, MEM%; 2024: GFX_UTIL, MEM_UTIL) on real outputs.

The goldens of the copied corpus files (`tests/fixtures/amd-smi/*.thermal.expected.json`, checked by
tests/test_parse_corpus.py) hold these fields too; here: values by column, N/A as None, a wrong unit.
"""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES
from tests.test_thermal_parse import BLOG_2024
from upgrade_gate.errors import ParseError
from upgrade_gate.parse.amdsmi_monitor import parse_amdsmi_monitor

AMDSMI = FIXTURES / "amd-smi"


def _read(name: str) -> str:
    return (AMDSMI / name).read_text(encoding="utf-8")


def test_amdsmi_monitor_reads_gfx_and_mem_utilisation_of_the_watch_capture() -> None:
    rows = parse_amdsmi_monitor(_read("monitor-watch-timestamp-mi300x-8gpu-under-stress.txt")).rows
    assert [(r.gpu, r.gfx_util_pct, r.mem_util_pct) for r in rows[:3]] == [
        (0, 100.0, 1.0),
        (1, 0.0, 0.0),
        (2, 0.0, 0.0),
    ]


def test_amdsmi_monitor_reads_utilisation_of_the_putm_capture_and_the_apu_example() -> None:
    putm = parse_amdsmi_monitor(_read("mi350x-8gpu-monitor-putm-rocm7.0.txt")).rows
    assert {(r.gfx_util_pct, r.mem_util_pct) for r in putm} == {(0.0, 0.0)} and len(putm) == 8
    apu = parse_amdsmi_monitor(_read("monitor-mi300a-4apu-gtt-usage-doc-example.txt")).rows
    assert [r.gfx_util_pct for r in apu] == [2.0, 2.0, 2.0, 2.0]


def test_amdsmi_monitor_reads_the_2024_util_header_names() -> None:
    rows = parse_amdsmi_monitor(BLOG_2024).rows
    assert [(r.gfx_util_pct, r.mem_util_pct) for r in rows] == [(83.0, 0.0), (13.0, 0.0), (0.0, 0.0)]


def test_amdsmi_monitor_keeps_na_utilisation_as_none() -> None:
    text = _read("monitor-mi300x-cpx-nps4-doc-example.txt").replace("...\n", "")
    rows = parse_amdsmi_monitor(text).rows
    assert (rows[0].gfx_util_pct, rows[1].gfx_util_pct, rows[1].mem_util_pct) == (0.0, None, None)
    assert {"gfx_util_pct", "mem_util_pct"} <= set(rows[1].na_fields)


@pytest.mark.parametrize(
    "text",
    [
        "GPU   GFX_CLK   GFX%\n  0  1278 MHz  100 W\n",  # a unit that is no percentage
        "GPU   GFX_CLK   GFX%\n  0  1278 MHz    abc\n",
        "GPU   GFX_CLK   GFX%\n  0  1278 MHz  100 pc\n",
    ],
)
def test_amdsmi_monitor_refuses_a_utilisation_that_is_no_percentage(text: str) -> None:
    with pytest.raises(ParseError, match="GFX%"):
        parse_amdsmi_monitor(text)
