"""`baseline migrate` (issue 29): a store's v1 baselines rewritten as schema v2 in one commit, on real
git repositories; tags and history untouched, a concurrent save never overwritten, a bad baseline
committing nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_schema_v2 import rich_snapshot
from tests.test_store_gitstore import assert_fsck_clean, git
from tests.test_store_inert import _ran
from upgrade_gate.cli.main import run
from upgrade_gate.errors import InputError
from upgrade_gate.model import Snapshot, Software, replace
from upgrade_gate.snapshot.io import dumps_snapshot
from upgrade_gate.store.gitstore import BaselineStore

pytest_plugins = ["tests.test_store_inert"]  # planted

NODES = ("node-a", "node-b", "node-c")


def _v1_save(st: BaselineStore, snaps: list[Snapshot], *, tag: str | None = None) -> str:
    """A save as a release before schema v2 made it: the v1 canonical bytes, committed by the store."""
    files = {f"nodes/{s.node.name}.json": dumps_snapshot(s).encode() for s in snaps}
    sha = st._write(lambda: files, f"save {len(snaps)} node(s) (v1)", tag=tag)
    assert sha is not None
    return sha


def _version(store: Path, node: str, ref: str = "HEAD") -> str:
    return str(json.loads(git(store, "show", f"{ref}:nodes/{node}.json"))["schema_version"])


@pytest.fixture
def v1_store(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    with BaselineStore(store) as st:
        _v1_save(st, [rich_snapshot(n) for n in NODES], tag="rocm-6.1.3")
    assert {_version(store, n) for n in NODES} == {"1"}
    return store


def test_migrate_rewrites_every_v1_baseline_in_one_commit(v1_store: Path) -> None:
    before = git(v1_store, "rev-parse", "HEAD").strip()
    with BaselineStore(v1_store) as st:
        done = st.migrate()
        assert done.commit is not None and done.migrated == NODES and done.already == 0 and done.raced == ()
        assert st.warnings == []
        for node in NODES:
            assert st.load(node) == rich_snapshot(node)  # the same baseline, now v2
            assert st.load(node, "rocm-6.1.3") == rich_snapshot(node)  # the tag still names the v1 commit
            assert st.load_trusted(node, st.pin()) == rich_snapshot(node)
    assert git(v1_store, "rev-parse", "HEAD~1").strip() == before  # one commit on top, history kept
    assert git(v1_store, "rev-parse", "rocm-6.1.3^{commit}").strip() == before
    assert {_version(v1_store, n) for n in NODES} == {"2"}
    assert {_version(v1_store, n, "rocm-6.1.3") for n in NODES} == {"1"}
    assert "to snapshot schema v2" in git(v1_store, "log", "-1", "--format=%s")
    assert git(v1_store, "status", "--porcelain") == ""  # the working tree mirrors the commit
    assert (v1_store / "nodes" / "node-a.json").read_text() == dumps_snapshot(rich_snapshot("node-a"), version="2")
    assert_fsck_clean(v1_store)


def test_migrate_twice_is_a_no_op_and_a_mixed_store_migrates_only_v1(v1_store: Path) -> None:
    with BaselineStore(v1_store) as st:
        st.save([rich_snapshot("node-d")])  # a save of this release writes v2
        done = st.migrate()
        assert done.migrated == NODES and done.already == 1
        head = st.pin()
        again = st.migrate()
        assert again.commit is None and again.migrated == () and again.already == 4
        assert st.pin() == head


def test_a_migrate_with_nothing_to_migrate_catches_up_a_mirror_a_killed_writer_left(v1_store: Path) -> None:
    """SIGKILL between the ref move and the end of the working-tree mirror leaves the index and files of the
    commit before (nothing signal-deferral can stop); `migrate` said "nothing to migrate" and left them, so a
    `git commit -a` in the store would have committed a revert (break test 2026-12-07)."""
    with BaselineStore(v1_store) as st:
        st.migrate()
        head = st.pin()
    git(v1_store, "read-tree", "HEAD~1")  # the index and the files of the commit before, as the kill left them
    git(v1_store, "checkout-index", "-a", "-f")
    assert git(v1_store, "status", "--porcelain") != ""
    with BaselineStore(v1_store) as st:
        again = st.migrate()
        assert again.commit is None and again.migrated == () and st.pin() == head
    assert git(v1_store, "status", "--porcelain") == ""
    assert {json.loads((v1_store / "nodes" / f"{n}.json").read_text())["schema_version"] for n in NODES} == {"2"}
    assert_fsck_clean(v1_store)


def test_a_save_that_lands_during_the_migration_wins(v1_store: Path) -> None:
    upgraded = replace(rich_snapshot("node-b"), software=Software(rocm_version="6.2.0"))

    def save_meanwhile(point: str) -> None:
        if point == "streamed":  # every baseline read and rewritten, the lock not yet taken
            with BaselineStore(v1_store) as other:
                other.save([upgraded])

    with BaselineStore(v1_store) as st:
        done = st.migrate(_hook=save_meanwhile)
        assert done.raced == ("node-b",) and done.migrated == ("node-a", "node-c")
        assert st.load("node-b") == upgraded  # not the older baseline the migration had read
        assert st.load("node-a") == rich_snapshot("node-a")
    assert {_version(v1_store, n) for n in NODES} == {"2"}
    assert_fsck_clean(v1_store)


def test_a_baseline_that_does_not_decode_commits_nothing(v1_store: Path) -> None:
    with BaselineStore(v1_store) as st:
        bad = dumps_snapshot(rich_snapshot("node-z")).encode()  # node-z's snapshot filed as node-y
        st._write(lambda: {"nodes/node-y.json": bad}, "hand-made")
        head = st.pin()
        with pytest.raises(InputError, match=r"nodes/node-y.json@[0-9a-f]{12}: holds node 'node-z'"):
            st.migrate()
        assert st.pin() == head
    assert _version(v1_store, "node-a") == "1"


def test_cli_baseline_migrate(v1_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["baseline", "migrate", "--store", str(v1_store)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"migrated 3 baseline(s) in {v1_store} to schema v2 as ") and "(0 already v2)" in out
    assert run(["baseline", "migrate", "--store", str(v1_store)]) == 0
    assert capsys.readouterr().out == f"nothing to migrate in {v1_store}: 3 baseline(s), all schema v2\n"
    # a baseline edited by hand into something the schema refuses: exit 3, one line naming it
    with BaselineStore(v1_store) as st:
        doc = json.loads(dumps_snapshot(rich_snapshot("node-e")))
        doc["gpus"][0]["index"] = -1
        st._write(lambda: {"nodes/node-e.json": json.dumps(doc).encode()}, "hand-edited")
    assert run(["baseline", "migrate", "--store", str(v1_store)]) == 3
    err = capsys.readouterr().err.strip()
    assert "nodes/node-e.json@" in err and len(err.splitlines()) == 1
    assert run(["baseline", "migrate", "--store", str(v1_store.parent / "none")]) == 4


def test_migrate_runs_nothing_the_store_names(planted: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Hooks, filters and fsmonitor planted in the store's config (tests/test_store_inert.py) stay inert."""
    store, marks = planted
    with BaselineStore(store) as st:
        _v1_save(st, [rich_snapshot("node-q")])
    assert _ran(marks) == []
    assert run(["baseline", "migrate", "--store", str(store)]) == 0
    assert "migrated 1 baseline(s)" in capsys.readouterr().out
    assert _ran(marks) == []
    assert _version(store, "node-q") == "2"
    assert_fsck_clean(store)
