"""lspci parser: golden files over every corpus output and derived `-D -nn -vvv` forms, plus asserts."""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.errors import ParseError
from upgrade_gate.parse.lspci import PARSERS, parse_lspci, pcie_links

FOLDER = FIXTURES / "lspci"
CASES = sorted(FOLDER.glob("*.txt"))


def _read(name: str) -> str:
    return (FOLDER / name).read_text(encoding="utf-8")


def test_lspci_vvv_block_link_and_sriov() -> None:
    result = parse_lspci(_read("cx7-socket-direct-gen5-x16-vvv-libkmod-warning.txt"))
    (dev,) = result.devices
    assert dev.bdf == "0000:03:00.0"  # printed without a domain: domain 0 by lspci's rules
    assert dev.class_name == "Ethernet controller"
    assert dev.vendor_device is None  # no -nn
    assert dev.express_type == "Endpoint"
    assert dev.link_cap is not None and (dev.link_cap.speed_gts, dev.link_cap.width) == (32.0, 16)
    assert dev.link_status is not None
    assert (dev.link_status.speed_gts, dev.link_status.width) == (32.0, 16)
    assert dev.link_status.speed_note == "ok" and not dev.link_status.downgraded
    assert dev.driver == "mlx5_core"
    assert dev.kernel_modules == ()  # the libkmod failure suppressed that line
    assert dev.numa_node == 0
    assert dev.sriov is not None
    assert (dev.sriov.total_vfs, dev.sriov.num_vfs, dev.sriov.vf_device_id) == (16, 0, "101e")
    assert result.warnings == ("lspci: Unable to load libkmod resources: error -2",)


def test_lspci_downgraded_link_in_pciutils38_form() -> None:
    result = parse_lspci(_read("derived-cx7-D-nn-vvv-pciutils3.8-lnksta-downgraded-x8.txt"))
    (dev,) = result.devices
    assert dev.class_id == "0200"
    assert dev.vendor_device == "15b3:1021"
    assert dev.name == "Mellanox Technologies MT2910 Family [ConnectX-7]"
    assert dev.kernel_modules == ("mlx5_core",)
    (link,) = pcie_links(result)
    assert (link.speed_gts, link.width, link.max_speed_gts, link.max_width) == (16.0, 8, 32.0, 16)
    assert link.downgraded is True
    assert link.vendor_device == "15b3:1021"


def test_lspci_access_denied_leaves_links_unknown() -> None:
    result = parse_lspci(_read("derived-mi300x-D-nn-vvv-non-root-access-denied.txt"))
    (dev,) = result.devices
    assert dev.caps_access_denied is True
    assert dev.link_cap is None and dev.link_status is None
    assert dev.vendor_device == "1002:74a1"
    assert pcie_links(result) == ()


def test_lspci_annotated_driver_lines_keep_only_the_driver() -> None:
    pf, vf = parse_lspci(_read("mi300x-sriov-host-lspci-nnk-pf-gim-vf-vfio-ANNOTATED-doc.txt")).devices
    assert (pf.bdf, pf.vendor_device, pf.driver) == ("0000:85:00.0", "1002:74a1", "gim")
    assert (vf.bdf, vf.vendor_device, vf.driver) == ("0000:85:02.0", "1002:74b5", "vfio-pci")
    assert pf.kernel_modules == ("amdgpu",)
    assert vf.subsystem == "Advanced Micro Devices, Inc. [AMD/ATI] Device [1002:74a1]"


def test_lspci_plain_listing() -> None:
    devices = parse_lspci(_read("mi210x4-lspci-grep-vga-and-amd-bridges-driver-not-loaded.txt")).devices
    gpus = [d for d in devices if d.class_name == "Display controller"]
    assert [d.bdf for d in gpus] == ["0000:4c:00.0", "0000:63:00.0", "0000:cc:00.0", "0000:e3:00.0"]
    assert gpus[0].revision == "02"
    assert gpus[0].name == "Advanced Micro Devices, Inc. [AMD/ATI] Aldebaran/MI200 [Instinct MI210]"
    accel = parse_lspci(_read("mi350x-8gpu-lspci-grep-accelerators-unknown-device-name.txt")).devices
    assert len(accel) == 8 and accel[0].name.endswith("Device 75a0")


def test_lspci_grep_fragment_is_rejected() -> None:
    with pytest.raises(ParseError, match="without a device header") as info:
        parse_lspci(_read("mi300x-8gpu-lspci-vvv-grep-lnksta-tabs-expanded.txt"))
    assert info.value.line_no == 1


def test_lspci_driver_name_with_unannotated_extra_text_is_rejected() -> None:
    text = "0000:85:00.0 Processing accelerators [1200]: AMD [1002:74a1]\n\tKernel driver in use: gim extra\n"
    with pytest.raises(ParseError, match="driver name"):
        parse_lspci(text)


def test_lspci_duplicate_device_is_rejected() -> None:
    line = "85:00.0 Processing accelerators: Advanced Micro Devices, Inc. [AMD/ATI] Device 75a0\n"
    with pytest.raises(ParseError, match="listed twice"):
        parse_lspci(line + line)


def test_lspci_malformed_lnksta_is_rejected() -> None:
    text = _read("cx7-socket-direct-gen5-x16-vvv-libkmod-warning.txt").replace("Width x16 (ok)", "Width 16")
    with pytest.raises(ParseError, match="malformed LnkSta"):
        parse_lspci(text)


@pytest.mark.parametrize(
    ("lnksta", "speed", "width", "downgraded"),
    [
        ("Speed 8GT/s, Width x16", 8.0, 16, False),  # pciutils >= 3.8, equal to LnkCap
        ("Speed 2.5GT/s (downgraded), Width x4 (downgraded)", 2.5, 4, True),
        ("Speed 64GT/s (overdriven), Width x16", 64.0, 16, False),
        ("Speed unknown, Width x0", None, 0, False),
        ("Speed 5GT/s (strange), Width x1 (ok)", 5.0, 1, False),  # pciutils 3.5-3.7 wording
    ],
)
def test_lspci_lnksta_forms_across_pciutils_releases(
    lnksta: str, speed: float | None, width: int, downgraded: bool
) -> None:
    text = f"0000:01:00.0 Ethernet controller [0200]: X [15b3:1021]\n\t\tLnkSta:\t{lnksta}\n"
    (dev,) = parse_lspci(text).devices
    assert dev.link_status is not None
    assert (dev.link_status.speed_gts, dev.link_status.width) == (speed, width)
    assert dev.link_status.downgraded is downgraded


def test_lspci_empty_output_is_rejected() -> None:
    with pytest.raises(ParseError, match="no PCI devices"):
        parse_lspci("lspci: Unable to load libkmod resources: error -2\n")


def test_lspci_registry_key() -> None:
    assert PARSERS["lspci"] is parse_lspci
