"""The decoded-baseline cache beside the store's git objects (store.decoded): a read from it is the saved
baseline, and anything wrong with an entry is a miss that reads git (checked by object id) instead."""

from __future__ import annotations

import shutil
import threading
import zlib
from pathlib import Path

import msgspec
import pytest

from tests.judge_scenarios import named_snapshot, three_node_store
from upgrade_gate import cachekey
from upgrade_gate.model import ClassReference, Snapshot, replace
from upgrade_gate.store import decoded
from upgrade_gate.store.decoded import DecodedCache
from upgrade_gate.store.gitstore import BaselineStore


@pytest.fixture(autouse=True)
def own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's own cache key (`cachekey`), not the account's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    cachekey.forget()


@pytest.fixture
def store(tmp_path: Path, own_key: None) -> BaselineStore:
    return three_node_store(tmp_path / "store")


def _blob(store: BaselineStore, node: str, pin: str) -> bytes:
    return store._open().commit(pin).tree["nodes"][f"{node}.json"].binsha  # type: ignore[no-any-return]


def _cache(store: BaselineStore) -> DecodedCache:
    return DecodedCache(Path(store._open().git_dir))


def test_save_fills_the_cache_and_a_read_from_it_is_the_schema_checked_load(store: BaselineStore) -> None:
    pin = store.pin()
    cache = _cache(store)
    for node in store.nodes(pin):
        entry = cache.entry(Snapshot, _blob(store, node, pin))
        assert entry.is_file() and entry.stat().st_size < 20_000  # ~8.6 KB against a ~130 KB document
        assert cache.get(Snapshot, _blob(store, node, pin)) == store.load(node, pin)
        assert BaselineStore(store.path).load_trusted(node, pin) == store.load(node, pin)
    assert not store.warnings


def test_the_cache_lives_in_the_git_folder_never_in_the_working_tree_or_a_commit(store: BaselineStore) -> None:
    repo = store._open()
    assert _cache(store).root.is_relative_to(Path(repo.git_dir))
    assert not repo.git.status("--porcelain", "--ignored")
    assert all(not p.startswith("upgrade-gate") for p in repo.git.ls_files().splitlines())


def test_a_gate_without_a_cache_reads_git_and_fills_it(store: BaselineStore) -> None:
    pin = store.pin()
    shutil.rmtree(_cache(store).root)
    fresh = BaselineStore(store.path)
    assert fresh.load_trusted("node-1", pin) == store.load("node-1", pin)
    assert _cache(store).get(Snapshot, _blob(store, "node-1", pin)) == store.load("node-1", pin)


def test_a_cached_read_is_the_saved_baseline_even_when_its_git_object_was_damaged_since(
    store: BaselineStore,
) -> None:
    """The entry was decoded from the bytes saved (named by their object id), so a later change of the
    loose object cannot change what a gate reads; `git fsck` is what finds a damaged object."""
    pin = store.pin()
    expected = store.load("node-1", pin)
    repo = store._open()
    blob = repo.commit(pin).tree / "nodes" / "node-1.json"
    path = Path(repo.git_dir) / "objects" / blob.hexsha[:2] / blob.hexsha[2:]
    path.chmod(0o644)
    path.write_bytes(zlib.compress(zlib.decompress(path.read_bytes()).replace(b'"node-1"', b'"node-9"', 1)))
    assert BaselineStore(store.path).load_trusted("node-1", pin) == expected


def _columns_changed(body: bytes, column: str) -> bytes:
    """The entry's record with its measurement columns made inconsistent (our own MAC over it, so only
    the column checks of `model.columnar.from_wire` stand between it and the judge)."""
    record = msgspec.msgpack.decode(_unpacked(body))
    cols = next(c for c in (record["measurements"], *(p["measurements"] for p in record["phases"])) if c["keys"])
    if column == "keys":
        cols["keys"] = cols["keys"][:-1]
    else:
        cols["sweep"] = [len(cols["sweeps"]), *cols["sweep"][1:]]
    return decoded.pack(msgspec.msgpack.encode(record))


def _as_v1_record(body: bytes) -> bytes:
    """The entry's snapshot in the per-measurement (v1) form an earlier release kept."""
    from upgrade_gate.model.columnar import SnapshotV2, from_wire

    wire = msgspec.msgpack.decode(_unpacked(body), type=SnapshotV2)
    return decoded.pack(msgspec.msgpack.encode(from_wire(wire, where="test")))


def test_an_entry_holds_the_snapshot_in_its_columnar_v2_form(store: BaselineStore) -> None:
    """Each sweep's settings once and the samples as columns (~half the decode of one object per
    measurement); read back, it is the model's `Snapshot` the store saved."""
    from upgrade_gate.model.columnar import SnapshotV2

    pin = store.pin()
    blob = _blob(store, "node-1", pin)
    body = _body(_cache(store).entry(Snapshot, blob).read_bytes())
    wire = msgspec.msgpack.decode(_unpacked(body), type=SnapshotV2)
    columns = (wire.measurements, *(p.measurements for p in wire.phases))
    assert wire.schema_version == "2" and sum(len(c.keys) for c in columns) > 0
    assert _cache(store).get(Snapshot, blob) == store.load("node-1", pin)
    assert decoded.fingerprint(Snapshot) != decoded.fingerprint(ClassReference)


def _unpacked(body: bytes) -> bytes:
    raw = decoded.unpack(body)
    assert raw is not None
    return raw


def _unsized(raw: bytes) -> bytes:
    """`raw` as a Zstandard frame that does not state its size (so nothing bounds it before inflating)."""
    import zstandard

    return zstandard.ZstdCompressor(write_content_size=False).compress(raw)


def _other_record() -> bytes:
    return msgspec.msgpack.encode({"node": {"name": 7}})


def _sealed(blob: bytes, body: bytes) -> bytes:
    """An entry for `blob` around `body` with a header that checks out (so the checks after it run)."""
    return DecodedCache(Path("unused")).seal(Snapshot, blob, body)


def _body(entry: bytes) -> bytes:
    return entry[decoded._HEADER :]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda blob, data: b"", id="empty"),
        pytest.param(lambda blob, data: data[: len(data) // 2], id="truncated"),
        pytest.param(lambda blob, data: data[:100] + bytes([data[100] ^ 0x40]) + data[101:], id="one-bit-flipped"),
        pytest.param(lambda blob, data: data[:30] + bytes([data[30] ^ 1]) + data[31:], id="mac-changed"),
        pytest.param(lambda blob, data: b"XXXX" + data[4:], id="not-an-entry"),
        pytest.param(lambda blob, data: _sealed(b"\1" * 20, _body(data)), id="written-for-another-blob"),
        pytest.param(lambda blob, data: _sealed(blob, b"not zstd at all"), id="not-zstd"),
        pytest.param(lambda blob, data: _sealed(blob, zlib.compress(_unpacked(_body(data)), 1)), id="a-zlib-body"),
        pytest.param(lambda blob, data: _sealed(blob, _unsized(_unpacked(_body(data)))), id="a-frame-without-its-size"),
        pytest.param(lambda blob, data: _sealed(blob, decoded.pack(b"\xc1garbage")), id="not-msgpack"),
        pytest.param(lambda blob, data: _sealed(blob, decoded.pack(_other_record())), id="another-record"),
        pytest.param(
            lambda blob, data: _sealed(blob, decoded.pack(_unpacked(_body(data))[:-1])),
            id="decoded-short-by-a-byte",
        ),
        pytest.param(lambda blob, data: _sealed(blob, _body(data) + b"\0"), id="trailing-byte"),
        pytest.param(lambda blob, data: _sealed(blob, _body(data) + _body(data)), id="two-streams"),
        pytest.param(lambda blob, data: _sealed(blob, _body(data)[:-4]), id="stream-cut-short"),
        pytest.param(lambda blob, data: _sealed(blob, _columns_changed(_body(data), "keys")), id="a-column-short"),
        pytest.param(lambda blob, data: _sealed(blob, _columns_changed(_body(data), "sweep")), id="a-sweep-not-there"),
        pytest.param(lambda blob, data: _sealed(blob, _as_v1_record(_body(data))), id="per-measurement-form"),
    ],
)
def test_a_damaged_entry_is_a_miss_read_from_git_and_written_again(store: BaselineStore, damage) -> None:  # type: ignore[no-untyped-def]
    pin = store.pin()
    expected = store.load("node-2", pin)
    blob = _blob(store, "node-2", pin)
    entry = _cache(store).entry(Snapshot, blob)
    entry.chmod(0o644)
    entry.write_bytes(damage(blob, entry.read_bytes()))
    assert _cache(store).get(Snapshot, blob) is None
    assert BaselineStore(store.path).load_trusted("node-2", pin) == expected
    assert _cache(store).get(Snapshot, blob) == expected  # written again


def test_an_entry_holds_its_blob_id_and_a_mac_and_is_read_only(store: BaselineStore) -> None:
    pin = store.pin()
    blob = _blob(store, "node-0", pin)
    entry = _cache(store).entry(Snapshot, blob)
    data = entry.read_bytes()
    assert data[:4] == decoded.MAGIC and data[4:24] == blob and data == _sealed(blob, _body(data))
    assert entry.stat().st_mode & 0o777 == 0o444


def test_a_baseline_msgpack_cannot_hold_is_not_cached_and_still_saved_and_read(tmp_path: Path) -> None:
    """An integer beyond 64 bits is valid JSON and valid for the schema; msgpack cannot encode it."""
    snap = named_snapshot("node-big")
    snap = replace(snap, gpus=(replace(snap.gpus[0], vram_total_mib=2**70), *snap.gpus[1:]))
    store = BaselineStore(tmp_path / "store")
    sha = store.save([snap], message="big")
    assert not store.warnings
    assert _cache(store).get(Snapshot, _blob(store, "node-big", sha)) is None
    again = BaselineStore(store.path)
    assert again.load_trusted("node-big", sha) == store.load("node-big", sha)
    assert again.load_trusted("node-big", sha).gpus[0].vram_total_mib == 2**70


def test_a_save_drops_another_releases_entries(store: BaselineStore) -> None:
    root = _cache(store).root
    other = root / "snapshot-0123456789abcdef" / "ab"
    other.mkdir(parents=True)
    (other / "cd").write_bytes(b"an old release's entry")
    mine = sorted(p.name for p in root.iterdir() if p.name != "snapshot-0123456789abcdef")
    store.save([named_snapshot("node-8", seed=8)], message="one more")
    assert sorted(p.name for p in root.iterdir()) == mine


@pytest.mark.parametrize(("bound", "limit"), [("MAX_ENTRY_BYTES", 1000), ("MAX_DECODED_BYTES", 10_000)])
def test_an_entry_beyond_the_read_bounds_is_a_miss(
    store: BaselineStore, monkeypatch: pytest.MonkeyPatch, bound: str, limit: int
) -> None:
    pin = store.pin()
    monkeypatch.setattr(decoded, bound, limit)  # an 8.6 KB entry inflating to ~62 KB, over both
    assert _cache(store).get(Snapshot, _blob(store, "node-0", pin)) is None
    assert BaselineStore(store.path).load_trusted("node-0", pin) == store.load("node-0", pin)


@pytest.mark.parametrize("kind", ["fifo", "link", "folder"])
def test_an_entry_that_is_not_a_regular_file_is_a_miss_without_waiting(store: BaselineStore, kind: str) -> None:
    import os

    pin = store.pin()
    entry = _cache(store).entry(Snapshot, _blob(store, "node-0", pin))
    saved = entry.read_bytes()
    entry.unlink()  # read-only, in a folder that is not
    if kind == "fifo":
        os.mkfifo(entry)  # opening it for reading would wait for a writer: never opened that way
    elif kind == "link":
        (entry.parent / "elsewhere").write_bytes(saved)
        entry.symlink_to(entry.parent / "elsewhere")
    else:
        entry.mkdir()
    assert _cache(store).get(Snapshot, _blob(store, "node-0", pin)) is None
    assert BaselineStore(store.path).load_trusted("node-0", pin) == store.load("node-0", pin)


def test_a_cache_that_cannot_be_written_only_makes_misses(store: BaselineStore) -> None:
    root = _cache(store).root
    shutil.rmtree(root.parent)
    root.parent.write_text("in the way\n", encoding="utf-8")  # no folder can be made under it
    sha = store.save([named_snapshot("node-7", seed=7)], message="one more")
    assert not store.warnings  # the save landed; a cache miss later loses nothing
    again = BaselineStore(store.path)
    assert again.load_trusted("node-7", sha) == store.load("node-7", sha)
    assert root.parent.read_text(encoding="utf-8") == "in the way\n"


def test_concurrent_writers_of_one_entry_leave_it_whole(store: BaselineStore) -> None:
    pin = store.pin()
    value = store.load("node-0", pin)
    blob = _blob(store, "node-0", pin)
    shutil.rmtree(_cache(store).root)
    caches = [_cache(store) for _ in range(8)]
    threads = [threading.Thread(target=c.put, args=(Snapshot, blob, value)) for c in caches for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entry = _cache(store).entry(Snapshot, blob)
    assert _cache(store).get(Snapshot, blob) == value
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]  # no temporary file left behind


def test_threads_packing_and_unpacking_at_once_read_back_what_was_written() -> None:
    """Threads of one process pack and unpack at once (a shared zstandard compressor or decompressor
    crashed the process: they are not thread-safe); every body reads back as written."""
    records = [msgspec.msgpack.encode({"n": n, "pad": bytes(range(256)) * (40 + n)}) for n in range(16)]
    bodies = [decoded.pack(r) for r in records]
    wrong: list[int] = []

    def work(n: int) -> None:
        for i in range(1000):
            k = (n + i) % len(records)
            if decoded.unpack(bodies[k]) != records[k] or decoded.unpack(decoded.pack(records[k])) != records[k]:
                wrong.append(k)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_the_fingerprint_names_the_record_the_package_version_and_the_model_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import upgrade_gate

    snapshot = decoded.fingerprint(Snapshot)
    assert snapshot != decoded.fingerprint(ClassReference)
    assert snapshot.startswith("snapshot-")
    for change in (
        lambda: monkeypatch.setattr(upgrade_gate, "__version__", "0.0.0-other"),
        lambda: monkeypatch.setattr(decoded, "_model_source", lambda: b"a default changed in the model"),
    ):
        decoded.fingerprint.cache_clear()
        change()
        try:
            assert decoded.fingerprint(Snapshot) != snapshot  # another model never reads this one's entries
        finally:
            monkeypatch.undo()
            decoded.fingerprint.cache_clear()
    assert decoded.fingerprint(Snapshot) == snapshot


def test_the_blob_id_is_gits(store: BaselineStore) -> None:
    pin = store.pin()
    repo = store._open()
    blob = repo.commit(pin).tree / "nodes" / "node-0.json"
    assert decoded.blob_id(blob.data_stream.read()) == blob.binsha
