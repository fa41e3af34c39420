"""Issue 26, case 11 (the store's part): a tag git refuses is refused up front, a committed link where a
baseline should be is an error and not "no baseline", and a node name too long for a file name leaves
the working tree clean."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.test_store_gitstore import git, snapshot_for
from upgrade_gate.cli.main import run
from upgrade_gate.errors import ExitCode, InputError, StoreConflictError, StoreError
from upgrade_gate.snapshot.io import dumps_snapshot, write_snapshot
from upgrade_gate.store import layout
from upgrade_gate.store.gitstore import BaselineStore


@pytest.mark.parametrize("tag", ["x.", "rocm-6.2.", "a..b", "v1.lock", ".v1", "-v1", "v/1", "v 1", "v@{1}", "v~1"])
def test_a_tag_git_refuses_is_a_usage_error_before_anything_is_written(
    tmp_path: Path, tag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--tag x.` exited 4 with "another writer moved refs/heads/main" (git refused the name at the ref move)."""
    snap = tmp_path / "a.json"
    write_snapshot(snapshot_for("node-a"), snap)
    store = tmp_path / "store"
    assert run(["baseline", "save", str(snap), "--store", str(store), "--tag", tag]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and repr(tag) in err and "another writer" not in err
    assert not store.exists()


@pytest.mark.parametrize(
    "tag", ["x.", "x.y", "rocm-6.2.0", "a+b", "v1.lock.x", "A_b-9", "9", "x.lock", "a..b", "z" * 128]
)
def test_the_tag_rule_agrees_with_git_check_ref_format(tag: str) -> None:
    """What `layout.check_tag` accepts, git accepts as `refs/tags/<tag>` (never the other way round)."""
    git_ok = subprocess.run(["git", "check-ref-format", f"refs/tags/{tag}"], check=False).returncode == 0
    try:
        layout.check_tag(tag)
        ours = True
    except Exception:
        ours = False
    assert not ours or git_ok


def test_a_ref_move_git_refuses_for_another_reason_is_not_called_a_conflict(tmp_path: Path) -> None:
    """Only a compare-and-swap that lost is "another writer moved" (exit 4, retry helps); anything else
    git refuses is its own line (reached here below the name check, as a name git alone refuses would)."""
    with BaselineStore(tmp_path / "store") as st:
        st.save([snapshot_for("node-a")])
        with pytest.raises(StoreError) as err:
            st._write(lambda: {"windows/w.json": b"{}"}, "a document", tag="bad.")
        assert not isinstance(err.value, StoreConflictError)
        assert "git update-ref refused the new commit" in str(err.value) and "another writer" not in str(err.value)
        assert "bad." not in git(tmp_path / "store", "tag")


def _commit_link(store: Path, path: str, target: str) -> str:
    """Commit (by hand, with plain git plumbing) a symbolic link at `path` in place of a baseline file."""
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"], cwd=store, input=target, capture_output=True, text=True, check=True
    ).stdout.strip()
    git(store, "update-index", "--add", "--cacheinfo", f"120000,{blob},{path}")
    tree = git(store, "write-tree").strip()
    env_args = ["-c", "user.name=x", "-c", "user.email=x@x"]
    sha = subprocess.run(
        ["git", *env_args, "commit-tree", tree, "-p", "HEAD", "-m", "by hand"],
        cwd=store, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    git(store, "update-ref", "refs/heads/main", sha)
    return sha


def test_a_committed_link_where_a_baseline_should_be_is_bad_input_not_no_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    with BaselineStore(store) as st:
        st.save([snapshot_for("node-a"), snapshot_for("node-b")])
    sha = _commit_link(store, "nodes/node-a.json", "node-b.json")
    with BaselineStore(store) as st:
        with pytest.raises(InputError, match=r"nodes/node-a\.json@.*is a symbolic link in the committed tree"):
            st.load("node-a")
        with pytest.raises(InputError, match="is a symbolic link"):
            st.load_trusted("node-a", st.pin())
        with pytest.raises(InputError, match="is a symbolic link"):
            st.nodes()
        assert st.load("node-b").node.name == "node-b"
    for argv in (["baseline", "show", "node-a"], ["baseline", "list"], ["baseline", "show", f"node-a@{sha}"]):
        assert run([*argv, "--store", str(store)]) == ExitCode.BAD_INPUT
        err = capsys.readouterr().err
        assert "node-a.json" in err and "symbolic link" in err and "no baseline" not in err


def test_a_committed_link_in_place_of_the_denylist_fails_closed(tmp_path: Path) -> None:
    """A denylist.json that is a link read as "nothing denied" before: a denied GPU would have passed."""
    store = tmp_path / "store"
    with BaselineStore(store) as st:
        st.save([snapshot_for("node-a")])
        st.deny("SERIAL-1", "failed phase 3")
    _commit_link(store, "denylist.json", "/etc/passwd")
    with BaselineStore(store) as st, pytest.raises(InputError, match=r"denylist\.json@.*symbolic link"):
        st.denylist()


def test_a_node_name_too_long_for_a_file_name_leaves_the_working_tree_clean(tmp_path: Path) -> None:
    """253 characters (Kubernetes allows them) make a 258-byte file name, over Linux's 255: the save
    landed but the mirror failed on every save and `git status` showed the file deleted for good."""
    long = "n" + "-a" * 125 + "bc"
    assert len(long) == 253
    near = "m" * 240  # fits as a file, but not with the mirror's old `.<name>.<random>.tmp` temp name
    store = tmp_path / "store"
    with BaselineStore(store) as st:
        st.save([snapshot_for(long), snapshot_for(near), snapshot_for("node-a")], tag="t1")
        assert len(st.warnings) == 1 and f"nodes/{long}.json is committed but not mirrored" in st.warnings[0]
        assert st.load(long, "t1").node.name == long
    assert git(store, "status", "--porcelain") == ""
    assert (store / "nodes" / f"{near}.json").read_text() == dumps_snapshot(snapshot_for(near), version="2")
    with BaselineStore(store) as st:  # the next saves neither warn again nor dirty the tree
        st.save([snapshot_for("node-b")])
        assert st.warnings == []
        st.save([snapshot_for(long, rocm="6.2.0")], tag="t2")
        assert len(st.warnings) == 1
        assert st.load(long, "t2").software.rocm_version == "6.2.0"
    assert git(store, "status", "--porcelain") == ""
    assert sorted(p.name for p in store.glob("nodes/.*.tmp")) == []
