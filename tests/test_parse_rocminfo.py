"""rocminfo parser: golden files over every corpus output, plus explicit asserts on the key values."""

from __future__ import annotations

import pytest

from tests.conftest import CORPUS, FIXTURES, needs_corpus
from upgrade_gate.errors import ParseError
from upgrade_gate.parse.bdf import PciAddress
from upgrade_gate.parse.rocminfo import PARSERS, parse_rocminfo, vram_kb

FOLDER = FIXTURES / "rocminfo"
CASES = sorted(FOLDER.glob("*.txt"))
MI300X = FOLDER / "mi300x-8gpu-rocm6.2.3-support.txt"
MI100 = FOLDER / "mi100-plus-ryzen7900x-igpu-gfx1036-rocm5.7.0-trailing-spaces-stripped.txt"
VF = FOLDER / "mi300x-vf-1gpu-guest-rocm7.2.4-xeon8568y.txt"
ROCM40 = FOLDER / "rocm4.0-navi10-gfx1010-i7-8700-able-to-open-kfd-preflight.txt"
MI210 = FOLDER / "mi210x2-pcie-ultra9-rocm7.2.0-xnack-vmm-attributes.txt"
LUMI = FOLDER / "mi250x-lumi-1gcd-4numa-cpu-agents-rocm5.7-docker-ansi-banner.txt"
MI250X = FOLDER / "mi250x-8gcd-rocm6.2.3-rock5.16.9-hip-order-not-bdf-order.txt"


@needs_corpus
def test_rocminfo_fixtures_are_unchanged_corpus_copies() -> None:
    corpus = sorted((CORPUS / "rocminfo").glob("*.txt"))
    assert corpus, "corpus missing"
    for path in corpus:
        assert (FOLDER / path.name).read_bytes() == path.read_bytes(), path.name


def test_rocminfo_mi300x_lists_eight_gpus_in_hip_order() -> None:
    info = parse_rocminfo(MI300X.read_text(encoding="utf-8"))
    assert info.rock_version == "6.8.5"
    assert info.runtime_version == "1.14"
    assert [a.device_type for a in info.agents[:2]] == ["CPU", "CPU"]
    gpus = info.gpu_agents
    assert len(gpus) == 8
    assert [a.bus_dev_fn for a in gpus] == [
        "1b:00.0", "3d:00.0", "4e:00.0", "5f:00.0", "9d:00.0", "bd:00.0", "cd:00.0", "dd:00.0",
    ]  # fmt: skip
    first = gpus[0]
    assert first.uuid == "GPU-07386a321fa45d1e"
    assert first.gfx_target == "gfx942"
    assert first.marketing_name == "AMD Instinct MI300X"
    assert first.chip_id == 0x74A1
    assert first.compute_units == 304
    assert first.node == 2
    assert first.bdf_id == 6912
    assert first.bdf_id is not None and PciAddress.from_bdf_id(first.bdf_id, domain=0).bdf == "0000:1b:00.0"
    assert vram_kb(first) == 201310208
    assert [p.segment for p in first.pools] == ["GLOBAL", "GLOBAL", "GLOBAL", "GROUP"]
    assert first.pools[1].flags == ("EXTENDED FINE GRAINED",)
    assert first.isas == ("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-",)
    assert len({a.uuid for a in gpus}) == 8


def test_rocminfo_cpu_agents_have_no_uuid_and_no_bdf() -> None:
    info = parse_rocminfo(MI300X.read_text(encoding="utf-8"))
    cpu = info.agents[0]
    assert cpu.uuid is None
    assert cpu.bdf_id is None and cpu.bus_dev_fn is None and cpu.gfx_target is None
    assert cpu.pools[1].flags == ("KERNARG", "FINE GRAINED")


def test_rocminfo_rocm57_mixed_dgpu_and_igpu() -> None:
    info = parse_rocminfo(MI100.read_text(encoding="utf-8"))
    assert info.rock_version is None  # "ROCk module is loaded" without a version
    assert info.runtime_ext_version is None  # not printed by ROCm 5.7
    mi100, igpu = info.gpu_agents
    assert (mi100.gfx_target, mi100.bus_dev_fn, mi100.compute_units) == ("gfx908", "03:00.0", 120)
    assert mi100.uuid == "GPU-cafb6d633e33407e"
    assert igpu.gfx_target == "gfx1036"
    assert igpu.uuid is None  # printed as GPU-XX
    assert igpu.wavefront_size == 32
    assert mi100.pools[1].flags == ()  # "GLOBAL; FLAGS:" with nothing after it


def test_rocminfo_ansi_banner_and_vf_guest() -> None:
    text = VF.read_text(encoding="utf-8")
    assert "\x1b[37m" in text
    info = parse_rocminfo(text)
    assert info.rock_version == "6.16.13"
    (gpu,) = info.gpu_agents
    assert gpu.marketing_name == "AMD Instinct MI300X VF"
    assert gpu.chip_id == 0x74B5
    assert gpu.bus_dev_fn == "83:00.0"
    assert gpu.isas == (
        "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-",
        "amdgcn-amd-amdhsa--gfx9-4-generic:sramecc+:xnack-",
    )


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("error-rock-module-NOT-loaded-4x-mi210-rocm6.2.3.txt", "kernel module not loaded"),
        ("error-rocm3.x-kfd-cannot-allocate-memory.txt", "cannot open /dev/kfd"),
        ("error-rx7600xt-rocm6.0.0-out-of-resources.txt", "HSA runtime call failed"),
        ("error-rx9070xt-rocm7.2.1-agent-creation-failed-unrecognized-id.txt", "agent creation failed"),
    ],
)
def test_rocminfo_broken_systems_raise_parse_error(name: str, message: str) -> None:
    with pytest.raises(ParseError, match=message) as info:
        parse_rocminfo((FOLDER / name).read_text(encoding="utf-8"))
    assert info.value.tool == "rocminfo"
    assert info.value.line_no >= 1


def test_rocminfo_rocm40_preflight_line_and_no_asic_revision() -> None:
    info = parse_rocminfo(ROCM40.read_text(encoding="utf-8"))
    assert (info.rock_version, info.runtime_version, info.runtime_ext_version) == (None, "1.1", None)
    cpu, gpu = info.agents
    assert cpu.isas == () and cpu.asic_revision is None and gpu.asic_revision is None
    assert (gpu.gfx_target, gpu.chip_id, gpu.bus_dev_fn, gpu.wavefront_size) == ("gfx1010", 0x731F, "03:00.0", 32)
    assert gpu.uuid is None  # GPU-XX
    assert gpu.marketing_name == "Navi 10 [Radeon RX 5600 OEM/5600 XT / 5700/5700 XT]"
    assert vram_kb(gpu) == 8372224


def test_rocminfo_preflight_line_only_before_the_system_attributes() -> None:
    text = ROCM40.read_text(encoding="utf-8")
    moved = text.replace("Able to open /dev/kfd read-write\n", "").replace(
        "  Uuid:                    GPU-XX", "Able to open /dev/kfd read-write\n  Uuid:                    GPU-XX"
    )
    with pytest.raises(ParseError):
        parse_rocminfo(moved)


def test_rocminfo_mi250x_eight_gcds_hip_order_is_not_bdf_order() -> None:
    info = parse_rocminfo(MI250X.read_text(encoding="utf-8"))
    assert (info.rock_version, info.runtime_version, info.runtime_ext_version) == ("5.16.9.22.20", "1.14", "1.6")
    gpus = info.gpu_agents
    assert len(gpus) == 8 and [a.number for a in gpus] == list(range(3, 11))
    assert [a.bus_dev_fn for a in gpus] == [
        "31:00.0", "34:00.0", "11:00.0", "14:00.0", "ae:00.0", "b3:00.0", "8e:00.0", "93:00.0",
    ]  # fmt: skip
    assert [a.bus_dev_fn for a in gpus] != sorted(a.bus_dev_fn or "" for a in gpus)
    assert len({a.uuid for a in gpus}) == 8 and gpus[0].uuid == "GPU-4007a1a5b32f6606"
    assert {(a.chip_id, a.compute_units) for a in gpus} == {(0x740C, 104)}
    assert {a.marketing_name for a in gpus} == {"AMD Instinct MI250X/MI250"}
    assert {vram_kb(a) for a in gpus} == {67092480}
    assert [a.node for a in gpus] == list(range(2, 10))
    assert gpus[4].bdf_id is not None and PciAddress.from_bdf_id(gpus[4].bdf_id).bdf == "0000:ae:00.0"


def test_rocminfo_mi250x_one_gcd_behind_four_cpu_agents_with_ansi_banner() -> None:
    text = LUMI.read_text(encoding="utf-8")
    assert text.startswith("\x1b[37mROCk module is loaded\x1b[0m\n")
    info = parse_rocminfo(text)
    assert [a.device_type for a in info.agents] == ["CPU"] * 4 + ["GPU"]
    (gpu,) = info.gpu_agents
    assert (gpu.number, gpu.node, gpu.chip_id, gpu.compute_units) == (5, 4, 0x7408, 110)
    assert (gpu.uuid, gpu.bus_dev_fn) == ("GPU-a98e0d77ca91cb4a", "d1:00.0")
    assert gpu.pools[1].segment == "GLOBAL" and gpu.pools[1].flags == ()  # "GLOBAL; FLAGS:" + blanks


def test_rocminfo_mi210_rocm72_new_attributes_and_pcie_bdfs() -> None:
    info = parse_rocminfo(MI210.read_text(encoding="utf-8"))
    assert (info.rock_version, info.runtime_version, info.runtime_ext_version) == ("6.16.13", "1.18", "1.15")
    assert [(a.bus_dev_fn, a.uuid) for a in info.gpu_agents] == [
        ("01:00.0", "GPU-327c8626c83ec858"),
        ("02:00.0", "GPU-753ef2efdc04e86d"),
    ]
    assert {a.marketing_name for a in info.gpu_agents} == {"AMD Instinct MI210"}
    assert info.agents[0].max_clock_mhz == 0


def test_rocminfo_truncated_output_raises() -> None:
    text = MI300X.read_text(encoding="utf-8")
    cut = text[: text.index("Agent 7")]
    with pytest.raises(ParseError, match="truncated"):
        parse_rocminfo(cut)


def test_rocminfo_out_of_sequence_agent_raises() -> None:
    text = MI300X.read_text(encoding="utf-8").replace("Agent 5\n", "Agent 6\n", 1)
    with pytest.raises(ParseError, match="out of sequence"):
        parse_rocminfo(text)


def test_rocminfo_inconsistent_dec_hex_raises() -> None:
    text = MI300X.read_text(encoding="utf-8").replace("29857(0x74a1)", "29857(0x74a2)", 1)
    with pytest.raises(ParseError, match="disagree"):
        parse_rocminfo(text)


def test_rocminfo_empty_output_raises() -> None:
    with pytest.raises(ParseError, match="empty"):
        parse_rocminfo("\n\n")


def test_rocminfo_registry_key() -> None:
    assert PARSERS["rocminfo"] is parse_rocminfo
