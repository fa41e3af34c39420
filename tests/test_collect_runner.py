"""LocalRunner against small executables put first on PATH: hang, missing, non-zero, garbage."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from upgrade_gate.collect.runner import LocalRunner

SLEEP = shutil.which("sleep") or "/bin/sleep"


def _tool(bindir: Path, name: str, body: str) -> None:
    path = bindir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def bindir(tmp_path: Path) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    return path


def _runner(bindir: Path) -> LocalRunner:
    # Only the fake tools are on PATH: nothing from the host can answer by accident.
    return LocalRunner(env={"PATH": str(bindir), "LC_ALL": "C"})


def _gone(pid: int) -> bool:
    """True once `pid` no longer runs (absent, or a zombie waiting for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_local_runner_records_stdout_stderr_and_exit_code(bindir: Path) -> None:
    _tool(bindir, "amd-smi", 'echo "{\\"ok\\": 1}"; echo warn >&2')
    result = _runner(bindir).run(["amd-smi", "list", "--json"], timeout=10)
    assert result.argv == ("amd-smi", "list", "--json")
    assert (result.returncode, result.stdout, result.stderr) == (0, '{"ok": 1}\n', "warn\n")
    assert result.ok and result.failure_reason() is None


def test_local_runner_missing_binary_is_a_value(bindir: Path) -> None:
    result = _runner(bindir).run(["rocminfo"], timeout=10)
    assert result.missing and not result.ok and result.returncode is None
    assert result.failure_reason() == "rocminfo: missing binary"


def test_local_runner_nonzero_exit_reason_names_last_stderr_line(bindir: Path) -> None:
    _tool(bindir, "rocm-smi", "echo partial; echo 'ERROR: GPU[0] not responding' >&2; exit 2")
    result = _runner(bindir).run(["rocm-smi", "--json"], timeout=10)
    assert result.returncode == 2 and result.stdout == "partial\n"
    assert result.failure_reason() == "rocm-smi: exit code 2: ERROR: GPU[0] not responding"


def test_local_runner_garbage_bytes_are_decoded_not_fatal(bindir: Path) -> None:
    _tool(bindir, "lspci", r"printf '\377\376garbage\000\n'")
    result = _runner(bindir).run(["lspci", "-D"], timeout=10)
    assert result.ok
    assert result.stdout == "\ufffd\ufffdgarbage\x00\n"


def test_local_runner_timeout_kills_the_process_group(bindir: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    # The tool starts a grandchild and hangs; both must die when the timeout fires.
    _tool(bindir, "dmesg", f"{SLEEP} 300 &\necho $! > {pidfile}\necho started\nwait")
    result = _runner(bindir).run(["dmesg"], timeout=0.5)
    assert result.timed_out and not result.ok and result.returncode is None
    assert result.stdout == "started\n"
    reason = result.failure_reason()
    assert reason is not None and reason.startswith("dmesg: timed out after")
    grandchild = int(pidfile.read_text())
    for _ in range(500):  # reaping by init is asynchronous; wait for it, bounded
        if _gone(grandchild):
            break
        time.sleep(0.01)
    assert _gone(grandchild)


def test_local_runner_passes_env_and_no_shell(bindir: Path, tmp_path: Path) -> None:
    _tool(bindir, "uname", 'printf "%s|" "$@"; echo "$MARK"')
    sentinel = tmp_path / "sentinel"
    runner = LocalRunner(env={"PATH": str(bindir), "MARK": "m"})
    result = runner.run(["uname", f"-r; touch {sentinel}", f"$(touch {sentinel})"], timeout=10)
    assert result.stdout == f"-r; touch {sentinel}|$(touch {sentinel})|m\n"
    assert not sentinel.exists()
