"""JSON report: the `GateReport` as a document that validates against `report.schema.json`.

It keeps every finding and adds the grouping: `nodes[].causes[]` and `fleet_causes[]`, each cause
naming its findings by index into the owning `findings` array.
"""

from __future__ import annotations

from typing import Any

from upgrade_gate import codec, schemas
from upgrade_gate.model import GateReport
from upgrade_gate.report.interface import ReportContext
from upgrade_gate.snapshot.io import canonical_json


def report_to_dict(report: GateReport) -> dict[str, Any]:
    """Plain-JSON form of a report, validated against the report schema."""
    data: dict[str, Any] = codec.to_jsonable(report)
    schemas.validate("report", data, source="gate report")
    return data


def render_json(ctx: ReportContext) -> str:
    """Canonical JSON text of the report: every finding, and the causes grouping them."""
    from upgrade_gate.judge.causes import ensure_causes

    return canonical_json(report_to_dict(ensure_causes(ctx.report, baselines=ctx.baselines, candidates=ctx.candidates)))
