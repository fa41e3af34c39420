"""A SIGKILLed upgrade-gate leaves no tool running (issue 26, case 11): the watchdog of
`collect.runner` SIGKILLs the process group of every tool still tracked when the parent's end of its
pipe closes, so a probe's grandchild that ignores SIGTERM dies with the command that started it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.test_cli_exit_codes import alive, env_with, wait_for

SLEEP = "/bin/sleep" if Path("/bin/sleep").exists() else "/usr/bin/sleep"


def stubborn_node(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A fake node whose rocminfo starts a grandchild that ignores SIGTERM, then waits for it forever."""
    from tests.test_collect_capture import fake_node

    pid_file, grand_file = tmp_path / "rocminfo.pid", tmp_path / "grandchild.pid"
    body = f"/bin/sh -c 'trap \"\" TERM; echo $$ > {grand_file}; exec {SLEEP} 600' &\necho $$ > {pid_file}\nwait\n"
    bindir, _ = fake_node(tmp_path, rocminfo=body)
    return bindir, pid_file, grand_file


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def test_sigkilled_capture_takes_the_tool_and_its_stubborn_grandchild_with_it(tmp_path: Path) -> None:
    bindir, pid_file, grand_file = stubborn_node(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "upgrade_gate", "capture", "--node", "n1", "--out", str(tmp_path / "out.tar.gz")],
        env=env_with(PATH=str(bindir)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    tool = grand = 0
    try:
        tool, grand = int(wait_for(pid_file)), int(wait_for(grand_file))
        assert alive(tool) and alive(grand)
        proc.send_signal(signal.SIGKILL)  # no handler, no finally: only the watchdog is left to act
        proc.wait(timeout=60)
        assert gone_within(grand, 30), "the SIGTERM-ignoring grandchild outlived the SIGKILLed capture"
        assert gone_within(tool, 30), "the tool outlived the SIGKILLed capture"
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in (tool, grand):
            if pid and alive(pid):
                subprocess.run(["kill", "-9", str(pid)], check=False)


def test_watchdog_leaves_nothing_behind_after_a_normal_run(tmp_path: Path) -> None:
    from upgrade_gate.collect.runner import LocalRunner

    result = LocalRunner().run([SLEEP, "0"], timeout=30)
    assert result.ok
    code = (
        "import sys; from upgrade_gate.collect.runner import LocalRunner, _Watchdog; "
        f"r = LocalRunner().run([{SLEEP!r}, '0'], timeout=30); w = _Watchdog.proc; "
        "print(w.pid if w else 0); sys.exit(0 if r.ok else 1)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env_with(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    watchdog = int(out.stdout.strip())
    assert watchdog and gone_within(watchdog, 30), "the watchdog outlived its process"
