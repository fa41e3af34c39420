"""Snapshot schema v2 (issue 29): the columnar form decodes to the same snapshot as v1, through every
reader (schema-checked, strict, trusted), is refused where v1 would be, and is smaller."""

from __future__ import annotations

import json
import random
import re
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.judge_scenarios import upgraded
from tests.test_store_gitstore import snapshot_for
from upgrade_gate import codec, schemagen, schemas
from upgrade_gate.errors import InputError, SchemaError
from upgrade_gate.model import Measurement, PhaseResult, PhaseStatus, Snapshot, replace
from upgrade_gate.model.columnar import SnapshotV2, columns, from_wire, measurements, to_wire
from upgrade_gate.snapshot.io import (
    decode_snapshot,
    dumps_snapshot,
    load_snapshot,
    load_snapshot_fast,
    loads_snapshot,
    schema_version,
    snapshot_from_dict,
    write_snapshot,
)

MESH = {"min_bytes": "1024", "max_bytes": "2147483648", "step_factor": "2", "ranks": "8"}
RAIL = {"iters": "5", "qp": "4"}


def rich_snapshot(node: str = "node-a") -> Snapshot:
    """snapshot_for's node with phase results: two sweeps, a rail, a lower-is-better metric, no source."""
    sweep = tuple(
        Measurement(
            key=f"mesh/all_reduce/busbw/{size}",
            unit="GB/s",
            samples=(0.1 * i + size / 1e6, 0.2, 1e-5, 12345.678901234567),
            settings=dict(MESH),
            source="rccl-tests",
        )
        for i, size in enumerate((1024, 2048, 4096))
    )
    rail = Measurement(key="rail/ionic_0/bw_avg", unit="Gb/s", samples=(390.5,), settings=dict(RAIL), source=None)
    latency = Measurement(key="rail/ionic_0/lat", unit="us", samples=(2.5, 2.25), higher_is_better=False)
    phases = (
        PhaseResult(phase=2, name="mesh", status=PhaseStatus.PASSED, measurements=(*sweep, latency)),
        PhaseResult(phase=3, name="idle", status=PhaseStatus.SKIPPED),
        PhaseResult(phase=4, name="rail", status=PhaseStatus.PASSED, measurements=(rail,), peer="node-b"),
    )
    return replace(snapshot_for(node), phases=phases)


def test_v2_decodes_to_the_same_snapshot_through_every_reader(tmp_path: Path) -> None:
    snap = rich_snapshot()
    text = dumps_snapshot(snap, version="2")
    assert json.loads(text)["schema_version"] == "2"
    assert loads_snapshot(text, source="t") == snap  # schema walk + generic decode
    assert snapshot_from_dict(json.loads(text), source="t") == snap
    assert decode_snapshot(text.encode(), source="t") == snap  # strict (the gate's candidates)
    assert decode_snapshot(text.encode(), source="t", trusted=True) == snap  # the store's own bytes
    path = tmp_path / "n.json"
    write_snapshot(snap, path, version="2")
    assert load_snapshot(path) == snap and load_snapshot_fast(path) == snap
    # v1 is still what a plain write writes, and it still reads
    assert json.loads(dumps_snapshot(snap))["schema_version"] == "1"
    assert decode_snapshot(dumps_snapshot(snap).encode(), source="t") == snap
    assert load_snapshot_fast(path) == load_snapshot_fast(_v1(tmp_path, snap))


def _v1(tmp_path: Path, snap: Snapshot) -> Path:
    path = tmp_path / "v1.json"
    write_snapshot(snap, path)
    return path


def test_v2_writes_each_sweep_once_and_samples_as_one_row() -> None:
    text = dumps_snapshot(rich_snapshot(), version="2")
    mesh = json.loads(text)["phases"][0]["measurements"]
    assert mesh["sweeps"] == [MESH, {}] and mesh["sweep"] == [0, 0, 0, 1]
    assert mesh["sources"] == ["rccl-tests"] * 3 + [None]
    assert mesh["higher_is_better"] == [True, True, True, False]
    assert re.search(r"\n +\[0\.001024, 0\.2, 1e-05, 12345\.678901234567\],\n", text)  # one line per metric
    assert text == dumps_snapshot(loads_snapshot(text, source="t"), version="2")  # canonical: stable
    assert text.endswith("}\n")


def test_v2_is_smaller_raw_and_compressed() -> None:
    """A node with sweeps as the pipeline measures them (4 collectives x 23 sizes x 5 noisy samples);
    the bench fleet's numbers are in bench/RESULTS-schema-v2.md."""
    rng = random.Random(7)
    sweeps = tuple(
        Measurement(
            key=f"mesh/{op}/busbw/{1024 << i}",
            unit="GB/s",
            samples=tuple(round(300 * rng.gauss(1, 0.03), 2) for _ in range(5)),
            settings={**MESH, "op": op},
            source="rccl-tests",
        )
        for op in ("all_reduce", "all_gather", "reduce_scatter", "alltoall")
        for i in range(23)
    )
    phase = PhaseResult(phase=2, name="mesh", status=PhaseStatus.PASSED, measurements=sweeps)
    snap = replace(snapshot_for("node-a"), phases=(phase,))
    v1, v2 = dumps_snapshot(snap).encode(), dumps_snapshot(snap, version="2").encode()
    assert len(v2) < len(v1) / 3
    assert len(zlib.compress(v2)) < len(zlib.compress(v1))


def test_columns_round_trip_shares_one_settings_map_per_sweep() -> None:
    metrics = rich_snapshot().phases[0].measurements
    back = measurements(columns(metrics), where="x")
    assert back == metrics
    assert back[0].settings is back[1].settings is back[2].settings


def test_documents_of_one_layout_share_their_columns_and_settings_maps_and_nothing_else() -> None:
    """Two nodes' documents decode to equal layouts held once (the judge's comparisons then meet the same
    object); the samples stay each node's own, and a document whose settings differ gets its own map."""
    one, two = rich_snapshot("node-a"), rich_snapshot("node-b")
    other = replace(
        two, phases=(replace(two.phases[0], measurements=(replace(two.phases[0].measurements[0], samples=(9.0,)),)),)
    )
    a, b = (decode_snapshot(dumps_snapshot(s, version="2").encode(), source="x") for s in (one, two))
    assert a == one and b == two  # equal values: only identity changes
    ma, mb = a.phases[0].measurements, b.phases[0].measurements
    assert all(x.key is y.key and x.unit is y.unit and x.settings is y.settings for x, y in zip(ma, mb, strict=True))
    assert ma[0].samples is not mb[0].samples
    c = decode_snapshot(dumps_snapshot(other, version="2").encode(), source="x")
    assert c.phases[0].measurements[0].settings is ma[0].settings  # the same sweep: shared
    changed = replace(
        one,
        phases=(
            replace(
                one.phases[0], measurements=(replace(one.phases[0].measurements[0], settings={**MESH, "ranks": "4"}),)
            ),
        ),
    )
    d = decode_snapshot(dumps_snapshot(changed, version="2").encode(), source="x")
    assert d.phases[0].measurements[0].settings == {**MESH, "ranks": "4"}
    assert d.phases[0].measurements[0].settings is not ma[0].settings


def test_the_shared_columns_keep_order_and_kind_and_stay_bounded() -> None:
    from upgrade_gate.model.columnar import _Shared

    shared = _Shared()
    first = {"b": "1", "a": "2"}
    assert shared.settings(first) is first
    assert shared.settings({"b": "1", "a": "2"}) is first
    reordered = {"a": "2", "b": "1"}  # equal as a dict, not as the document wrote it: its own order kept
    assert list(shared.settings(reordered)) == ["a", "b"]
    assert shared.column((True, False), "higher_is_better") == (True, False)
    assert shared.column(("x", None), "sources") == ("x", None)
    ints = (1, 0)  # equal to (True, False), in another column's table: a column is never handed another's kind
    assert shared.column(ints, "sweep") is ints
    assert all(type(v) is bool for v in shared.column((True, False), "higher_is_better", 3))
    long = ("k" * shared.LARGEST,)  # one key as long as a document: not held
    assert shared.column(long, "keys") is long and shared.column(tuple(list(long)), "keys") is not long
    huge = {"k": "v" * shared.LARGEST}
    assert shared.settings(huge) is huge and shared.settings(dict(huge)) is not huge

    def cost(values: tuple[object, ...]) -> int:
        return len(values) + sum(len(v) for v in values if isinstance(v, str))

    for i in range(shared.HELD // 1000 + 5):  # many layouts: the tables are emptied, never hold past HELD
        shared.column(tuple(f"{i:08d}/{j}" for j in range(100)), "keys", i % 3)
        held = sum(cost(values) for _, values in shared._columns)
        held += sum(len(items) + sum(len(a) + len(b) for a, b in items) for items in shared._settings)
        assert held == shared._held <= shared.HELD
        assert all(v is shared._columns.get((name, v)) for (name, _), v in shared._last.items())  # all held


def test_the_last_layout_of_a_slot_is_tried_first_and_keeps_the_documents_order() -> None:
    from upgrade_gate.model.columnar import _Shared

    shared = _Shared()
    keys = tuple(f"mesh/all_reduce/busbw/{2**i}" for i in range(20))
    first = shared.column(keys, "keys", 2)
    again = tuple(f"mesh/all_reduce/busbw/{2**i}" for i in range(20))
    assert again is not first and shared.column(again, "keys", 2) is first  # compared, not hashed
    assert shared.column((*again[:-1], "x"), "keys", 2) == (*again[:-1], "x")
    maps = ({"b": "1", "a": "2"}, {"ranks": "8"})
    held = shared.sweeps(maps, 2)
    assert shared.sweeps(({"b": "1", "a": "2"}, {"ranks": "8"}), 2) is held
    reordered = shared.sweeps(({"a": "2", "b": "1"}, {"ranks": "8"}), 2)  # equal maps, another key order
    assert [list(m) for m in reordered] == [["a", "b"], ["ranks"]]
    changed = shared.sweeps(({"b": "1", "a": "3"}, {"ranks": "8"}), 2)
    assert changed[0] == {"b": "1", "a": "3"} and changed[1] is held[1]
    huge = ({"k": "v" * shared.LARGEST},)  # not held: not remembered for the slot either
    assert shared.sweeps(huge, 5)[0] is huge[0] and ("sweeps", 5) not in shared._last


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("units", ["GB/s"], "units: 1 entries, but keys has 4 (one per metric)"),
        ("samples", [[1.0]] * 5, "samples: 5 entries, but keys has 4 (one per metric)"),
        ("sweep", [0, 0, 0, 7], "sweep[3]: 7 names no sweep (sweeps has 2)"),
    ],
)
def test_columns_that_disagree_are_refused_by_every_reader(column: str, value: object, message: str) -> None:
    document = json.loads(dumps_snapshot(rich_snapshot(), version="2"))
    document["phases"][0]["measurements"][column] = value
    text = json.dumps(document)
    where = "bad.json: $.phases[0].measurements."
    for read in (
        lambda: loads_snapshot(text, source="bad.json"),
        lambda: decode_snapshot(text.encode(), source="bad.json"),
    ):
        with pytest.raises(SchemaError) as caught:
            read()
        assert str(caught.value) == where + message
        assert "\n" not in str(caught.value)


def test_v2_refuses_what_v1_refuses() -> None:
    document = json.loads(dumps_snapshot(rich_snapshot(), version="2"))
    edits: tuple[tuple[Callable[[dict[str, Any], dict[str, Any]], object], str], ...] = (
        (lambda d, m: d.update(extra=1), "extra"),
        (lambda d, m: m.update(sweeps=[{"k": "x" * 5000}, {}]), "sweeps"),  # a text longer than MAX_TEXT
        (lambda d, m: m.update(sweeps=[{str(i): "x" for i in range(1025)}, {}]), "sweeps"),  # > 1,024 settings
        (lambda d, m: m.update(keys=["", "b", "c", "d"]), "keys"),  # an empty key
        (lambda d, m: m.update(sweep=[0, 0, 0, -1]), "sweep"),
        (lambda d, m: m.pop("units"), "units"),  # every column is required
        (lambda d, m: d.update(measurements=[]), "measurements"),  # v1's list under v2's version
    )
    for edit, found in edits:
        bad = json.loads(json.dumps(document))
        edit(bad, bad["phases"][0]["measurements"])
        text = json.dumps(bad)
        with pytest.raises(SchemaError, match=found):
            loads_snapshot(text, source="bad.json")
        with pytest.raises(SchemaError, match=found):
            decode_snapshot(text.encode(), source="bad.json")


def test_v2_refuses_a_key_named_twice() -> None:
    text = dumps_snapshot(rich_snapshot(), version="2")
    doubled = text.replace('"sweep": [0, 0, 0, 1],', '"sweep": [0, 0, 0, 1],\n      "sweep": [1, 1, 1, 1],', 1)
    assert doubled != text
    for read in (loads_snapshot, lambda t, source: decode_snapshot(t.encode(), source=source)):
        with pytest.raises(InputError, match="sweep") as caught:
            read(doubled, source="dup.json")
        assert "twice" in str(caught.value) or "duplicate" in str(caught.value).lower()


@pytest.mark.parametrize("where", ["samples", "top-level samples", "settings"])
def test_v2_refuses_a_key_named_twice_beside_the_samples_the_count_leaves_out(where: str) -> None:
    """The duplicate-key count re-encodes a candidate without its samples (`columnar.without_samples`):
    a `samples` member named twice, and a key named twice next to them, are still counted and refused."""
    snap = rich_snapshot()
    if where == "top-level samples":
        snap = replace(snap, measurements=snap.phases[0].measurements)
    document = json.loads(dumps_snapshot(snap, version="2"))
    columns = document["measurements"] if where == "top-level samples" else document["phases"][0]["measurements"]
    text = json.dumps(document)
    if where == "settings":
        member = json.dumps(columns["sweeps"][0])
        doubled = text.replace(member, member[:-1] + ', "ranks": "4"}', 1)
    else:
        member = '"samples": ' + json.dumps(columns["samples"])
        doubled = text.replace(member, member + ", " + member, 1)
    assert doubled != text
    decode_snapshot(text.encode(), source="ok.json")  # the same document without the double: read
    with pytest.raises(InputError) as caught:
        decode_snapshot(doubled.encode(), source="dup.json")
    said = str(caught.value)
    assert said.startswith("dup.json: duplicate key $.") and "\n" not in said
    assert said.split()[3].endswith(".ranks" if where == "settings" else "measurements.samples")


def _refusal(read: Callable[[], object]) -> str:
    with pytest.raises(SchemaError) as caught:
        read()
    return str(caught.value).replace('"two"', '"2"')


def test_a_version_that_is_neither_is_refused_and_the_peek_never_decides_alone() -> None:
    document = json.loads(dumps_snapshot(rich_snapshot(), version="2"))
    document["schema_version"] = "3"
    for read in (loads_snapshot, lambda t, source: decode_snapshot(t.encode(), source=source)):
        with pytest.raises(SchemaError) as caught:
            read(json.dumps(document), source="t")
        assert str(caught.value) == "t: schema_version '3': this upgrade-gate reads snapshot schema 1 and 2"
    # a nested "schema_version" (a label) does not make a v1 document v2
    snap = replace(rich_snapshot(), node=replace(rich_snapshot().node, labels={"schema_version": "2"}))
    assert schema_version(dumps_snapshot(snap)) == "1"
    assert decode_snapshot(dumps_snapshot(snap).encode(), source="t") == snap
    assert decode_snapshot(dumps_snapshot(snap).encode(), source="t", trusted=True) == snap
    # ... and the spelling that lets v2 skip the peek only picks the decoder tried first: a v1 document
    # that spells it and is bad is refused as v1 refuses it, with the v1 reader's words
    bad = json.loads(dumps_snapshot(snap))
    bad["extra"] = 1
    expected = _refusal(lambda: decode_snapshot(json.dumps(bad).replace('"2"', '"two"').encode(), source="t"))
    assert '"schema_version": "2"' in json.dumps(bad)
    assert _refusal(lambda: decode_snapshot(json.dumps(bad).encode(), source="t")) == expected
    assert schema_version(b"not json") is None
    with pytest.raises(InputError, match="not JSON"):
        decode_snapshot(b"not json", source="t")


def test_the_wire_classes_follow_the_model() -> None:
    """A field of Snapshot or PhaseResult is a field of their v2 twins (generated, not copied)."""
    import msgspec

    from upgrade_gate.model.columnar import PhaseResultV2

    assert [f.name for f in msgspec.structs.fields(SnapshotV2)] == [f.name for f in msgspec.structs.fields(Snapshot)]
    assert [f.name for f in msgspec.structs.fields(PhaseResultV2)] == [
        f.name for f in msgspec.structs.fields(PhaseResult)
    ]
    snap = rich_snapshot()
    assert from_wire(to_wire(snap), where="t") == snap
    assert codec.to_jsonable(to_wire(snap))["schema_version"] == "2"


def test_the_v2_schema_is_generated_and_shipped() -> None:
    assert "snapshot-v2" in schemagen.DOCUMENTS and "snapshot-v2" in schemas.schema_names()
    assert schemas.load_schema("snapshot-v2") == json.loads(schemagen.render("snapshot-v2"))
    required = schemas.load_schema("snapshot-v2")["$defs"]["MeasurementColumns"]["required"]
    assert set(required) == {"sweeps", "sweep", "keys", "units", "sources", "higher_is_better", "samples"}


def _pairs_text(value: Any) -> str:
    """JSON text of `value`, where a list of `_Twice` pairs is written as one object (a key may repeat)."""
    if isinstance(value, _Twice):
        return "{" + ", ".join(f"{json.dumps(k)}: {_pairs_text(v)}" for k, v in value.pairs) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_pairs_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(map(_pairs_text, value)) + "]"
    return json.dumps(value)


class _Twice:
    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs


def _first_member_twice(document: Any, path: tuple[str | int, ...], value: Any = None) -> str:
    """`document` as text with the first member of the object at `path` named twice (its own value again,
    or `value`)."""
    *up, last = path
    parent = document
    for step in up:
        parent = parent[step]
    members = list(parent[last].items())
    key, own = members[0]
    parent[last] = _Twice([(key, own if value is None else value), *members])
    return _pairs_text(document)


@pytest.mark.parametrize(
    "path",
    [
        ("gpus", 0, "firmware"),
        ("probes", 0),
        ("phases", 0),
        ("phases", 0, "measurements"),
        ("phases", 0, "measurements", "sweeps", 0),
        ("measurements",),
        ("node",),
    ],
)
@pytest.mark.parametrize("escaped", [False, True])
def test_v2_refuses_a_key_named_twice_anywhere_with_numpy_loaded(path: tuple[str | int, ...], escaped: bool) -> None:
    """The vectorised colon count (numpy loaded, as in a gate worker; documents of 4 KiB or more) and the
    re-encoding without samples still refuse a key named twice wherever it is, with the same value or
    another, and where an escaped colon (`\\u003a`) sends the document to the exact locator."""
    import numpy  # noqa: F401  (loaded: `dupkeys.colons` takes its vectorised way)

    snap = replace(upgraded(), measurements=rich_snapshot().measurements, phases=rich_snapshot().phases)
    document = json.loads(dumps_snapshot(snap, version="2"))
    if escaped:
        document["tool_version"] = ":" + document["tool_version"]
    clean = _pairs_text(document)
    if escaped:
        clean = clean.replace('"tool_version": ":', '"tool_version": "\\u003a', 1)
    assert len(clean) >= 4096 and decode_snapshot(clean.encode(), source="ok.json") == replace(
        snap, tool_version=snap.tool_version if not escaped else ":" + snap.tool_version
    )
    for value in (None, "x:y"):
        twice = _first_member_twice(json.loads(clean), path, value)
        if escaped:
            twice = twice.replace('"tool_version": ":', '"tool_version": "\\u003a', 1)
        with pytest.raises(InputError, match="duplicate key"):
            decode_snapshot(twice.encode(), source="dup.json")


def test_the_diff_of_two_v2_decodes_of_one_layout_sees_each_change() -> None:
    """Shared layouts (`_Shared`) compare by identity first: two v2-decoded snapshots of one layout that
    differ in one settings value, one unit or one sample count still differ, and the diff says where."""
    from upgrade_gate.judge.diff import diff_snapshots

    base = rich_snapshot()
    first = base.phases[0].measurements[0]
    edits = {
        "settings": replace(first, settings={**first.settings, "ranks": "4"}),
        "unit": replace(first, unit="MB/s"),
        "samples": replace(first, samples=(*first.samples, 1.0)),
    }
    decode = lambda s: decode_snapshot(dumps_snapshot(s, version="2").encode(), source="x")  # noqa: E731
    left = decode(base)
    assert diff_snapshots(left, decode(base)) == ()
    for what, changed in edits.items():
        phase = replace(base.phases[0], measurements=(changed, *base.phases[0].measurements[1:]))
        right = decode(replace(base, phases=(phase, *base.phases[1:])))
        paths = [c.path for c in diff_snapshots(left, right)]
        assert paths and all(first.key in p for p in paths), (what, paths)
