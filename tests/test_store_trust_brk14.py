"""The store is not trusted by its location (brk14): a tag is read exactly and must be on the store's
branch, and a git folder that is not the store's own, or holds links or FIFOs where git reads or writes,
is refused (exit 3) before anything is read or written. Real repositories throughout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cli_exit_codes import env_with, one_error_line
from tests.test_store_gitstore import git, snapshot_for
from upgrade_gate.errors import ExitCode, InputError
from upgrade_gate.snapshot.io import write_snapshot
from upgrade_gate.store.gitstore import ALLOW_MOVED_TAG_ENV, BaselineStore, MovedTagError


@pytest.fixture(autouse=True)
def _no_moved_tag_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_MOVED_TAG_ENV, raising=False)


def _store(path: Path, rocm: str = "6.1.3") -> Path:
    with BaselineStore(path) as st:
        st.save([snapshot_for("node-a", rocm=rocm)], tag="v1", message="before the change")
    return path


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return _store(tmp_path / "store")


@pytest.fixture
def forged(tmp_path: Path, store: Path) -> str:
    """The head of another store saved under the same tag `v1` (its message carries the trailer), its
    objects fetched into `store` but referenced by nothing there."""
    other = _store(tmp_path / "other", rocm="9.9.9")
    git(store, "fetch", "-q", str(other), "refs/heads/main:refs/tmp-forged")
    git(store, "update-ref", "-d", "refs/tmp-forged")
    return git(other, "rev-parse", "main").strip()


def _gate(store: Path, tmp_path: Path, *extra: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cand = tmp_path / "cand.json"
    write_snapshot(snapshot_for("node-a"), cand)
    env = env_with()
    env.pop(ALLOW_MOVED_TAG_ENV, None)
    args = [*extra, "gate", "--store", str(store), "--ref", "v1", "--candidate", str(cand)]
    return subprocess.run(
        [sys.executable, "-m", "upgrade_gate", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def _save(store: Path, tmp_path: Path, tag: str = "v2") -> subprocess.CompletedProcess[str]:
    snap = tmp_path / "node-b.json"
    write_snapshot(snapshot_for("node-b"), snap)
    args = ["baseline", "save", str(snap), "--store", str(store), "--tag", tag, "-m", "x"]
    return subprocess.run([sys.executable, "-m", "upgrade_gate", *args], capture_output=True, text=True, env=env_with())


# ---------------------------------------------------------------- 01: a tag moved off the store's branch


def test_a_tag_moved_to_another_stores_commit_with_the_same_trailer_is_refused(store: Path, forged: str) -> None:
    (store / ".git" / "refs" / "tags" / "v1").write_text(forged + "\n")
    with BaselineStore(store) as st, pytest.raises(MovedTagError, match="not in the history of the store's branch"):
        st.load("node-a", "v1")
    with BaselineStore(store, allow_moved_tag=True) as st:  # --allow-moved-tag keeps its meaning
        assert st.load("node-a", "v1").software.rocm_version == "9.9.9"


def test_a_moved_tag_off_the_branch_exits_3_through_the_gate(store: Path, forged: str, tmp_path: Path) -> None:
    (store / ".git" / "refs" / "tags" / "v1").write_text(forged + "\n")
    proc = _gate(store, tmp_path)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    assert "--allow-moved-tag" in one_error_line(proc.stderr)
    assert _gate(store, tmp_path, "--allow-moved-tag").returncode in (ExitCode.PASS, ExitCode.BLOCK)


def test_a_tag_on_the_branch_history_still_reads(store: Path) -> None:
    with BaselineStore(store) as st:
        st.save([snapshot_for("node-a", rocm="6.2.0")], tag="v2")
        st.save([snapshot_for("node-a", rocm="6.3.0")])
        assert st.load("node-a", "v1").software.rocm_version == "6.1.3"
        assert st.load("node-a", "tags/v2~0").software.rocm_version == "6.2.0"
        assert [e.tags for e in st.log("node-a")] == [(), ("v2",), ("v1",)]


# ---------------------------------------------------------------- 02: a ref that shadows the tag


@pytest.mark.parametrize("shadow", ["v1", "refs/v1", "tags/v1"])
@pytest.mark.parametrize("packed", [False, True], ids=["loose", "packed"])
def test_a_ref_that_git_reads_before_the_tag_is_refused(store: Path, forged: str, shadow: str, packed: bool) -> None:
    if packed:
        git(store, "pack-refs", "--all")
    (store / ".git" / shadow).parent.mkdir(parents=True, exist_ok=True)
    (store / ".git" / shadow).write_text(forged + "\n")
    ref = "tags/v1" if shadow == "tags/v1" else "v1"
    with BaselineStore(store) as st, pytest.raises(InputError, match=r"names the tag refs/tags/v1, but git reads") as e:
        st.load("node-a", ref)
    assert str(store) in str(e.value) and f"'{ref}'" in str(e.value)


def test_a_packed_tag_reads_exactly(store: Path) -> None:
    git(store, "pack-refs", "--all")
    assert not (store / ".git" / "refs" / "tags" / "v1").exists()
    with BaselineStore(store) as st:
        assert st.load("node-a", "v1").software.rocm_version == "6.1.3"
        assert st.nodes("refs/tags/v1") == ("node-a",)


def test_a_stray_ref_beside_the_tags_is_not_read_in_place_of_a_missing_tag(store: Path, forged: str) -> None:
    (store / ".git" / "refs" / "gone").write_text(forged + "\n")
    with BaselineStore(store) as st, pytest.raises(InputError, match="neither a tag, a branch nor HEAD"):
        st.load("node-a", "gone")


# ---------------------------------------------------------------- 03: a broken tag ref


@pytest.mark.parametrize("content", ["", "  \n", "not a sha\n"])
def test_a_broken_tag_ref_is_bad_input_naming_the_file(store: Path, tmp_path: Path, content: str) -> None:
    ref = store / ".git" / "refs" / "tags" / "v1"
    ref.write_text(content)
    with BaselineStore(store) as st, pytest.raises(InputError, match=str(ref)):
        st.load("node-a", "v1")
    proc = _gate(store, tmp_path)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    assert str(ref) in one_error_line(proc.stderr)


# ---------------------------------------------------------------- 04/05: a git folder that is not the store's


def _redirected(tmp_path: Path, how: str) -> tuple[Path, Path]:
    """(a store folder whose git folder leads to `other`, other) for how in gitfile, symlink, commondir."""
    other = _store(tmp_path / "other", rocm="9.9.9")
    path = tmp_path / "store"
    if how == "commondir":
        _store(path)
        (path / ".git" / "commondir").write_text(f"{other / '.git'}\n")
        return path, other
    path.mkdir()
    shutil.copytree(other / "nodes", path / "nodes")
    for name in ("README.md", "store.json"):
        shutil.copy2(other / name, path / name)
    if how == "gitfile":
        (path / ".git").write_text(f"gitdir: {other / '.git'}\n")
    else:
        (path / ".git").symlink_to(other / ".git")
    return path, other


@pytest.mark.parametrize("how", ["gitfile", "symlink", "commondir"])
def test_a_git_folder_that_leads_elsewhere_is_refused_for_reads_and_writes(tmp_path: Path, how: str) -> None:
    path, other = _redirected(tmp_path, how)
    before = git(other, "for-each-ref")
    with BaselineStore(path) as st:
        with pytest.raises(InputError, match=r"\.git"):
            st.nodes("v1")
        with pytest.raises(InputError, match=r"\.git"):
            st.save([snapshot_for("node-b")], tag="v2")
    proc = _save(path, tmp_path)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    assert ("commondir" if how == "commondir" else "/.git:") in one_error_line(proc.stderr)
    assert git(other, "for-each-ref") == before  # nothing landed in the other repository
    assert _gate(path, tmp_path).returncode == ExitCode.BAD_INPUT


# ---------------------------------------------------------------- 06: a link where git writes


@pytest.mark.parametrize("link", ["logs/refs/heads/main", "logs/HEAD", "refs/tags"])
def test_a_save_writes_nothing_through_a_link_in_the_git_folder(store: Path, tmp_path: Path, link: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "target"
    where = store / ".git" / link
    if where.is_dir():  # the tags folder moved outside, the store's own tag with it
        shutil.copytree(where, target)
        shutil.rmtree(where)
    else:
        target.write_text("victim file\n")
        where.unlink(missing_ok=True)
    where.symlink_to(target)
    head = git(store, "rev-parse", "main")
    proc = _save(store, tmp_path)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    assert str(where) in one_error_line(proc.stderr)
    assert git(store, "rev-parse", "main") == head
    if link == "refs/tags":
        assert sorted(p.name for p in target.iterdir()) == ["v1"]
    else:
        assert target.read_text() == "victim file\n"


# ---------------------------------------------------------------- 07: a FIFO where git reads


@pytest.mark.parametrize("what", ["refs/tags/v1", "packed-refs", "config", "HEAD", "refs/heads/main"])
def test_a_fifo_in_the_git_folder_is_refused_at_once(store: Path, tmp_path: Path, what: str) -> None:
    fifo = store / ".git" / what
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    proc = _gate(store, tmp_path, timeout=30)  # it waited forever
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    assert str(fifo) in one_error_line(proc.stderr) and "FIFO" in proc.stderr


# ---------------------------------------------------------------- a config that includes another file


@pytest.mark.parametrize(
    "section", ["[include]\n\tpath = {}\n", '[includeIf "gitdir:/"]\n\tpath = {}\n', "  [INCLUDE ]\n\tpath={}\n"]
)
def test_a_config_that_includes_another_file_is_refused_before_git_reads_it(
    store: Path, tmp_path: Path, section: str
) -> None:
    """git-config(1) "Includes": git and gitpython read the named file wherever it is; a FIFO there hung
    them (the store tester's note of 2026-12-07). The FIFO makes the test's point: nothing opens it."""
    fifo = tmp_path / "elsewhere.fifo"
    os.mkfifo(fifo)
    config = store / ".git" / "config"
    config.write_text(config.read_text() + section.format(fifo))
    proc = _gate(store, tmp_path, timeout=30)
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    assert str(config) in one_error_line(proc.stderr) and "includes another file" in proc.stderr
    assert _save(store, tmp_path).returncode == ExitCode.BAD_INPUT
