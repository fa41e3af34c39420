"""Identifiers and the value constraints the model's annotations carry into the generated schemas.

Constraints are `msgspec.Meta` inside `typing.Annotated`, so one annotation is read three ways: by
mypy (the plain type), by msgspec when it decodes a document (`codec.decode_json` enforces patterns,
lengths and bounds) and by `upgrade_gate.schemagen` when it writes `schemas/*.schema.json`. Limits on
sizes are there for hostile input (issue 12): a snapshot may not carry 10,000 GPUs or a 1 MiB string.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, NewType, TypeVar, cast

import msgspec
from msgspec import Meta

T = TypeVar("T")


class Record(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The base of every model class: a frozen, keyword-only msgspec Struct (each subclass repeats
    `kw_only=True`: msgspec does not inherit it).

    Structs rather than dataclasses (issue 14): msgspec decodes a document into Structs about twice as
    fast (a 132 KB snapshot: ~0.6 ms against ~1.3 ms into frozen dataclasses) and encodes and converts
    them faster too. `gc=False`: a model value is a tree of immutable records, tuples and dicts that never
    refers back to itself, so the cyclic collector need not track the ~10^4 records of each snapshot.
    """


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of a model record (or of any dataclass) with `changes`: `dataclasses.replace` for both."""
    if isinstance(obj, msgspec.Struct):
        return msgspec.structs.replace(obj, **changes)
    return cast(T, dataclasses.replace(cast(Any, obj), **changes))


def is_record(value: object) -> bool:
    """True for a model record class or instance (what the codec and the schema generator walk)."""
    kind = value if isinstance(value, type) else type(value)
    return issubclass(kind, msgspec.Struct) or dataclasses.is_dataclass(kind)


NodeName = NewType("NodeName", str)
Bdf = NewType("Bdf", str)  # lower-case dddd:bb:dd.f
GpuSerial = NewType("GpuSerial", str)
RuleId = NewType("RuleId", str)

MAX_TEXT = 4096
"""Longest string value a snapshot field may hold (a kernel log line, a command line)."""

ALWAYS = Meta(extra={"required": True})
"""On a field that has a default: a document must still carry it (so the schema lists it as required).
The model's defaults are for building values in code; the documents the tool writes carry every field."""


def always(annotation: Any) -> bool:
    """True when an (Annotated) field annotation carries `ALWAYS`."""
    return any(
        isinstance(meta, Meta) and (meta.extra or {}).get("required") is True
        for meta in getattr(annotation, "__metadata__", ())
    )


BDF_PATTERN = r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$"
NODE_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"  # a Kubernetes node name; safe as a file name
RULE_PATTERN = r"^[a-z0-9_]+(\.[a-z0-9_]+)*$"
SHA256_PATTERN = r"^[0-9a-f]{64}$"

BdfText = Annotated[Bdf, Meta(pattern=BDF_PATTERN, description="PCI address, lower-case dddd:bb:dd.f")]
NodeNameText = Annotated[NodeName, Meta(pattern=NODE_PATTERN)]
RuleIdText = Annotated[RuleId, Meta(pattern=RULE_PATTERN)]
Sha256 = Annotated[str, Meta(pattern=SHA256_PATTERN)]
Name = Annotated[str, Meta(min_length=1)]
Text = Annotated[str, Meta(max_length=MAX_TEXT)]
OptText = Text | None
DateTime = Annotated[str, Meta(extra_json_schema={"format": "date-time"}, description="ISO 8601, UTC")]
Count = Annotated[int, Meta(ge=0)]
StrMap = Annotated[dict[str, Text], Meta(max_length=1024)]
"""A map of strings (labels, settings, firmware versions), bounded."""
Reasons = Annotated[dict[str, Text], Meta(max_length=1024, description="field name -> why it is null (N/A)")]


def one_of(*values: str) -> Any:
    """A JSON Schema enum on a `str` field whose type stays `str` in code (the strict decode of untrusted
    documents checks it too: `codec._schema_only`)."""
    return Meta(extra_json_schema={"enum": list(values)})


def const(value: str) -> Any:
    """A JSON Schema const on a `str` field (a document version)."""
    return Meta(extra_json_schema={"const": value})
