"""The generic codec and the snapshot schema agree with the model."""

from __future__ import annotations

import pytest

from upgrade_gate import codec
from upgrade_gate.errors import SchemaError
from upgrade_gate.model import Gpu, NodeInfo, NodeName, ProbeStatus, Snapshot, Software
from upgrade_gate.snapshot.io import dumps_snapshot, loads_snapshot


def _snapshot() -> Snapshot:
    return Snapshot(
        node=NodeInfo(name=NodeName("node-a")),
        taken_at="2026-11-30T09:00:00Z",
        tool_version="0.1.0",
        software=Software(
            kernel="6.8.0",
            driver_version=None,
            rocm_version="6.1.3",
            na_reasons={"driver_version": "modinfo: missing binary"},
        ),
        gpus=(Gpu(index=0, bdf=None, firmware={"SMC": "1.2"}),),
        probes=(ProbeStatus(name="rocminfo", ok=True),),
    )


def test_codec_round_trips_a_snapshot() -> None:
    snap = _snapshot()
    assert loads_snapshot(dumps_snapshot(snap), source="t") == snap


def test_codec_rejects_unknown_field_naming_the_path() -> None:
    data = codec.to_jsonable(_snapshot())
    data["gpus"][0]["colour"] = "red"
    with pytest.raises(SchemaError, match="colour"):
        codec.from_jsonable(Snapshot, data)


def test_snapshot_schema_rejects_upper_case_bdf() -> None:
    data = codec.to_jsonable(_snapshot())
    data["gpus"][0]["bdf"] = "0000:C1:00.0"
    with pytest.raises(SchemaError, match=r"gpus\[0\]\.bdf"):
        from upgrade_gate.snapshot.io import snapshot_from_dict

        snapshot_from_dict(data, source="x.json")


def test_every_shipped_schema_is_a_valid_json_schema() -> None:
    import jsonschema

    from upgrade_gate.schemas import load_schema, schema_names

    names = schema_names()
    assert {"snapshot", "manifest", "report", "policy", "change-plan", "window"} <= set(names)
    for name in names:
        schema = load_schema(name)
        jsonschema.validators.validator_for(schema).check_schema(schema)
