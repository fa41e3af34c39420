"""The git baseline store: save, list, show, log, diff, tags, denylist and documents on real repos."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from upgrade_gate.errors import InputError, NotFoundError, SchemaError, StoreError, UsageError
from upgrade_gate.model import (
    Bdf,
    Gpu,
    GpuSerial,
    Measurement,
    Nic,
    NodeInfo,
    NodeName,
    Snapshot,
    Software,
    SriovFunction,
    replace,
)
from upgrade_gate.store.gitstore import BaselineStore, TagExistsError

BDFS = ("0000:05:00.0", "0000:15:00.0", "0000:65:00.0", "0000:75:00.0")


def snapshot_for(
    node: str,
    *,
    rocm: str = "6.1.3",
    node_class: str = "mi300x-4gpu",
    bdfs: tuple[str, ...] = BDFS,
    smc: str = "00.85.112.00",
    numvfs: int = 8,
    busbw: tuple[float, ...] = (350.0, 352.0, 349.0),
) -> Snapshot:
    """A small schema-valid snapshot built from the model (serials derive from node and slot)."""
    gpus = tuple(
        Gpu(
            index=i,
            bdf=Bdf(bdf),
            serial=GpuSerial(f"{node}-{bdf[5:7]}"),
            product_name="AMD Instinct MI300X",
            firmware={"SMC": smc, "PSP_SOSDRV": "00.36.02.59"},
            vbios="113-M3000100-102",
        )
        for i, bdf in enumerate(bdfs)
    )
    return Snapshot(
        node=NodeInfo(name=NodeName(node), node_class=node_class),
        taken_at="2026-11-30T09:00:00Z",
        tool_version="0.1.0",
        software=Software(kernel="6.8.0-45-generic", driver_version="6.8.5", rocm_version=rocm),
        gpus=gpus,
        nics=(Nic(name="ionic_0", bdf=Bdf("0000:06:00.0"), fw_ver="1.90.0", vendor_part_id="4106"),),
        sriov=(SriovFunction(bdf=Bdf("0000:06:00.0"), numvfs=numvfs, totalvfs=16),),
        measurements=(
            Measurement(
                key="mesh/all_reduce/avg_busbw",
                unit="GB/s",
                samples=busbw,
                settings={"min_bytes": "1024", "max_bytes": "2147483648", "step_factor": "2"},
            ),
        ),
    )


def git(path: Path, *args: str) -> str:
    """Run git in the store and return stdout (raises on failure)."""
    return subprocess.run(["git", *args], cwd=path, check=True, capture_output=True, text=True).stdout


def assert_fsck_clean(path: Path) -> None:
    """`git fsck` passes with no error lines (dangling objects from a killed save are allowed)."""
    res = subprocess.run(["git", "fsck", "--no-dangling"], cwd=path, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    for word in ("error", "missing", "corrupt", "bad"):
        assert word not in (res.stdout + res.stderr).lower(), res.stdout + res.stderr


@pytest.fixture
def store(tmp_path: Path) -> Iterator[BaselineStore]:
    with BaselineStore(tmp_path / "store") as st:
        yield st


def test_store_save_writes_one_commit_and_file_per_node(store: BaselineStore) -> None:
    a, b = snapshot_for("node-a"), snapshot_for("node-b")
    sha = store.save([a, b], tag="rocm-6.1.3", message="first baselines")
    assert store.nodes() == ("node-a", "node-b")
    assert store.load("node-a") == a
    assert store.load("node-b", "rocm-6.1.3") == b
    assert store.load("node-b", sha) == b
    assert git(store.path, "rev-parse", "HEAD").strip() == sha
    assert git(store.path, "log", "--format=%s").splitlines() == [
        "first baselines",
        "initialise upgrade-gate baseline store",
    ]
    assert git(store.path, "status", "--porcelain") == ""  # the working tree mirrors HEAD
    assert (store.path / "nodes" / "node-a.json").read_text() == git(store.path, "show", "HEAD:nodes/node-a.json")
    assert_fsck_clean(store.path)


def test_store_save_is_canonical_and_stable(store: BaselineStore) -> None:
    from upgrade_gate.snapshot.io import dumps_snapshot

    snap = snapshot_for("node-a")
    store.save([snap])
    # the store writes schema v2, the columnar form (issue 29)
    assert git(store.path, "show", "HEAD:nodes/node-a.json") == dumps_snapshot(snap, version="2")
    store.save([snap])  # an unchanged save is still one commit, with an empty diff
    assert git(store.path, "diff", "HEAD~1", "HEAD") == ""


def test_store_log_lists_node_history_with_tags(store: BaselineStore) -> None:
    first = store.save([snapshot_for("node-a"), snapshot_for("node-b")], tag="rocm-6.1.3")
    second = store.save([snapshot_for("node-a", rocm="6.2.0")], tag="rocm-6.2.0", message="upgrade a")
    store.save([snapshot_for("node-b", rocm="6.2.0")])
    log = store.log("node-a")
    assert [e.sha for e in log] == [second, first]
    assert log[0].tags == ("rocm-6.2.0",) and log[0].message == "upgrade a"
    assert log[1].tags == ("rocm-6.1.3",)
    assert log[0].date.endswith("Z")
    assert len(store.log("node-b")) == 2


def test_store_diff_refs_returns_both_baselines(store: BaselineStore) -> None:
    store.save([snapshot_for("node-a")], tag="before")
    store.save([snapshot_for("node-a", rocm="6.2.0")], tag="after")
    old, new = store.diff_refs("node-a", "before", "after")
    assert (old.software.rocm_version, new.software.rocm_version) == ("6.1.3", "6.2.0")
    assert store.load("node-a", "HEAD~1") == old


def test_store_schema_invalid_snapshot_is_refused_before_anything_is_written(store: BaselineStore) -> None:
    store.save([snapshot_for("node-a")])
    head = git(store.path, "rev-parse", "HEAD")
    good = snapshot_for("node-b")
    bad = replace(snapshot_for("node-c"), gpus=(Gpu(index=0, bdf=Bdf("0000:C1:00.0")),))
    objects_before = git(store.path, "count-objects", "-v")
    with pytest.raises(SchemaError, match="node-c"):
        store.save([good, bad])
    assert git(store.path, "rev-parse", "HEAD") == head
    assert git(store.path, "count-objects", "-v") == objects_before
    assert not (store.path / "nodes" / "node-b.json").exists()
    assert store.nodes() == ("node-a",)


def test_store_schema_invalid_snapshot_creates_no_store(tmp_path: Path) -> None:
    bad = replace(snapshot_for("node-c"), gpus=(Gpu(index=0, bdf=Bdf("0000:C1:00.0")),))
    with pytest.raises(SchemaError):
        BaselineStore(tmp_path / "new").save([bad])
    assert not (tmp_path / "new").exists()


def test_store_existing_tag_is_refused_and_nothing_moves(store: BaselineStore) -> None:
    sha = store.save([snapshot_for("node-a")], tag="rocm-6.1.3")
    with pytest.raises(TagExistsError, match=r"rocm-6\.1\.3") as err:
        store.save([snapshot_for("node-a", rocm="6.2.0")], tag="rocm-6.1.3")
    assert err.value.exit_code == 3
    assert git(store.path, "rev-parse", "HEAD").strip() == sha
    assert store.load("node-a").software.rocm_version == "6.1.3"


@pytest.mark.parametrize("tag", ["-x", "a..b", "x.lock", "a b", "a/b", ""])
def test_store_invalid_tag_is_a_usage_error(store: BaselineStore, tag: str) -> None:
    with pytest.raises(UsageError):
        store.save([snapshot_for("node-a")], tag=tag)


def test_store_unknown_node_and_ref_raise_not_found(store: BaselineStore) -> None:
    store.save([snapshot_for("node-a")])
    with pytest.raises(NotFoundError, match="node-z"):
        store.load("node-z")
    with pytest.raises(NotFoundError, match="no-such-tag"):
        store.load("node-a", "no-such-tag")
    with pytest.raises(NotFoundError, match="no-such-tag"):
        store.nodes("no-such-tag")
    with pytest.raises(NotFoundError, match="node-z"):
        store.log("node-z")
    with pytest.raises(InputError, match="not a valid node name"):
        store.load("../etc/passwd")


def test_store_duplicate_node_in_one_save_is_refused(store: BaselineStore) -> None:
    with pytest.raises(InputError, match="twice"):
        store.save([snapshot_for("node-a"), snapshot_for("node-a", rocm="6.2.0")])


def test_store_reads_the_committed_tree_not_the_working_tree(store: BaselineStore) -> None:
    snap = snapshot_for("node-a")
    store.save([snap])
    (store.path / "nodes" / "node-a.json").write_text('{"half": ')
    (store.path / "nodes" / "node-x.json").write_text("{}")
    assert store.load("node-a") == snap
    assert store.nodes() == ("node-a",)


def test_store_corrupt_committed_baseline_fails_schema_on_read(store: BaselineStore) -> None:
    store.save([snapshot_for("node-a")])
    (store.path / "nodes" / "node-a.json").write_text('{"schema_version": "1"}\n')
    git(store.path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "hand edit")
    with pytest.raises(SchemaError, match=r"node-a\.json"):
        store.load("node-a")


def test_store_paths_that_are_not_stores_raise_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    other = tmp_path / "other-repo"
    other.mkdir()
    git(other, "init", "-q")
    git(other, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x")
    for path in (tmp_path / "file", tmp_path / "full", other):
        with pytest.raises(StoreError, match=str(path)) as err:
            BaselineStore(path).save([snapshot_for("node-a")])
        assert err.value.exit_code == 4
    with pytest.raises(StoreError, match="no baseline store"):
        BaselineStore(tmp_path / "absent").nodes()
    with pytest.raises(StoreError, match="not a git repository"):
        BaselineStore(tmp_path / "full").load("node-a")


def test_store_a_clone_is_recognised_as_a_store(store: BaselineStore, tmp_path: Path) -> None:
    snap = snapshot_for("node-a")
    store.save([snap], tag="v1")
    subprocess.run(["git", "clone", "-q", str(store.path), str(tmp_path / "clone")], check=True)
    with BaselineStore(tmp_path / "clone") as clone:
        assert clone.load("node-a", "v1") == snap
        clone.save([snapshot_for("node-b")])
        assert clone.nodes() == ("node-a", "node-b")


def test_store_empty_directory_becomes_a_store(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with BaselineStore(tmp_path / "empty") as st:
        st.init()
        st.init()  # idempotent
        assert st.nodes() == ()
        assert (tmp_path / "empty" / "nodes").is_dir()
        assert git(st.path, "config", "user.name").strip() == "upgrade-gate"


def test_store_denylist_keeps_the_first_entry(store: BaselineStore) -> None:
    store.init()
    assert store.denylist() == {}
    first = store.deny("SN123", "ECC uncorrectable in phase 1", "node-a", now="2026-11-30T10:00:00Z")
    again = store.deny("SN123", "second failure", "node-b")
    assert again == first
    store.deny("SN007", "ring timeout")
    denied = store.denylist()
    assert sorted(denied) == ["SN007", "SN123"]
    assert denied[GpuSerial("SN123")].node == "node-a"
    assert denied[GpuSerial("SN007")].node is None
    assert git(store.path, "log", "--format=%s").count("deny GPU") == 2


def test_store_deny_refuses_bad_values(store: BaselineStore) -> None:
    with pytest.raises(SchemaError):
        store.deny("  ", "reason")
    with pytest.raises(InputError, match="node name"):
        store.deny("SN1", "reason", "Bad_Node")


def test_store_documents_round_trip_and_reserved_names(store: BaselineStore) -> None:
    store.write_document("windows/w-1.json", {"state": "open", "canaries": ["node-a"]}, "open window w-1")
    assert store.read_document("windows/w-1.json") == {"state": "open", "canaries": ["node-a"]}
    assert store.documents("windows") == ("windows/w-1.json",)
    assert store.documents("classes") == ()
    with pytest.raises(NotFoundError):
        store.read_document("windows/none.json")
    for name in ("nodes/node-a.json", "store.json", "denylist.json", "../x.json", "windows/x.txt"):
        with pytest.raises(InputError):
            store.write_document(name, {}, "x")
    with pytest.raises(SchemaError):
        store.write_document("classes/c.json", {"node_class": "c"}, "x", schema="class-reference")


def test_store_trees_follow_git_ordering(store: BaselineStore) -> None:
    for name in ("a/x.json", "a.json", "a-b/x.json", "a0.json"):
        store.write_document(name, {"name": name}, f"write {name}")
    res = subprocess.run(["git", "fsck", "--strict"], cwd=store.path, capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout + res.stderr == ""
    assert git(store.path, "ls-tree", "--name-only", "HEAD").split()[:4] == ["README.md", "a-b", "a.json", "a"]
    assert store.read_document("a/x.json") == {"name": "a/x.json"}
    assert git(store.path, "status", "--porcelain") == ""


def test_store_with_a_broken_marker_is_not_a_store(store: BaselineStore) -> None:
    store.save([snapshot_for("node-a")])
    (store.path / "store.json").write_text('{"kind": "something-else", "schema_version": "1"}\n')
    git(store.path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "hand edit")
    with pytest.raises(StoreError, match="not an upgrade-gate baseline store"):
        BaselineStore(store.path).nodes()
