"""Recognised preambles (issue 13) and error-text sanity (issue 10 #6, issue 12), on real texts.

Texts and where they come from: tests/fixtures/amd-smi/PROVENANCE.md, tests/fixtures/rccl-tests/
PROVENANCE.md and tests/fixtures/rocm-smi/PROVENANCE.md ("Preambles and error texts").
"""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.errors import ParseError
from upgrade_gate.parse import amdsmi, rdma, rocmsmi, sysfs
from upgrade_gate.parse import rccl_tests as rt
from upgrade_gate.parse.preamble import split_preamble
from upgrade_gate.parse.sanity import error_text, name_problem, version_problem

AMD = FIXTURES / "amd-smi"
RCCL = FIXTURES / "rccl-tests"
# amd-smi prints this on stdout before its output for a non-root user outside render/video
# (ROCm/amdsmi amdsmi_cli/amdsmi_helpers.py check_required_groups; seen in ROCm/amdsmi issue #130).
GROUPS = "WARNING: User is missing the following required groups: render, video. Please add user to these groups."
LOW_POWER = "WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status"
OMPI_HELP = (
    "--------------------------------------------------------------------------\n"
    "WARNING: There was an error initializing an OpenFabrics device.\n"
    "\n"
    "  Local host:   cn1074\n"
    "  Local device: mlx5_0\n"
    "--------------------------------------------------------------------------\n"
)


def test_preamble_ucx_lines_before_rccl_tests_table_are_skipped_not_read_as_json() -> None:
    with_ucx = (RCCL / "mi355x-2node-16rank-ionic-allreduce-16G-ucx-warn-preamble-readme.txt").read_text()
    plain = (RCCL / "mi355x-2node-16rank-ionic-allreduce-16G-rocm7.2.2-rccl2.27.7.txt").read_text()
    assert with_ucx.startswith("[1776961424.585035] [Aliyun1:3315 :0]")
    found, body = split_preamble(with_ucx)
    assert [(p.kind, p.lines) for p in found] == [("ucx-log", 16)]
    assert body.count("\n") == with_ucx.count("\n"), "skipped lines are blanked, line numbers stay"
    a, b = rt.parse_rccl_tests(with_ucx), rt.parse_rccl_tests(plain)
    assert a.rows[0].line_no == b.rows[0].line_no + 16
    assert [r.out_of_place for r in a.rows] == [r.out_of_place for r in b.rows]
    assert a.avg_busbw_gbs == b.avg_busbw_gbs == 129.28


def test_preamble_ucx_lines_before_rccl_json_then_broken_json_says_what_was_skipped() -> None:
    ucx = "".join(
        (RCCL / "mi355x-2node-16rank-ionic-allreduce-16G-ucx-warn-preamble-readme.txt").read_text().splitlines(True)[:2]
    )
    good = (RCCL / "mi300x-8gpu-allreduce-array-from-source.json").read_text()
    assert rt.parse_rccl_tests(ucx + good).rows == rt.parse_rccl_tests(good).rows
    with pytest.raises(ParseError, match=r"after 2 skipped preamble line\(s\).*UCX"):
        rt.parse_rccl_tests(ucx + good[: len(good) // 2])


def test_preamble_openmpi_help_block_is_skipped() -> None:
    plain = (RCCL / "mi355x-2node-16rank-ionic-allreduce-16G-rocm7.2.2-rccl2.27.7.txt").read_text()
    found, _ = split_preamble(OMPI_HELP + plain)
    assert [(p.kind, p.lines) for p in found] == [("openmpi-help", 6)]
    assert rt.parse_rccl_tests(OMPI_HELP + plain).avg_busbw_gbs == 129.28


def test_preamble_amdsmi_group_banner_before_intact_json_is_a_note() -> None:
    with_banner = (AMD / "static-json-strix-halo-no-render-group-banner-from-source.txt").read_text()
    plain = (AMD / "static-json-list-schema-strix-halo-gfx1151-rocm6.3.1-go-test.json").read_text()
    assert amdsmi.parse_amdsmi_static(with_banner) == amdsmi.parse_amdsmi_static(plain)
    found, _ = split_preamble(with_banner)
    assert found[0].kind == "amd-smi-groups"
    assert "render devices" in found[0].note and "render" in (found[0].cause or "")


def test_preamble_amdsmi_group_banner_is_named_as_the_cause_when_the_rest_is_broken() -> None:
    """Before: "expected a 'GPU: <n>' block" / "invalid JSON" pointed at the wrong fault."""
    with pytest.raises(
        ParseError,
        match=r"amd-smi ran without access to the render devices.*lacks group\(s\) render, video; then: invalid JSON",
    ):
        amdsmi.parse_amdsmi_static(GROUPS + '\n[\n    {\n        "gpu": 0,\n')
    with pytest.raises(ParseError, match=r"without access to the render devices.*then: no GPU in output"):
        amdsmi.parse_amdsmi_list(GROUPS + "\n")


def test_preamble_amdsmi_version_with_banner_keeps_the_error_value_for_the_builder() -> None:
    version = amdsmi.parse_amdsmi_version(
        (AMD / "version-json-26.2.2-no-render-group-file-error-from-source.txt").read_text()
    )
    assert version.amdgpu_version is None  # issue 27: an error text is never a value, not even in `parse`
    assert version.printed("amdgpu_version") == "AMDSMI_STATUS_FILE_ERROR - Error opening file"
    assert version_problem(version.printed("amdgpu_version")) is not None


def test_preamble_rocmsmi_low_power_warning_before_json() -> None:
    doc = '{"card0": {"Unique ID": "0x28246ce5673b4aa0", "Serial Number": "692409006566"}}'
    info = rocmsmi.parse_rocmsmi(LOW_POWER + "\n\n" + doc)
    assert info.gpus[0].serial == "692409006566"
    assert [p.kind for p in split_preamble(LOW_POWER + "\n\n" + doc)[0]] == ["rocm-smi-low-power"]


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("AMDSMI_STATUS_FILE_ERROR - Error opening file", "/dev/dri/renderD*"),
        ("AMDSMI_STATUS_NO_PERM - Permission Denied", "without permission"),
        ("AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported", "not supported"),
        ("N/A", "printed 'N/A'"),
        ("ionic_\ufffd\ufffd", "not UTF-8"),
        ("Error: unable to read", "error message"),
        ("Permission denied", "permission banner"),
        ("abc\x00def", "control characters"),
    ],
)
def test_sanity_error_texts_are_named(value: str, fragment: str) -> None:
    problem = error_text(value)
    assert problem is not None and fragment in problem


@pytest.mark.parametrize(
    "value", ["6.7.0", "6.16.13", "5.18.2.22.40", "6.2.0-66", "0x0017004f", "692409006566", "MI300X"]
)
def test_sanity_ordinary_values_pass(value: str) -> None:
    assert error_text(value) is None


def test_sanity_versions_must_look_like_versions() -> None:
    inbox = (AMD / "version-26.0.2-inbox-driver-proc-version-rocm7.0.2.txt").read_text()
    version = amdsmi.parse_amdsmi_version(inbox)
    printed = version.printed("amdgpu_version")
    assert version.amdgpu_version is None  # issue 27: kept for the builder's evidence, never as the value
    assert printed is not None and "/proc/version" in (version_problem(printed) or "")
    assert version_problem("6.8.5") is None and version_problem("6.8.0-49-generic") is None
    assert version_problem("unknown") is not None


def test_sanity_undecodable_names_are_refused_by_every_name_parser() -> None:
    """Issue 12: `ionic_0` with non-UTF-8 bytes decodes (errors="replace") to `ionic_\\ufffd\\ufffd`."""
    bad = "ionic_\ufffd\ufffd"
    assert name_problem(bad) is not None and name_problem("ionic_0") is None
    ibv = (FIXTURES / "ibv_devinfo" / "ibv_devinfo-8x-ionic-pollara-fw1.117.1-tabs-expanded.txt").read_text()
    with pytest.raises(ParseError, match="not UTF-8"):
        rdma.parse_ibv_devinfo(ibv.replace("ionic_0", bad, 1))
    link = (FIXTURES / "ibv_devinfo" / "rdma-link-show-bnxt_re-2port-one-DOWN-DISABLED.txt").read_text()
    with pytest.raises(ParseError, match="not UTF-8"):
        rdma.parse_rdma_link(link.replace("bnxt_re0", bad, 1))
    ibstat = (FIXTURES / "ibv_devinfo" / "ibstat-a100-azure-8x-cx6-hdr-ibpanic-exit255-gpud.txt").read_text()
    with pytest.raises(ParseError, match="not UTF-8"):
        rdma.parse_ibstat(ibstat.replace("mlx5_0", bad, 1))
    with pytest.raises(ParseError, match="not UTF-8"):
        sysfs.parse_sysfs_grep(f"/sys/bus/pci/devices/0000:06:00.0/infiniband/{bad}/fw_ver:1.117.1-a-63\n")


# --------------------------------------------------------------------------- firmware vocabulary


def test_firmware_names_rocmsmi_real_values_map_to_amdsmi_names_and_formats() -> None:
    """rocm-smi prints the same rsmi number in its own format (rocm_smi.py showFwInfo); amd-smi in its own."""
    from upgrade_gate.parse.firmware_names import rocmsmi_to_amdsmi

    info = rocmsmi.parse_rocmsmi((FIXTURES / "rocm-smi" / "mi100-6gpu-json-all-rocm5.7.1-telegraf.json").read_text())
    mapped = rocmsmi_to_amdsmi(info.gpus[0].firmware)
    assert info.gpus[0].firmware["MEC"] == "65" and mapped["CP_MEC1"] == "65"
    assert info.gpus[0].firmware["TA RAS"] == "27.00.01.62" and mapped["TA_RAS"] == "1B.00.01.3E"
    assert info.gpus[0].firmware["SOS"] == "0x0017004f" and mapped["PSP_SOSDRV"] == "00.17.00.4F"
    assert info.gpus[0].firmware["SMC"] == "00.54.29.00" and mapped["PM"] == "00.54.29.00"
    assert info.gpus[0].firmware["ASD"] == "0x21000059" and mapped["ASD"] == str(0x21000059)
    assert {"SDMA0", "SDMA1", "CP_MEC2", "RLC", "TA_XGMI", "VCE", "UVD"} <= set(mapped)
    assert not set(mapped) & {"MEC", "SOS", "SMC", "TA RAS"}, "one vocabulary: no rocm-smi names left"


def test_firmware_names_amdsmi_corpus_values_round_trip_through_rocmsmi_format() -> None:
    from upgrade_gate.parse.firmware_names import ROCMSMI_TO_AMDSMI, amdsmi_number, rocmsmi_format, rocmsmi_to_amdsmi

    fw = amdsmi.parse_amdsmi_firmware((AMD / "firmware-mi355x-gpu0-only-oci-pollara.txt").read_text()).gpus[0].firmware
    assert fw is not None
    to_rocm = {v: k for k, v in ROCMSMI_TO_AMDSMI.items()}
    printed_by_rocmsmi = {}
    for block, version in fw.items():
        if block in to_rocm:
            number = amdsmi_number(block, version)
            assert number is not None, block
            printed_by_rocmsmi[to_rocm[block]] = rocmsmi_format(to_rocm[block], number)
    assert printed_by_rocmsmi["SOS"] == "0x00450029" and printed_by_rocmsmi["TA RAS"] == "27.69.00.10"
    assert rocmsmi_to_amdsmi(printed_by_rocmsmi) == {b: v for b, v in fw.items() if b in to_rocm}
