"""Compiled schema validators kept in the user's cache folder: same answers, never stale, never required."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from upgrade_gate import schemas
from upgrade_gate.errors import SchemaError

GOOD = {"id": "p1", "change": {"rocm": {"from": "6.1.3", "to": "6.2.0"}}}
BAD = {"id": "p1", "nope": 1}


@pytest.fixture(autouse=True)
def fresh_validators() -> Iterator[None]:
    schemas._fast_validator.cache_clear()
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
    return sorted((folder / "upgrade-gate" / "validators").glob("change-plan-*.bin"))


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


@pytest.mark.parametrize("where", ["entry", "folder"])
def test_schemas_cache_runs_no_entry_that_another_account_could_have_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A cache entry is code that `validate` runs: one in a folder, or a file, that group or others may
    write (a shared CI cache) is compiled afresh instead. A forged entry that accepts everything there
    used to turn every schema check into a pass."""
    import marshal

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    expected = _answers()
    (entry,) = _entries(tmp_path)
    forged = compile("def validate(data, custom_formats={}, name_prefix=None):\n    return data\n", "<forged>", "exec")
    entry.write_bytes(marshal.dumps(("validate", forged)))
    schemas._fast_validator.cache_clear()
    assert _answers()[1] is None  # the forged entry, where only this user can write, is this user's own doing
    (entry if where == "entry" else entry.parent).chmod(0o666 if where == "entry" else 0o777)
    schemas._fast_validator.cache_clear()
    assert _answers() == expected  # not run: BAD is refused again
