"""dmesg parser and its pattern table: golden files over the corpus, plus explicit event asserts."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.errors import ConfigError, ParseError
from upgrade_gate.parse.dmesg import PARSERS, load_default_patterns, load_patterns, parse_dmesg

FOLDER = FIXTURES / "dmesg"
CASES = sorted(FOLDER.glob("*.txt"))


def _read(name: str) -> str:
    return (FOLDER / name).read_text(encoding="utf-8")


def test_dmesg_mi300x_aca_errors_and_mode1_reset() -> None:
    result = parse_dmesg(_read("mi300x-8gpu-aca-hw-error-mode1-reset-rocm6.2.3.txt"))
    kinds = Counter(e.kind for e in result.events)
    assert kinds["amdgpu.ras_uncorrectable_interrupt"] == 1
    assert kinds["amdgpu.aca_hw_error"] == 13  # one per "events logged" line, not per register line
    assert kinds["amdgpu.asic_reset"] == 8  # MODE1 reset of all eight GPUs
    assert kinds["amdgpu.vram_lost"] == 1
    assert kinds["amdgpu.ras_correctable"] == 1  # the "new" count, not the "in total" repeat
    first = result.events[0]
    assert (first.kind, first.severity, first.bdf, first.line_no) == (
        "amdgpu.ras_uncorrectable_interrupt",
        "fatal",
        "0000:dd:00.0",
        1,
    )
    resets = sorted(str(e.bdf) for e in result.events if e.kind == "amdgpu.asic_reset")
    assert resets == sorted(f"0000:{b}:00.0" for b in ("1b", "3d", "4e", "5f", "9d", "bd", "cd", "dd"))
    vram = next(e for e in result.events if e.kind == "amdgpu.vram_lost")
    assert vram.bdf is None  # "[drm] VRAM is lost ..." names no device
    assert result.timestamp_style == "monotonic"


def test_dmesg_mi50_reset_failure_with_ctime_timestamps() -> None:
    result = parse_dmesg(_read("mi50-athub-ras-ue-gpu-reset-psp-resume-failed-ret-62-dmesg-T.txt"))
    assert result.timestamp_style == "ctime"
    fatal = [(e.kind, e.line_no) for e in result.events if e.severity == "fatal"]
    assert fatal == [
        ("amdgpu.ras_uncorrectable_interrupt", 3),
        ("amdgpu.gpu_reset_begin", 4),  # every reset blocks (issue 10 item 3)
        ("amdgpu.asic_reset", 15),
        ("amdgpu.gpu_reset_succeeded", 17),
        ("amdgpu.ip_resume_failed", 24),
        ("amdgpu.gpu_reset_failed", 25),
        ("amdgpu.gpu_reset_failed", 28),
        ("amdgpu.gpu_reset_begin", 29),
    ]
    assert {e.bdf for e in result.events if e.bdf is not None} == {"0000:e3:00.0"}
    assert result.events[0].text.startswith("amdgpu 0000:e3:00.0: amdgpu: uncorrectable")  # no timestamp


def test_dmesg_rx7600xt_without_timestamps() -> None:
    result = parse_dmesg(_read("rx7600xt-psp-resume-failed-mes-no-timestamps.txt"))
    assert result.timestamp_style == "none"
    kinds = [e.kind for e in result.events]
    assert kinds.count("amdgpu.vm_flush_timeout") == 2
    assert "amdgpu.psp_failure" in kinds and "amdgpu.mes_failure" in kinds
    assert kinds.count("amdgpu.ip_resume_failed") == 2


def test_dmesg_mlx5_pcie_link_limited() -> None:
    result = parse_dmesg(_read("mlx5-pcie-link-degraded-x8.txt"))
    (event,) = result.events
    assert (event.kind, event.severity, event.bdf, event.line_no) == ("pcie.link_limited", "error", "0001:43:00.0", 2)
    assert "limited by 8.0 GT/s PCIe x8 link" in event.text


@pytest.mark.parametrize(
    "name", ["nvidia-fallen-off-bus-multiline-no-xid-driver570.txt", "nvidia-xid119-gsp-timeout-xe9680-dmesg-T.txt"]
)
def test_dmesg_nvidia_lines_produce_no_amdgpu_events(name: str) -> None:
    result = parse_dmesg(_read(name))
    assert result.events == ()
    assert result.message_count > 0


def test_dmesg_joins_continuation_lines() -> None:
    result = parse_dmesg(_read("nvidia-fallen-off-bus-multiline-no-xid-driver570.txt"))
    assert result.message_count == 3  # the two indented NVRM lines continue the first message


def test_dmesg_joined_message_is_matched_as_one() -> None:
    # A site's own table can match across continuation lines (the NVIDIA message spans three lines).
    table = load_patterns(
        "version: 1\npatterns:\n"
        "  - {id: site.fallen_off_bus, regex: 'GPU (?P<bdf>\\S+) .* fallen off the bus', severity: fatal,"
        " driver: nvidia, families: [all], source: corpus}\n"
    )
    result = parse_dmesg(_read("nvidia-fallen-off-bus-multiline-no-xid-driver570.txt"), table)
    (event,) = result.events
    assert (event.kind, event.bdf, event.line_no) == ("site.fallen_off_bus", "0000:b3:00.0", 1)


# Messages from kernel format strings (see the `source` of each pattern in dmesg_patterns.yaml).
@pytest.mark.parametrize(
    ("line", "kind", "severity"),
    [
        (
            "[  100.000001] amdgpu 0000:c1:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1234, emitted seq=1236",
            "amdgpu.ring_timeout",
            "fatal",
        ),
        (
            "[  100.000001] amdgpu 0000:c1:00.0: amdgpu: ring sdma0 timeout, but soft recovered",
            "amdgpu.ring_timeout_soft_recovered",
            "warn",
        ),
        (
            "[  100.000001] amdgpu 0000:c1:00.0: amdgpu: [gfxhub0] no-retry page fault"
            " (src_id:0 ring:24 vmid:8 pasid:32769)",
            "amdgpu.page_fault",
            "error",
        ),
        (
            "[  100.000001] amdgpu 0000:c1:00.0: amdgpu: 2 uncorrectable hardware errors detected in umc block",
            "amdgpu.ras_uncorrectable",
            "fatal",
        ),
        (
            "[  100.000001] pcieport 0000:00:01.1: PCIe Bus Error: severity=Uncorrected (Fatal),"
            " type=Transaction Layer, (Requester ID)",
            "pcie.aer_uncorrected_fatal",
            "fatal",
        ),
        (
            "[  100.000001] mlx5_core 0000:41:00.0: poll_health:852:(pid 0):"
            " device's health compromised - reached miss count",
            "mlx5.health_compromised",
            "fatal",
        ),
    ],
)
def test_dmesg_kernel_format_strings_classify(line: str, kind: str, severity: str) -> None:
    (event,) = parse_dmesg(line + "\n").events
    assert (event.kind, event.severity) == (kind, severity)
    assert event.bdf is not None


@pytest.mark.parametrize(
    "line",
    [
        "amdgpu 0000:c3:00.0: amdgpu: no uncorrectable hardware errors detected in umc block",
        "amdgpu 0000:c3:00.0: amdgpu: socket: 0, die: 0,"
        " 0 uncorrectable hardware errors detected in total in umc block",
        "amdgpu 0000:c3:00.0: amdgpu: MEM ECC is active.",
    ],
)
def test_dmesg_all_clear_lines_are_not_events(line: str) -> None:
    assert parse_dmesg(line + "\n").events == ()


def test_dmesg_family_filter_drops_aca_pattern_for_other_families() -> None:
    text = _read("mi300x-8gpu-aca-hw-error-mode1-reset-rocm6.2.3.txt")
    kinds = {e.kind for e in parse_dmesg(text, family="mi200").events}
    assert "amdgpu.aca_hw_error" not in kinds
    assert "amdgpu.aca_hw_error" in {e.kind for e in parse_dmesg(text, family="mi300").events}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty kernel log"),
        ("\n  \n", "empty kernel log"),
        ("dmesg: read kernel buffer failed: Operation not permitted\n", "could not read"),
        # a wrapper's error where the log belongs, exit 0 (break test 2026-12-07: read as a clean log)
        ("ERROR: amdgpu driver not loaded, is the module blacklisted?\n", "not a kernel log: error message"),
        ("Failed to open /dev/kmsg\nsee the journal\n", "not a kernel log: error message"),
    ],
)
def test_dmesg_no_evidence_raises(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_dmesg(text)


def test_dmesg_a_log_without_timestamps_is_still_read() -> None:
    """A kernel built without CONFIG_PRINTK_TIME prints no timestamps: such a log is read, only one that opens
    with an error text is refused."""
    result = parse_dmesg("Linux version 6.8.0-45-generic (buildd@lcy02)\namdgpu 0000:05:00.0: amdgpu: RAS: ok\n")
    assert result.message_count == 2 and result.timestamp_style == "none"


def test_dmesg_default_table_is_valid_and_ids_are_namespaced() -> None:
    table = load_default_patterns()
    ids = [p.id for p in table.patterns]
    assert len(ids) == len(set(ids))
    assert all(i.split(".")[0] in {"amdgpu", "pcie", "mlx5"} for i in ids)
    assert all(p.severity in {"fatal", "error", "warn"} for p in table.patterns)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "mapping"),
        (
            "version: 1\npatterns:\n  - {id: a, regex: '(', severity: fatal, driver: x, families: [all], source: s}\n",
            "bad regex",
        ),
        (
            "version: 1\npatterns:\n  - {id: a, regex: 'x', severity: loud, driver: x, families: [all], source: s}\n",
            "severity",
        ),
        (
            "version: 1\npatterns:\n  - {id: a, regex: 'x', severity: warn, driver: x, families: [], source: s}\n",
            "families",
        ),
        (
            "version: 1\npatterns:\n"
            "  - {id: a, regex: 'x', severity: warn, driver: x, families: [all], source: s, colour: red}\n",
            "unknown key",
        ),
        (
            "version: 1\npatterns:\n"
            "  - {id: a, regex: 'x', severity: warn, driver: x, families: [all], source: s}\n"
            "  - {id: a, regex: 'y', severity: warn, driver: x, families: [all], source: s}\n",
            "duplicate id",
        ),
        ("version: one\npatterns: []\n", "version"),
        ("patterns: [\n", "not YAML"),
    ],
)
def test_dmesg_pattern_table_errors_name_the_entry(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_patterns(text)


def test_dmesg_registry_key_uses_default_table() -> None:
    result = PARSERS["dmesg"](_read("mlx5-pcie-link-degraded-x8.txt"))
    assert result == parse_dmesg(_read("mlx5-pcie-link-degraded-x8.txt"))


# --------------------------------------------------------------------------- issue 10: dead or hung GPUs


def test_dmesg_mi210_fatal_init_and_probe_failure_are_fatal_per_gpu() -> None:
    """Real dmesg of 2x MI210 on amdgpu 6.16.13 (ROCm/legacy-rocm-build #6281): both GPUs never came up."""
    result = parse_dmesg(_read("mi210x2-fatal-init-probe-failed-error-12-amdgpu6.16.13.txt"))
    got = [(e.kind, e.severity, e.bdf, e.line_no) for e in result.events]
    assert got == [
        ("amdgpu.fatal_init", "fatal", "0000:c3:00.0", 7),
        ("amdgpu.probe_failed", "fatal", "0000:c3:00.0", 8),
        ("amdgpu.fatal_init", "fatal", "0000:83:00.0", 11),
        ("amdgpu.probe_failed", "fatal", "0000:83:00.0", 12),
    ]


def test_dmesg_newer_kernel_probe_failure_wording_is_fatal() -> None:
    result = parse_dmesg(_read("mi50-fatal-init-probe-with-driver-failed-kernel6.12.txt"))
    assert [(e.kind, e.severity, e.bdf) for e in result.events] == [
        ("amdgpu.fatal_init", "fatal", "0000:03:00.0"),
        ("amdgpu.probe_failed", "fatal", "0000:03:00.0"),
    ]


@pytest.mark.parametrize(
    "name",
    [
        "rdna3-ring-gfx-timeout-ring-reset-failed-mode2.txt",
        "navi10-kernel7.0-ring-reset-failed-baco-no-amdgpu-prefix.txt",
        "journal-error-ring-gfx-timeout-baco-reset-cosmic-comp.txt",
    ],
)
def test_dmesg_ring_timeouts_and_resets_are_fatal(name: str) -> None:
    """gfx_0.0.0 ring timeouts (old `*ERROR*` and new device-prefixed forms) and every reset line block."""
    events = parse_dmesg(_read(name)).events
    fatal = {e.kind for e in events if e.severity == "fatal"}
    assert {"amdgpu.ring_timeout", "amdgpu.gpu_reset_begin", "amdgpu.asic_reset", "amdgpu.gpu_reset_succeeded"} <= fatal


def test_dmesg_ring_reset_failed_is_its_own_event() -> None:
    events = parse_dmesg(_read("navi10-kernel7.0-ring-reset-failed-baco-no-amdgpu-prefix.txt")).events
    failed = [e for e in events if e.kind == "amdgpu.ring_reset_failed"]
    assert [(e.severity, e.bdf, e.line_no) for e in failed] == [("fatal", "0000:28:00.0", 8)]


# --------------------------------------------------------------------------- issue 10: garbage is no log


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("[    8.798469] [drm] amdgpu kernel modesetting enabled.\n\x00\x00\x00\x00\n", "NUL byte"),
        ("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00>\x00", "control byte"),
        (b"[    8.798469] amdgpu\xff\xfe\xfa\n".decode("utf-8", errors="replace"), "non-UTF-8 byte"),
        ("[    8.798469] ok line\n[    8.80] \x01\x02\x03\x04 junk\n", "control byte"),
    ],
)
def test_dmesg_refuses_binary_garbage(text: str, what: str) -> None:
    with pytest.raises(ParseError, match=what) as info:
        parse_dmesg(text)
    assert "not a kernel log" in info.value.message


def test_dmesg_garbage_names_the_first_bad_line() -> None:
    text = _read("mi210x2-fatal-init-probe-failed-error-12-amdgpu6.16.13.txt") + "\x00" * 64 + "\n"
    with pytest.raises(ParseError) as info:
        parse_dmesg(text)
    assert info.value.line_no == 13


def test_dmesg_tabs_and_ansi_colours_are_not_garbage() -> None:
    text = "[    0.218503] rcu: \tRCU restricting CPUs from NR_CPUS=256 to nr_cpu_ids=2.\n\x1b[31mred\x1b[0m\n"
    assert parse_dmesg(text).message_count == 2
