"""Issue 27: real amdgpu wordings the pattern table missed, and event lines that name no device.

Fixtures are real logs (tests/fixtures/dmesg/PROVENANCE.md, "Issue 27 fixtures"). A line without a
device takes the device of the same driver's lines around it only when that is unambiguous.
"""

from __future__ import annotations

from pathlib import Path

from upgrade_gate.parse.dmesg import parse_dmesg

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "dmesg"


def _events(name: str) -> list[tuple[str, str, str | None, int]]:
    result = parse_dmesg((FIXTURES / name).read_text(encoding="utf-8"))
    return [(e.kind, e.severity, e.bdf, e.line_no) for e in result.events]


def test_dmesg_gfxhub_page_fault_without_retry_word_is_an_event() -> None:
    assert _events("rdna2-gfxhub-page-fault-no-retry-word.txt") == [("amdgpu.page_fault", "error", "0000:0b:00.0", 2)]


def test_dmesg_ip_block_hung_is_fatal() -> None:
    hung = [e for e in _events("gfx11-ip-block-hung-mes-gpu-reset.txt") if e[0] == "amdgpu.ip_block_hung"]
    assert hung == [("amdgpu.ip_block_hung", "fatal", "0000:63:00.0", 8)]


def test_dmesg_early_init_failure_takes_the_device_of_its_neighbouring_lines() -> None:
    events = _events("mi300x-sriov-early-init-psp-failed-no-bdf.txt")
    early = [(bdf, line) for kind, sev, bdf, line in events if kind == "amdgpu.ip_resume_failed"]
    assert early == [
        ("0000:1b:00.0", 9),
        ("0000:1b:00.0", 11),
        ("0000:1b:00.0", 13),
        ("0000:1b:00.0", 15),
        ("0000:1b:00.0", 18),
        ("0000:3d:00.0", 27),  # the next device's block: its own neighbours
    ]
    assert all(sev == "fatal" for kind, sev, _, _ in events if kind == "amdgpu.ip_resume_failed")


def test_dmesg_ring_timeout_without_bdf_on_a_one_gpu_host_names_that_gpu() -> None:
    events = _events("journal-error-ring-gfx-timeout-baco-reset-cosmic-comp.txt")
    assert events[0][:3] == ("amdgpu.ring_timeout", "fatal", "0000:08:00.0")


def test_dmesg_lines_between_two_devices_stay_without_a_device() -> None:
    text = (
        "[  1.000000] amdgpu 0000:1b:00.0: amdgpu: GPU reset begin!\n"
        "[  1.000001] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, "
        "signaled seq=5, emitted seq=7\n"
        "[  1.000002] amdgpu 0000:3d:00.0: amdgpu: GPU reset begin!\n"
    )
    timeout = next(e for e in parse_dmesg(text).events if e.kind == "amdgpu.ring_timeout")
    assert timeout.bdf is None


def test_dmesg_eight_gpus_resetting_at_once_keep_device_less_lines_unassigned() -> None:
    events = _events("mi300x-8gpu-aca-hw-error-mode1-reset-rocm6.2.3.txt")
    assert all(
        bdf is None for kind, _, bdf, _ in events if kind in ("amdgpu.restore_queues_failed", "amdgpu.vram_lost")
    )
