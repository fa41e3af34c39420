"""JSON report: the `GateReport` as a document that validates against `report.schema.json`.

It keeps every finding and adds the grouping: `nodes[].causes[]` and `fleet_causes[]`, each cause
naming its findings by index into the owning `findings` array.

The text is the canonical layout (sorted keys, 2-space indent, UTF-8 unescaped) written by msgspec's
encoder and formatter (C): issue 14 measured 3-5 s for the 31 MB report of an 8,192-node gate through
`json.dumps(indent=2)`, whose indenting encoder is pure Python. The document is the same; only floats
in exponent range are spelled as msgspec spells them (`0.00001`, `1e16`, not `1e-05`, `1e+16`), which
is the same JSON number.
"""

from __future__ import annotations

from typing import Any

import msgspec

from upgrade_gate import codec, schemas
from upgrade_gate.model import GateReport
from upgrade_gate.report.interface import ReportContext

_ENCODER = msgspec.json.Encoder(order="sorted")


def report_to_dict(report: GateReport) -> dict[str, Any]:
    """Plain-JSON form of a report, validated against the report schema."""
    data: dict[str, Any] = codec.to_jsonable(report)
    schemas.validate("report", data, source="gate report")
    return data


def render_json(ctx: ReportContext) -> str:
    """Canonical JSON text of the report: every finding, and the causes grouping them."""
    from upgrade_gate.judge.causes import ensure_causes

    data = report_to_dict(ensure_causes(ctx.report, baselines=ctx.baselines, candidates=ctx.candidates))
    return msgspec.json.format(_ENCODER.encode(data), indent=2).decode("utf-8") + "\n"
