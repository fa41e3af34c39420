"""The baseline store under faults: concurrent creation, a full disk after the commit point, a tag moved
by hand, no git binary. Each save reports exactly what happened."""

from __future__ import annotations

import errno
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cli_exit_codes import env_with, one_error_line
from tests.test_store_gitstore import assert_fsck_clean, git, snapshot_for
from upgrade_gate.errors import ExitCode, NotFoundError
from upgrade_gate.snapshot.io import write_snapshot
from upgrade_gate.store.gitstore import ALLOW_MOVED_TAG_ENV, BaselineStore, MovedTagError, TagExistsError

FORK = multiprocessing.get_context("fork")


def _first_save(path: Path, node: str, go: multiprocessing.synchronize.Event, out: multiprocessing.Queue) -> None:
    go.wait()
    try:
        with BaselineStore(path) as st:
            st.save([snapshot_for(node)])
        out.put((node, "ok"))
    except Exception as exc:  # reported to the parent, which asserts on it
        out.put((node, f"{type(exc).__name__}: {exc}"))


def test_eight_concurrent_first_saves_into_a_new_store_all_land(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "store"  # neither the store nor its parent exists yet
    go = FORK.Event()
    out: multiprocessing.Queue = FORK.Queue()
    nodes = [f"node-{i}" for i in range(8)]
    procs = [FORK.Process(target=_first_save, args=(path, n, go, out)) for n in nodes]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(120)
    results = dict(out.get(timeout=5) for _ in nodes)
    assert results == {n: "ok" for n in nodes}
    with BaselineStore(path) as st:
        assert st.nodes() == tuple(nodes)
    assert_fsck_clean(path)


def test_disk_full_while_mirroring_reports_landed_and_a_retry_is_not_tag_exists(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with BaselineStore(path) as st:
        st.save([snapshot_for("node-a")], tag="v1")

    def full_disk(point: str) -> None:
        if point == "worktree-partial":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    snaps = [snapshot_for("node-a", rocm="6.2.0"), snapshot_for("node-b", rocm="6.2.0")]
    with BaselineStore(path) as st:
        sha = st.save(snaps, tag="v2", _hook=full_disk)
        assert len(st.warnings) == 1
        assert f"saved {sha[:12]}, but mirroring it into the working tree failed (" in st.warnings[0]
        assert "No space left on device" in st.warnings[0]
        assert st.load("node-a", "v2").software.rocm_version == "6.2.0"  # landed, and readable at the tag
    with BaselineStore(path) as st:  # the operator retries the same save after freeing space
        assert st.save(snaps, tag="v2") == sha
        assert st.warnings == [f"tag 'v2' already holds exactly these baselines (at {sha[:12]})"]
    assert git(path, "status", "--porcelain") == ""  # the retry caught the mirror up
    with BaselineStore(path) as st, pytest.raises(TagExistsError):
        st.save([snapshot_for("node-a", rocm="6.3.0")], tag="v2")  # different content: still immutable
    assert_fsck_clean(path)


@pytest.fixture
def moved(tmp_path: Path) -> Path:
    """A store whose tag v1 was moved by hand onto the commit of v2."""
    path = tmp_path / "store"
    with BaselineStore(path) as st:
        st.save([snapshot_for("node-a")], tag="v1")
        st.save([snapshot_for("node-a", rocm="6.2.0")], tag="v2")
    git(path, "tag", "-f", "v1", "v2")
    return path


def test_a_tag_moved_by_hand_is_refused_on_read(moved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_MOVED_TAG_ENV, raising=False)
    with BaselineStore(moved) as st:
        assert st.load("node-a", "v2").software.rocm_version == "6.2.0"  # the untouched tag reads
        with pytest.raises(MovedTagError, match=r"tag 'v1' points at [0-9a-f]{12}, which upgrade-gate did not save"):
            st.load("node-a", "v1")
        with pytest.raises(MovedTagError):
            st.nodes("v1")
    with BaselineStore(moved, allow_moved_tag=True) as st:
        assert st.load("node-a", "v1").software.rocm_version == "6.2.0"


@pytest.mark.parametrize("ref", ["v1", "refs/tags/v1", "tags/v1", "v1~0", "v1^{commit}", "v1^0", "tags/v1@{0}"])
def test_every_way_of_naming_a_moved_tag_is_refused(moved: Path, monkeypatch: pytest.MonkeyPatch, ref: str) -> None:
    # break test 2026-12-07: `--ref tags/v1`, `v1~0` and `v1^{commit}` read the moved tag unchecked
    monkeypatch.delenv(ALLOW_MOVED_TAG_ENV, raising=False)
    with BaselineStore(moved) as st:
        try:
            st.nodes(ref)
        except MovedTagError as exc:
            assert "tag 'v1' points at" in str(exc)
        except NotFoundError:
            assert "@{" in ref  # a reflog the reader does not resolve: refused all the same, never read
        else:
            pytest.fail(f"{ref!r} read a moved tag")
        assert st.nodes("tags/v2~0") == ("node-a",)  # an untouched tag reads however it is named


def test_a_branch_beside_a_moved_tag_still_reads(moved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_MOVED_TAG_ENV, raising=False)
    git(moved, "branch", "audit", "v2")
    with BaselineStore(moved) as st:
        assert st.nodes("audit") == ("node-a",)  # nothing was promised about a branch
        assert st.nodes("heads/audit~0") == ("node-a",)


@pytest.mark.parametrize(("value", "allowed"), [("1", True), ("yes", True), ("TRUE", True), ("0", False),
                                                ("false", False), ("no", False), ("", False)])  # fmt: skip
def test_allow_moved_tag_env_reads_yes_and_no(
    moved: Path, monkeypatch: pytest.MonkeyPatch, value: str, allowed: bool
) -> None:
    # break test 2026-12-07: UPGRADE_GATE_ALLOW_MOVED_TAG=false allowed the moved tag (any value but "0" did)
    monkeypatch.setenv(ALLOW_MOVED_TAG_ENV, value)
    with BaselineStore(moved) as st:
        if allowed:
            assert st.load("node-a", "v1").software.rocm_version == "6.2.0"
        else:
            with pytest.raises(MovedTagError):
                st.load("node-a", "v1")


def test_allow_moved_tag_env_refuses_a_value_that_is_neither(moved: Path, tmp_path: Path) -> None:
    cand = tmp_path / "cand.json"
    write_snapshot(snapshot_for("node-a"), cand)
    env = env_with(**{ALLOW_MOVED_TAG_ENV: "maybe"})
    args = ["gate", "--store", str(moved), "--ref", "v2", "--candidate", str(cand)]
    proc = subprocess.run([sys.executable, "-m", "upgrade_gate", *args], capture_output=True, text=True, env=env)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    assert f"{ALLOW_MOVED_TAG_ENV}='maybe': expected 1, true or yes" in one_error_line(proc.stderr)


def test_a_moved_tag_exits_3_through_the_cli_unless_allowed(moved: Path, tmp_path: Path) -> None:
    cand = tmp_path / "cand.json"
    write_snapshot(snapshot_for("node-a"), cand)
    env = env_with()
    env.pop(ALLOW_MOVED_TAG_ENV, None)
    args = ["gate", "--store", str(moved), "--ref", "v1", "--candidate", str(cand)]
    proc = subprocess.run([sys.executable, "-m", "upgrade_gate", *args], capture_output=True, text=True, env=env)
    assert proc.returncode == ExitCode.BAD_INPUT
    assert "--allow-moved-tag" in one_error_line(proc.stderr)
    proc = subprocess.run(
        [sys.executable, "-m", "upgrade_gate", "--allow-moved-tag", *args], capture_output=True, text=True, env=env
    )
    assert proc.returncode in (ExitCode.PASS, ExitCode.BLOCK), proc.stderr


def test_log_messages_do_not_show_the_tag_trailer(tmp_path: Path) -> None:
    with BaselineStore(tmp_path / "s") as st:
        st.save([snapshot_for("node-a")], tag="v1", message="before the change")
        assert [e.message for e in st.log("node-a")] == ["before the change"]


@pytest.mark.parametrize("command", [["baseline", "list"], ["baseline", "save", "SNAP"]])
def test_no_git_on_path_is_one_line_exit_4(tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "store"
    with BaselineStore(path) as st:
        st.save([snapshot_for("node-a")])
    snap = tmp_path / "s.json"
    write_snapshot(snapshot_for("node-b"), snap)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    args = [a.replace("SNAP", str(snap)) for a in command] + ["--store", str(path)]
    env = env_with(PATH=str(empty))
    env.pop("GIT_PYTHON_REFRESH", None)
    proc = subprocess.run([sys.executable, "-m", "upgrade_gate", *args], capture_output=True, text=True, env=env)
    assert proc.returncode == ExitCode.ENVIRONMENT, proc.stderr
    assert "the git binary is not on PATH" in one_error_line(proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_store_older_than_the_tag_trailer_still_reads_its_tags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tags of a store saved before tagged saves carried the trailer read as they are; the first tagged
    save adopts them where they stand, so they keep reading, and a later move of one is refused."""
    monkeypatch.delenv(ALLOW_MOVED_TAG_ENV, raising=False)
    path = tmp_path / "store"
    with BaselineStore(path) as st:
        st.save([snapshot_for("node-a")])
    git(path, "tag", "legacy")  # what an older upgrade-gate wrote: a tag, no trailer
    with BaselineStore(path) as st:
        assert st.load("node-a", "legacy").software.rocm_version is not None
        st.save([snapshot_for("node-a", rocm="6.2.0")], tag="v2")
    with BaselineStore(path) as st:
        assert st.load("node-a", "legacy").software.rocm_version is not None  # adopted where it stood
    git(path, "tag", "-f", "legacy", "v2")
    with BaselineStore(path) as st, pytest.raises(MovedTagError):
        st.load("node-a", "legacy")  # moved after adoption
