"""Generic JSON codec for the frozen dataclasses of `upgrade_gate.model`.

Driven by the type annotations, so a field added to the model needs no codec change. Decoding is
strict: an unknown key or a wrong type raises `SchemaError` naming the path. Documents are validated
against their JSON Schema before decoding (see `upgrade_gate.schemas`), so these checks are a second
line, not the only one. Enum values encode as their `.value`; tuples as lists; None stays null.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from typing import Any, TypeVar, Union, get_args, get_origin

from upgrade_gate.errors import SchemaError

T = TypeVar("T")


def to_jsonable(obj: object) -> Any:
    """Turn a model value into plain JSON types (dict, list, str, int, float, bool, None)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in _fields(type(obj))}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, tuple | list):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    return obj


@functools.cache
def _fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(cls)


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
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
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
        return float(data)
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
