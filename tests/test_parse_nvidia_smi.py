"""nvidia-smi parsers (issue 30): `-q -x`, `topo -m`, `nvlink -s` on real outputs, and the bad-input forms.

Goldens, the refusal of the cut DGX matrix, and the mutation/random-text properties run in
`tests/test_parse_corpus.py`; this module pins what each parser must read from the real outputs and how
each hostile form (error texts, prompts, ANSI remnants, truncation, wrapped lines) ends: parsed right or
a ParseError naming its form, never an error text as a value.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.errors import ParseError
from upgrade_gate.parse.nvidia_smi_nvlink import parse_nvidia_smi_nvlink
from upgrade_gate.parse.nvidia_smi_topo import parse_nvidia_smi_topo
from upgrade_gate.parse.nvidia_smi_xml import parse_nvidia_smi_xml

A100 = "a100-sxm4-80gb-mig-q-x-driver535-telegraf.xml"
T4 = "tesla-t4-q-x-driver515-v11-throttle-reasons-telegraf.xml"
ADA = "rtx4000-sff-ada-q-x-driver595-v13-telegraf.xml"
TOPO = "rtxa6000x3-topo-m-nv4-ansi-underlined-header-siboehm.txt"
DGX_TOPO = "h100-dgx-topo-m-12nic-truncated.txt"
NVLINK = "rtxa6000x3-nvlink-s-one-gpu-all-links-inactive-siboehm.txt"

# nvidia-smi's own failure messages (see upgrade_gate.parse.nvidia_smi_messages), each with the words its
# refusal must carry.
FAILURES = [
    (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
        "NVIDIA driver is installed and running.\n",
        "could not communicate with the NVIDIA driver",
    ),
    ("No devices were found\n", "found no devices"),
    ("Failed to initialize NVML: Driver/library version mismatch\n", "driver/library version mismatch"),
]


def _text(name: str) -> str:
    return (FIXTURES / "nvidia-smi" / name).read_text(encoding="utf-8")


# --------------------------------------------------------------------------- nvidia-smi -q -x


def test_nvidia_smi_xml_reads_identity_firmware_and_mig_of_a100() -> None:
    log = parse_nvidia_smi_xml(_text(A100))
    assert (log.dtd, log.driver_version, log.cuda_version) == ("nvsmi_device_v12.dtd", "535.54.03", "12.2")
    assert log.attached_gpus == 4 and len(log.gpus) == 1 and not log.complete  # the fixture kept 1 of 4
    gpu = log.gpus[0]
    assert (gpu.index, gpu.bdf, gpu.serial) == (0, "0000:01:00.0", "1650522003820")
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert (gpu.device_id, gpu.vendor_id, gpu.vbios) == ("0x20b2", "0x10de", "92.00.36.00.02")
    assert gpu.firmware == {
        "inforom.img": "G506.0212.00.01",
        "inforom.oem": "2.0",
        "inforom.ecc": "6.16",
        "gsp": "535.54.03",
    }
    assert "inforom_version/pwr_object" in gpu.na_fields  # N/A: None and named, never guessed
    assert (gpu.mig_current, gpu.mig_pending) == ("Enabled", "Enabled")
    assert [(m.index, m.gpu_instance_id, m.memory_total_mib) for m in gpu.mig_devices] == [
        (0, 3, 19968),
        (1, 4, 19968),
        (2, 5, 19968),
        (3, 6, 19968),
    ]
    assert gpu.clock_reasons_element == "clocks_event_reasons" and gpu.clock_reasons_active == ()
    assert gpu.remapped_rows is None and "remapped_rows" in gpu.na_fields
    assert gpu.ecc is not None and gpu.ecc.volatile["dram_uncorrectable"] == 0


def test_nvidia_smi_xml_reads_v11_throttle_reasons_and_retired_pages() -> None:
    gpu = parse_nvidia_smi_xml(_text(T4)).gpus[0]
    assert gpu.clock_reasons_element == "clocks_throttle_reasons"  # renamed clocks_event_reasons in DTD v12
    assert gpu.retired_pages is not None
    assert (gpu.retired_pages.single_bit_count, gpu.retired_pages.double_bit_count) == (0, 0)
    assert gpu.retired_pages.pending is False
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (8, 16)
    assert gpu.mig_current is None and "mig_mode/current_mig" in gpu.na_fields


def test_nvidia_smi_xml_reads_v13_remapped_rows_and_active_reason() -> None:
    gpu = parse_nvidia_smi_xml(_text(ADA)).gpus[0]
    assert gpu.remapped_rows is not None
    assert (gpu.remapped_rows.uncorrectable, gpu.remapped_rows.pending, gpu.remapped_rows.failure) == (0, False, False)
    assert gpu.clock_reasons_active == ("gpu_idle",)
    assert gpu.architecture == "Ada Lovelace"
    assert gpu.ecc is not None and gpu.ecc.volatile == {}  # every counter N/A (ECC disabled)


@pytest.mark.parametrize(("text", "message"), FAILURES)
def test_nvidia_smi_xml_refuses_failure_messages_by_name(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message) as info:
        parse_nvidia_smi_xml(text)
    assert info.value.line_no == 1


def test_nvidia_smi_xml_refuses_a_prompt_before_the_document() -> None:
    with pytest.raises(ParseError, match="text before the XML document"):
        parse_nvidia_smi_xml("root@node:~# nvidia-smi -q -x\n" + _text(A100))


def test_nvidia_smi_xml_strips_ansi_remnants() -> None:
    text = _text(A100)
    dirty = text.replace("<nvidia_smi_log>", "\x1b[0m<nvidia_smi_log>^[[0m", 1)
    assert parse_nvidia_smi_xml(dirty) == parse_nvidia_smi_xml(text)


def test_nvidia_smi_xml_refuses_a_truncated_document_naming_its_last_line() -> None:
    text = _text(A100)
    cut = text[: len(text) // 2]
    with pytest.raises(ParseError, match="truncated XML document") as info:
        parse_nvidia_smi_xml(cut)
    assert info.value.line_no == cut.count("\n") + 1


def test_nvidia_smi_xml_refuses_a_value_wrapped_over_lines() -> None:
    wrapped = _text(A100).replace("NVIDIA A100-SXM4-80GB</product_name>", "NVIDIA A100-SXM4-\n80GB</product_name>")
    with pytest.raises(ParseError, match="<product_name> value wrapped over lines"):
        parse_nvidia_smi_xml(wrapped)


@pytest.mark.parametrize(
    ("element", "printed"),
    [("serial", "Unknown Error"), ("uuid", "[GPU requires reset]"), ("vbios_version", "Not Supported")],
)
def test_nvidia_smi_xml_never_takes_an_error_text_as_a_value(element: str, printed: str) -> None:
    text = re.sub(rf"<{element}>[^<]*</{element}>", f"<{element}>{printed}</{element}>", _text(A100), count=1)
    with pytest.raises(ParseError, match=f"<{element}> holds an error text"):
        parse_nvidia_smi_xml(text)


def test_nvidia_smi_xml_refuses_a_counter_that_is_not_a_count() -> None:
    text = _text(T4).replace("<retired_count>0</retired_count>", "<retired_count>0x1</retired_count>", 1)
    with pytest.raises(ParseError, match="is not a count"):
        parse_nvidia_smi_xml(text)


def test_nvidia_smi_xml_refuses_entity_declarations() -> None:
    bomb = (
        '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log [<!ENTITY a "aaaa">]>\n<nvidia_smi_log>&a;</nvidia_smi_log>\n'
    )
    with pytest.raises(ParseError, match="internal subset"):
        parse_nvidia_smi_xml(bomb)


def test_nvidia_smi_xml_refuses_a_bus_id_that_disagrees_with_the_gpu_id() -> None:
    text = _text(A100).replace("<pci_bus_id>00000000:01:00.0</pci_bus_id>", "<pci_bus_id>00000000:02:00.0</pci_bus_id>")
    with pytest.raises(ParseError, match="differs from the <gpu id>"):
        parse_nvidia_smi_xml(text)


def test_nvidia_smi_xml_refuses_more_gpus_than_attached() -> None:
    text = _text(T4).replace("<attached_gpus>1</attached_gpus>", "<attached_gpus>0</attached_gpus>")
    with pytest.raises(ParseError, match="1 <gpu> elements but attached_gpus 0"):
        parse_nvidia_smi_xml(text)


# --------------------------------------------------------------------------- nvidia-smi topo -m


def test_nvidia_smi_topo_reads_the_nvlink_pair_under_an_underlined_header() -> None:
    matrix = parse_nvidia_smi_topo(_text(TOPO))
    assert [d.name for d in matrix.devices] == ["GPU0", "GPU1", "GPU2"]
    assert [(link.a, link.b, link.connection, link.nvlinks) for link in matrix.links] == [
        ("GPU0", "GPU1", "NV4", 4),
        ("GPU0", "GPU2", "NODE", None),
        ("GPU1", "GPU2", "NODE", None),
    ]
    assert matrix.legend and matrix.devices[0].cpu_affinity == "0-31,64-95" and matrix.devices[0].numa_affinity == 0


def test_nvidia_smi_topo_reads_tabs_expanded_to_spaces_and_caret_escapes_the_same() -> None:
    text = _text(TOPO)
    pasted = text.replace("\x1b[4m", "^[[4m").replace("\x1b[0m", "^[[0m").expandtabs(8)
    assert parse_nvidia_smi_topo(pasted) == parse_nvidia_smi_topo(text)


def _dgx_printed_rows_only() -> str:
    """The corpus DGX matrix restricted to the devices it has rows for (NIC6-NIC11 dropped): a derivation
    of a real output, to test the NIC columns and the GPU NUMA ID quirk ("0\\t\\tN/A")."""
    lines = _text(DGX_TOPO).splitlines()
    header = lines[0].split("\t")
    drop = {i for i, name in enumerate(header) if name in {f"NIC{n}" for n in range(6, 12)}}
    return "".join("\t".join(c for i, c in enumerate(line.split("\t")) if i not in drop) + "\n" for line in lines)


def test_nvidia_smi_topo_reads_nics_affinity_and_the_empty_cell_before_gpu_numa_id() -> None:
    matrix = parse_nvidia_smi_topo(_dgx_printed_rows_only())
    gpu4 = next(d for d in matrix.devices if d.name == "GPU4")
    assert (gpu4.cpu_affinity, gpu4.numa_affinity, gpu4.gpu_numa_id) == ("56-111,168-223", 1, None)
    assert gpu4.na_fields == ("GPU NUMA ID",)
    nic0 = next(d for d in matrix.devices if d.name == "NIC0")
    assert nic0.kind == "nic" and nic0.cpu_affinity is None
    assert sum(1 for link in matrix.links if link.nvlinks == 18) == 28  # 8 GPUs, every pair NV18
    affinity = matrix.nic_affinity()
    assert affinity["NIC0"] == ("GPU0",) and affinity["NIC3"] == ("GPU1",) and affinity["NIC5"] == ("GPU3",)
    assert matrix.nic_names == {} and not matrix.legend  # the capture lost its legends


@pytest.mark.parametrize(("text", "message"), FAILURES)
def test_nvidia_smi_topo_refuses_failure_messages_by_name(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_nvidia_smi_topo(text)


def test_nvidia_smi_topo_refuses_a_prompt_a_wrapped_row_and_a_foreign_cell() -> None:
    text = _text(TOPO)
    with pytest.raises(ParseError, match="text before the matrix header"):
        parse_nvidia_smi_topo("> nvidia-smi topo -m\n" + text)
    with pytest.raises(ParseError, match="the row is cut"):
        parse_nvidia_smi_topo(text.replace("GPU1\tNV4\t X \tNODE", "GPU1\tNV4\n\t X \tNODE", 1))
    with pytest.raises(ParseError, match="'ERR!' is not a connection kind"):
        parse_nvidia_smi_topo(text.replace("GPU2\tNODE\tNODE", "GPU2\tERR!\tNODE", 1))


def test_nvidia_smi_topo_refuses_an_asymmetric_matrix() -> None:
    text = _text(TOPO).replace("GPU2\tNODE\tNODE", "GPU2\tSYS\tNODE", 1)
    with pytest.raises(ParseError, match="GPU2/GPU0 'SYS' but GPU0/GPU2 'NODE'"):
        parse_nvidia_smi_topo(text)


def test_nvidia_smi_topo_refuses_a_cut_matrix_naming_the_missing_rows() -> None:
    with pytest.raises(ParseError, match="header names 20 devices but 14 rows: output cut") as info:
        parse_nvidia_smi_topo(_text(DGX_TOPO))
    assert info.value.line_no == 15


# --------------------------------------------------------------------------- nvidia-smi nvlink -s


def test_nvidia_smi_nvlink_reads_links_and_the_all_inactive_gpu() -> None:
    status = parse_nvidia_smi_nvlink(_text(NVLINK))
    assert [(g.index, g.active_links, g.all_inactive) for g in status.gpus] == [
        (0, 4, False),
        (1, 4, False),
        (2, 0, True),
    ]
    assert status.gpus[0].links[0].speed_gbs == 14.062
    assert status.gpus[2].uuid == "GPU-02c05ee3-bdb5-aac7-f9e8-a4c8f3f725b3"


def test_nvidia_smi_nvlink_reads_an_inactive_link() -> None:
    text = _text(NVLINK).replace("\t Link 3: 14.062 GB/s", "\t Link 3: <inactive>", 1)
    gpu = parse_nvidia_smi_nvlink(text).gpus[0]
    assert gpu.active_links == 3 and gpu.links[3].speed_gbs is None and not gpu.links[3].active


def test_nvidia_smi_nvlink_refuses_a_capture_cut_before_the_last_gpu_s_links() -> None:
    cut = _text(NVLINK).rsplit("NVML:", 1)[0]
    with pytest.raises(ParseError, match="GPU 2 has no link lines: output cut"):
        parse_nvidia_smi_nvlink(cut)


@pytest.mark.parametrize(("text", "message"), FAILURES)
def test_nvidia_smi_nvlink_refuses_failure_messages_by_name(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_nvidia_smi_nvlink(text)


def test_nvidia_smi_nvlink_refuses_prompts_wrapped_headers_and_repeated_links() -> None:
    text = _text(NVLINK)
    with pytest.raises(ParseError, match="not a GPU, link or NVML line"):
        parse_nvidia_smi_nvlink("> nvidia-smi nvlink -s\n" + text)
    with pytest.raises(ParseError, match="not a GPU, link or NVML line"):
        parse_nvidia_smi_nvlink(text.replace("RTX A6000 (UUID: GPU-5b", "RTX A6000\n(UUID: GPU-5b", 1))
    with pytest.raises(ParseError, match="link 0 printed twice"):
        parse_nvidia_smi_nvlink(text.replace("\t Link 1: 14.062", "\t Link 0: 14.062", 1))


def test_nvidia_smi_nvlink_strips_ansi_remnants() -> None:
    text = _text(NVLINK)
    assert parse_nvidia_smi_nvlink(
        "^[[0m" + text.replace("\t Link 0", "\x1b[1m\t Link 0", 1)
    ) == parse_nvidia_smi_nvlink(text)
