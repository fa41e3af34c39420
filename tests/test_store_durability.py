"""Durability of the baseline store: killed saves, stale locks, concurrent writers.

Killed saves run in a forked child that SIGKILLs itself at a named step (the store's test-only
`_hook`), or that saves in a loop until the parent SIGKILLs it. Either way the store must stay
readable, `git fsck` clean and the previous baseline intact, and the next save must work.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_store_gitstore import assert_fsck_clean, git, snapshot_for
from upgrade_gate.errors import StoreConflictError
from upgrade_gate.snapshot.io import write_snapshot
from upgrade_gate.store import locking
from upgrade_gate.store.gitstore import BaselineStore

FORK = multiprocessing.get_context("fork")
STEPS = ("validated", "locked", "blobs", "tree", "commit", "ref", "worktree-partial", "worktree", "index")
LANDED = {"ref", "worktree-partial", "worktree", "index"}


def _die_at(path: Path, step: str) -> None:
    def hook(point: str) -> None:
        if point == step:
            os.kill(os.getpid(), signal.SIGKILL)

    BaselineStore(path).save(
        [snapshot_for("node-a", rocm="6.2.0"), snapshot_for("node-b", rocm="6.2.0")], tag="v2", _hook=hook
    )


def _save_forever(path: Path, started: multiprocessing.synchronize.Event) -> None:
    os.setpgid(0, 0)  # its own process group, so the kill also takes the git processes it runs
    with BaselineStore(path) as st:
        for i in range(10_000):
            st.save([snapshot_for("node-a", rocm=f"6.2.{i}"), snapshot_for(f"node-{i % 5}x")])
            started.set()


def _baseline(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    with BaselineStore(path) as st:
        st.save([snapshot_for("node-a"), snapshot_for("node-b")], tag="v1")
    return path


def _check_intact(path: Path) -> None:
    assert_fsck_clean(path)
    with BaselineStore(path) as st:
        assert st.load("node-a", "v1") == snapshot_for("node-a")
        assert st.load("node-b", "v1") == snapshot_for("node-b")
        for node in st.nodes():
            for entry in st.log(node):
                st.load(node, entry.sha)  # every committed version reads back schema-valid


@pytest.mark.parametrize("step", STEPS)
def test_store_save_killed_at_each_step_keeps_store_intact(tmp_path: Path, step: str) -> None:
    path = _baseline(tmp_path)
    child = FORK.Process(target=_die_at, args=(path, step))
    child.start()
    child.join()
    assert child.exitcode == -signal.SIGKILL
    _check_intact(path)
    with BaselineStore(path) as st:
        landed = st.load("node-a").software.rocm_version
        assert landed == ("6.2.0" if step in LANDED else "6.1.3")
        assert ("v2" in git(path, "tag")) == (step in LANDED)
        st.save([snapshot_for("node-c")], tag="v3")  # the next save recovers whatever was left
        assert st.nodes() == ("node-a", "node-b", "node-c")
    assert git(path, "status", "--porcelain") == ""  # the working-tree mirror caught up


@pytest.mark.parametrize("delay", [0.0, 0.03, 0.09])
def test_store_save_loop_sigkilled_keeps_store_intact(tmp_path: Path, delay: float) -> None:
    path = _baseline(tmp_path)
    started = FORK.Event()
    child = FORK.Process(target=_save_forever, args=(path, started))
    child.start()
    assert started.wait(60)
    time.sleep(delay)  # lands the kill somewhere in a save; no assertion depends on where
    os.killpg(child.pid or 0, signal.SIGKILL)  # like a container or cgroup being killed
    child.join()
    _check_intact(path)
    for lock in locking.git_lock_files(path / ".git"):  # killed inside git itself: age its lock
        os.utime(lock, (time.time() - 2 * locking.STALE_AFTER_S,) * 2)
    with BaselineStore(path) as st:
        st.save([snapshot_for("node-z")])
        assert "node-z" in st.nodes()
    assert git(path, "status", "--porcelain") == ""
    assert_fsck_clean(path)


def test_store_stale_leftovers_are_cleared_and_young_locks_reported(tmp_path: Path) -> None:
    path = _baseline(tmp_path)
    ref_lock = path / ".git" / "refs" / "heads" / "main.lock"
    index_lock = path / ".git" / "index.lock"
    obj_tmp = path / ".git" / "objects" / "objk3j2h1"
    mirror_tmp = path / "nodes" / ".node-a.json.x1y2.tmp"
    for leftover in (ref_lock, index_lock, obj_tmp, mirror_tmp):
        leftover.write_text("half written")
    with BaselineStore(path) as st:
        with pytest.raises(StoreConflictError, match=r"main\.lock|index\.lock") as err:
            st.save([snapshot_for("node-c")])
        assert err.value.exit_code == 4
        assert st.load("node-a") == snapshot_for("node-a")  # reads never need the locks
        old = time.time() - 2 * locking.STALE_AFTER_S
        for lock in (ref_lock, index_lock):
            os.utime(lock, (old, old))
        st.save([snapshot_for("node-c")])
    for leftover in (ref_lock, index_lock, obj_tmp, mirror_tmp):
        assert not leftover.exists()
    assert git(path, "status", "--porcelain") == ""
    _check_intact(path)


def test_store_writer_lock_held_too_long_fails_clearly(tmp_path: Path) -> None:
    path = _baseline(tmp_path)
    head = git(path, "rev-parse", "HEAD")
    with (
        locking.store_lock(path / ".git", timeout_s=1, store=path),
        pytest.raises(StoreConflictError, match="another writer holds the store lock"),
    ):
        BaselineStore(path, lock_timeout_s=0.1).save([snapshot_for("node-c")])
    assert git(path, "rev-parse", "HEAD") == head


def test_store_foreign_ref_move_loses_compare_and_swap(tmp_path: Path) -> None:
    path = _baseline(tmp_path)

    def foreign_writer(point: str) -> None:
        if point == "commit":  # someone moves the branch between our read and our ref update
            tree = git(path, "rev-parse", "HEAD^{tree}").strip()
            env = dict(os.environ, GIT_AUTHOR_NAME="x", GIT_AUTHOR_EMAIL="x@x")
            env |= {"GIT_COMMITTER_NAME": "x", "GIT_COMMITTER_EMAIL": "x@x"}
            sha = subprocess.run(
                ["git", "commit-tree", tree, "-p", "HEAD", "-m", "foreign"],
                cwd=path, env=env, check=True, capture_output=True, text=True,
            ).stdout.strip()  # fmt: skip
            git(path, "update-ref", "refs/heads/main", sha)

    with BaselineStore(path) as st:
        with pytest.raises(StoreConflictError, match="another writer moved"):
            st.save([snapshot_for("node-c")], tag="v9", _hook=foreign_writer)
        assert st.nodes() == ("node-a", "node-b")
    assert "v9" not in git(path, "tag")
    assert git(path, "log", "-1", "--format=%s").strip() == "foreign"
    _check_intact(path)


def _save_one(path: Path, node: str, barrier: multiprocessing.synchronize.Barrier) -> None:
    barrier.wait()
    BaselineStore(path).save([snapshot_for(node, rocm="6.2.0")], message=f"save {node}")


def test_store_two_concurrent_saves_both_land(tmp_path: Path) -> None:
    path = _baseline(tmp_path)
    barrier = FORK.Barrier(2)
    children = [FORK.Process(target=_save_one, args=(path, n, barrier)) for n in ("node-a", "node-c")]
    for child in children:
        child.start()
    for child in children:
        child.join()
    assert [c.exitcode for c in children] == [0, 0]
    subjects = git(path, "log", "--format=%s").splitlines()
    assert sorted(subjects[:2]) == ["save node-a", "save node-c"]
    with BaselineStore(path) as st:
        assert st.nodes() == ("node-a", "node-b", "node-c")
        assert st.load("node-a").software.rocm_version == "6.2.0"
    assert git(path, "status", "--porcelain") == ""
    _check_intact(path)


def test_store_two_concurrent_cli_saves_on_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "store"
    files = []
    for node in ("node-a", "node-b"):
        write_snapshot(snapshot_for(node), tmp_path / f"{node}.json")
        files.append(tmp_path / f"{node}.json")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "upgrade_gate", "baseline", "save", str(f), "--store", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for f in files
    ]
    results = [(p.wait(120), p.stderr.read() if p.stderr else "") for p in procs]
    for code, err in results:  # both land, or one fails with a clear one-line error
        assert code == 0 or (code == 4 and err.startswith("upgrade-gate: error:")), err
    with BaselineStore(path) as st:
        landed = st.nodes()
    assert len(landed) == sum(1 for code, _ in results if code == 0)
    assert_fsck_clean(path)


@pytest.mark.parametrize("step", ["ref", "worktree-partial"])
def test_store_save_interrupted_after_its_commit_point_mirrors_first_then_stops(tmp_path: Path, step: str) -> None:
    """SIGINT after the ref moved (2026-12-07: the command said "interrupted" with the commit and tag landed
    and the working tree half written): the mirror finishes, then the interrupt ends the save as before."""
    path = _baseline(tmp_path)

    def hook(point: str) -> None:
        if point == step:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt), BaselineStore(path) as st:
        st.save([snapshot_for("node-a", rocm="6.2.0"), snapshot_for("node-b", rocm="6.2.0")], tag="v2", _hook=hook)
    assert git(path, "status", "--porcelain") == ""  # nothing half-written
    _check_intact(path)
    with BaselineStore(path) as st:
        assert st.load("node-a", "v2").software.rocm_version == "6.2.0"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler it had, back
