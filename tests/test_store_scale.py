"""A fleet's save streams (issue 26, case 10): `baseline save` writes each baseline as it reads it and
keeps only blob ids, and stays exactly as safe as the in-memory save (the ref move is the commit point;
a failure anywhere in the stream leaves the branch and tags where they were). Its memory at 8,192 nodes
is measured by bench/bench_store_save.py, not here (no timed or sized asserts in the suite)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_store_gitstore import assert_fsck_clean, git, snapshot_for
from upgrade_gate.cli.main import run
from upgrade_gate.errors import ExitCode, InputError, SchemaError, StoreConflictError
from upgrade_gate.model import Snapshot
from upgrade_gate.snapshot.io import dumps_snapshot, write_snapshot
from upgrade_gate.store import layout, locking
from upgrade_gate.store.aggregate import aggregate_class, class_reference_to_document
from upgrade_gate.store.decoded import blob_id
from upgrade_gate.store.gitstore import BaselineStore


def _has_object(store: Path, sha: bytes) -> bool:
    return subprocess.run(["git", "cat-file", "-e", sha.hex()], cwd=store, check=False).returncode == 0


def _locked(store: Path) -> bool:
    """True while some writer holds the store's flock (a second writer would time out at once)."""
    try:
        with locking.store_lock(store / ".git", timeout_s=0, store=store):
            return False
    except StoreConflictError:
        return True


def test_save_stream_writes_each_baseline_as_it_comes_without_holding_the_lock(tmp_path: Path) -> None:
    """When the stream yields snapshot i, the blob of snapshot i-1 is already in the object database:
    nothing waits for the whole fleet in memory. The store lock is not held while the fleet is read
    (minutes at 8,192 nodes), so another writer (here a `deny`) lands meanwhile, and the save after it."""
    path = tmp_path / "store"
    with BaselineStore(path) as st:
        st.save([snapshot_for("node-seed")])
    snaps = [snapshot_for(f"node-{i:03d}") for i in range(6)]
    seen: list[tuple[bool, bool]] = []

    def stream() -> Iterator[Snapshot]:
        for i, snap in enumerate(snaps):
            if i > 0:
                previous = blob_id(dumps_snapshot(snaps[i - 1], version="2").encode())  # the store writes v2
                seen.append((_locked(path), _has_object(path, previous)))
            if i == 3:
                with BaselineStore(path, lock_timeout_s=0) as other:
                    other.deny("SERIAL-9", "failed phase 3")
            yield snap

    with BaselineStore(path) as st:
        sha = st.save_stream(stream(), tag="t1")
        assert st.nodes("t1") == ("node-000", "node-001", "node-002", "node-003", "node-004", "node-005", "node-seed")
        assert st.load("node-003", sha) == snaps[3]
        assert "SERIAL-9" in st.denylist("t1")
    assert seen == [(False, True)] * 5
    assert git(path, "log", "-2", "--format=%s").splitlines()[1].startswith("deny GPU SERIAL-9")
    assert git(path, "status", "--porcelain") == ""
    assert_fsck_clean(path)


def test_a_streamed_object_being_written_is_not_cleared_by_another_writer(tmp_path: Path) -> None:
    """A streamed save's temp object (`objects/ug-*.tmp`, written without the lock) is another writer's
    leftover only once stale; gitdb's own (`objects/obj*`, written under the lock) is one at once."""
    path = tmp_path / "store"
    with BaselineStore(path) as st:
        st.save([snapshot_for("node-a")])
    young = path / ".git" / "objects" / "ug-young.tmp"
    stale = path / ".git" / "objects" / "ug-stale.tmp"
    for f in (young, stale):
        f.write_bytes(b"half")
    old = time.time() - 2 * locking.STALE_AFTER_S
    os.utime(stale, (old, old))
    with BaselineStore(path) as st:
        st.save([snapshot_for("node-b")])
    assert young.exists() and not stale.exists()


def test_save_stream_commits_what_save_commits(tmp_path: Path) -> None:
    """The streamed and the in-memory save of the same fleet make the same tree and message."""
    snaps = [snapshot_for(f"node-{i:03d}", rocm="6.2.0" if i % 3 else "6.1.3") for i in range(12)]
    a, b = tmp_path / "a", tmp_path / "b"
    with BaselineStore(a) as st:
        st.save(snaps, tag="t1")
    with BaselineStore(b) as st:
        st.save_stream(iter(snaps), tag="t1")
    assert git(a, "rev-parse", "HEAD^{tree}") == git(b, "rev-parse", "HEAD^{tree}")
    assert git(a, "log", "-1", "--format=%B") == git(b, "log", "-1", "--format=%B")


@pytest.mark.parametrize("at", [0, 3])
def test_save_stream_failing_midway_leaves_the_store_as_it_was(tmp_path: Path, at: int) -> None:
    """A snapshot that fails in the stream (here the 1st or the 4th) fails the save: branch, tags, working
    tree and index as they were; at most unreferenced blobs remain, which fsck accepts."""
    path = tmp_path / "store"
    with BaselineStore(path) as st:
        st.save([snapshot_for("node-a")], tag="v1")
    head = git(path, "rev-parse", "HEAD")

    def stream() -> Iterator[Snapshot]:
        for i in range(6):
            if i == at:
                raise SchemaError(f"node-{i}.json: not a snapshot")
            yield snapshot_for(f"node-{i}")

    with BaselineStore(path) as st, pytest.raises(SchemaError, match=f"node-{at}"):
        st.save_stream(stream(), tag="v2")
    assert git(path, "rev-parse", "HEAD") == head
    assert git(path, "tag").split() == ["v1"]
    assert git(path, "status", "--porcelain") == ""
    assert_fsck_clean(path)


def test_save_stream_whose_first_snapshot_fails_creates_no_store(tmp_path: Path) -> None:
    def stream() -> Iterator[Snapshot]:
        raise SchemaError("bad.json: not a snapshot")
        yield snapshot_for("node-a")  # pragma: no cover

    with pytest.raises(SchemaError):
        BaselineStore(tmp_path / "new").save_stream(stream())
    assert not (tmp_path / "new").exists()


def test_save_stream_refuses_a_node_given_twice(tmp_path: Path) -> None:
    with BaselineStore(tmp_path / "store") as st, pytest.raises(InputError, match="node-a is given twice"):
        st.save_stream(iter([snapshot_for("node-a"), snapshot_for("node-b"), snapshot_for("node-a")]))


def _files(tmp_path: Path, snaps: list[Snapshot]) -> list[str]:
    out = []
    for snap in snaps:
        path = tmp_path / f"{snap.node.name}.json"
        write_snapshot(snap, path)
        out.append(str(path))
    return out


def test_cli_save_streams_the_fleet_with_its_class_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`baseline save` over a listing: one commit holding every baseline and the class reference over the
    saved snapshots and the store's other baselines of the class; the same save again under the same tag
    answers the same commit (a retry), a different one is refused."""
    store = tmp_path / "store"
    older = snapshot_for("node-old")
    with BaselineStore(store) as st:
        st.save([older])
    snaps = [snapshot_for(f"node-{i:03d}", smc="00.85.113.00" if i < 5 else "00.85.112.00") for i in range(8)]
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{p}\n" for p in _files(tmp_path, snaps)))
    argv = ["baseline", "save", "--snapshots", str(listing), "--store", str(store), "--tag", "t1"]
    assert run(argv) == ExitCode.PASS
    out = capsys.readouterr()
    assert "saved 8 node(s)" in out.out and out.err == ""
    with BaselineStore(store) as st:
        assert st.nodes("t1") == tuple(sorted([*(s.node.name for s in snaps), "node-old"]))
        name = f"classes/{older.node.node_class}.json"
        expected = class_reference_to_document(aggregate_class(str(older.node.node_class), [*snaps, older]))
        assert st.read_document(name, "t1") == expected
    sha = git(store, "rev-parse", "t1")
    assert run(argv) == ExitCode.PASS  # the same save again: the same commit, with a note
    assert "already holds exactly these baselines" in capsys.readouterr().err
    assert git(store, "rev-parse", "t1") == sha
    write_snapshot(snapshot_for("node-000", rocm="6.3.0"), tmp_path / "node-000.json")
    assert run(argv) == ExitCode.BAD_INPUT
    assert "tag 't1' already exists" in capsys.readouterr().err
    assert git(store, "status", "--porcelain") == ""
    assert layout.node_path("node-000") in git(store, "ls-files")


FORK = multiprocessing.get_context("fork")


def _stream_killed_at(path: Path, step: str) -> None:
    def die(point: str) -> None:
        if point == step:
            os.kill(os.getpid(), signal.SIGKILL)

    def stream() -> Iterator[Snapshot]:
        for i in range(4):
            if i == 2:
                die("mid-stream")
            yield snapshot_for(f"node-{i}", rocm="6.2.0")

    BaselineStore(path).save_stream(stream(), tag="v2", _hook=die)


@pytest.mark.parametrize("step", ["mid-stream", "streamed", "locked", "blobs", "commit", "ref", "worktree"])
def test_save_stream_killed_at_each_step_leaves_the_old_state_or_the_new(tmp_path: Path, step: str) -> None:
    """A streamed save SIGKILLed anywhere: before the ref move the store is exactly as it was (fsck clean,
    tag absent), after it the save has landed; the next save recovers whatever was left."""
    path = tmp_path / "store"
    with BaselineStore(path) as st:
        st.save([snapshot_for("node-0")], tag="v1")
    child = FORK.Process(target=_stream_killed_at, args=(path, step))
    child.start()
    child.join()
    assert child.exitcode == -signal.SIGKILL
    assert_fsck_clean(path)
    landed = step in ("ref", "worktree")
    with BaselineStore(path) as st:
        assert ("v2" in git(path, "tag")) == landed
        assert st.nodes() == (("node-0", "node-1", "node-2", "node-3") if landed else ("node-0",))
        assert st.load("node-0", "v1") == snapshot_for("node-0")
        st.save([snapshot_for("node-9")], tag="v3")
    assert git(path, "status", "--porcelain") == ""
    assert_fsck_clean(path)
