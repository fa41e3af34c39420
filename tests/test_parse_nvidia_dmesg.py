"""NVIDIA kernel-log scan (issue 30): Xid, "fallen off the bus" and GSP events from the NVIDIA data file.

The two corpus logs are golden-tested in `tests/test_parse_corpus.py` (suite dmesg-nvidia). Single Xid
lines below take the line format of the corpus' Xid 119 line (`NVRM: Xid (PCI:dddd:bb:dd): <n>, pid=...,
name=..., <text>`) with the numbers of NVIDIA's Xid catalogue; the text after the number is not matched.
"""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.errors import ParseError
from upgrade_gate.parse.dmesg import load_default_patterns, parse_dmesg
from upgrade_gate.parse.nvidia_dmesg import family_of, load_nvidia_patterns, parse_nvidia_dmesg


def _xid(number: int, text: str = "event") -> str:
    return f"[ 1843.308145] NVRM: Xid (PCI:0000:3b:00): {number}, pid=2024380, name=python3, {text}.\n"


def _events(text: str, family: str | None = None) -> list[tuple[str, str, str | None]]:
    return [(e.kind, e.severity, e.bdf) for e in parse_nvidia_dmesg(text, family=family).events]


def test_nvidia_dmesg_gsp_timeouts_are_fatal_and_name_the_gpu_with_function_zero() -> None:
    text = (FIXTURES / "dmesg-nvidia" / "nvidia-xid119-gsp-timeout-xe9680-dmesg-T.txt").read_text(encoding="utf-8")
    events = _events(text, family="hopper")
    assert events and set(events) == {("nvidia.gsp_rpc_timeout", "fatal", "0000:9b:00.0")}


def test_nvidia_dmesg_fallen_off_the_bus_without_an_xid_is_fatal() -> None:
    text = (FIXTURES / "dmesg-nvidia" / "nvidia-fallen-off-bus-multiline-no-xid-driver570.txt").read_text(
        encoding="utf-8"
    )
    assert _events(text)[0] == ("nvidia.fallen_off_bus", "fatal", "0000:b3:00.0")


@pytest.mark.parametrize(
    ("number", "kind", "severity"),
    [
        (79, "nvidia.fallen_off_bus", "fatal"),
        (48, "nvidia.ecc_double_bit", "fatal"),
        (64, "nvidia.row_remap_failure", "fatal"),
        (63, "nvidia.row_remap_event", "error"),
        (74, "nvidia.nvlink_error", "fatal"),
        (120, "nvidia.gsp_error", "fatal"),
        (13, "nvidia.app_fault", "warn"),
        (31, "nvidia.app_fault", "warn"),
        (92, "nvidia.ecc_sbe_rate", "warn"),
        (140, "nvidia.ecc_unrecovered", "fatal"),  # pages the driver could not offline: reset (break test)
        (999, "nvidia.xid", "error"),  # an Xid the table does not name is an error, never ignored
    ],
)
def test_nvidia_dmesg_grades_each_xid_by_number(number: int, kind: str, severity: str) -> None:
    assert _events(_xid(number)) == [(kind, severity, "0000:3b:00.0")]


def test_nvidia_dmesg_family_map_applies_contained_ecc_from_ampere_on() -> None:
    assert _events(_xid(94), family="ampere") == [("nvidia.ecc_contained", "error", "0000:3b:00.0")]
    assert _events(_xid(95), family="hopper") == [("nvidia.ecc_uncontained", "fatal", "0000:3b:00.0")]
    # Volta has no contained/uncontained ECC: the number falls through to the catch-all.
    assert _events(_xid(94), family="volta") == [("nvidia.xid", "error", "0000:3b:00.0")]
    assert _events(_xid(119), family="volta") == [("nvidia.xid", "error", "0000:3b:00.0")]


def test_nvidia_dmesg_family_names_come_from_nvidia_smi_architecture() -> None:
    assert family_of("Ada Lovelace") == "ada-lovelace" and family_of("Hopper") == "hopper"
    assert family_of(None) is None and family_of("  ") is None
    families = {f for p in load_nvidia_patterns().patterns for f in p.families}
    assert families <= {"all", "volta", "turing", "ampere", "ada-lovelace", "hopper", "blackwell"}


def test_nvidia_and_amd_tables_do_not_judge_each_other() -> None:
    amd = (FIXTURES / "dmesg" / "mi50-athub-ras-ue-gpu-reset-psp-resume-failed-ret-62-dmesg-T.txt").read_text(
        encoding="utf-8"
    )
    assert parse_nvidia_dmesg(amd).events == ()
    assert parse_dmesg(_xid(79)).events == ()  # the AMD default table has no NVIDIA pattern


def test_nvidia_dmesg_refuses_what_the_engine_refuses() -> None:
    with pytest.raises(ParseError, match="could not read the kernel log"):
        parse_nvidia_dmesg("dmesg: read kernel buffer failed: Operation not permitted\n")
    with pytest.raises(ParseError, match="empty kernel log"):
        parse_nvidia_dmesg("\n")
    with pytest.raises(ParseError, match="NUL byte"):
        parse_nvidia_dmesg(_xid(79) + "\x00\x00\n")


def test_nvidia_dmesg_an_address_the_kernel_cannot_print_is_no_device() -> None:
    assert _events(_xid(79).replace("PCI:0000:3b:00", "PCI:0000:3b:ff")) == [("nvidia.fallen_off_bus", "fatal", None)]


@pytest.mark.parametrize(
    ("severity", "kind", "level"),
    [
        ("Uncorrected (Fatal)", "pcie.aer_uncorrected_fatal", "fatal"),
        ("Uncorrectable (Fatal)", "pcie.aer_uncorrected_fatal", "fatal"),
        ("Uncorrectable (Non-Fatal)", "pcie.aer_uncorrected_nonfatal", "error"),
        ("Correctable", "pcie.aer_corrected", "warn"),
    ],
)
def test_nvidia_dmesg_reads_pcie_aer_in_both_kernel_wordings(severity: str, kind: str, level: str) -> None:
    """The AMD table's AER patterns (aer.c's wording before and after 2023-12) hold for an NVIDIA GPU's port
    too; the NVIDIA table had none, so a fatal PCIe error on an H100 was no event (break test 2026-12-07)."""
    text = (FIXTURES / "dmesg-nvidia" / "nvidia-xid119-gsp-timeout-xe9680-dmesg-T.txt").read_text(encoding="utf-8")
    line = f"[ 8123.441230] nvidia 0000:18:00.0: PCIe Bus Error: severity={severity}, type=Transaction Layer\n"
    assert (kind, level, "0000:18:00.0") in _events(text + line, family="hopper")


@pytest.mark.parametrize(
    ("action", "kind", "severity"),
    [
        ("from 0x0 (None) to 0x1 (GPU Reset Required)", "nvidia.recovery_action", "fatal"),
        ("from 0x0 (None) to 0x2 (Node Reboot Required)", "nvidia.recovery_action", "fatal"),
        ("from 0x0 (None) to 0x4 (Drain and Reset)", "nvidia.recovery_action", "fatal"),
        ("to a wording no table has seen", "nvidia.recovery_action", "fatal"),  # never read as recovered
        ("from 0x1 (GPU Reset Required) to 0x0 (None)", "nvidia.xid", "error"),  # recovered: still an Xid
    ],
)
def test_nvidia_dmesg_xid_154_blocks_unless_the_action_is_none(action: str, kind: str, severity: str) -> None:
    """Xid 154 names the recovery the GPU needs (NVML's nvmlDeviceGpuRecoveryAction_t); a reset, reboot or
    drain only warned through the catch-all Xid before (break test 2026-12-07). Line format: driver 595 on
    forums.developer.nvidia.com t/364958, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset
    Required)"."""
    line = f"[ 4711.093312] NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed {action}\n"
    assert _events(line, family="hopper") == [(kind, severity, "0000:01:00.0")]


def test_host_device_patterns_are_the_same_in_every_vendors_table() -> None:
    """A pattern of a driver that is not the GPU's (PCIe, the NICs) judges an NVIDIA node as it judges an AMD
    one: a ConnectX "health compromised" line blocked on AMD and passed on NVIDIA, because only the AMD table
    had it (break test 2026-12-07)."""
    amd = {p.id: p for p in load_default_patterns().patterns if p.driver != "amdgpu"}
    nvidia = {p.id: p for p in load_nvidia_patterns().patterns if p.driver != "NVRM"}
    assert amd and amd.keys() == nvidia.keys()
    for pid, p in amd.items():
        q = nvidia[pid]
        assert (q.regex.pattern, q.severity, q.driver, q.families) == (
            p.regex.pattern,
            p.severity,
            p.driver,
            p.families,
        )


def test_nvidia_dmesg_reads_the_nic_and_link_events_of_the_amd_table() -> None:
    text = (FIXTURES / "dmesg" / "mlx5-pcie-link-degraded-x8.txt").read_text(encoding="utf-8")
    assert ("pcie.link_limited", "error", "0001:43:00.0") in _events(text, family="hopper")
    line = "[ 912.004511] mlx5_core 0000:1a:00.0: poll_health:801:(pid 0): device's health compromised"
    line += " - reached miss count\n"
    assert _events(line, family="hopper") == [("mlx5.health_compromised", "fatal", "0000:1a:00.0")]
