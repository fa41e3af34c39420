"""The result frame that carries a Job's stdout back through its pod log."""

from __future__ import annotations

import base64
import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from upgrade_gate.errors import ParseError
from upgrade_gate.fleet.resultframe import END, EXEC_FAILED, extract, frame, wrapper_source


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


def test_resultframe_wrapper_as_a_job_runs_it_needs_nothing_installed(tmp_path: Path) -> None:
    """A Job runs `python3 -I -S -c <framewrapper's source>`: no site, no PYTHONPATH, no upgrade_gate."""
    source = wrapper_source()
    assert "$(" not in source  # Kubernetes would expand it in the container's arguments
    assert "import upgrade_gate" not in source and "from upgrade_gate" not in source  # standard library only
    assert source.startswith("# upgrade-gate's result wrapper") and "Design decisions" not in source  # no docstring
    child = "import sys; sys.stdout.buffer.write(b'x' * 200000 + b'\\x00'); print('warn', file=sys.stderr); sys.exit(5)"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": "/nonexistent"}
    argv = [sys.executable, "-I", "-S", "-c", source, "--"]
    proc = subprocess.run([*argv, sys.executable, "-c", child], capture_output=True, text=True, env=env,
                          cwd=tmp_path, check=False)  # fmt: skip
    assert proc.returncode == 5
    assert proc.stderr == "warn\n"
    assert extract(proc.stdout) == (b"x" * 200000 + b"\x00", 5)
    missing = subprocess.run([*argv, "no-such-tool-here"], capture_output=True, text=True, env=env, check=False)
    assert missing.returncode == 127
    assert f"{EXEC_FAILED} no-such-tool-here" in missing.stderr
    quiet = subprocess.run([*argv, "cat"], input="ignored", capture_output=True, text=True, env=env, check=False)
    assert extract(quiet.stdout) == (b"", 0)  # stdin is /dev/null, as before


def test_resultframe_wrapper_frames_read_by_the_gzip_module() -> None:
    payload = bytes(range(256)) * 50
    text = frame(payload, exit_code=1)
    packed = base64.b64decode("".join(line[4:] for line in text.splitlines() if line.startswith("UGR ")))
    assert gzip.decompress(packed) == payload
    assert extract(text) == (payload, 1)
