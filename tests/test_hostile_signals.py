"""SIGINT / SIGTERM while `validate` runs a hung tool (RVS): the gate exits with the signal's code and
one line, and no process of the fake node outlives it (orphan check over /proc)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.test_cli_exit_codes import env_with
from tests.test_validate_support import FAST, healthy_spec, make_node
from upgrade_gate.fakenode import Faults, faults


def processes_under(marker: str) -> list[int]:
    """Pids (not zombies) whose command line mentions `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if marker in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_during_validate_kills_the_hung_rvs(tmp_path: Path, sig: signal.Signals, code: int) -> None:
    node = make_node(tmp_path, healthy_spec(), Faults(tools={"rvs": faults.hang()}))
    config = tmp_path / "cvf.yaml"
    config.write_text(yaml.safe_dump(dict(FAST)), encoding="utf-8")
    out = tmp_path / "out.json"
    args = ["validate", "--node", node.spec.name, "--host-root", str(node.host_root), "--phases", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "upgrade_gate", *args, "--config", str(config), "--out", str(out)],
        env=env_with(PATH=str(node.bin_dir)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    marker = str(node.bin_dir / "rvs")
    try:
        deadline = time.monotonic() + 60
        while not processes_under(marker):
            assert time.monotonic() < deadline, "rvs never started"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, stderr
    assert "upgrade-gate: error: " + ("terminated (SIGTERM)" if code == 143 else "interrupted (SIGINT)") in stderr
    deadline = time.monotonic() + 10
    while processes_under(str(node.root)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_under(str(node.root)) == [], "a tool of the fake node outlived the gate"
    assert not out.exists()
