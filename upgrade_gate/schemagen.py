"""Generate the JSON Schemas of the modelled documents from the model (one source per shape).

`schemas/snapshot.schema.json` (and its columnar form, `snapshot-v2.schema.json`: `model.columnar`),
`report.schema.json` and `class-reference.schema.json` are written by
`python -m upgrade_gate.schemas --write` and checked by `--check` (and by tests/test_schemagen.py): a
field added to the model reaches the schema, the codec and the docs at once. msgspec emits the schema
from the dataclasses and the `msgspec.Meta` constraints in their annotations (`model.types`); this
module only shapes it into a published document:

- the root class becomes the top level, with `$schema`, `$id` and a title; the other classes are
  `$defs` under their class names, properties in field order;
- every object is closed (`additionalProperties: false`): the codec refuses unknown keys too;
- `required` lists the fields without a default plus those marked `ALWAYS` (documents carry them
  even though code may leave them out);
- a class's `RETIRED_FIELDS` stay accepted as null (`deprecated`): documents written before a field
  was removed still read, and the decoders drop the key;
- no `default` keywords: fastjsonschema fills defaults into the document it validates, and validating
  must not change what is then decoded (the model's defaults apply when decoding anyway).

Plans, policies, checklists, manifests, windows, the denylist and the store marker are not modelled as
dataclasses here; their schemas stay hand-written (jsonschema's messages serve the people writing them).
"""

from __future__ import annotations

import json
import re
import sys
import typing
from pathlib import Path
from typing import Any

import msgspec

from upgrade_gate.model import ClassReference, GateReport, Snapshot
from upgrade_gate.model import columnar as _columnar
from upgrade_gate.model import reference as _reference
from upgrade_gate.model import report as _report
from upgrade_gate.model import snapshot as _snapshot
from upgrade_gate.model.types import always, is_record

DOCUMENTS: dict[str, tuple[type, str]] = {
    "snapshot": (Snapshot, "upgrade-gate node snapshot"),
    "snapshot-v2": (_columnar.SnapshotV2, "upgrade-gate node snapshot, columnar measurements (schema v2)"),
    "report": (GateReport, "upgrade-gate gate report"),
    "class-reference": (ClassReference, "upgrade-gate class reference"),
}
"""Schema name -> (root class, title)."""

_DRAFT = "https://json-schema.org/draft/2020-12/schema"
_ID = "https://upgrade-gate.dev/schemas/{name}.schema.json"
_REF = "#/$defs/{name}"
_RETIRED = {"type": "null", "deprecated": True, "description": "removed (nothing filled it); accepted as null"}


def _any_value(tp: type) -> dict[str, Any]:
    """`object` fields (a finding's expected/actual values) take any JSON value (no keyword but a note)."""
    if tp is object:
        return {"description": "any JSON value"}
    raise NotImplementedError(tp)


def _classes() -> dict[str, type]:
    out: dict[str, type] = {}
    for module in (_snapshot, _columnar, _reference, _report):
        for value in vars(module).values():
            if isinstance(value, type) and is_record(value) and value.__module__ == module.__name__:
                out[value.__name__] = value
    return out


def _required(field: msgspec.structs.FieldInfo, hints: dict[str, Any]) -> bool:
    """No default, or marked `ALWAYS`."""
    return field.required or always(hints[field.name])


def _shape(cls: type, generated: dict[str, Any]) -> dict[str, Any]:
    """One class's object schema: closed, properties in field order, required as documents need them."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = msgspec.structs.fields(cls)
    properties = {f.name: _without_default(generated["properties"][f.name]) for f in fields}
    for name in getattr(cls, "RETIRED_FIELDS", ()):
        properties[name] = dict(_RETIRED)
    required = [f.name for f in fields if _required(f, hints)]
    out: dict[str, Any] = {k: generated[k] for k in ("title", "description") if k in generated}
    if "description" in out:  # the docstring's paragraphs, each on one line
        out["description"] = re.sub(r"(?<!\n)\n(?!\n)", " ", out["description"])
    out.update(type="object", additionalProperties=False, required=required, properties=properties)
    return out


def _without_default(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != "default"}


def generate(name: str) -> dict[str, Any]:
    """The schema document `name` (a key of DOCUMENTS), as a dict."""
    root, title = DOCUMENTS[name]
    (_top,), components = msgspec.json.schema_components([root], schema_hook=_any_value, ref_template=_REF)
    classes = _classes()
    defs = {key: _shape(classes[key], value) if key in classes else value for key, value in components.items()}
    body = defs.pop(root.__name__)
    body.pop("title", None)
    return {"$schema": _DRAFT, "$id": _ID.format(name=name), "title": title, **body, "$defs": defs}


def render(name: str) -> str:
    """The schema file's text: two-space JSON, a value on one line where it fits, trailing newline."""
    return _dump(generate(name), 0) + "\n"


_WIDTH = 118


def _dump(value: Any, indent: int) -> str:
    flat = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, dict | list) or not value or indent + len(flat) + 24 <= _WIDTH:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, list):
        items = [pad + _dump(v, indent + 2) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    entries = [f"{pad}{json.dumps(k)}: {_dump(v, indent + 2)}" for k, v in value.items()]
    return "{\n" + ",\n".join(entries) + "\n" + " " * indent + "}"


def stale(folder: Path) -> list[str]:
    """Names of the generated schemas whose file in `folder` differs from what the model generates."""
    return [n for n in DOCUMENTS if not _same(folder / f"{n}.schema.json", render(n))]


def _same(path: Path, text: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") == text
    except FileNotFoundError:
        return False


def main(argv: list[str]) -> int:
    """`--write`: regenerate the files; `--check`: exit 1 naming the stale ones."""
    from upgrade_gate import shipped

    folder = shipped.folder("schemas")
    if argv == ["--write"]:
        for name in DOCUMENTS:
            (folder / f"{name}.schema.json").write_text(render(name), encoding="utf-8")
            print(f"wrote {folder / name}.schema.json")
        return 0
    if argv == ["--check"]:
        out = stale(folder)
        for name in out:
            print(f"{folder / name}.schema.json differs from the model: run python -m upgrade_gate.schemas --write")
        return 1 if out else 0
    print("usage: python -m upgrade_gate.schemas --write | --check", file=sys.stderr)
    return 2
