"""The strict decode of a document written by an older release (an optional field left out): issue 29.

`codec._decode_unique` reads such a document through the presence mirror (a field left out stays UNSET,
and is not re-encoded) instead of counting its keys from a second, plain decode. The result must be the
one the ordinary mirror gives, and every refusal must stay: a key named twice, a retired field with a
value, a wrong type (named as before).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from tests.judge_scenarios import mi300x_snapshot
from upgrade_gate import codec
from upgrade_gate.errors import InputError, SchemaError
from upgrade_gate.model import Snapshot, replace
from upgrade_gate.snapshot.io import decode_snapshot, dumps_snapshot


def _older(version: str = "1") -> Any:
    """A whole document with `Gpu.health` and `Software.amdsmi_version` left out, as an older writer wrote it."""
    snap = mi300x_snapshot()
    document = json.loads(dumps_snapshot(snap, version=version))
    for gpu in document["gpus"]:
        del gpu["health"]
    del document["software"]["amdsmi_version"]
    return document


def _expected() -> Snapshot:
    snap = mi300x_snapshot()
    return replace(
        snap,
        gpus=tuple(replace(g, health=None) for g in snap.gpus),
        software=replace(snap.software, amdsmi_version=None),
    )


@pytest.mark.parametrize("version", ["1", "2"])
def test_codec_presence_reads_an_older_document_as_the_ordinary_mirror_does(version: str) -> None:
    data = json.dumps(_older(version)).encode()
    assert decode_snapshot(data, source="t") == _expected()
    ordinary = codec._mirror_decoder(Snapshot).decode(json.dumps(_older("1")).encode())
    assert msgspec.convert(ordinary, Snapshot, from_attributes=True) == _expected()


@pytest.mark.parametrize("version", ["1", "2"])
def test_codec_presence_refuses_a_key_named_twice_in_an_older_document(version: str) -> None:
    text = json.dumps(_older(version), indent=2)
    twice = text.replace('"kernel": ', '"kernel": "6.8.0", "kernel": ', 1)
    assert twice != text
    with pytest.raises(InputError, match="duplicate key"):
        decode_snapshot(twice.encode(), source="t")


def test_codec_presence_keeps_the_retired_field_rule() -> None:
    document = _older()
    document["software"]["hip_runtime_version"] = None
    assert decode_snapshot(json.dumps(document).encode(), source="t") == _expected()
    document["software"]["hip_runtime_version"] = "6.2"
    with pytest.raises(SchemaError, match="hip_runtime_version"):
        decode_snapshot(json.dumps(document).encode(), source="t")


def test_codec_presence_names_a_wrong_type_as_before() -> None:
    document = _older()
    document["software"]["rocm_build"] = 7
    with pytest.raises(SchemaError) as caught:
        decode_snapshot(json.dumps(document).encode(), source="t")
    assert str(caught.value) == "t: Expected `str | null`, got `int` - at `$.software.rocm_build`"


def test_codec_presence_refuses_a_value_outside_the_model_constraints() -> None:
    document = _older()
    document["gpus"][0]["bdf"] = "not a bdf"
    with pytest.raises(SchemaError, match=r"\$\.gpus\[0\]\.bdf"):
        decode_snapshot(json.dumps(document).encode(), source="t")
