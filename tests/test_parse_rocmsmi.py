"""rocm-smi parsers against every recorded rocm-smi output: goldens, key values, rejections."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FIXTURES
from tests.test_parse_corpus import cases_of
from upgrade_gate.errors import ParseError
from upgrade_gate.parse import rocmsmi
from upgrade_gate.parse.rocmsmi import parse_rocmsmi, parse_rocmsmi_concise, parse_rocmsmi_showtopo

DIR = FIXTURES / "rocm-smi"

CONCISE = cases_of("rocm-smi", "rocm-smi-concise")


def _read(name: str) -> str:
    return (DIR / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("key", sorted(rocmsmi.PARSERS))
def test_parse_rocmsmi_driver_not_initialized_is_a_parse_error(key: str) -> None:
    with pytest.raises(ParseError):
        rocmsmi.PARSERS[key](_read("error-driver-not-initialized-amdgpu-not-in-modules-4x-mi210-rocm6.2.3.txt"))


@pytest.mark.parametrize("name", CONCISE)
def test_parse_rocmsmi_concise_table_is_not_section_output(name: str) -> None:
    with pytest.raises(ParseError):
        parse_rocmsmi(_read(name))


def test_parse_rocmsmi_show_all_fru_corrupt_mixed_gpus() -> None:
    result = parse_rocmsmi(_read("mi210x3-mi50-mi100-mixed-5gpu-showallinfo-fru-corrupt-rocm5.4.txt"))
    assert result.form == "text" and result.driver_version == "5.18.2.22.40"
    assert [g.index for g in result.gpus] == [0, 1, 2, 3, 4]
    assert [g.bdf for g in result.gpus] == [
        "0000:63:00.0",
        "0000:e3:00.0",
        "0000:c3:00.0",
        "0000:83:00.0",
        "0000:a3:00.0",
    ]
    assert [g.device_id for g in result.gpus] == ["0x740f", "0x66a1", "0x738c", "0x740f", "0x740f"]
    assert [g.serial for g in result.gpus] == [None, "691939000092", "22fde47f6f30ba4d", None, None]
    assert result.gpus[0].unique_id == "0x21e4cb94e63377ab"
    assert any("FRU is likely corrupted" in e for e in result.gpus[0].errors)
    assert result.gpus[0].errors[0].startswith("Serial Number: ")
    assert result.gpus[0].card_series is None and result.gpus[1].card_series == "Radeon Instinct MI50 16GB"
    fw0 = result.gpus[0].firmware
    assert len(fw0) == 21 and fw0["MEC"] == "69" and fw0["TA RAS"] == "27.00.01.60" and fw0["SOS"] == "0x0027007f"


def test_parse_rocmsmi_json_mi100_identity_firmware_topology() -> None:
    result = parse_rocmsmi(_read("mi100-6gpu-json-all-rocm5.7.1-telegraf.json"))
    assert result.form == "json" and result.driver_version == "6.2.4" and len(result.gpus) == 6
    gpu = result.gpus[0]
    assert (gpu.device_id, gpu.bdf, gpu.serial, gpu.unique_id) == ("0x738c", "0000:1e:00.0", "0", None)
    assert "unique_id" in gpu.na_fields
    assert gpu.firmware["SMC"] == "00.54.29.00" and gpu.vram_total_bytes == 34342961152
    assert [g.bdf for g in result.gpus][-1] == "0000:49:00.0"
    assert len(result.links) == 15
    assert {(lk.weight, lk.hops, lk.link_type) for lk in result.links} == {(40, 2, "PCIE")}


def test_parse_rocmsmi_json_rx6700xt_no_affinity_and_na() -> None:
    gpu = parse_rocmsmi(_read("rx6700xt-json-all-rocm4.3.0-telegraf.json")).gpus[0]
    assert gpu.numa_node == 0 and gpu.numa_affinity is None and "numa_affinity" in gpu.na_fields
    assert gpu.serial is None and "serial" in gpu.na_fields and gpu.firmware["ASD"] == "553648315"


def test_parse_rocmsmi_json_device_id_rename_and_system_only_input() -> None:
    doc = {"card0": {"Device ID": "0x74a1", "Unique ID": "0x1f2e", "PCI Bus": "0000:0C:00.0"}, "system": {}}
    gpu = parse_rocmsmi(json.dumps(doc)).gpus[0]
    assert (gpu.device_id, gpu.unique_id, gpu.bdf) == ("0x74a1", "0x1f2e", "0000:0c:00.0")
    topo = parse_rocmsmi(json.dumps({"system": {"(Topology) Link type between DRM devices 1 and 0": "XGMI"}}))
    assert topo.gpus == () and topo.links[0].a == 0 and topo.links[0].link_type == "XGMI"


def test_parse_rocmsmi_text_sections_with_tabs() -> None:
    showid = parse_rocmsmi(_read("mi300x-spx-showid-rocm6.3.3.txt")).gpus[0]
    assert (showid.device_name, showid.device_id, showid.guid) == ("AMD Instinct MI300X OAM", "0x74a1", "28851")
    apu = parse_rocmsmi(_read("apu-0x164e-showfwinfo-section-of-a-fragment.txt")).gpus[0]
    assert (
        apu.firmware["SMC"] == "00.84.79.221" and apu.firmware["TA XGMI"] == "00.00.00.00" and len(apu.firmware) == 21
    )
    qpx = parse_rocmsmi(_read("mi300x-qpx-4partitions-showmeminfo-vram-rocm6.3.3.txt"))
    assert [g.vram_total_bytes for g in qpx.gpus] == [206141652992] * 4


def test_parse_rocmsmi_showtopo_matrices_and_numa() -> None:
    text = _read("mi300a-4apu-showtopo-rocm7.1.1-tabs-trailing-spaces.txt")
    topo = parse_rocmsmi_showtopo(text)
    assert topo.gpus == (0, 1, 2, 3) and topo.matrices == ("weight", "hops", "link_type")
    assert len(topo.links) == 6 and {(lk.weight, lk.hops, lk.link_type) for lk in topo.links} == {(15, 1, "XGMI")}
    assert [(g.index, g.numa_node, g.numa_affinity) for g in topo.numa] == [(i, i, i) for i in range(4)]
    info = parse_rocmsmi(text)
    assert info.links == topo.links and [g.numa_node for g in info.gpus] == [0, 1, 2, 3]


def test_parse_rocmsmi_showtopo_warning_line_before_the_matrices() -> None:
    topo = parse_rocmsmi_showtopo(_read("mi308x-8gpu-showtopo-low-power-warning-rocm7.2.txt"))
    assert topo.warnings == (
        "AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status",
    )  # fmt: skip
    assert topo.gpus == tuple(range(8)) and len(topo.links) == 28
    assert {(lk.weight, lk.hops, lk.link_type) for lk in topo.links} == {(15, 1, "XGMI")}
    assert [g.numa_node for g in topo.numa] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_parse_rocmsmi_concise_trailing_tabs_mi355x_under_load() -> None:
    table = parse_rocmsmi_concise(_read("mi355x-8gpu-concise-trailing-tabs-under-load-rocm7.1.2-oci.txt"))
    assert [r.node for r in table.rows] == [3, 5, 4, 2, 7, 9, 8, 6]
    assert {(r.device_id, r.memory_partition, r.compute_partition, r.power_cap_w) for r in table.rows} == {
        ("0x75a3", "NPS1", "SPX", 1400.0)
    }
    assert [r.gpu_percent for r in table.rows] == [93.0, 95.0, 94.0, 96.0, 100.0, 100.0, 100.0, 100.0]
    assert table.rows[7].power_w == 1317.0 and table.rows[7].guid == "8465"


def test_parse_rocmsmi_concise_partitions_and_caret_ansi() -> None:
    tpx = parse_rocmsmi_concise(_read("mi300a-tpx-3partitions-concise-rocm6.3.3.txt"))
    assert [(r.device, r.compute_partition, r.partition_id) for r in tpx.rows] == [(i, "TPX", i) for i in range(3)]
    assert {r.memory_partition for r in tpx.rows} == {"NPS1"}
    hung = parse_rocmsmi_concise(_read("mi300x-8gpu-concise-rocm6.2.3-ansi-caret-hung.txt"))
    assert len(hung.rows) == 8 and hung.rows[0].temp_c == 48.0 and hung.rows[0].power_cap_w == 750.0
    assert [r.vram_percent for r in hung.rows] == [1.0, 75.0, 74.0, 74.0, 75.0, 1.0, 75.0, 74.0]
    assert (hung.rows[5].device_id, hung.rows[5].guid, hung.rows[5].node) == ("0x74a1", "705", 7)
    spx = parse_rocmsmi_concise(_read("mi300a-spx-concise-rocm6.3.3.txt")).rows[0]
    assert (spx.compute_partition, spx.sclk_mhz, spx.mclk_mhz) == ("SPX", 95.0, 1300.0)


def test_parse_rocmsmi_concise_legacy_and_wrapped_name() -> None:
    legacy = parse_rocmsmi_concise(_read("legacy-2019-default-table-rocm2.x-single-gpu.txt"))
    row = legacy.rows[0]
    assert legacy.columns[0] == "GPU" and (row.temp_c, row.fan_percent, row.gpu_percent) == (38.0, 21.96, 100.0)
    navi = parse_rocmsmi_concise(_read("rx7600xt-concise-rocm6.0.0-derived-header.txt")).rows[0]
    assert (navi.device_id, navi.revision, navi.name) == ("0x0518", "0xc0", "Navi 33 [Radeon RX 7")
    assert navi.sclk_mhz is None and navi.power_cap_w is None and navi.perf == "unknown"
    assert {"sclk_mhz", "power_cap_w", "temp_c"} <= set(navi.na_fields)


@pytest.mark.parametrize(
    ("key", "text", "message"),
    [
        ("rocm-smi", '{"card0": {"PCI Bus": "0000:1E:00"}}', "PCI address"),
        ("rocm-smi", '{"card0": ["x"]}', "object of values"),
        ("rocm-smi", "{}", "no card"),
        ("rocm-smi", "garbage\n", "outside a rocm-smi section"),
        ("rocm-smi", "== ID ==\nGPU[0] : Device ID: 0x1\nGPU[0] : Device ID: 0x2\n", "printed twice"),
        ("rocm-smi", "== M ==\nGPU[0] : VRAM Total Memory (B): lots\n", "integer"),
        ("rocm-smi-showtopo", "== Weight between two GPUs ==\n   GPU0  GPU1\nGPU0 0 15\nGPU1 40 0\n", "differs"),
        ("rocm-smi-showtopo", "== Weight between two GPUs ==\n   GPU0  GPU1\nGPU0 0\n", "does not match"),
        ("rocm-smi-concise", "GPU  Temp   AvgPwr  SCLK\n0    hot    155.0W  1802Mhz\n", "unexpected temp_c"),
        ("rocm-smi-concise", "GPU  Temp   AvgPwr  SCLK\n0    38.0c155.0W  1802Mhz\n", "run together"),
        ("rocm-smi-concise", "GPU  Temp   AvgPwr  SCLK\n0    38.0c  155.0W\n", "empty"),
        ("rocm-smi-concise", "GPU  Temp   AvgPwr  SCLK\n", "without rows"),
    ],
)
def test_parse_rocmsmi_rejects_malformed_input(key: str, text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        rocmsmi.PARSERS[key](text)


def test_parse_rocmsmi_json_after_warning_lines() -> None:
    text = "WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status\n\n"
    result = parse_rocmsmi(text + _read("rx6700xt-json-all-rocm4.3.0-telegraf.json"))
    assert result.form == "json" and result.gpus[0].bdf == "0000:07:00.0"
    assert result.warnings == ("AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status",)
