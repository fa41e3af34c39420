"""The result frame that carries a Job's stdout back through its pod log."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from upgrade_gate.errors import ParseError
from upgrade_gate.fleet.resultframe import END, extract, frame


@given(st.binary(max_size=4096), st.integers(min_value=-1, max_value=255))
def test_resultframe_roundtrip(payload: bytes, code: int) -> None:
    assert extract(frame(payload, exit_code=code)) == (payload, code)


def test_resultframe_ignores_lines_around_the_frame() -> None:
    log = "warning: something on stderr\n" + frame(b'{"ok": true}\n') + "trailing noise\n"
    assert extract(log) == (b'{"ok": true}\n', 0)


def test_resultframe_takes_the_last_complete_frame() -> None:
    log = frame(b"first") + frame(b"second", exit_code=3)
    assert extract(log) == (b"second", 3)


def test_resultframe_missing_frame_fails_closed() -> None:
    with pytest.raises(ParseError, match="no result frame"):
        extract("just a log line\n")


def test_resultframe_truncated_log_fails_closed() -> None:
    text = frame(bytes(range(256)) * 40)
    cut = text[: text.index(END) - 10]
    with pytest.raises(ParseError, match=r"not terminated|does not decode"):
        extract(cut)


def test_resultframe_tampered_payload_fails_checksum() -> None:
    good = frame(b"payload-one")
    other = frame(b"payload-two")
    header_good = good.splitlines()[0]
    forged = "\n".join([header_good, *other.splitlines()[1:]]) + "\n"
    with pytest.raises(ParseError, match="checksum"):
        extract(forged)


def test_resultframe_wrapper_frames_stdout_and_passes_stderr_and_exit_code() -> None:
    child = "import sys; sys.stdout.buffer.write(b'\\x00bin\\xff'); print('oops', file=sys.stderr); sys.exit(3)"
    proc = subprocess.run(
        [sys.executable, "-m", "upgrade_gate.fleet.resultframe", "--", sys.executable, "-c", child],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 3
    assert "oops" in proc.stderr
    assert extract(proc.stdout) == (b"\x00bin\xff", 3)


def test_resultframe_wrapper_reports_missing_command() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "upgrade_gate.fleet.resultframe", "--", "/nonexistent/tool"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 127
    assert "cannot run /nonexistent/tool" in proc.stderr
