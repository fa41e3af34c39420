"""Generic JSON codec for the records of `upgrade_gate.model` (frozen msgspec Structs; dataclasses too).

Driven by the type annotations, so a field added to the model needs no codec change. Decoding is
strict: an unknown key or a wrong type raises `SchemaError` naming the path. Documents are validated
against their JSON Schema before decoding (see `upgrade_gate.schemas`), so these checks are a second
line, not the only one. Enum values encode as their `.value`; tuples as lists; None stays null.

Fast paths (issue 14: `gate` reads 16,384 documents at fleet scale), both compiled by msgspec from the
same annotations, so they too need no change when the model grows:
- `to_jsonable` converts with `msgspec.to_builtins` (C) and turns its tuples into lists.
- `decode_json(cls, bytes, trusted=True)`: parse and typed decode in one C pass, for documents the
  baseline store wrote (validated against the schema when saved, read back by content hash).
- `decode_json(cls, bytes)` (untrusted): the same, through a mirror of the model built as msgspec
  Structs with `forbid_unknown_fields`, so an unknown key, a missing required field, a wrong type or an
  enum value outside the model is a `SchemaError` naming the path (fields marked `ALWAYS` are required
  here too, as in the generated schema); the mirror is then converted to
  the model's records (C as well), which checks the value constraints the model's annotations
  carry (BDF and node-name patterns, lengths, minimums and maxima: the same `msgspec.Meta` the schemas
  are generated from). What only the schema says of a `str` field is checked in the mirror as well
  (`_schema_only`): an enum (`one_of`: a kernel event's severity) and a `const` (`schema_version`) as a
  Literal, `format: date-time` by the schema validator's own regex. `uniqueItems` is the one keyword left
  to the callers (`report.json_report.check_node`); a new schema-only keyword fails the mirror's build.
  An object that names a key twice is refused too (InputError with the key path and both lines,
  issue 26): msgspec, like `json.loads`, would keep the later value without a word, so the members
  kept are counted against the document (`_decode_unique`: through a complete mirror, every field
  required, for documents that have them all, as upgrade-gate writes them).

A class's `RETIRED_FIELDS` (a field removed from the model) are accepted as null in documents written
before the removal and dropped; the generated schemas accept them the same way.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
import types
import typing
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, NamedTuple, TypeVar, Union, get_args, get_origin

import msgspec

from upgrade_gate.errors import InputError, SchemaError
from upgrade_gate.model.types import always, is_record

T = TypeVar("T")


def to_jsonable(obj: object) -> Any:
    """Turn a model value into plain JSON types (dict, list, str, int, float, bool, None)."""
    try:
        return _listed(msgspec.to_builtins(obj, str_keys=True))
    except (TypeError, msgspec.EncodeError):  # a value msgspec does not know: the generic walk below
        return _to_jsonable(obj)


def _listed(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {k: _listed(v) for k, v in value.items()}
    if kind is tuple or kind is list:
        return [_listed(v) for v in value]
    return value


def _to_jsonable(obj: object) -> Any:
    if is_record(obj) and not isinstance(obj, type):
        return {f.name: _to_jsonable(getattr(obj, f.name)) for f in _fields(typing.cast(type, type(obj)))}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, tuple | list):
        return [_to_jsonable(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): _to_jsonable(v) for k, v in obj.items()}
    return obj


def decode_json(
    cls: type[T],
    data: bytes | str,
    *,
    trusted: bool = False,
    source: str = "$",
    own: bool = False,
    colon_free: Callable[[Any], Any] | None = None,
) -> T:
    """Parse and decode a JSON document into `cls` (see the module docstring for trusted/untrusted).

    `own`: bytes this process just encoded from a record (no key can repeat): the strict decode
    without the duplicate-key count (`json_report.check_node`, once per node of a gate).
    `colon_free`: for the duplicate-key count of a complete mirror, a function giving the decoded mirror
    with members emptied that can hold nothing but numbers (no `:` is in a number, so the count is the
    same, and the numbers are not written again to count it: `model.columnar`'s samples)."""
    try:
        kind: Any = cls
        if trusted:
            decoded: T = _typed_decoder(kind).decode(data)
            return decoded
        mirrored = _mirror_decoder(kind).decode(data) if own else _decode_unique(kind, data, source, colon_free)
        converted: T = msgspec.convert(mirrored, cls, from_attributes=True)
        return converted
    except msgspec.ValidationError as exc:
        raise SchemaError(f"{source}: {_friendly(str(exc))}") from None
    except msgspec.DecodeError as exc:
        raise InputError(f"{source}: not JSON: {exc}") from None
    except RecursionError:  # deeper than the plain decode of the duplicate-key count goes (~2,000 levels)
        raise InputError(f"{source}: nested too deep") from None


def _decode_unique(cls: type, data: bytes | str, source: str, colon_free: Callable[[Any], Any] | None = None) -> Any:
    """The mirror of `cls` decoded from `data` (or its plain form), refusing a key named twice (InputError,
    key path and lines).

    The fast way, for a document that has every field (as upgrade-gate writes them): decoded through
    the complete mirror (every field required, none retired), whose re-encoding then holds exactly the
    members the document kept (`dupkeys.kept_every_member`: +~320 us CPU on a 132 KB bench-fleet
    candidate, ~520 -> ~840 us). A document without some optional field (written by an older release,
    before the field was added: after each such release, every document in the field) is decoded
    through the presence mirror (`_presence`: a field left out stays UNSET, and is not re-encoded), counted
    the same way, and given as its plain form, which the model's defaults complete. A document that does
    not decode there either is counted from a plain decode (`dupkeys.check_json_keys`) and decoded through
    the ordinary mirror, which names what is wrong (docs/limits.md). The bench fleet's v1 candidate
    without `Gpu.health`: ~1,385 -> ~1,135 us CPU; v2: ~685 -> ~635 us (2026-12-05, load ~12)."""
    from upgrade_gate import dupkeys

    try:
        mirrored = _mirror_decoder(cls, complete=True).decode(data)
    except msgspec.ValidationError:  # a field left out (an older writer), or a real error
        try:
            present = _mirror_decoder(cls, presence=True).decode(data)
        except msgspec.ValidationError:  # a real error: said below, as before the presence mirror
            dupkeys.check_json_keys(data, source)
            return _mirror_decoder(cls).decode(data)
        if not dupkeys.kept_every_member(data, present):
            dupkeys.check_json_keys(data, source)
        return msgspec.to_builtins(present)  # the fields left out omitted: the model's defaults fill them
    if not dupkeys.kept_every_member(data, mirrored if colon_free is None else colon_free(mirrored)):
        dupkeys.check_json_keys(data, source)
    return mirrored


@functools.cache
def _typed_decoder(cls: type) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(cls)


@functools.cache
def _mirror_decoder(cls: type, *, complete: bool = False, presence: bool = False) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(_mirror(cls, complete, presence))


@functools.cache
def _mirror(tp: Any, complete: bool = False, presence: bool = False) -> Any:
    """The msgspec Struct twin of a model type: same fields, defaults and types; unknown keys refused.
    `complete`: every field required and no retired one accepted (`_decode_unique`'s fast way).
    `presence`: a field with a default is UNSET when left out (so not re-encoded), not its default."""
    supertype = getattr(tp, "__supertype__", None)
    if supertype is not None:
        return _mirror(supertype, complete, presence)
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        # built from a runtime tuple
        return Union[tuple(_mirror(a, complete, presence) for a in get_args(tp))]  # noqa: UP007
    if origin is tuple:
        args = get_args(tp)
        return tuple[_mirror(args[0], complete, presence), ...]  # type: ignore[misc]
    if origin is dict:
        key, value = get_args(tp)
        return dict[_mirror(key, complete, presence), _mirror(value, complete, presence)]  # type: ignore[misc]
    if isinstance(tp, type) and is_record(tp):
        hints = _hints(tp)
        marked = typing.get_type_hints(tp, include_extras=True)
        required: list[Any] = []
        retired = (None | msgspec.UnsetType, msgspec.UNSET) if presence else (None, None)
        optional: list[Any] = [] if complete else [(name, *retired) for name in _retired(tp)]
        for f in _fields(tp):
            kind = _schema_only(_mirror(hints[f.name], complete, presence), marked[f.name])
            if complete or always(marked[f.name]):  # documents must carry it, as the generated schema says
                required.append((f.name, kind))
            elif presence and (f.default is not _MISSING or f.default_factory is not _MISSING):
                optional.append((f.name, Union[kind, msgspec.UnsetType], msgspec.UNSET))  # noqa: UP007
            elif f.default is not _MISSING:
                optional.append((f.name, kind, f.default))
            elif f.default_factory is not _MISSING:
                optional.append((f.name, kind, msgspec.field(default_factory=f.default_factory)))
            else:
                required.append((f.name, kind))
        # gc=False: the mirror lives only until it is converted and holds no cycles; untracked, its
        # objects do not drive collections (the candidate decode ran ~40% faster, issue 14)
        fields = [*required, *optional]
        return msgspec.defstruct(tp.__name__, fields, forbid_unknown_fields=True, kw_only=True, gc=False)
    return tp


DATE_TIME_PATTERN = (
    r"^(?:\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|1\d|2[0-8]))"
    r"|(?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)(t|T)(?:[01]\d|2[0-3]):[0-5]\d:"
    r"(?:[0-5]\d|60)(?:\.\d+)?(?:[+-](?:[01]\d|2[0-3]):[0-5]\d|[+-](?:[01]\d|2[0-3])[0-5]\d|z|Z)\Z"
)
"""RFC 3339 date-time as the schema validator (fastjsonschema) checks `format: date-time`: the same regex."""


def _schema_only(kind: Any, annotation: Any) -> Any:
    """`kind` with the constraints `annotation` gives only the JSON Schema made checks of the mirror:
    `one_of` and `const` (a `str` in the model) as a Literal, `format: date-time` as a pattern. Without
    them a candidate's kernel event of severity "FATAL" was decoded, and judged as no event at all."""
    for meta in getattr(annotation, "__metadata__", ()):
        extra = meta.extra_json_schema if isinstance(meta, msgspec.Meta) else None
        if not extra:
            continue
        if "enum" in extra:
            return _narrowed(kind, Literal[tuple(extra["enum"])])
        if "const" in extra:
            return _narrowed(kind, Literal[extra["const"]])
        if extra.get("format") == "date-time":
            return _narrowed(kind, Annotated[str, msgspec.Meta(pattern=DATE_TIME_PATTERN)])
        if set(extra) - {"uniqueItems"}:  # uniqueItems: checked where a document has it (json_report)
            raise TypeError(f"codec: no strict check for the schema keywords {sorted(extra)}")
    return kind


def _narrowed(kind: Any, strict: Any) -> Any:
    if kind is str:
        return strict
    if get_origin(kind) in (Union, types.UnionType) and str in get_args(kind):
        return Union[tuple(strict if a is str else a for a in get_args(kind))]  # noqa: UP007 - runtime tuple
    raise TypeError(f"codec: a schema-only constraint on {kind!r}, not on a str")


def _friendly(message: str) -> str:
    """msgspec's message for a date-time that does not match, without the 300-character regex."""
    return message.replace(f"`str` matching regex {DATE_TIME_PATTERN!r}", _DATE_TIME_WORDS)


_DATE_TIME_WORDS = "an RFC 3339 date-time (2025-06-08T10:00:00Z)"
_DATE_TIME = re.compile(DATE_TIME_PATTERN, re.ASCII)  # RFC 3339's DIGIT is 0-9, not any Unicode digit


def parse_date_time(text: object, *, where: str) -> datetime:
    """The one reader of stored date-times: what the schemas' `format: date-time` accepts, timezone-aware.

    Lower-case `t`/`z` and `+hhmm` offsets are read; a leap second (`23:59:60`), which no `datetime` holds,
    is folded into the next second (later, never earlier: a soak started in one ends no sooner). Digits
    must be ASCII (the pattern's `\\d` alone also matches other scripts' digits). Anything else, and what
    the pattern allows but no `datetime` holds (year 0), is InputError naming `where` (exit 3)."""
    if not isinstance(text, str) or _DATE_TIME.match(text) is None:
        raise InputError(f"{where}: {text!r} is not {_DATE_TIME_WORDS}")
    iso = text.upper().replace("Z", "+00:00")  # fixed positions: YYYY-MM-DDTHH:MM:SS, then fraction, offset
    leap = iso[17:19] == "60"
    try:
        value = datetime.fromisoformat(f"{iso[:17]}59{iso[19:]}" if leap else iso)
        return value + timedelta(seconds=1) if leap else value
    except (ValueError, OverflowError):  # year 0, or a leap second folded past 9999-12-31
        raise InputError(f"{where}: {text!r} is {_DATE_TIME_WORDS} that no time value can hold") from None


@functools.cache
def _retired(cls: type) -> frozenset[str]:
    return frozenset(getattr(cls, "RETIRED_FIELDS", ()))


_MISSING: Any = object()


class _Field(NamedTuple):
    """A record's field: its name and default (`_MISSING` where it has none), from a Struct or a dataclass."""

    name: str
    default: Any
    default_factory: Any


@functools.cache
def _fields(cls: type) -> tuple[_Field, ...]:
    if issubclass(cls, msgspec.Struct):
        return tuple(
            _Field(
                f.name,
                _MISSING if f.default is msgspec.NODEFAULT else f.default,
                _MISSING if f.default_factory is msgspec.NODEFAULT else f.default_factory,
            )
            for f in msgspec.structs.fields(cls)
        )
    return tuple(
        _Field(
            f.name,
            _MISSING if f.default is dataclasses.MISSING else f.default,
            _MISSING if f.default_factory is dataclasses.MISSING else f.default_factory,
        )
        for f in dataclasses.fields(typing.cast(Any, cls))
    )


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_jsonable(cls: type[T], data: Any, path: str = "$") -> T:
    """Build `cls` from plain JSON data, strictly; raises SchemaError naming the path."""
    try:
        return typing.cast(T, _decoder(typing.cast(Any, cls))(data))
    except _DecodeError as exc:
        raise SchemaError(f"{path}{exc.where()}: {exc.message}") from None


class _DecodeError(Exception):
    """A decoding failure; the path is collected on the way out so the happy path formats nothing."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.segments: list[str] = []

    def where(self) -> str:
        return "".join(reversed(self.segments))


Decoder = typing.Callable[[Any], Any]


@functools.cache
def _decoder(tp: Any) -> Decoder:
    """One decoding function per type, built once from the annotations (cached per process)."""
    supertype = getattr(tp, "__supertype__", None)
    if supertype is not None:  # NewType: decode as its supertype
        return _decoder(supertype)
    if tp is Any or tp is object:
        return _identity
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return _union_decoder(get_args(tp))
    if origin is tuple:
        return _tuple_decoder(_decoder(get_args(tp)[0]))
    if origin is dict:
        return _dict_decoder(_decoder(get_args(tp)[1]))
    if isinstance(tp, type) and is_record(tp):
        return _dataclass_decoder(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_decoder(tp)
    if tp is float:
        return _float
    if tp is int:
        return _int
    if tp is bool or tp is str:
        return _exact_decoder(tp)
    raise TypeError(f"cannot decode type {tp!r}")


def _identity(data: Any) -> Any:
    return data


def _union_decoder(args: tuple[Any, ...]) -> Decoder:
    optional = type(None) in args
    options = [_decoder(a) for a in args if a is not type(None)]

    def decode(data: Any) -> Any:
        if data is None and optional:
            return None
        first: _DecodeError | None = None
        for option in options:
            try:
                return option(data)
            except _DecodeError as exc:
                first = first or exc
        raise first or _DecodeError("unexpected null")

    return decode


def _tuple_decoder(item: Decoder) -> Decoder:
    def decode(data: Any) -> Any:
        if not isinstance(data, list):
            raise _DecodeError(f"expected a list, got {type(data).__name__}")
        out = []
        for i, value in enumerate(data):
            try:
                out.append(item(value))
            except _DecodeError as exc:
                exc.segments.append(f"[{i}]")
                raise
        return tuple(out)

    return decode


def _dict_decoder(value_decoder: Decoder) -> Decoder:
    def decode(data: Any) -> Any:
        if not isinstance(data, dict):
            raise _DecodeError(f"expected an object, got {type(data).__name__}")
        out = {}
        for key, value in data.items():
            try:
                out[str(key)] = value_decoder(value)
            except _DecodeError as exc:
                exc.segments.append(f".{key}")
                raise
        return out

    return decode


def _dataclass_decoder(cls: type) -> Decoder:
    fields: dict[str, Decoder] = {}

    def decode(data: Any) -> Any:
        if not fields:  # filled on first use: dataclasses may refer to each other
            fields.update({name: _decoder(tp) for name, tp in _hints(cls).items() if name in _names(cls)})
        if not isinstance(data, dict):
            raise _DecodeError(f"expected an object, got {type(data).__name__}")
        kwargs = {}
        for key, value in data.items():
            field_decoder = fields.get(key)
            if field_decoder is None:
                if value is None and key in _retired(cls):
                    continue
                raise _DecodeError(f"unknown field {key!r}")
            try:
                kwargs[key] = field_decoder(value)
            except _DecodeError as exc:
                exc.segments.append(f".{key}")
                raise
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise _DecodeError(str(exc)) from exc

    return decode


@functools.cache
def _names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in _fields(cls))


def _enum_decoder(cls: type[enum.Enum]) -> Decoder:
    def decode(data: Any) -> Any:
        try:
            return cls(data)
        except ValueError:
            raise _DecodeError(f"{data!r} is not one of {[e.value for e in cls]}") from None

    return decode


def _float(data: Any) -> float:
    if isinstance(data, int | float) and not isinstance(data, bool):
        try:
            return float(data)
        except OverflowError:  # an integer of hundreds of digits: JSON allows it, no float holds it
            raise _DecodeError("a number too large for a float") from None
    raise _DecodeError(f"expected a number, got {data!r}")


def _int(data: Any) -> int:
    if isinstance(data, int) and not isinstance(data, bool):
        return data
    raise _DecodeError(f"expected an integer, got {data!r}")


def _exact_decoder(tp: type) -> Decoder:
    def decode(data: Any) -> Any:
        if type(data) is tp:
            return data
        raise _DecodeError(f"expected {tp.__name__}, got {data!r}")

    return decode
