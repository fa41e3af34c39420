"""The dmesg scan is linear in the log: a device-less event's whole-log device is found once per driver and
parse, not once per event (1 MiB of device-less timeouts took 18.8 s when it was per event). Pinned by
counting the whole-log scans, not by timing (speed is in bench/)."""

from __future__ import annotations

import pytest

from upgrade_gate.parse import dmesg

TIMEOUT = (
    "[ {t}.000000] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=2"
)
DEVICE = "[ {t}.000000] amdgpu 0000:1b:00.0: amdgpu: GPU reset begin!"


def test_many_device_less_events_scan_the_whole_log_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = dmesg._one_device

    def counting(messages, devices, driver):  # type: ignore[no-untyped-def]
        calls.append(driver)
        return real(messages, devices, driver)

    monkeypatch.setattr(dmesg, "_one_device", counting)
    lines = [DEVICE.format(t=1)] + [TIMEOUT.format(t=i + 2) for i in range(3000)]
    result = dmesg.parse_dmesg("\n".join(lines) + "\n")
    timeouts = [e for e in result.events if "timeout" in e.text]
    assert len(timeouts) == 3000
    assert {str(e.bdf) for e in timeouts} == {"0000:1b:00.0"}  # the host's one amdgpu device
    assert len(calls) == len(set(calls)) <= 2  # once per driver, whatever the number of events


def test_two_devices_in_the_log_leave_a_far_event_without_one() -> None:
    lines = [DEVICE.format(t=1), DEVICE.format(t=2).replace("1b:00", "3c:00")]
    lines += [f"[ {i + 3}.000000] unrelated line {i}" for i in range(100)] + [TIMEOUT.format(t=200)]
    result = dmesg.parse_dmesg("\n".join(lines) + "\n")
    (timeout,) = [e for e in result.events if "timeout" in e.text]
    assert timeout.bdf is None
