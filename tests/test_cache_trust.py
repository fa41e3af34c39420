"""Caches are never trusted by location (issue 26, cases 1 and 2): every entry read back is sealed with
this user's key (`upgrade_gate.cachekey`), so a forged one is a miss and the verdict is the one the tool
reaches without a cache. The key file itself: created 0600 on first use, refused (caches off) when it is
a link, shared with group or others, another user's, or not 32 bytes."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import shutil
from pathlib import Path

import msgspec
import pytest

from tests.abi_support import AbiTrees, build_trees
from tests.judge_scenarios import named_snapshot
from upgrade_gate import cachekey, schemas
from upgrade_gate.abi import tree
from upgrade_gate.cachekey import CacheKey
from upgrade_gate.cli.main import run
from upgrade_gate.errors import ExitCode
from upgrade_gate.model import Snapshot, replace
from upgrade_gate.snapshot.io import write_snapshot
from upgrade_gate.store import decoded
from upgrade_gate.store.decoded import DecodedCache
from upgrade_gate.store.gitstore import BaselineStore

NOBODY = 65534
IS_ROOT = os.geteuid() == 0


@pytest.fixture(autouse=True)
def user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own `$XDG_CACHE_HOME` (and so its own key), read afresh."""
    folder = tmp_path / "user-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    monkeypatch.setenv("NO_COLOR", "1")
    cachekey.forget()
    schemas._fast_validator.cache_clear()
    yield folder
    cachekey.forget()
    schemas._fast_validator.cache_clear()


def _key_file(user_cache: Path) -> Path:
    return user_cache / "upgrade-gate" / cachekey.KEY_NAME


def _other_key(tmp_path: Path) -> CacheKey:
    """The key of another user of the same cache (who runs upgrade-gate too)."""
    return CacheKey(secret=hashlib.sha256(b"someone else").digest(), path=tmp_path / "theirs")


# --- case 1: the ABI cache, shared -------------------------------------------------------------------


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> AbiTrees:
    return build_trees(tmp_path_factory.mktemp("abi-trust"))


def _shared_folder(tmp_path: Path) -> Path:
    """A cache folder anyone may write (mode 0777), another user's where the test can make it so."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    if IS_ROOT:
        os.chown(shared, NOBODY, NOBODY)
    return shared


def _plant(path: Path, data: bytes) -> None:
    """Write `path` as the other user would: their file, mode 0666."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(0o666)
    if IS_ROOT:
        os.chown(path, NOBODY, NOBODY)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_abi_entry_forged_under_the_candidates_hash_does_not_turn_block_into_pass(
    trees: AbiTrees, tmp_path: Path
) -> None:
    """Issue 26, case 1: the running library's entry copied under the candidate library's hash (the hash
    inside edited to match) in a shared `--cache-dir` made `abi` exit 0 where it blocks without a cache."""
    argv = ["abi", "--running", str(trees.running), "--candidate", str(trees.v2)]
    assert run([*argv, "--no-cache"]) == ExitCode.BLOCK
    shared = _shared_folder(tmp_path)
    assert run([*argv, "--cache-dir", str(shared)]) == ExitCode.BLOCK  # fills the cache
    key = cachekey.user_key()
    assert key is not None
    mine = shared / f"key-{key.id}"
    forged = 0
    for name in ("libamdhip64.so.6.0.0", "librocm_smi64.so.1"):
        was, now = _sha(trees.running / name), _sha(trees.v2 / name)
        entry = (mine / was[:2] / f"{was}.abi").read_bytes()
        body = entry[tree._HEADER :].replace(was.encode(), now.encode())
        for data in (
            entry.replace(was.encode(), now.encode()),  # this user's own MAC, for the running library's hash
            tree.seal(_other_key(tmp_path), now, body),  # sealed by the other user, with their own key
            tree.ENTRY_MAGIC + hashlib.blake2b(body, digest_size=32).digest() + body,  # an unkeyed digest
        ):
            _plant(mine / now[:2] / f"{now}.abi", data)
            _plant(shared / now[:2] / f"{now}.json", bytes(body))  # and the abi-2 layout, bare JSON
            assert run([*argv, "--cache-dir", str(shared)]) == ExitCode.BLOCK
            forged += 1
    assert forged == 6
    assert run([*argv, "--cache-dir", str(shared)]) == ExitCode.BLOCK  # the entries rewritten are this user's


def test_abi_users_sharing_a_cache_folder_keep_their_own_entries(trees: AbiTrees, tmp_path: Path) -> None:
    shared = _shared_folder(tmp_path)
    files, _aliases, _not_elf = tree.library_files(trees.running)
    first, hits = tree.scan(files, cache_dir=shared, workers=1)
    assert hits == 0
    again, hits = tree.scan(files, cache_dir=shared, workers=1)
    assert (again, hits) == (first, len(files))
    key = cachekey.user_key()
    assert key is not None
    assert [p.name for p in shared.iterdir()] == [f"key-{key.id}"]
    assert all(p.read_bytes()[:4] == tree.ENTRY_MAGIC for p in shared.rglob("*.abi"))


@pytest.mark.parametrize("planted", ["link", "their-folder"])
def test_abi_key_folder_planted_in_a_shared_cache_is_not_written_through(
    trees: AbiTrees, tmp_path: Path, planted: str
) -> None:
    """The key id is visible in a shared folder: another user may plant a link (or a folder of theirs) at
    its name before this user's next run. The cache is then off for the run; nothing lands elsewhere."""
    shared = _shared_folder(tmp_path)
    key = cachekey.user_key()
    assert key is not None
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if planted == "link":
        (shared / f"key-{key.id}").symlink_to(elsewhere)
    else:
        if not IS_ROOT:
            pytest.skip("making a folder another user's needs root")
        (shared / f"key-{key.id}").mkdir(mode=0o777)
        os.chown(shared / f"key-{key.id}", NOBODY, NOBODY)
    files, _aliases, _not_elf = tree.library_files(trees.running)
    expected, _hits = tree.scan(files, cache_dir=None, workers=1)
    assert tree.scan(files, cache_dir=shared, workers=1) == (expected, 0)
    assert not list(elsewhere.iterdir()) and not list((shared / f"key-{key.id}").iterdir())


@pytest.mark.parametrize("kind", ["fifo", "link-to-dev-zero", "folder"])
def test_abi_entry_that_is_not_a_regular_file_is_a_miss_without_waiting(
    trees: AbiTrees, tmp_path: Path, kind: str
) -> None:
    """abi-2 read an entry with `read_bytes()`: a FIFO planted at its name hung `abi` for good, a link to
    /dev/zero exited 70 (MemoryError) after taking all the memory it could."""
    files, _aliases, _not_elf = tree.library_files(trees.running)
    cache = tmp_path / "cache"
    expected, _hits = tree.scan(files, cache_dir=cache, workers=1)
    for entry in cache.rglob("*.abi"):
        entry.unlink()
        if kind == "fifo":
            os.mkfifo(entry)
        elif kind == "folder":
            entry.mkdir()
        else:
            entry.symlink_to("/dev/zero")
    assert tree.scan(files, cache_dir=cache, workers=1) == (expected, 0)  # every entry a miss, read again


# --- case 2: the decoded baselines in the store's git folder -----------------------------------------


def _bios_store(tmp_path: Path) -> tuple[BaselineStore, Path]:
    """A store whose tag t1 holds node-0 at BIOS 1.2.3, and a candidate of node-0 at BIOS 1.2.4."""
    base = named_snapshot("node-0")
    base = replace(base, host=replace(base.host, captured=True, bios_version="1.2.3"))
    store = BaselineStore(tmp_path / "store")
    store.save([base], tag="t1", message="before the BIOS update")
    cand = tmp_path / "cand.json"
    write_snapshot(replace(base, host=replace(base.host, bios_version="1.2.4")), cand)
    return store, cand


def _forged_bodies(entry: bytes) -> bytes:
    """The entry's record with the candidate's BIOS in it, compressed as the cache does."""
    record = msgspec.msgpack.decode(decoded.unpack(entry[decoded._HEADER :]) or b"")
    record["host"]["bios_version"] = "1.2.4"
    return decoded.pack(msgspec.msgpack.encode(record))


def test_decoded_entry_forged_with_a_recomputed_digest_does_not_pass_a_changed_bios(tmp_path: Path) -> None:
    """Issue 26, case 2: an entry rewritten with the candidate's BIOS and its unkeyed digest recomputed made
    `gate --ref t1` exit 0 while `git fsck` and the tag check looked clean."""
    store, cand = _bios_store(tmp_path)
    argv = ["gate", "--store", str(store.path), "--ref", "t1", "--candidate", str(cand)]
    assert run(argv) == ExitCode.BLOCK
    pin = store.pin("t1")
    blob = store._open().commit(pin).tree["nodes"]["node-0.json"].binsha
    cache = DecodedCache(Path(store._open().git_dir))
    path = cache.entry(Snapshot, blob)
    saved = path.read_bytes()
    body = _forged_bodies(saved)
    for forged in (
        decoded.MAGIC + blob + hashlib.blake2b(body, digest_size=32).digest() + body,  # UGD1's digest
        b"UGD1" + blob + hashlib.blake2b(body, digest_size=32).digest() + body,  # UGD1 as it was
        decoded.MAGIC
        + blob
        + _other_key(tmp_path).mac(decoded.PURPOSE, path.parent.parent.name.encode(), blob, body)
        + body,  # sealed with another user's key
        saved[: decoded._HEADER] + body,  # this user's MAC, over another body
    ):
        path.chmod(0o644)
        path.write_bytes(forged)
        assert cache.get(Snapshot, blob) is None
        assert run(argv) == ExitCode.BLOCK
        assert cache.get(Snapshot, blob) == store.load("node-0", pin)  # a miss, read from git, written again
    assert run(["baseline", "show", "--store", str(store.path), "node-0@t1"]) == ExitCode.PASS


def test_decoded_entry_under_another_blobs_name_is_a_miss(tmp_path: Path) -> None:
    """An entry this user sealed for one blob, copied (blob id and all) under another blob's name."""
    store = BaselineStore(tmp_path / "store")
    store.save([named_snapshot("node-0"), named_snapshot("node-1", seed=2)], message="two")
    pin = store.pin()
    commit_tree = store._open().commit(pin).tree["nodes"]
    one, two = (commit_tree[f"node-{i}.json"].binsha for i in range(2))
    cache = DecodedCache(Path(store._open().git_dir))
    entry = cache.entry(Snapshot, one).read_bytes()
    target = cache.entry(Snapshot, two)
    target.chmod(0o644)
    target.write_bytes(entry.replace(one, two, 1))
    assert cache.get(Snapshot, two) is None
    assert BaselineStore(store.path).load_trusted("node-1", pin).node.name == "node-1"


def test_decoded_save_drops_the_unkeyed_layout_and_leaves_other_users_entries(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "store")
    store.save([named_snapshot("node-0")], message="one")
    cache = DecodedCache(Path(store._open().git_dir))
    old = cache.folder / decoded.fingerprint(Snapshot) / "ab"  # where UGD1 kept its entries
    old.mkdir(parents=True)
    (old / "cd").write_bytes(b"an unkeyed entry")
    theirs = cache.folder / "key-0123456789abcdef" / decoded.fingerprint(Snapshot)
    theirs.mkdir(parents=True)
    store.save([named_snapshot("node-1", seed=2)], message="two")
    assert sorted(p.name for p in cache.folder.iterdir()) == sorted([cache.root.name, "key-0123456789abcdef"])
    assert theirs.is_dir()


@pytest.mark.parametrize("link", ["upgrade-gate", "decoded", "key", "fingerprint"])
def test_decoded_cache_folder_that_is_a_link_is_neither_written_through_nor_pruned(tmp_path: Path, link: str) -> None:
    """A store handed over (a tarball, a shared folder) may carry links in its git folder. `baseline save`
    prunes other fingerprints' folders: through a link it removed every folder of wherever that pointed."""
    store = BaselineStore(tmp_path / "store")
    store.save([named_snapshot("node-0")], message="one")
    cache = DecodedCache(Path(store._open().git_dir))
    target = {
        "upgrade-gate": cache.folder.parent,
        "decoded": cache.folder,
        "key": cache.root,
        "fingerprint": cache.root / decoded.fingerprint(Snapshot),
    }[link]
    victim = tmp_path / "victim"
    (victim / "someone-elses-folder").mkdir(parents=True)
    (victim / "snapshot-0123456789abcdef").mkdir()  # even one named like a fingerprint
    (victim / "ab").mkdir()
    for name in ("someone-elses-folder", "snapshot-0123456789abcdef", "ab"):
        (victim / name / "keep-me").write_text("not the tool's\n", encoding="utf-8")
    before = sorted(str(p.relative_to(victim)) for p in victim.rglob("*"))
    shutil.rmtree(target)
    target.symlink_to(victim)
    sha = store.save([named_snapshot("node-1", seed=2)], message="two")
    assert sorted(str(p.relative_to(victim)) for p in victim.rglob("*")) == before
    again = BaselineStore(store.path)
    assert again.load_trusted("node-1", sha) == store.load("node-1", sha)
    assert sorted(str(p.relative_to(victim)) for p in victim.rglob("*")) == before


# --- the key file ----------------------------------------------------------------------------------


def test_a_missing_key_is_created_0600_in_a_private_folder_and_read_back(user_cache: Path) -> None:
    path = _key_file(user_cache)
    assert not path.exists()
    key = cachekey.user_key()
    assert key is not None and key.path == path and cachekey.refusal() is None
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert path.read_bytes() == key.secret and len(key.secret) == cachekey.KEY_BYTES
    assert [p.name for p in path.parent.iterdir()] == [cachekey.KEY_NAME]  # no temporary file left
    cachekey.forget()
    assert cachekey.user_key() == key  # the same key at the next run
    assert "secret" not in repr(key) and key.secret.hex() not in repr(key)


def _make_key(path: str, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    os.environ["XDG_CACHE_HOME"] = path
    cachekey.forget()
    key = cachekey.user_key()
    out.put(key.secret if key is not None else cachekey.refusal())


def test_concurrent_first_runs_agree_on_one_key(user_cache: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [ctx.Process(target=_make_key, args=(str(user_cache), out)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    secrets = {out.get(timeout=5) for _ in procs}
    assert secrets == {_key_file(user_cache).read_bytes()}


def _refusal_cases() -> list[object]:
    def link(path: Path) -> None:
        real = path.with_name("elsewhere")
        real.write_bytes(os.urandom(32))
        real.chmod(0o600)
        path.symlink_to(real)

    def mode(bits: int):  # type: ignore[no-untyped-def]
        def make(path: Path) -> None:
            path.write_bytes(os.urandom(32))
            path.chmod(bits)

        return make

    def short(path: Path) -> None:
        path.write_bytes(b"too short")
        path.chmod(0o600)

    def folder(path: Path) -> None:
        path.mkdir(mode=0o700)

    return [
        pytest.param(link, "a symbolic link", id="symlink"),
        pytest.param(mode(0o666), "mode 0666", id="world-writable"),
        pytest.param(mode(0o604), "mode 0604", id="world-readable"),
        pytest.param(mode(0o640), "mode 0640", id="group-readable"),
        pytest.param(short, "9 bytes, not 32", id="wrong-size"),
        pytest.param(folder, "not a regular file", id="folder"),
    ]


@pytest.mark.parametrize(("make", "why"), _refusal_cases())
def test_a_key_file_not_to_trust_is_refused_and_every_cache_is_off(  # type: ignore[no-untyped-def]
    user_cache: Path, tmp_path: Path, trees: AbiTrees, make, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused, not replaced: the file is not one this tool made as it stands (and replacing it would
    hide the tampering). Every cache is then off: nothing read, nothing written; verdicts unchanged."""
    path = _key_file(user_cache)
    path.parent.mkdir(parents=True)
    make(path)
    before = sorted((p.name, p.is_symlink()) for p in path.parent.iterdir())
    assert cachekey.user_key() is None
    refused = cachekey.refusal()
    assert refused is not None and refused.startswith(f"{path}: cache key refused ({why}") and "\n" not in refused
    assert sorted((p.name, p.is_symlink()) for p in path.parent.iterdir()) == before  # left as it was
    # the decoded-baseline cache
    store = BaselineStore(tmp_path / "store")
    store.save([named_snapshot("node-0")], message="one")
    assert not (Path(store._open().git_dir) / "upgrade-gate" / "decoded").exists()
    assert BaselineStore(store.path).load_trusted("node-0", store.pin()) == store.load("node-0", store.pin())
    # the gate says so too (the decoded-baseline cache is off): a warning, and the verdict unchanged
    candidate = tmp_path / "node-0.json"
    write_snapshot(named_snapshot("node-0"), candidate)
    capsys.readouterr()
    assert run(["gate", "--store", str(store.path), "--candidate", str(candidate)]) == ExitCode.PASS
    assert f"warning: {refused}" in capsys.readouterr().err
    # the ABI cache, through the CLI: the verdict, and a warning naming the key file
    cache = tmp_path / "abi-cache"
    argv = ["abi", "--running", str(trees.running), "--candidate", str(trees.v2), "--cache-dir", str(cache)]
    assert run(argv) == ExitCode.BLOCK
    assert f"warning: {refused}" in capsys.readouterr().err
    assert not cache.exists()
    # the compiled schema validators
    assert schemas._fast_validator("change-plan") is not None
    assert not (user_cache / "upgrade-gate" / "validators").exists()


@pytest.mark.skipif(not IS_ROOT, reason="making a file another user's needs root")
def test_a_key_file_owned_by_another_user_is_refused(user_cache: Path) -> None:
    path = _key_file(user_cache)
    path.parent.mkdir(parents=True)
    path.write_bytes(os.urandom(32))
    path.chmod(0o600)
    os.chown(path, NOBODY, NOBODY)
    assert cachekey.user_key() is None
    assert f"owned by uid {NOBODY}, not this user" in (cachekey.refusal() or "")


def test_a_key_folder_that_cannot_be_made_turns_caches_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("in the way\n", encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    cachekey.forget()
    assert cachekey.user_key() is None
    assert (cachekey.refusal() or "").endswith("(Not a directory); caches are off")


def test_the_mac_separates_caches_and_parts(tmp_path: Path) -> None:
    key = CacheKey(secret=bytes(range(32)), path=tmp_path / "k")
    assert key.mac(b"ug-decoded", b"x") != key.mac(b"ug-abi-entry", b"x")  # an entry of one cache is not another's
    assert key.mac(b"p", b"ab", b"c") != key.mac(b"p", b"a", b"bc")  # parts cannot be re-split
    assert key.verify(key.mac(b"p", b"a"), b"p", b"a") and not key.verify(bytes(32), b"p", b"a")
    assert _other_key(tmp_path).mac(b"p", b"a") != key.mac(b"p", b"a")
    assert key.id != _other_key(tmp_path).id and len(key.id) == 16
    with pytest.raises(ValueError, match="at most 16 bytes"):
        key.mac(b"a purpose that is too long", b"x")
