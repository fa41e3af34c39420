"""sysfs parsers: `grep -H .` reads, KFD topology properties and `uname -r`, golden and explicit asserts."""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.errors import ParseError
from upgrade_gate.parse.sysfs import (
    amdgpu_version,
    ib_fw_versions,
    parse_kfd_properties,
    parse_sysfs_grep,
    parse_uname_r,
    rocm_version,
    single_value,
    sriov_by_pf,
)

FOLDER = FIXTURES / "sysfs"
CASES = sorted(FOLDER.glob("*.txt"))


def _read(name: str) -> str:
    return (FOLDER / name).read_text(encoding="utf-8")


def test_sysfs_grep_splits_after_the_file_name_not_the_bdf_colons() -> None:
    values = parse_sysfs_grep(_read("grep-sriov-cx7-numvfs0-totalvfs16-derived.txt"))
    assert values.values == {
        "/sys/bus/pci/devices/0000:03:00.0/sriov_numvfs": "0",
        "/sys/bus/pci/devices/0000:03:00.0/sriov_totalvfs": "16",
    }
    assert sriov_by_pf(values) == {"0000:03:00.0": (0, 16)}


def test_sysfs_grep_sriov_under_a_host_root_with_a_missing_totalvfs() -> None:
    values = parse_sysfs_grep(_read("grep-sriov-mi300x-pf-host-root-derived.txt"))
    assert sriov_by_pf(values) == {"0000:85:00.0": (1, None)}


def test_sysfs_grep_ib_firmware_versions() -> None:
    values = parse_sysfs_grep(_read("grep-ib-fw-ver-8x-ionic-derived.txt"))
    versions = ib_fw_versions(values)
    assert sorted(versions) == [f"ionic_{i}" for i in range(8)]
    assert set(versions.values()) == {"1.117.1-a-63"}
    assert sriov_by_pf(values) == {}


def test_sysfs_grep_single_values() -> None:
    assert amdgpu_version(parse_sysfs_grep(_read("grep-amdgpu-version-6.16.13-derived.txt"))) == "6.16.13"
    assert rocm_version(parse_sysfs_grep(_read("grep-rocm-version-7.2.4-derived.txt"))) == "7.2.4"


def test_sysfs_grep_missing_single_value_raises() -> None:
    values = parse_sysfs_grep(_read("grep-rocm-version-7.2.4-derived.txt"))
    with pytest.raises(ParseError, match="no file"):
        amdgpu_version(values)
    with pytest.raises(ParseError, match="no file"):
        single_value(parse_sysfs_grep(""), path_suffix="/version")


def test_sysfs_grep_error_line_raises() -> None:
    with pytest.raises(ParseError, match="grep could not read") as info:
        parse_sysfs_grep(_read("grep-error-no-such-file-derived.txt"))
    assert info.value.line_no == 2


def test_sysfs_grep_non_integer_vf_count_raises() -> None:
    # Raised by the parse itself (brk14 finding 14), so the probe's own parse failure names it.
    with pytest.raises(ParseError, match="decimal integer") as info:
        parse_sysfs_grep("/sys/bus/pci/devices/0000:03:00.0/sriov_numvfs:four\n")
    assert info.value.line_no == 1


def test_sysfs_grep_numvfs_above_totalvfs_raises() -> None:
    text = "/sys/bus/pci/devices/0000:03:00.0/sriov_numvfs:17\n/sys/bus/pci/devices/0000:03:00.0/sriov_totalvfs:16\n"
    with pytest.raises(ParseError, match="above sriov_totalvfs"):
        sriov_by_pf(parse_sysfs_grep(text))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("/sys/bus/pci/devices/0000:03:00.0/vendor:0x15b3\n", "known sysfs file"),
        ("/sys/module/amdgpu/version:6.8.5\n/sys/module/amdgpu/version:6.8.6\n", "more than one line"),
        ("/sys/module/amdgpu/version:   \n", "blank value"),
        ("6.8.5\n", "known sysfs file"),
    ],
)
def test_sysfs_grep_rejects_odd_lines(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_sysfs_grep(text)


def test_sysfs_grep_empty_output_is_an_empty_mapping() -> None:
    # grep prints nothing for empty files (and when no file exists, the probe has no argument to read).
    assert parse_sysfs_grep("").values == {}


def test_kfd_properties_mi100_node() -> None:
    props = parse_kfd_properties(_read("kfd-topology-nodes-N-properties-mi100-arcturus-fixture.txt"))
    assert props.values["device_id"] == 29580
    assert props.values["simd_count"] == 480
    assert props.bdf == "0000:23:00.0"  # location_id 8960 = 0x2300
    assert props.gfx_target == "gfx908"  # gfx_target_version 90008
    assert props.values["unique_id"] == 7809984429061111111


def test_kfd_properties_mem_bank() -> None:
    props = parse_kfd_properties(_read("kfd-topology-node3-mem_banks-0-properties-mi300x-cpx.txt"))
    assert props.values["size_in_bytes"] == 25767706624  # 24 GiB per CPX partition
    assert props.bdf is None and props.gfx_target is None


@pytest.mark.parametrize(
    ("version", "target"), [(90010, "gfx90a"), (90402, "gfx942"), (100306, "gfx1036"), (110002, "gfx1102")]
)
def test_kfd_properties_decodes_gfx_target_version(version: int, target: str) -> None:
    text = f"simd_count 4\ngfx_target_version {version}\n"
    assert parse_kfd_properties(text).gfx_target == target


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("simd_count 4\nsimd_count 5\n", "duplicate"),
        ("name arcturus\n", "property line"),
        ("", "empty"),
        ("simd_count 4\nlocation_id 99999999\ndomain 0\n", "out of range"),
    ],
)
def test_kfd_properties_rejects_bad_files(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_kfd_properties(text)


def test_uname_r_releases() -> None:
    release = parse_uname_r(_read("uname-r-5.15.0-112-generic-derived.txt"))
    assert (release.release, release.major, release.minor, release.patch) == ("5.15.0-112-generic", 5, 15, 0)
    assert parse_uname_r("6.8.0-49-generic\n").release == "6.8.0-49-generic"
    assert parse_uname_r("6.7\n").patch is None


@pytest.mark.parametrize("text", ["", "\n", "uname: extra operand\n", "5.15.0 #1 SMP\n", "5.15.0\n6.8.0\n"])
def test_uname_r_rejects_other_output(text: str) -> None:
    with pytest.raises(ParseError):
        parse_uname_r(text)
