"""JSON report: the `GateReport` as a document that validates against `report.schema.json`.

It keeps every finding and adds the grouping: `nodes[].causes[]` and `fleet_causes[]`, each cause
naming its findings by index into the owning `findings` array.

The text is the canonical layout (sorted keys, 2-space indent, UTF-8 unescaped) written by msgspec's
encoder and formatter (C): issue 14 measured 3-5 s for the 31 MB report of an 8,192-node gate through
`json.dumps(indent=2)`, whose indenting encoder is pure Python. The document is the same; only floats
in exponent range are spelled as msgspec spells them (`0.00001`, `1e16`, not `1e-05`, `1e+16`), which
is the same JSON number.

`write_json` streams the same text node by node: the report without its nodes is validated and
formatted once, then each node is encoded, checked and written, so a fleet's report is never held
whole - as a dict or as text - in memory (8,192 nodes: a 68 MB document, ~400 MB as Python objects).
`write_json_texts` writes the same document from the nodes' texts made elsewhere (`node_body`: the
spooled `gate`'s workers make them, and the parent never holds the node reports).

How a node is checked (issue 14: a JSON Schema walk per node was ~0.2 ms, ~1.8 s serial in the
parent at 8,192 nodes, more than everything else the parent does): the first node is validated
against the report schema inside the skeleton, as the skeleton is; every node's encoded text is
decoded back strictly as a `NodeReport` (`codec.decode_json`, untrusted: unknown keys, missing
`ALWAYS` fields, wrong types, enum values, patterns, lengths and bounds refused, ~0.05 ms) and its
causes' finding indexes are checked unique. That is the node's part of the schema: the schema is
generated from the same model annotations (`upgrade_gate.schemagen`, `--check` in the tests), and
`tests/test_report_node_check.py` fails if a keyword the strict decode does not enforce (a `format`,
say) ever appears under `NodeReport` in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from upgrade_gate import codec, docio, schemas
from upgrade_gate.errors import SchemaError
from upgrade_gate.model import GateReport, NodeReport, replace
from upgrade_gate.report.interface import ReportContext

_ENCODER = msgspec.json.Encoder(order="sorted")


def report_to_dict(report: GateReport) -> dict[str, Any]:
    """Plain-JSON form of a report, validated against the report schema."""
    data: dict[str, Any] = codec.to_jsonable(report)
    schemas.validate("report", data, source="gate report")
    return data


def render_json(ctx: ReportContext) -> str:
    """Canonical JSON text of the report: every finding, and the causes grouping them."""
    return b"".join(_chunks(ctx)).decode("utf-8")


def write_json(ctx: ReportContext, path: Path) -> None:
    """`render_json`'s text written to `path` node by node (atomically: a temp file, then renamed)."""
    docio.write_atomic(path, _chunks(ctx))


_NODES = b'\n  "nodes": []'


def _chunks(ctx: ReportContext) -> Iterator[bytes]:
    """The canonical text in pieces: the report around its nodes, then one node at a time."""
    from upgrade_gate.judge.causes import ensure_causes

    report = ensure_causes(ctx.report, baselines=ctx.baselines, candidates=ctx.candidates)
    return _framed(replace(report, nodes=()), (node_body(node) for node in report.nodes))


def write_json_texts(report: GateReport, texts: Iterable[bytes], path: Path) -> None:
    """`write_json` for a report whose nodes come as their texts (`node_body`, made elsewhere: the
    spooled `gate`'s workers), in order, after `report` (its own `nodes` empty): the same document."""
    if report.nodes:
        raise ValueError("write_json_texts: the report's nodes come as texts")
    docio.write_atomic(path, _framed(report, texts))


def _framed(skeleton_report: GateReport, texts: Iterable[bytes]) -> Iterator[bytes]:
    skeleton = report_to_dict(skeleton_report)
    text = msgspec.json.format(_ENCODER.encode(skeleton), indent=2)
    head, found, tail = text.partition(_NODES)
    started = False
    for body in texts:
        if not found:
            raise ValueError("the report's skeleton has no nodes array")
        if not started:  # the whole schema once, on the parsed text of the first node
            node = msgspec.json.decode(body)
            schemas.validate("report", {**skeleton, "nodes": [node]}, source=f"gate report, node {node.get('node')}")
            yield head + b'\n  "nodes": [\n    ' + body
            started = True
        else:
            yield b",\n    " + body
    yield (b"\n  ]" + tail + b"\n") if started else (text + b"\n")


def node_body(node: NodeReport) -> bytes:
    """A node report's text in the JSON report: encoded, checked (`check_node`), indented in place."""
    encoded = encode_node(node)
    check_node(encoded, source=_where(node))
    return msgspec.json.format(encoded, indent=2).replace(b"\n", b"\n    ")


def encode_node(node: NodeReport) -> bytes:
    """A node report's compact JSON, keys sorted (dataclass fields straight from msgspec, C)."""
    try:
        return _ENCODER.encode(node)
    except TypeError:  # a dict with non-string keys in a finding's free-form value: stringify them first
        return _ENCODER.encode(msgspec.to_builtins(node, str_keys=True))


def check_node(encoded: bytes, *, source: str) -> None:
    """Raise SchemaError unless `encoded` is a node report the report schema accepts (module docstring)."""
    decoded = codec.decode_json(NodeReport, encoded, source=source, own=True)  # our own bytes: no key repeats
    for cause in decoded.causes:
        if len(set(cause.findings)) != len(cause.findings):
            raise SchemaError(f"{source}: cause {cause.key}: findings {list(cause.findings)} repeat an index")


def _where(node: NodeReport) -> str:
    return f"gate report, node {node.node}"
