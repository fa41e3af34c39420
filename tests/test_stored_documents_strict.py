"""Documents read back from the store or the ABI cache are held to what their schema or writer promised.

- A date-time the schemas accept (RFC 3339: a leap second, lower-case `t`/`z`, `+hhmm`) parses; any
  other value is bad input (exit 3) naming the field, never an internal error (exit 70).
- A stored document whose content disagrees with its name (a window's candidate holding another
  node, `classes/<x>.json` holding class y) is bad input naming the file, never read as the other.
- An ABI cache entry is decoded strictly: any mismatch is a cache miss and the library is read again.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.abi_support import AbiTrees, build_trees
from tests.judge_scenarios import named_snapshot
from upgrade_gate import cachekey, schemas
from upgrade_gate.abi.tree import _HEADER, CACHE_FORMAT, library_files, scan, seal
from upgrade_gate.cli.main import run
from upgrade_gate.codec import DATE_TIME_PATTERN
from upgrade_gate.errors import ExitCode, InputError
from upgrade_gate.fleet.rollout import observation_due, parse_time, soak_status
from upgrade_gate.fleet.window_state import candidate_name, load_candidate, save_candidate
from upgrade_gate.model import ClassReference
from upgrade_gate.report.window_html import render_window_html
from upgrade_gate.snapshot.io import snapshot_to_dict
from upgrade_gate.store.aggregate import class_reference_to_document
from upgrade_gate.store.gitstore import BaselineStore
from upgrade_gate.store.inputs import saved_references

LEAP = "2026-06-30T23:59:60Z"


def _window(started_at: str, observations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "schema_version": "1", "id": "w1", "change_id": "rocm-6.2.0", "state": "soaking",
        "plan": {"id": "p", "source": "plan.yaml", "sha256": "0" * 64, "document": {}},
        "class_label": "upgrade-gate/class", "namespace": "upgrade-gate",
        "canaries": [{"node": "n1", "class": "mi300x", "idle": True, "busy_pods": []}],
        "classes": [], "excluded": [],
        "history": [{"action": "plan", "by": "alice", "at": "2026-06-30T10:00:00Z", "state": "planned"}],
        "soak": {"started_at": started_at, "duration_s": 3600, "every_s": 600, "min_observations": 2,
                 "mesh": False, "observations": observations or []},
    }  # fmt: skip


def _observation(at: str) -> dict[str, Any]:
    return {
        "at": at, "by": "cron", "verdict": "PASS",
        "nodes": {"n1": {"verdict": "PASS", "causes": []}},
        "metrics": {"n1": {"kernel_events": 0.0}},
    }  # fmt: skip


# --------------------------------------------------------------------------- date-times


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-06-30T10:00:00Z", datetime(2026, 6, 30, 10, 0, 0, tzinfo=UTC)),
        ("2026-06-30t10:00:00z", datetime(2026, 6, 30, 10, 0, 0, tzinfo=UTC)),
        ("2026-06-30T12:00:00+02:00", datetime(2026, 6, 30, 10, 0, 0, tzinfo=UTC)),
        ("2026-06-30T15:30:00+0530", datetime(2026, 6, 30, 10, 0, 0, tzinfo=UTC)),
        ("2026-06-30T10:00:00.25Z", datetime(2026, 6, 30, 10, 0, 0, 250000, tzinfo=UTC)),
        (LEAP, datetime(2026, 7, 1, 0, 0, 0, tzinfo=UTC)),  # a leap second folds into the next second
        ("2026-06-30t23:59:60.5z", datetime(2026, 7, 1, 0, 0, 0, 500000, tzinfo=UTC)),
    ],
)
def test_parse_time_reads_every_date_time_the_schema_accepts(text: str, expected: datetime) -> None:
    schemas.validate("window", _window(text), source="w1")  # the schema accepts it ...
    assert parse_time(text) == expected  # ... and so does the reader


@pytest.mark.parametrize(
    "text",
    [
        "2026-06-30T1\u1813:00:00Z",
        "2026-06-30T10:00:00",
        "2026-06-30 10:00:00Z",
        "2026-06-31T10:00:00Z",
        "2026-06-30T24:00:00Z",
        "yesterday",
        "",
    ],
)
def test_parse_time_refuses_what_is_not_rfc_3339_as_bad_input_naming_the_field(text: str) -> None:
    with pytest.raises(InputError, match=r"^soak\.started_at: .* is not an RFC 3339 date-time"):
        parse_time(text, where="soak.started_at")
    assert InputError.exit_code is ExitCode.BAD_INPUT


@settings(max_examples=300, deadline=None)
@given(st.from_regex(DATE_TIME_PATTERN, fullmatch=True))
def test_parse_time_is_one_rule_with_the_schema_pattern(text: str) -> None:
    """Whatever the pattern accepts parses; what no datetime can hold (year 0) is bad input, never a crash."""
    try:
        value = parse_time(text, where="f")
    except InputError as exc:
        assert str(exc).startswith("f: ")
        # not RFC 3339 (`\d` matches any Unicode digit), year 0, or a leap second folded past 9999
        assert not text.isascii() or text[:4] == "0000" or text[:10] == "9999-12-31"
    else:
        assert value.tzinfo is not None


def test_parse_time_pattern_is_the_schema_validators() -> None:
    """The reader's rule is the schema's: the codec's pattern, which the schema validator uses too."""
    assert re.match(DATE_TIME_PATTERN, LEAP) and re.match(DATE_TIME_PATTERN, "2026-06-30t10:00:00z")


def test_soak_status_reads_a_leap_second_start_and_names_the_field_it_cannot_read() -> None:
    now = datetime(2026, 7, 1, 0, 5, tzinfo=UTC)
    status = soak_status(_window(LEAP), now)
    assert status is not None and status.elapsed_s == 300.0
    assert not observation_due(_window(LEAP), now)
    doc = _window("2026-06-30T23:00:00Z", [_observation("0000-06-30T23:30:00Z")])
    schemas.validate("window", doc, source="w1")  # year 0 is RFC 3339, but no datetime holds it
    with pytest.raises(InputError, match=r"windows/w1\.json: soak\.observations\[0\]\.at: '0000-06-30T23:30:00Z'"):
        soak_status(doc, now)


def test_window_page_reads_the_same_date_times() -> None:
    doc = _window(LEAP, [_observation("2026-07-01t00:10:00z"), _observation("2026-07-01T00:20:60Z")])
    assert render_window_html(doc, {}).count("<svg") == 1
    doc["soak"]["observations"].append(_observation("0000-07-01T00:30:00Z"))
    with pytest.raises(InputError, match=r"windows/w1\.json: soak\.observations\[2\]\.at: "):
        render_window_html(doc, {})


@pytest.fixture
def store(tmp_path: Path) -> BaselineStore:
    st = BaselineStore(tmp_path / "store")
    st.init()
    return st


def test_window_status_and_observe_read_a_hand_committed_leap_second(
    store: BaselineStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store.write_document("windows/w1.json", _window(LEAP), "hand-made window", schema="window")
    monkeypatch.setenv("UPGRADE_GATE_NOW", "2026-07-01T00:05:00Z")
    assert run(["window", "status", "--store", str(store.path), "--id", "w1"]) == ExitCode.PASS
    assert run(["window", "observe", "--store", str(store.path), "--id", "w1", "--if-due"]) == ExitCode.PASS
    assert "no observation due before 2026-07-01T00:10:00Z" in capsys.readouterr().out


def test_window_status_with_an_unreadable_date_time_exits_3_naming_the_field(
    store: BaselineStore, capsys: pytest.CaptureFixture[str]
) -> None:
    store.write_document("windows/w1.json", _window("0000-06-30T23:00:00Z"), "hand-made window", schema="window")
    assert run(["window", "status", "--store", str(store.path), "--id", "w1"]) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert "windows/w1.json: soak.started_at: '0000-06-30T23:00:00Z' is an RFC 3339 date-time" in err
    assert "internal error" not in err


# --------------------------------------------------------------------------- names and contents


def test_load_candidate_refuses_a_file_holding_another_node(store: BaselineStore) -> None:
    save_candidate(store, "w1", named_snapshot("node-a"))
    assert load_candidate(store, "w1", "node-a").node.name == "node-a"
    store.write_document(
        candidate_name("w1", "node-a"), snapshot_to_dict(named_snapshot("node-b")), "hand", schema="snapshot"
    )
    with pytest.raises(InputError, match=r"windows/w1/node-a\.json: holds node 'node-b', expected 'node-a'"):
        load_candidate(store, "w1", "node-a")


def test_saved_references_refuse_a_class_file_named_for_another_class(store: BaselineStore) -> None:
    good = ClassReference(node_class="mi300x", nodes=("n1",), firmware={"gpu/vbios": "113-GOOD"})
    other = ClassReference(node_class="mi300x", nodes=("n9",), firmware={"gpu/vbios": "113-OTHER"})
    store.write_document("classes/mi300x.json", class_reference_to_document(good), "agg", schema="class-reference")
    assert saved_references(store, store.pin()) == {"mi300x": good}
    store.write_document("classes/zz-old.json", class_reference_to_document(other), "hand", schema="class-reference")
    with pytest.raises(InputError, match=r"classes/zz-old\.json@[0-9a-f]{12}: holds class 'mi300x', expected 'zz-old'"):
        saved_references(store, store.pin())


# --------------------------------------------------------------------------- the ABI cache


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> AbiTrees:
    return build_trees(tmp_path_factory.mktemp("abi-strict"))


def _versioned_export(doc: dict[str, Any]) -> int:
    return next(i for i, e in enumerate(doc["exports"]) if e[1] is not None)


def _list_version(doc: dict[str, Any]) -> None:
    i = _versioned_export(doc)
    doc["exports"][i][1] = [doc["exports"][i][1]]


def _string_default(doc: dict[str, Any]) -> None:
    doc["exports"][0][2] = "false"


def _unknown_key(doc: dict[str, Any]) -> None:
    doc["extra"] = 1


def _short_row(doc: dict[str, Any]) -> None:
    doc["exports"][0] = doc["exports"][0][:4]


def _long_row(doc: dict[str, Any]) -> None:
    doc["exports"][0] = [*doc["exports"][0], "x"]


def _int_weak(doc: dict[str, Any]) -> None:
    doc["imports"] = [["x", None, None, 1]]


def _number_name(doc: dict[str, Any]) -> None:
    doc["needed"] = [1]


def _missing_key(doc: dict[str, Any]) -> None:
    del doc["version_defs"]


def _dict_exports(doc: dict[str, Any]) -> None:
    doc["exports"] = {}


def _not_an_object(doc: dict[str, Any]) -> None:
    doc.clear()
    doc["format"] = [CACHE_FORMAT]


@pytest.mark.parametrize(
    "damage",
    [
        _list_version,
        _string_default,
        _unknown_key,
        _short_row,
        _long_row,
        _int_weak,
        _number_name,
        _missing_key,
        _dict_exports,
        _not_an_object,
    ],
)
def test_abi_cache_entry_that_is_not_exactly_what_was_written_is_read_again(
    trees: AbiTrees, tmp_path: Path, damage: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sealed with this user's key (so the MAC passes and the strict decode is what refuses it)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))  # this test's own key
    cachekey.forget()
    key = cachekey.user_key()
    assert key is not None
    cache = tmp_path / "cache"
    files, _aliases, _not_elf = library_files(trees.running)
    (path,) = [f for f in files if "libamdhip64" in f.name]
    first, hits = scan([path], cache_dir=cache, workers=1)
    assert hits == 0
    (entry,) = cache.rglob("*.abi")
    doc = json.loads(entry.read_bytes()[_HEADER:])
    assert scan([path], cache_dir=cache, workers=1) == (first, 1)  # the honest entry is served
    damage(doc)
    entry.write_bytes(seal(key, entry.stem, json.dumps(doc).encode()))
    assert scan([path], cache_dir=cache, workers=1) == (first, 0)  # a miss: the library is read again
    assert scan([path], cache_dir=cache, workers=1) == (first, 1)  # and the entry rewritten
