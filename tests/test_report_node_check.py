"""The JSON report checks each node by a strict typed decode, not a schema walk: the two must agree.

`report.json_report` validates the report's envelope and its first node against the report schema,
and every node by decoding its text strictly back into a `NodeReport` (plus unique finding indexes
per cause). These tests pin that this is the node's whole schema: the schema under `NodeReport` uses
only keywords the decode enforces, and what the schema refuses, the check refuses too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.report_sample import sample_report
from upgrade_gate import schemas
from upgrade_gate.errors import SchemaError
from upgrade_gate.judge.causes import ensure_causes
from upgrade_gate.model import GateReport, NodeName, NodeReport, RuleId, replace
from upgrade_gate.report.interface import ReportContext
from upgrade_gate.report.json_report import check_node, encode_node, render_json, write_json

# What `codec.decode_json` enforces (types, closed objects, required, enums, patterns, lengths,
# bounds), what documents a schema without constraining (description, title), and `uniqueItems`,
# which `check_node` checks itself.
ENFORCED = {
    "$ref",
    "additionalProperties",
    "anyOf",
    "description",
    "enum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "items",
    "maxItems",
    "maxLength",
    "maximum",
    "minItems",
    "minLength",
    "minimum",
    "pattern",
    "properties",
    "required",
    "title",
    "type",
    "uniqueItems",
}


def _keywords_under(name: str) -> set[str]:
    defs = schemas.load_schema("report")["$defs"]
    seen: set[str] = set()
    keys: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                keys.add(key)
                if key == "$ref":
                    target = sub.rsplit("/", 1)[-1]
                    if target not in seen:
                        seen.add(target)
                        walk(defs[target])
                elif key == "properties":
                    for prop in sub.values():
                        walk(prop)
                else:
                    walk(sub)
        elif isinstance(value, list):
            for sub in value:
                walk(sub)

    seen.add(name)
    walk(defs[name])
    return keys


def test_report_node_schema_uses_only_keywords_the_strict_decode_enforces() -> None:
    extra = _keywords_under("NodeReport") - ENFORCED
    assert not extra, f"check these in json_report.check_node (or validate every node again): {sorted(extra)}"


def _report() -> GateReport:
    return ensure_causes(sample_report(), baselines={}, candidates={})


def _node() -> NodeReport:
    node = _report().nodes[0]
    assert node.findings and node.causes
    return node


def _hostile_nodes() -> dict[str, NodeReport]:
    node = _node()
    finding, cause = node.findings[0], node.causes[0]
    bad: dict[str, Any] = {
        "rule id breaks its pattern": replace(node, findings=(replace(finding, rule=RuleId("Not A Rule")),)),
        "verdict outside the enum": replace(node, verdict="MAYBE"),
        "severity outside the enum": replace(node, findings=(replace(finding, severity="fatal"),)),
        "negative finding index": replace(node, causes=(replace(cause, findings=(-1,)),)),
        "repeated finding index": replace(node, causes=(replace(cause, findings=(0, 0)),)),
        "empty cause key": replace(node, causes=(replace(cause, key=""),)),
        "message not a string": replace(node, findings=(replace(finding, message=3),)),
        "float where an integer goes": replace(node, causes=(replace(cause, findings=(0.5,)),)),
    }
    return bad


@pytest.mark.parametrize("case", sorted(_hostile_nodes()))
def test_report_node_check_refuses_what_the_schema_refuses(case: str) -> None:
    node = _hostile_nodes()[case]
    encoded = encode_node(node)
    skeleton = json.loads(render_json(ReportContext(report=replace(sample_report(), nodes=()))))
    with pytest.raises(SchemaError):
        schemas.validate("report", {**skeleton, "nodes": [json.loads(encoded)]}, source="t")
    with pytest.raises(SchemaError, match="node x"):
        check_node(encoded, source="node x")


@pytest.mark.parametrize(
    ("case", "edit"),
    [
        ("unknown key", lambda d: {**d, "extra": 1}),
        ("unknown key in a finding", lambda d: {**d, "findings": [{**d["findings"][0], "extra": 1}]}),
        ("an ALWAYS field left out", lambda d: {k: v for k, v in d.items() if k != "changes"}),
        ("null where a list goes", lambda d: {**d, "causes": None}),
    ],
)
def test_report_node_check_refuses_text_the_schema_refuses(case: str, edit: Any) -> None:
    data = edit(json.loads(encode_node(_node())))
    skeleton = json.loads(render_json(ReportContext(report=replace(sample_report(), nodes=()))))
    with pytest.raises(SchemaError):
        schemas.validate("report", {**skeleton, "nodes": [data]}, source="t")
    with pytest.raises(SchemaError, match="node x"):
        check_node(json.dumps(data).encode(), source="node x")


def test_report_node_check_accepts_what_the_schema_accepts() -> None:
    report = _report()
    skeleton = json.loads(render_json(ReportContext(report=replace(report, nodes=()))))
    for node in report.nodes:
        encoded = encode_node(node)
        schemas.validate("report", {**skeleton, "nodes": [json.loads(encoded)]}, source="t")
        check_node(encoded, source="t")


def test_report_json_refuses_a_bad_node_after_the_first(tmp_path: Path) -> None:
    report = _report()
    good = report.nodes[0]
    bad = replace(good, node=NodeName("gpu-node-99"), findings=(replace(good.findings[0], rule=RuleId("Bad")),))
    path = tmp_path / "report.json"
    with pytest.raises(SchemaError, match="gpu-node-99"):
        write_json(ReportContext(report=replace(report, nodes=(*report.nodes, bad))), path)
    assert not path.exists()  # the atomic writer left nothing behind


def test_report_json_node_text_is_the_same_with_non_string_keys() -> None:
    node = _node()
    odd = replace(node, findings=(replace(node.findings[0], data={2: "b", 10: "a"}),))
    assert json.loads(encode_node(odd))["findings"][0]["data"] == {"10": "a", "2": "b"}
