"""The judge's forked workers (judge.forkpool): ordered results, and a worker that dies, an error that does
not survive a pickle, or SIGTERM to the whole process group ends the run with an error, never a hang."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.test_cli_exit_codes import alive
from upgrade_gate.cpus import usable_cpus
from upgrade_gate.errors import InputError, ParseError
from upgrade_gate.judge.forkpool import ForkPool, WorkerDied, forked_pool


def _square(x: int) -> int:
    if x % 7 == 3:
        time.sleep(0.05)  # some items finish after later ones: the order must still hold
    return x * x


def test_results_come_in_the_items_order() -> None:
    with forked_pool(2) as pool:
        assert list(pool.imap(_square, list(range(40)))) == [x * x for x in range(40)]
        assert pool.map(_square, []) == []


def _killed_at_5(x: int) -> int:
    if x == 5:
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
    return x


def test_a_worker_killed_mid_run_is_an_error_naming_what_it_was_judging() -> None:
    pools: list[ForkPool[int]] = []
    started = time.monotonic()
    with (
        pytest.raises(WorkerDied, match=r"died \(killed by SIGKILL\) while judging item five"),
        forked_pool(2) as pool,
    ):
        pools.append(pool)
        pool.map(_killed_at_5, list(range(12)), describe=lambda x: "item five" if x == 5 else str(x))
    assert time.monotonic() - started < 30
    assert not pools[0]._live  # every worker reaped


def _raises(x: int) -> int:
    if x == 4:
        raise ParseError("rocminfo", 3, "garbage")  # its __init__ cannot be rebuilt from its pickle
    if x == 6:
        raise InputError("candidate x.json: not JSON")
    return x


def test_an_error_that_does_not_survive_a_pickle_arrives_as_its_nearest_class() -> None:
    with (
        pytest.raises(InputError, match=r"rocminfo: unexpected output at line 3: 'garbage'") as info,
        forked_pool(2) as pool,
    ):
        pool.map(_raises, list(range(5)))
    assert type(info.value) is InputError  # exit 3, as the ParseError itself would have been


def test_an_error_that_survives_a_pickle_arrives_as_itself() -> None:
    with pytest.raises(InputError, match="not JSON"), forked_pool(2) as pool:
        pool.map(_raises, [0, 1, 2, 6, 5])


def _bug(x: int) -> int:
    return {}[x]  # type: ignore[no-any-return]


def test_a_bug_in_a_worker_is_raised_in_the_parent() -> None:
    with pytest.raises(KeyError), forked_pool(2) as pool:
        pool.map(_bug, [1, 2, 3])


def _unsendable(x: int) -> object:
    return (lambda: x) if x == 2 else x  # a lambda cannot be pickled


def test_a_result_that_cannot_be_sent_is_an_internal_error_not_a_dead_worker() -> None:
    with pytest.raises(RuntimeError, match="could not send its result"), forked_pool(2) as pool:
        pool.map(_unsendable, [0, 1, 2, 3])


_GROUP_SIGTERM = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from upgrade_gate.judge.forkpool import forked_pool

    marker = Path(sys.argv[1])

    class Terminated(Exception):
        pass

    def on_term(signum, frame):  # what the CLI's handler does
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated()

    signal.signal(signal.SIGTERM, on_term)

    def work(x):
        marker.write_text("started")
        if x == 0:
            time.sleep(60)  # one slow item; the other worker is idle, waiting for a task
        return x

    try:
        with forked_pool(2) as pool:
            list(pool.imap(work, list(range(3))))
    except Terminated:
        sys.exit(143)
    sys.exit(0)
    """
)


def _started(tmp_path: Path, text: str, out: Path, ready: Callable[[], bool]) -> subprocess.Popen[bytes]:
    """`text` run as a script in a session of its own (argument: `out`), once `ready()` says its workers run."""
    script = tmp_path / "run.py"
    script.write_text(text, encoding="utf-8")
    proc = subprocess.Popen([sys.executable, str(script), str(out)], start_new_session=True)
    deadline = time.monotonic() + 30
    while not ready():
        if time.monotonic() > deadline or proc.poll() is not None:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("the workers never started")
        time.sleep(0.05)
    return proc


def test_sigterm_to_the_process_group_with_an_idle_worker_ends_the_run(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    proc = _started(tmp_path, _GROUP_SIGTERM, marker, marker.exists)
    try:
        time.sleep(0.5)  # the fast items are done: one worker idles
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 143
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True).returncode == 1  # none left


_PARENT_KILLED = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from upgrade_gate.judge.forkpool import forked_pool

    pids = Path(sys.argv[1])

    def work(x):
        with open(pids, "a") as f:
            f.write(f"{os.getpid()}\\n")
        time.sleep(0.5 if x else 6)  # one worker busy for a while, the others done and waiting
        return x

    with forked_pool(3) as pool:
        list(pool.imap(work, list(range(4))))
    """
)


def test_workers_leave_when_their_parent_is_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    proc = _started(tmp_path, _PARENT_KILLED, pids, lambda: pids.exists() and len(set(pids.read_text().split())) >= 3)
    try:
        time.sleep(1.0)  # the quick items are done: two workers wait for a task
        proc.kill()  # the parent only, as the OOM killer would
        proc.wait()
        workers = {int(p) for p in pids.read_text().split()}
        deadline = time.monotonic() + 60  # the busy one finishes its item (6 s) and finds no parent
        while any(alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [p for p in workers if alive(p)]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert not left, f"workers outlived their parent: {left}"


def test_usable_cpus_follows_the_affinity_mask() -> None:
    code = "import os; os.sched_setaffinity(0, {0}); from upgrade_gate.cpus import usable_cpus as u; print(u())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"
    assert 1 <= usable_cpus() <= (os.cpu_count() or 1)


@pytest.mark.parametrize(
    ("cpu_max", "cap"),
    [("max 100000\n", None), ("50000 100000\n", 1), ("150000 100000\n", 2), ("not a quota\n", None), (None, None)],
)
def test_usable_cpus_is_capped_by_a_cgroup_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu_max: str | None, cap: int | None
) -> None:
    import upgrade_gate.cpus as cpus

    path = tmp_path / "cpu.max"
    if cpu_max is not None:
        path.write_text(cpu_max, encoding="ascii")
    monkeypatch.setattr(cpus, "CPU_MAX", path)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert cpus.usable_cpus() == (4 if cap is None else cap)  # 1.5 CPUs of quota: two workers
