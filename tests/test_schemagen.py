"""The snapshot, report and class-reference schemas are generated from the model (issue 17).

- `schemas/` holds exactly what `python -m upgrade_gate.schemas --write` generates (a model change
  without regenerating fails here);
- the generated schemas reject every mutated document the last hand-written ones rejected
  (tests/fixtures/schemas-handwritten/): one deterministic mutation per field and bad value, on a
  document with one entry per list so every shape is reached;
- a retired field (`Software.hip_runtime_version`, which nothing ever filled) still reads as null from
  old documents, by every decoder, and is refused with a value.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import fastjsonschema
import pytest

from tests.conftest import FIXTURES, REPO
from tests.judge_scenarios import mi300x_snapshot
from tests.report_sample import sample_report
from upgrade_gate import codec, schemagen, schemas
from upgrade_gate.errors import SchemaError
from upgrade_gate.model import ClassReference, MetricSummary, NodeName, Snapshot
from upgrade_gate.snapshot.io import snapshot_from_dict

HANDWRITTEN = FIXTURES / "schemas-handwritten"
SHA = "ab" * 32
BAD_VALUES: tuple[Any, ...] = (
    None,
    "",
    "x" * 5000,
    "0000:C1:00.0",
    "2026-13-45",
    -1,
    5000,
    1.5,
    True,
    [],
    {},
    ["x"],
    {"k": 1},
)


def test_schemagen_schemas_folder_is_what_the_model_generates() -> None:
    assert schemagen.stale(REPO / "schemas") == [], "run: python -m upgrade_gate.schemas --write"
    assert set(schemagen.DOCUMENTS) <= set(schemas.schema_names())  # and they are the ones the package loads


def test_schemagen_check_command_exits_0_when_current() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "upgrade_gate.schemas", "--check"], cwd=REPO, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def _snapshot_document() -> dict[str, Any]:
    data: dict[str, Any] = codec.to_jsonable(mi300x_snapshot())
    data["host"] = {"captured": True, "bios_vendor": "AMI", "kernel_cmdline": "ro quiet", "na_reasons": {}}
    data["events"] = [{"kind": "amdgpu.gpu_reset", "severity": "fatal", "bdf": None, "line_no": 3, "text": "x"}]
    data["event_patterns"] = "v1:abcdef"
    data["measurements"] = [{"key": "mesh/x", "unit": "GB/s", "samples": [1.0], "settings": {"a": "b"}}]
    data["phases"][0]["measurements"] = data["measurements"]
    data["evidence_issues"] = [{"kind": "conflict", "subject": "software.kernel", "message": "m", "values": {}}]
    data["libraries"] = [
        {"soname": "libx.so.1", "path": "/opt/rocm/lib/libx.so.1", "symbols_sha256": SHA, "symbol_count": 1,
         "file_sha256": SHA}
    ]  # fmt: skip
    data["nics"][0]["ports"] = data["nics"][0]["ports"][:1]
    for link in data["gpu_links"]:  # newer than the hand-written schema (2026-12-07), which refuses it
        link.pop("access", None)
    data["gpus"][0]["health"] = {
        "source": "nvidia_smi", "ecc_mode": "Enabled", "ecc_volatile_uncorrectable": {"dram_uncorrectable": 0},
        "ecc_aggregate_uncorrectable": {"dram_uncorrectable": 2}, "remapped_rows_correctable": 0,
        "remapped_rows_uncorrectable": 1, "remap_pending": False, "remap_failure": False,
        "retired_pages_single_bit": None, "retired_pages_double_bit": None, "retirement_pending": None,
        "reset_required": False, "na_reasons": {},
    }  # fmt: skip
    return _one_of_each(data)


def _class_reference_document() -> dict[str, Any]:
    ref = ClassReference(
        node_class="mi300x-8gpu",
        nodes=(NodeName("n1"),),
        gpu_order=("0000:05:00.0", None),
        firmware={"gpu/SMC": "1"},
        software={"kernel": "6.8"},
        sriov={"0000:05:00.0": 0},
        metrics=(MetricSummary(key="mesh/x", unit="GB/s", median=1.0, spread=0.0, n_nodes=1, settings={}),),
    )
    data: dict[str, Any] = codec.to_jsonable(ref)
    return data


def _one_of_each(value: Any) -> Any:
    """Every list cut to its first entry: each shape once, so the mutation walk stays small."""
    if isinstance(value, dict):
        return {k: _one_of_each(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_one_of_each(v) for v in value[:1]]
    return value


def _mutations(doc: Any) -> Iterator[tuple[str, Any]]:
    """(where, mutated document): each member dropped or replaced by each bad value, a key added."""

    def walk(node: Any, path: tuple[Any, ...]) -> Iterator[tuple[str, Any]]:
        if isinstance(node, dict):
            yield _at(path, lambda n: n.__setitem__("unexpected", 1))
            for key in node:
                yield _at(path, lambda n, k=key: n.__delitem__(k), f".{key}(dropped)")
                yield from walk(node[key], (*path, key))
        elif isinstance(node, list):
            for i, item in enumerate(node):
                yield from walk(item, (*path, i))
        for bad in BAD_VALUES if path else ():
            yield _set(path, bad)

    def _at(path: tuple[Any, ...], change: Any, label: str = ".unexpected") -> tuple[str, Any]:
        out = copy.deepcopy(doc)
        target = out
        for p in path:
            target = target[p]
        change(target)
        return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path) + label, out

    def _set(path: tuple[Any, ...], bad: Any) -> tuple[str, Any]:
        out = copy.deepcopy(doc)
        target = out
        for p in path[:-1]:
            target = target[p]
        target[path[-1]] = bad
        return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path) + f" = {bad!r:.20}", out

    yield from walk(doc, ())


def _accepts(validator: Any, doc: Any) -> bool:
    try:
        validator(doc)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


DOCUMENTS = {
    "snapshot": _snapshot_document,
    "report": lambda: _one_of_each(codec.to_jsonable(sample_report())),
    "class-reference": _class_reference_document,
}


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_schemagen_generated_schema_rejects_all_the_handwritten_one_rejected(name: str) -> None:
    hand = fastjsonschema.compile(json.loads((HANDWRITTEN / f"{name}.schema.json").read_text(encoding="utf-8")))
    generated = fastjsonschema.compile(schemagen.generate(name))
    doc = DOCUMENTS[name]()
    assert _accepts(hand, doc) and _accepts(generated, doc)
    looser = []
    checked = 0
    for where, mutated in _mutations(doc):
        checked += 1
        if not _accepts(hand, mutated) and _accepts(generated, mutated):
            looser.append(where)
    assert checked > 100
    assert not looser, f"the generated {name} schema accepts what the hand-written one refused: {looser[:10]}"


def _legacy_snapshot(value: object) -> dict[str, Any]:
    data: dict[str, Any] = codec.to_jsonable(mi300x_snapshot())
    data["software"]["hip_runtime_version"] = value
    return data


def test_schemagen_retired_field_reads_as_null_from_old_documents() -> None:
    snap = mi300x_snapshot()
    data = _legacy_snapshot(None)
    raw = json.dumps(data).encode()
    assert snapshot_from_dict(data, source="old.json") == snap
    assert codec.decode_json(Snapshot, raw) == snap
    assert codec.decode_json(Snapshot, raw, trusted=True) == snap
    assert "hip_runtime_version" not in codec.to_jsonable(snap)["software"]


def test_schemagen_retired_field_with_a_value_is_refused() -> None:
    data = _legacy_snapshot("6.1.40093")
    with pytest.raises(SchemaError, match=r"hip_runtime_version"):
        snapshot_from_dict(data, source="new.json")
    with pytest.raises(SchemaError, match=r"hip_runtime_version"):
        codec.decode_json(Snapshot, json.dumps(data).encode())


def test_schemagen_validating_does_not_fill_in_defaults() -> None:
    data = codec.to_jsonable(mi300x_snapshot())
    for key in ("host", "evidence_issues", "libraries", "event_patterns"):  # absent from older snapshots
        data.pop(key)
    del data["gpus"][0]["na_reasons"]
    before = copy.deepcopy(data)
    schemas.validate("snapshot", data, source="old.json")
    assert data == before
