"""amd-smi parsers against every recorded amd-smi output: goldens, key values, rejections."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.errors import ParseError
from upgrade_gate.parse import amdsmi
from upgrade_gate.parse.amdsmi import (
    parse_amdsmi_firmware,
    parse_amdsmi_list,
    parse_amdsmi_partition,
    parse_amdsmi_static,
    parse_amdsmi_topology,
    parse_amdsmi_version,
    parse_amdsmi_xgmi,
)

DIR = FIXTURES / "amd-smi"


def _read(name: str) -> str:
    return (DIR / name).read_text(encoding="utf-8")


def test_parse_amdsmi_version_text_and_json() -> None:
    text = parse_amdsmi_version(_read("version-24.7.1-rocm6.3.3.txt"))
    assert (text.tool_version, text.library_version, text.rocm_version) == ("24.7.1+8dc45db", "25.1.0.0", "6.3.3")
    assert text.amdgpu_version is None and text.na_fields == ()
    js = parse_amdsmi_version(_read("version-json-26.2.2-rocm7.2.1-root.json"))
    assert (js.tool_version, js.rocm_version, js.amdgpu_version) == ("26.2.2+e1a6bc5663", "7.2.1", "6.16.13")
    assert js.hsmp_driver_version is None and js.na_fields == ("hsmp_driver_version",)


def test_parse_amdsmi_list_text_with_version_banner() -> None:
    result = parse_amdsmi_list(_read("list-8gpu-mi300x-with-version-header-rocm6.1.2.txt"))
    assert result.version is not None and result.version.rocm_version == "6.1.2"
    assert [g.index for g in result.gpus] == list(range(8))
    assert result.gpus[0].bdf == "0000:11:00.0" and result.gpus[7].bdf == "0000:da:00.0"
    assert result.gpus[4].uuid == "43ff74a1-0000-1000-80a6-10e214063eb5"
    assert all(g.kfd_id is None and g.partition_id is None and g.na_fields == () for g in result.gpus)


def test_parse_amdsmi_list_json_agrees_with_text() -> None:
    text = parse_amdsmi_list(_read("list-8gpu-mi300x-with-version-header-rocm6.1.2.txt"))
    js = parse_amdsmi_list(_read("list-8gpu-mi300x-from-source.json"))
    assert js.form == "json-list"
    assert [(g.index, g.bdf, g.uuid) for g in js.gpus] == [(g.index, g.bdf, g.uuid) for g in text.gpus]
    assert (js.gpus[0].kfd_id, js.gpus[0].node_id, js.gpus[0].partition_id) == (55354, 2, 0)


def test_parse_amdsmi_static_new_json_schema() -> None:
    result = parse_amdsmi_static(
        _read("static-json-mi300x-8gpu-amdsmi26.2.2-rocm7.2.1-sriov-ifwi-dell-ai-fixture.json")
    )
    assert result.form == "json-gpu-data" and len(result.gpus) == 8
    gpu0, gpu4 = result.gpus[0], result.gpus[4]
    assert (gpu0.bdf, gpu0.asic_serial, gpu0.board_serial) == ("0000:1b:00.0", "0x28246CE5673B4AA0", "692409006566")
    assert (gpu0.market_name, gpu0.device_id, gpu0.gfx_target) == ("AMD Instinct MI300X", "0x74a1", "gfx942")
    assert gpu0.vram_total_mib == 196592 and gpu0.max_pcie_speed_gts == 32.0
    assert (gpu0.driver_name, gpu0.driver_version) == ("amdgpu", "6.16.13")
    assert gpu0.vbios is not None and (gpu0.vbios.source, gpu0.vbios.version) == ("ifwi", "00159017")
    assert gpu0.compute_partition is None and "compute_partition" not in gpu0.na_fields  # not printed
    assert (gpu4.bdf, gpu4.numa_node, gpu4.oam_id) == ("0000:9d:00.0", 1, 6)
    assert [g.bdf for g in result.gpus][-1] == "0000:dd:00.0"


def test_parse_amdsmi_static_old_list_envelope_reads_the_same_gpus() -> None:
    doc = json.loads(_read("static-json-mi300x-8gpu-amdsmi26.2.2-rocm7.2.1-sriov-ifwi-dell-ai-fixture.json"))
    listed = parse_amdsmi_static(json.dumps(doc["gpu_data"], indent=4))
    wrapped = parse_amdsmi_static(json.dumps(doc, indent=4))
    assert listed.form == "json-list" and listed.gpus == wrapped.gpus


def test_parse_amdsmi_static_text_doc_example() -> None:
    result = parse_amdsmi_static(_read("static-mi300a-doc-example-driver6.9.0-rc5-elided.txt"))
    assert result.truncated and result.cpu_count == 1 and len(result.gpus) == 1
    gpu = result.gpus[0]
    assert (gpu.bdf, gpu.asic_serial, gpu.device_id) == ("0000:01:00.0", "0x7E8F7E20764E2714", "0x74a0")
    assert (gpu.compute_partition, gpu.memory_partition, gpu.partition_id) == ("SPX", "NPS1", 0)
    assert gpu.vram_total_mib == 64289 and gpu.numa_node == 0 and gpu.driver_version == "6.9.0-rc5+"
    assert gpu.vbios is not None and gpu.vbios.version is None and "vbios.version" in gpu.na_fields
    assert gpu.board_serial is None and "board_serial" in gpu.na_fields


def test_parse_amdsmi_static_partition_view_cpx() -> None:
    result = parse_amdsmi_static(_read("static-partition-mi300a-4apu-cpx-24-partitions.txt"))
    assert len(result.gpus) == 24
    assert {g.compute_partition for g in result.gpus} == {"CPX"}
    assert {g.memory_partition for g in result.gpus} == {"NPS1"}
    assert [g.partition_id for g in result.gpus[:7]] == [0, 1, 2, 3, 4, 5, 0]
    assert all(g.bdf is None and g.na_fields == () for g in result.gpus)


def test_parse_amdsmi_firmware_text_and_json_agree() -> None:
    text = parse_amdsmi_firmware(_read("firmware-mi355x-gpu0-only-oci-pollara.txt"))
    js = parse_amdsmi_firmware(_read("firmware-mi355x-gpu0-from-source.json"))
    assert text.gpus == js.gpus
    firmware = text.gpus[0].firmware
    assert firmware is not None and len(firmware) == 14
    assert firmware["CP_MEC1"] == "41" and firmware["VCN"] == "09.10.90.31"
    assert firmware["TA_RAS"] == "1B.45.00.0A" and firmware["PM"] == "04.86.15.106"
    assert firmware["PLDM_BUNDLE"] == "01.25.17.07"


def test_parse_amdsmi_firmware_gpu_data_envelope_and_na() -> None:
    doc = json.loads(_read("firmware-mi355x-gpu0-from-source.json"))
    doc.append({"gpu": 1, "fw_list": "N/A"})
    result = parse_amdsmi_firmware(json.dumps({"gpu_data": doc}))
    assert result.form == "json-gpu-data"
    assert result.gpus[1].firmware is None and result.gpus[1].na_fields == ("fw_list",)


def test_parse_amdsmi_firmware_rejects_duplicate_block() -> None:
    doc = [{"gpu": 0, "fw_list": [{"fw_id": "PM", "fw_version": "1"}, {"fw_id": "PM", "fw_version": "2"}]}]
    with pytest.raises(ParseError, match="printed twice"):
        parse_amdsmi_firmware(json.dumps(doc))


def test_parse_amdsmi_static_and_list_json_of_a_real_rocm631_apu() -> None:
    static = parse_amdsmi_static(_read("static-json-list-schema-strix-halo-gfx1151-rocm6.3.1-go-test.json"))
    assert static.form == "json-list" and len(static.gpus) == 1
    gpu = static.gpus[0]
    assert (gpu.bdf, gpu.device_id, gpu.gfx_target, gpu.compute_units) == ("0000:c4:00.0", "0x1586", "gfx1151", 40)
    assert gpu.vbios is not None and gpu.vbios.version == "023.011.000.039.000001"
    assert (gpu.vram_total_mib, gpu.numa_node, gpu.numa_affinity) == (32768, 0, -1)
    assert gpu.asic_serial is None and gpu.board_serial is None  # N/A on an APU: no identity from amd-smi
    assert {"asic_serial", "board_serial", "max_pcie_speed_gts"} <= set(gpu.na_fields)
    listing = parse_amdsmi_list(_read("list-json-strix-halo-gfx1151-rocm6.3.1-go-test.json"))
    (entry,) = listing.gpus
    assert (entry.bdf, entry.uuid, entry.kfd_id, entry.node_id) == (
        "0000:c4:00.0",
        "00ff1586-0000-1000-8000-000000000000",
        42905,
        1,
    )


def test_parse_amdsmi_topology_mi355x_nine_tables_without_legend() -> None:
    topo = parse_amdsmi_topology(_read("topology-mi355x-8gpu-9-tables-no-legend-rocm7.0.2-oci-pollara.txt"))
    assert len(topo.bdfs) == 8 and topo.bdfs[0] == "0000:0d:00.0" and len(topo.links) == 56
    assert {(lk.access, lk.weight, lk.hops, lk.link_type) for lk in topo.links} == {(True, 0, 1, "XGMI")}
    assert {(lk.coherent, lk.atomics, lk.dma, lk.bi_dir) for lk in topo.links} == {("C", "64,32", "T", "T")}


def test_parse_amdsmi_topology_xgmi_weights() -> None:
    result = parse_amdsmi_topology(_read("topology-mi300x-8gpu-doc-example-amdsmi-changelog-rocm6.1-weight15.txt"))
    assert len(result.bdfs) == 8 and len(result.links) == 56
    assert {(lk.link_type, lk.weight, lk.hops, lk.access) for lk in result.links} == {("XGMI", 15, 1, True)}
    assert {(lk.numa_bw_min, lk.numa_bw_max) for lk in result.links} == {(50000, 50000)}
    assert result.tables == ("access", "weight", "hops", "link_type", "numa_bw")


def test_parse_amdsmi_topology_pcie_access_disabled() -> None:
    result = parse_amdsmi_topology(_read("topology-2gpu-pcie-access-disabled.txt"))
    assert result.bdfs == ("0000:03:00.0", "0000:0c:00.0")
    link = result.links[0]
    assert (link.src, link.dst, link.link_type, link.weight, link.hops) == (
        "0000:03:00.0",
        "0000:0c:00.0",
        "PCIE",
        40,
        2,
    )
    assert link.access is False and link.coherent is None and link.numa_bw_min is None


@pytest.mark.parametrize(
    ("text_name", "json_name"),
    [
        ("topology-2gpu-pcie-access-disabled.txt", "topology-2gpu-pcie-from-source.json"),
        (
            "topology-mi300x-8gpu-doc-example-amdsmi-changelog-rocm6.1-weight15.txt",
            "topology-mi300x-8gpu-5tables-from-source.json",
        ),
    ],
)
def test_parse_amdsmi_topology_json_agrees_with_text(text_name: str, json_name: str) -> None:
    text = parse_amdsmi_topology(_read(text_name))
    js = parse_amdsmi_topology(_read(json_name))
    assert js.bdfs == text.bdfs and js.tables == text.tables
    strip = [(lk.src, lk.dst, lk.access, lk.weight, lk.hops, lk.link_type, lk.numa_bw_min) for lk in js.links]
    assert strip == [(lk.src, lk.dst, lk.access, lk.weight, lk.hops, lk.link_type, lk.numa_bw_min) for lk in text.links]
    assert js.links[0].src_index == 0 and js.links[0].dst_index == 1


def test_parse_amdsmi_partition_current_and_memory() -> None:
    spx = parse_amdsmi_partition(_read("partition-mi300a-4apu-spx-all-NA-rocm6.3.3.txt"))
    assert [p.gpu for p in spx.current] == [0, 1, 2, 3]
    assert {(p.memory, p.accelerator_type, p.partition_ids) for p in spx.current} == {("NPS1", None, None)}
    assert "accelerator_type" in spx.current[0].na_fields
    assert [(m.gpu, m.caps, m.current) for m in spx.memory] == [(i, None, "NPS1") for i in range(4)]
    assert len(spx.profiles) == 4 and spx.profiles[0].values["NUM_PARTITIONS"] == "0"
    cpx = parse_amdsmi_partition(_read("partition-mi300a-4apu-cpx-24-partitions-all-NA.txt"))
    assert len(cpx.current) == 24 and len(cpx.memory) == 24 and len(cpx.profiles) == 24


def test_parse_amdsmi_xgmi_na_is_unknown_not_down() -> None:
    status = parse_amdsmi_xgmi(_read("xgmi-link-status-mi3x-8gpu-mvf-all-NA-doc-example.txt"))
    assert status.truncated and len(status.link_status) == 56
    assert {cell.status for cell in status.link_status} == {None}
    fixed = parse_amdsmi_xgmi(_read("xgmi-metric-2navi-no-xgmi-fixed-NA-doc-example.txt"))
    assert [(m.bdf, m.bit_rate_gbps, m.link_type) for m in fixed.metrics] == [
        ("0000:08:00.0", None, None),
        ("0000:44:00.0", None, None),
    ]


def test_parse_amdsmi_xgmi_metric_table() -> None:
    result = parse_amdsmi_xgmi(_read("xgmi-mi300x-8gpu-doc-example-amdsmi-changelog-rocm6.1.txt"))
    assert len(result.metrics) == 8 and result.destinations[0] == "0000:0c:00.0"
    gpu0 = result.metrics[0]
    assert (gpu0.bit_rate_gbps, gpu0.max_bandwidth_gbps, gpu0.link_type) == (32.0, 512.0, "XGMI")
    assert gpu0.read_kb == (None, 2, 2, 1, 2, 1, 2, 2) and gpu0.write_kb[1] == 1
    ports = parse_amdsmi_xgmi(_read("xgmi-source-status-mi3x-8gpu-mvf-all-NA-doc-example.txt")).port_status
    assert len(ports) == 8 and ports[7].bdf == "0000:f5:00.0" and set(ports[0].ports) == {None}


@pytest.mark.parametrize(
    ("key", "text", "message"),
    [
        ("amd-smi-list", "GPU: 0\n    BDF: 0000:11:00\n", "PCI address"),
        ("amd-smi-list", "GPU: 0\n    UUID: x\n", "without a BDF"),
        ("amd-smi-list", "GPU: 0\n    BDF: 0000:11:00.0\nGPU: 0\n    BDF: 0000:12:00.0\n", "printed twice"),
        ("amd-smi-static", "GPU: 0\n    VRAM:\n        SIZE: 12 parsecs\n", "unknown size unit"),
        ("amd-smi-static", "GPU: 0\n    ASIC:\n      MARKET_NAME: x\n     DEVICE_ID: y\n", "indentation"),
        ("amd-smi-static", "[]", "no GPU"),
        ("amd-smi-static", '{"gpu_data": [{"gpu": "zero"}]}', "GPU index"),
        ("amd-smi-version", "AMDSMI Tool: 1 | broken\n", "key: value"),
        ("amd-smi-version", "", "one version line"),
        ("amd-smi-topology", "WEIGHT TABLE:\n             0000:03:00.0\n0000:04:00.0 0\n", "row order"),
        ("amd-smi-firmware", "GPU: 0\n    FW_LIST:\n        FW 0:\n            FW_ID: PM\n", "FW_VERSION"),
    ],
)
def test_parse_amdsmi_rejects_malformed_input(key: str, text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        amdsmi.PARSERS[key](text)


@pytest.mark.parametrize("value", [1.7144137714980277e302, float("inf"), float("nan"), -1.0, 2.0**60])
def test_amdsmi_size_out_of_range_is_a_parse_error(value: float) -> None:
    """A size no GPU has (negative, beyond 2**53 MiB, inf) is a ParseError naming it: 1.7e302 MB once
    raised OverflowError (found by the mutated-JSON property test of `amd-smi static`)."""
    from upgrade_gate.parse.amdsmi_values import to_mib

    with pytest.raises(ParseError, match="out of range"):
        to_mib(value, "MB", tool="amd-smi", line_no=7, excerpt='"value": ...')
    assert to_mib(196592.0, "MB", tool="amd-smi", line_no=7, excerpt="x") == 196592
