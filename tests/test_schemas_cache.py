"""Compiled schema validators kept in the user's cache folder: same answers, never stale, never required."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from upgrade_gate import cachekey, schemas
from upgrade_gate.errors import SchemaError

GOOD = {"id": "p1", "change": {"rocm": {"from": "6.1.3", "to": "6.2.0"}}}
BAD = {"id": "p1", "nope": 1}


@pytest.fixture(autouse=True)
def fresh_validators() -> Iterator[None]:
    schemas._fast_validator.cache_clear()
    cachekey.forget()
    yield
    schemas._fast_validator.cache_clear()


def _answers() -> tuple[str | None, str | None]:
    out: list[str | None] = []
    for doc in (GOOD, BAD):
        try:
            schemas.validate("change-plan", doc, source="plan.yaml")
            out.append(None)
        except SchemaError as exc:
            out.append(str(exc))
    return out[0], out[1]


def _entries(folder: Path) -> list[Path]:
    return sorted((folder / "upgrade-gate" / "validators").glob(f"change-plan-*.{schemas.ENTRY_SUFFIX}"))


def test_schemas_cache_gives_the_answers_of_a_fresh_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(schemas.NO_CACHE_ENV, "1")
    expected = _answers()
    assert expected[0] is None and expected[1] is not None and "nope" in expected[1]
    assert not _entries(tmp_path)
    schemas._fast_validator.cache_clear()
    monkeypatch.delenv(schemas.NO_CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _answers() == expected  # compiled, and kept
    (entry,) = _entries(tmp_path)
    schemas._fast_validator.cache_clear()
    assert _answers() == expected  # read back from the cache
    entry.write_bytes(b"not marshal data")
    schemas._fast_validator.cache_clear()
    assert _answers() == expected  # a broken entry is compiled again...
    assert entry.read_bytes() != b"not marshal data"  # ...and replaced


def test_schemas_cache_entry_is_named_by_the_schema_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    schemas._fast_validator("change-plan")
    schemas._fast_validator("policy")
    names = sorted(p.name.rsplit("-", 1)[0] for p in (tmp_path / "upgrade-gate" / "validators").iterdir())
    assert names == ["change-plan", "policy"]


def test_schemas_cache_folder_that_cannot_be_written_only_costs_speed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert _answers()[0] is None


def _no_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make a compile fail loudly: what follows must come from the cache."""
    import fastjsonschema

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("compiled instead of read from the cache")

    monkeypatch.setattr(fastjsonschema, "_factory", refuse)


@pytest.mark.parametrize("where", ["private", "entry", "folder"])
def test_schemas_cache_runs_no_entry_that_this_users_key_did_not_seal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A cache entry is code that `validate` runs. A forged entry that accepts everything used to be run
    from a folder only this user may write (and, before that, from a shared one), turning every schema
    check into a pass; now it is never run, wherever it lies and whatever the permissions (issue 26),
    and the entry is compiled and sealed again."""
    import marshal

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    expected = _answers()
    (entry,) = _entries(tmp_path)
    forged = compile("def validate(data, custom_formats={}, name_prefix=None):\n    return data\n", "<forged>", "exec")
    data = marshal.dumps(("validate", forged))
    sealed = entry.read_bytes()
    for bad in (data, sealed[: schemas._HEADER] + data, schemas.ENTRY_MAGIC + bytes(32) + data):
        entry.write_bytes(bad)  # bare (the .bin format), another entry's MAC, a made-up MAC
        if where != "private":
            (entry if where == "entry" else entry.parent).chmod(0o666 if where == "entry" else 0o777)
        schemas._fast_validator.cache_clear()
        assert _answers() == expected  # not run: BAD is refused
        assert entry.read_bytes()[:4] == schemas.ENTRY_MAGIC and forged.co_filename.encode() not in entry.read_bytes()
    with monkeypatch.context() as patched:
        _no_compile(patched)
        schemas._fast_validator.cache_clear()
        assert _answers() == expected  # the entry written in place of the forgery is this user's own


def test_schemas_cache_entry_sealed_by_this_users_key_is_run_from_a_shared_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MAC, not the folder's permissions, decides: a shared cache folder still saves the compile."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    expected = _answers()
    (entry,) = _entries(tmp_path)
    entry.parent.chmod(0o777)
    entry.chmod(0o666)
    _no_compile(monkeypatch)
    schemas._fast_validator.cache_clear()
    assert _answers() == expected


@pytest.mark.parametrize("cached", [False, True])
def test_compiling_a_validator_leaves_the_loaded_schema_as_shipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached: bool
) -> None:
    # fastjsonschema rewrites "$ref"s in place; on a cold cache that once changed load_schema's shared answer
    # (CI: the shipped snapshot-v2 schema no longer equalled its own generated text).
    import json

    from upgrade_gate import shipped

    if cached:
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    else:
        monkeypatch.setenv(schemas.NO_CACHE_ENV, "1")
    for name in ("snapshot-v2", "snapshot"):
        schemas._fast_validator(name)
        text = (shipped.folder("schemas") / f"{name}.schema.json").read_text(encoding="utf-8")
        assert schemas.load_schema(name) == json.loads(text)
