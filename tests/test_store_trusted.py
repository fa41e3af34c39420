"""The store's fast read path: its own tree parser, and trusted loads checked by git object id."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from git.objects.fun import tree_entries_from_data

from tests.judge_scenarios import named_snapshot, three_node_store
from upgrade_gate.errors import InputError, StoreError
from upgrade_gate.store import gitobjects
from upgrade_gate.store.gitstore import BaselineStore


@pytest.fixture
def store(tmp_path: Path) -> BaselineStore:
    return three_node_store(tmp_path / "store")


def _gitpython(data: bytes) -> dict[str, tuple[bytes, int]]:
    return {name: (sha, mode) for sha, mode, name in tree_entries_from_data(data)}


def _tree(*entries: tuple[bytes, bytes]) -> bytes:
    sha = hashlib.sha1(b"x").digest()
    return b"".join(mode + b" " + name + b"\0" + sha for mode, name in entries)


def test_store_tree_parser_reads_a_real_store_like_gitpython(store: BaselineStore) -> None:
    repo = store._open()
    root = repo.head.commit.tree
    for sha in (root.binsha, (root / "nodes").binsha):
        data = repo.odb.stream(sha).read()
        assert gitobjects.parse_tree(data) == _gitpython(data)
    assert ".gitkeep" in gitobjects.parse_tree(repo.odb.stream((root / "nodes").binsha).read())


@pytest.mark.parametrize(
    "entries",
    [
        [(b"100644", "nöde.json".encode()), (b"100644", b"a b.json")],  # not plain: gitpython's parser
        [(b"40000", b"sub"), (b"100755", b"run.sh"), (b"120000", b"link"), (b"160000", b"module")],
        [(b"100644", b".gitkeep"), (b"100644", b".gitattributes")],
        [(b"100600", b"old-mode.json")],  # a mode git no longer writes, which gitpython reads
    ],
)
def test_store_tree_parser_agrees_with_gitpython_on_odd_but_valid_trees(entries: list[tuple[bytes, bytes]]) -> None:
    data = _tree(*entries)
    assert gitobjects.parse_tree(data) == _gitpython(data)


@pytest.mark.parametrize(
    "entries",
    [
        [(b"100644", b"..")],
        [(b"40000", b".git")],
        [(b"40000", b".GIT.")],  # NTFS drops trailing dots: still .git
        [(b"100644", b"ok.json"), (b"40000", b"git~1")],
        [(b"120000", b".gitmodules")],  # a link aliasing the submodule configuration
        [(b"100644", b"a/b.json")],
        [(b"170000", b"odd-mode.json")],
    ],
)
def test_store_tree_parser_refuses_what_gitpython_refuses(entries: list[tuple[bytes, bytes]]) -> None:
    data = _tree(*entries)
    with pytest.raises(ValueError):
        _gitpython(data)
    with pytest.raises(ValueError):
        gitobjects.parse_tree(data)


def test_store_tree_parser_refuses_a_truncated_tree() -> None:
    data = _tree((b"100644", b"a.json"), (b"100644", b"b.json"))[:-3]
    with pytest.raises(ValueError):
        gitobjects.parse_tree(data)


def test_store_load_trusted_is_the_schema_checked_load(store: BaselineStore) -> None:
    pin = store.pin()
    for node in store.nodes(pin):
        assert store.load_trusted(node, pin) == store.load(node, pin)


def _without_decoded_cache(store: BaselineStore) -> None:
    """Reads go to git: the store as cloned elsewhere (the decoded cache is not cloned; store.decoded)."""
    shutil.rmtree(Path(store._open().git_dir) / "upgrade-gate")


def test_store_load_trusted_refuses_a_blob_whose_content_was_changed(store: BaselineStore) -> None:
    pin = store.pin()
    repo = store._open()
    _without_decoded_cache(store)
    blob = repo.commit(pin).tree / "nodes" / "node-1.json"
    path = Path(repo.git_dir) / "objects" / blob.hexsha[:2] / blob.hexsha[2:]
    raw = zlib.decompress(path.read_bytes())
    forged = raw.replace(b'"node-1"', b'"node-9"', 1)
    assert len(forged) == len(raw) and forged != raw
    path.chmod(0o644)
    path.write_bytes(zlib.compress(forged))
    with pytest.raises(InputError, match="does not match its git object id"):
        BaselineStore(store.path).load_trusted("node-1", pin)


def _edit_by_hand(store: BaselineStore, node: str, edit: Callable[[dict[str, Any]], None]) -> None:
    """Edit `nodes/<node>.json` in the working tree and commit it with git itself, not `save`."""
    path = store.path / "nodes" / f"{node}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    subprocess.run(
        ["git", "-C", str(store.path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "by hand"],
        check=True,
    )


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        ("unknown", r"unknown field `surprise` - at `\$.gpus\[0\]`"),
        ("missing", r"missing required field `serial` - at `\$.gpus\[1\]`"),
        ("severity", r"Invalid enum value 'FATAL' - at `\$.events\[0\].severity`"),
    ],
)
def test_store_load_trusted_checks_a_baseline_committed_by_hand_as_the_schema_path_does(
    store: BaselineStore, edit: str, says: str
) -> None:
    """A commit need not come from `save` (an edit committed by hand, a pull from a shared remote): `gate`'s
    read refuses what `baseline show` refuses. It used to decode such a blob leniently: an unknown field
    dropped, a required one defaulted, a severity outside the enum kept (and the result cached)."""
    from upgrade_gate.errors import SchemaError

    pin = store.pin()
    assert store.load_trusted("node-1", pin) is not None  # a cached entry for the saved blob: not reused below

    def change(data: dict[str, Any]) -> None:
        if edit == "unknown":
            data["gpus"][0]["surprise"] = 1
        elif edit == "missing":
            del data["gpus"][1]["serial"]
        else:
            data["events"] = [{"kind": "amdgpu.gpu_reset", "severity": "FATAL", "bdf": None, "line_no": 1, "text": "x"}]

    _edit_by_hand(store, "node-1", change)
    with BaselineStore(store.path) as again:
        edited = again.pin()
        with pytest.raises(SchemaError, match=says):
            again.load_trusted("node-1", edited)
        with pytest.raises(SchemaError, match=r"node-1\.json"):
            again.load("node-1", edited)  # `baseline show`'s read, for comparison
        assert again.load_trusted("node-1", pin) == store.load("node-1", pin)  # the saved one is still fine


def test_store_load_trusted_reads_a_valid_baseline_committed_by_hand(store: BaselineStore) -> None:
    """A hand edit the schema accepts reads (strictly, once) and is then cached like a saved one."""
    from upgrade_gate.store.decoded import DecodedCache

    _edit_by_hand(store, "node-2", lambda data: data["gpus"][0].update(vbios="113-M3000100-HAND"))
    with BaselineStore(store.path) as again:
        pin = again.pin()
        snap = again.load_trusted("node-2", pin)
        assert snap.gpus[0].vbios == "113-M3000100-HAND" and snap == again.load("node-2", pin)
        blob = again._open().commit(pin).tree / "nodes" / "node-2.json"
        assert (
            isinstance(again._cache, DecodedCache) and again._cache.get(type(snap), bytes.fromhex(blob.hexsha)) == snap
        )


def test_store_load_trusted_refuses_an_object_that_is_not_a_blob(store: BaselineStore) -> None:
    pin = store.pin()
    repo = store._open()
    _without_decoded_cache(store)
    blob = repo.commit(pin).tree / "nodes" / "node-2.json"
    path = Path(repo.git_dir) / "objects" / blob.hexsha[:2] / blob.hexsha[2:]
    body = zlib.decompress(path.read_bytes()).partition(b"\0")[2]
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"blob 7\0" + body))  # a header that lies about the size
    with pytest.raises((InputError, StoreError), match="not a blob object"):
        BaselineStore(store.path).load_trusted("node-2", pin)


def test_store_load_trusted_reads_packed_objects_after_git_gc(store: BaselineStore) -> None:
    pin = store.pin()
    expected = store.load("node-0", pin)
    _without_decoded_cache(store)
    store.close()
    subprocess.run(["git", "-C", str(store.path), "gc", "-q", "--prune=now"], check=True)
    loose = list((store.path / ".git" / "objects").glob("??/*"))
    assert not loose  # everything packed
    with BaselineStore(store.path) as again:
        assert again.load_trusted("node-0", pin) == expected


def test_store_saved_class_reference_reads_trusted_as_the_schema_checked_document(store: BaselineStore) -> None:
    from upgrade_gate.store.aggregate import (
        aggregate_class,
        class_reference_from_document,
        class_reference_to_document,
    )
    from upgrade_gate.store.inputs import saved_references

    pin = store.pin()
    reference = aggregate_class("mi300x", [store.load(n, pin) for n in store.nodes(pin)])
    store.write_document(
        "classes/mi300x.json", class_reference_to_document(reference), "class", schema="class-reference"
    )
    pin = store.pin()
    checked = class_reference_from_document(
        store.read_document("classes/mi300x.json", pin, schema="class-reference"), source="t"
    )
    assert store.load_trusted_document(type(reference), "classes/mi300x.json", pin) == checked == reference
    assert saved_references(store, pin) == {"mi300x": reference}


def test_store_pinned_to_a_sha_that_is_no_commit_is_not_found(store: BaselineStore) -> None:
    from upgrade_gate.errors import NotFoundError

    repo = store._open()
    blob = repo.head.commit.tree / "store.json"
    with pytest.raises(NotFoundError, match="no commit"):
        store.load_trusted("node-0", blob.hexsha)


def test_store_gate_starts_git_only_for_gitpythons_version_check(store: BaselineStore, tmp_path: Path) -> None:
    import os
    import shutil
    import sys

    from upgrade_gate.snapshot.io import write_snapshot

    real = shutil.which("git")
    assert real is not None
    log = tmp_path / "git.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {real} "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    paths = []
    for i in range(3):
        path = tmp_path / f"node-{i}.json"
        write_snapshot(named_snapshot(f"node-{i}", seed=i + 1), path)
        paths.append(path)
    store.close()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    argv = [sys.executable, "-m", "upgrade_gate", "gate", "--store", str(store.path)]
    argv += [a for p in paths for a in ("--candidate", str(p))]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    assert set(log.read_text(encoding="utf-8").splitlines()) == {"version"}  # gitpython's import-time check
