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
    return typing.cast(T, _decode(cls, data, path))


def _decode(tp: Any, data: Any, path: str) -> Any:
    # NewType: decode as its supertype.
    supertype = getattr(tp, "__supertype__", None)
    if supertype is not None:
        return _decode(supertype, data, path)
    if tp is Any or tp is object:
        return data
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if data is None and type(None) in args:
            return None
        errors: list[str] = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _decode(arg, data, path)
            except SchemaError as exc:
                errors.append(str(exc))
        raise SchemaError(errors[0] if errors else f"{path}: unexpected null")
    if origin is tuple:
        if not isinstance(data, list):
            raise SchemaError(f"{path}: expected a list, got {type(data).__name__}")
        (item_tp, *_) = get_args(tp)
        return tuple(_decode(item_tp, v, f"{path}[{i}]") for i, v in enumerate(data))
    if origin is dict:
        if not isinstance(data, dict):
            raise SchemaError(f"{path}: expected an object, got {type(data).__name__}")
        _, val_tp = get_args(tp)
        return {str(k): _decode(val_tp, v, f"{path}.{k}") for k, v in data.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise SchemaError(f"{path}: expected an object, got {type(data).__name__}")
        hints = _hints(tp)
        names = {f.name for f in _fields(tp)}
        unknown = set(data) - names
        if unknown:
            raise SchemaError(f"{path}: unknown field {sorted(unknown)[0]!r}")
        kwargs = {k: _decode(hints[k], v, f"{path}.{k}") for k, v in data.items()}
        try:
            return tp(**kwargs)
        except TypeError as exc:
            raise SchemaError(f"{path}: {exc}") from exc
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(data)
        except ValueError as exc:
            raise SchemaError(f"{path}: {data!r} is not one of {[e.value for e in tp]}") from exc
    if tp is float:
        if isinstance(data, int | float) and not isinstance(data, bool):
            return float(data)
        raise SchemaError(f"{path}: expected a number, got {data!r}")
    if tp is int:
        if isinstance(data, int) and not isinstance(data, bool):
            return data
        raise SchemaError(f"{path}: expected an integer, got {data!r}")
    if tp is bool or tp is str:
        if type(data) is tp:
            return data
        raise SchemaError(f"{path}: expected {tp.__name__}, got {data!r}")
    raise SchemaError(f"{path}: cannot decode type {tp!r}")
