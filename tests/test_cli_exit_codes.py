"""One place maps outcomes to exit codes: each documented code is pinned here, and driven through the
real entry point (`python -m upgrade_gate` in a subprocess), signals included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.judge_scenarios import mi300x_snapshot, reverse_order
from upgrade_gate.cli.main import run
from upgrade_gate.errors import ExitCode
from upgrade_gate.snapshot.io import write_snapshot
from upgrade_gate.store.gitstore import BaselineStore

REPO = Path(__file__).resolve().parent.parent


def test_exit_codes_match_the_design_contract() -> None:
    assert {c.name: int(c) for c in ExitCode} == {
        "PASS": 0,
        "BLOCK": 1,
        "USAGE": 2,
        "BAD_INPUT": 3,
        "ENVIRONMENT": 4,
        "INTERNAL": 70,
        "INTERRUPTED": 130,
        "TERMINATED": 143,
    }


def test_every_exit_code_is_documented_in_the_readme() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for code in ExitCode:
        assert f"\n| {int(code)} |" in readme, code


def test_cli_version_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--version"]) == 0
    assert "upgrade-gate" in capsys.readouterr().out


def test_cli_unknown_command_is_usage_error() -> None:
    assert run(["no-such-command"]) == ExitCode.USAGE


def test_cli_unknown_option_is_usage_error() -> None:
    assert run(["--no-such-flag"]) == ExitCode.USAGE


# --------------------------------------------------------------------------- the real entry point


def env_with(**extra: str) -> dict[str, str]:
    """This process's environment with the worktree first on PYTHONPATH (plus `extra`)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def ug(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m upgrade_gate ARGS` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "upgrade_gate", *args],
        capture_output=True,
        text=True,
        env=env or env_with(),
        cwd=cwd,
        timeout=120,
        check=False,
    )


def one_error_line(stderr: str) -> str:
    """The single `upgrade-gate: error:` line of stderr (fails if there is none or a traceback)."""
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.startswith("upgrade-gate: error:")]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture
def snapshots(tmp_path: Path) -> tuple[Path, Path]:
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    write_snapshot(mi300x_snapshot(), before)
    write_snapshot(reverse_order(mi300x_snapshot()), after)
    return before, after


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    with BaselineStore(path) as st:
        st.save([mi300x_snapshot()], tag="v1")
    return path


def test_entry_point_0_pass_and_1_block(snapshots: tuple[Path, Path]) -> None:
    before, after = snapshots
    assert ug("diff", str(before), str(before)).returncode == ExitCode.PASS
    assert ug("diff", str(before), str(after)).returncode == ExitCode.BLOCK


def test_entry_point_2_usage() -> None:
    proc = ug("gate", "--no-such-flag")
    assert proc.returncode == ExitCode.USAGE
    assert "Traceback" not in proc.stderr


def test_entry_point_3_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    proc = ug("diff", str(bad), str(bad))
    assert proc.returncode == ExitCode.BAD_INPUT
    assert str(bad) in one_error_line(proc.stderr)


def test_entry_point_4_environment(snapshots: tuple[Path, Path], tmp_path: Path) -> None:
    proc = ug("gate", "--store", str(tmp_path / "nowhere"), "--candidate", str(snapshots[0]))
    assert proc.returncode == ExitCode.ENVIRONMENT
    assert "no baseline store" in one_error_line(proc.stderr)


@pytest.mark.parametrize("args", [("baseline", "list"), ("gate", "--report", "json:-", "--candidate", "SNAP")])
def test_a_stdout_closed_early_is_exit_4_not_a_verdict(store: Path, tmp_path: Path, args: tuple[str, ...]) -> None:
    # break test 2026-12-07: `--report json:- | head` and `baseline list | head` exited 1 (BLOCK's code) without
    # a word, even for a PASS: click turned the broken pipe into sys.exit(1)
    snap = tmp_path / "snap.json"
    write_snapshot(mi300x_snapshot(), snap)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write
    try:
        argv = [str(snap) if a == "SNAP" else a for a in args]
        proc = subprocess.run(
            [sys.executable, "-m", "upgrade_gate", *argv, "--store", str(store)],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=env_with(),
            timeout=120,
        )
    finally:
        os.close(write)
    assert proc.returncode == ExitCode.ENVIRONMENT, proc.stderr
    assert "standard output was closed" in one_error_line(proc.stderr)


@pytest.mark.parametrize("report", ["html", "junit", "markdown", "json"])
def test_unwritable_report_exits_4_not_1(
    report: str, store: Path, snapshots: tuple[Path, Path], tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    target = blocker / f"report.{report}"  # its parent is a file: ENOTDIR even for root
    proc = ug("gate", "--store", str(store), "--candidate", str(snapshots[0]), "--report", f"{report}:{target}")
    assert proc.returncode == ExitCode.ENVIRONMENT, proc.stderr
    assert str(blocker) in one_error_line(proc.stderr)


def test_unwritable_snapshot_out_exits_4(snapshots: tuple[Path, Path], tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    from upgrade_gate.collect.bundle import write_bundle
    from upgrade_gate.collect.capture import capture
    from upgrade_gate.collect.probes import Probe
    from upgrade_gate.collect.runner import LocalRunner

    bundle = capture(LocalRunner(), node="n1", probes=[Probe(name="kernel", argv=("uname", "-r"), parser="uname-r")])
    write_bundle(bundle, tmp_path / "b.tar.gz")
    proc = ug("snapshot", str(tmp_path / "b.tar.gz"), "--out", str(blocker / "snap.json"))
    assert proc.returncode == ExitCode.ENVIRONMENT, proc.stderr
    assert str(blocker) in one_error_line(proc.stderr)


def test_json_commands_print_errors_as_json(store: Path, snapshots: tuple[Path, Path], tmp_path: Path) -> None:
    proc = ug("diff", str(tmp_path / "missing.json"), str(snapshots[0]), "--json")
    assert proc.returncode == ExitCode.BAD_INPUT
    doc = json.loads(proc.stdout)
    assert doc == {"error": f"{tmp_path / 'missing.json'}: no such file", "type": "NotFoundError", "exit_code": 3}
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    proc = ug("gate", "--store", str(store), "--candidate", str(snapshots[0]), "--report", f"json:{blocker}/r.json")
    assert proc.returncode == ExitCode.ENVIRONMENT
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["exit_code"] == 4 and doc["type"] == "FileExistsError" and str(blocker) in doc["error"]


# --------------------------------------------------------------------------- 70: an unexpected exception


def crashing_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose `socket.gethostname` raises a RuntimeError (a stand-in for any bug)."""
    shim = tmp_path / "shim"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(
        "import socket\n"
        "def _boom():\n    raise RuntimeError('injected fault\\nsecond line')\n"
        "socket.gethostname = _boom\n",
        encoding="utf-8",
    )
    env = env_with()
    env["PYTHONPATH"] = os.pathsep.join((str(shim), env["PYTHONPATH"]))
    return env


def test_entry_point_70_unexpected_exception_one_line(tmp_path: Path) -> None:
    proc = ug("capture", "--out", str(tmp_path / "b.tar.gz"), env=crashing_env(tmp_path))
    assert proc.returncode == ExitCode.INTERNAL == 70
    line = one_error_line(proc.stderr)
    assert "internal error: RuntimeError: injected fault second line" in line
    assert "--traceback" in line


@pytest.mark.parametrize("how", ["flag", "env"])
def test_traceback_on_request(tmp_path: Path, how: str) -> None:
    env = crashing_env(tmp_path)
    args = ["capture", "--out", str(tmp_path / "b.tar.gz")]
    if how == "flag":
        args.insert(0, "--traceback")
    else:
        env["UPGRADE_GATE_TRACEBACK"] = "1"
    proc = ug(*args, env=env)
    assert proc.returncode == ExitCode.INTERNAL
    assert "Traceback (most recent call last)" in proc.stderr and "_boom" in proc.stderr


# --------------------------------------------------------------------------- 130 / 143 with orphan checks


def hung_node(tmp_path: Path) -> tuple[Path, Path]:
    """A fake node whose rocminfo records its pid and hangs; returns (bin dir, pid file)."""
    from tests.test_collect_capture import fake_node

    pid_file = tmp_path / "rocminfo.pid"
    sleep = "/bin/sleep" if Path("/bin/sleep").exists() else "/usr/bin/sleep"
    bindir, _ = fake_node(tmp_path, rocminfo=f"echo $$ > {pid_file}\nexec {sleep} 600")
    return bindir, pid_file


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def wait_for(path: Path, seconds: float = 30.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = path.read_text().strip() if path.exists() else ""
        if text:
            return text
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


@pytest.mark.parametrize(("sig", "code", "word"), [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")])
def test_signal_during_capture_exits_with_its_code_and_kills_the_hung_tool(
    tmp_path: Path, sig: signal.Signals, code: int, word: str
) -> None:
    bindir, pid_file = hung_node(tmp_path)
    out = tmp_path / "out.tar.gz"
    env = env_with(PATH=str(bindir))
    proc = subprocess.Popen(
        [sys.executable, "-m", "upgrade_gate", "capture", "--node", "n1", "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        tool_pid = int(wait_for(pid_file))
        assert alive(tool_pid)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, stderr
    assert f"upgrade-gate: error: {'interrupted' if code == 130 else 'terminated'} ({word})" in stderr
    deadline = time.monotonic() + 10
    while alive(tool_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(tool_pid), "the hung tool outlived the gate"
    assert not out.exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.tar.gz")]  # no half-written temp
