"""The fake node's launcher (`fakenode/_replay/forkrun.py`): torchrun's worker contract, ranks forked.

The training itself is proven by the workload phase and demo tests (the real script trains through it);
these prove what a launcher owes its job beyond a clean run: torchrun's environment and agent store, a
failed rank stopping the others with exit 1, and no rank outliving its launcher.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

LAUNCHER = Path(__file__).resolve().parents[1] / "upgrade_gate" / "fakenode" / "_replay" / "forkrun.py"

RANK_SCRIPT = """
import json, os, sys, time
from datetime import timedelta
import torch, torch.distributed as dist
out = sys.argv[1]
rank = int(os.environ["RANK"])
open(f"{out}/pid{rank}", "w").write(str(os.getpid()))
if sys.argv[2] == "sum":
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "TORCHELASTIC_USE_AGENT_STORE")
    json.dump({"sum": t.item(), "argv": sys.argv[1:], **{k: os.environ[k] for k in keys}}, open(f"{out}/r{rank}", "w"))
    dist.barrier()
    os._exit(0)
if sys.argv[2] == "fail" and rank == 1:
    sys.exit(3)
time.sleep(120)
"""


def _launch(tmp_path: Path, mode: str, ranks: int = 2) -> subprocess.Popen[str]:
    script = tmp_path / "job.py"
    script.write_text(RANK_SCRIPT, encoding="utf-8")
    argv = [sys.executable, "-u", str(LAUNCHER), "--standalone", "--nproc-per-node", str(ranks), str(script)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen([*argv, str(tmp_path), mode], env=env, stderr=subprocess.PIPE, text=True)


def _pids(tmp_path: Path, ranks: int) -> list[int]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = [tmp_path / f"pid{r}" for r in range(ranks)]
        if all(p.exists() and p.read_text() for p in found):
            return [int(p.read_text()) for p in found]
        time.sleep(0.1)
    raise AssertionError("the ranks did not start")


def _gone(pid: int) -> bool:
    """Ended: no such process, or a zombie its new parent has not reaped yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_forkrun_ranks_get_torchruns_environment_and_its_agent_store(tmp_path: Path) -> None:
    proc = _launch(tmp_path, "sum", ranks=3)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    seen = [json.loads((tmp_path / f"r{r}").read_text()) for r in range(3)]
    assert [s["sum"] for s in seen] == [6.0, 6.0, 6.0]  # one gloo group over the launcher's store
    assert [(s["RANK"], s["LOCAL_RANK"], s["WORLD_SIZE"]) for s in seen] == [(str(r), str(r), "3") for r in range(3)]
    assert {(s["MASTER_ADDR"], s["TORCHELASTIC_USE_AGENT_STORE"], s["LOCAL_WORLD_SIZE"]) for s in seen} == {
        ("localhost", "True", "3")
    }
    assert all(s["argv"] == [str(tmp_path), "sum"] for s in seen)


def test_forkrun_a_failed_rank_stops_the_others_and_exits_1(tmp_path: Path) -> None:
    proc = _launch(tmp_path, "fail")
    pids = _pids(tmp_path, 2)
    _, err = proc.communicate(timeout=60)  # rank 0 would sleep 120 s: the launcher stopped it
    assert proc.returncode == 1
    assert "forkrun: rank 1 (local_rank: 1) failed: exitcode : 3" in err
    assert "forkrun: rank 0 (local_rank: 0) failed: exitcode : -15" in err
    assert all(_gone(p) for p in pids)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_forkrun_no_rank_outlives_its_launcher(tmp_path: Path, sig: signal.Signals) -> None:
    proc = _launch(tmp_path, "sleep")
    pids = _pids(tmp_path, 2)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode == (-sig if sig == signal.SIGKILL else 128 + sig)
    deadline = time.monotonic() + 30  # SIGKILL: the kernel's parent-death signal reaches the orphans
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(p) for p in pids)
