"""The judge's answer: findings, changes, causes, checklist rows, per-node and whole reports.

`schemas/report.schema.json` is generated from these classes (`python -m upgrade_gate.schemas --write`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from msgspec import Meta

from upgrade_gate.model.types import ALWAYS, Count, DateTime, Name, NodeName, Record, RuleId, RuleIdText, const, one_of

REPORT_SCHEMA_VERSION = "1"


class Severity(StrEnum):
    """How much a finding matters; BLOCK findings make the verdict BLOCK."""

    BLOCK = "block"
    WARN = "warn"
    INFO = "info"


class Verdict(StrEnum):
    """The gate's answer."""

    PASS = "PASS"
    BLOCK = "BLOCK"


class ChangeOp(StrEnum):
    """Kind of a difference between baseline and candidate."""

    ADDED = "added"
    REMOVED = "removed"
    CHANGED = "changed"


class Change(Record, frozen=True, kw_only=True):
    """One difference at a JSON path (`gpus[serial=X].firmware.SMC`), owned by us, not deepdiff."""

    op: ChangeOp
    path: str
    baseline: object = None
    candidate: object = None
    expected: Annotated[bool, Meta(description="explained by the change plan")] = False
    expected_by: Annotated[str | None, Meta(description="which plan entry explained it")] = None


class Finding(Record, frozen=True, kw_only=True):
    """One judged difference or failure."""

    rule: RuleIdText
    severity: Severity
    node: NodeName
    message: str
    device: Annotated[str | None, Meta(description='BDF, serial, NIC name or "gpu[3]"')] = None
    path: str | None = None
    expected: object = None
    actual: object = None
    evidence: Annotated[str | None, Meta(description="probe or phase file behind it")] = None
    hint: Annotated[str | None, Meta(description="e.g. an ordering pin the operator can apply")] = None
    data: Annotated[
        object,
        Meta(description="the rule's facts a reporter renders as they are (device.order_changed: the order table)"),
    ] = None


CHECKLIST_STATUSES = ("pass", "fail", "unverified", "unattested", "attested", "n/a", "warn")


class ChecklistRow(Record, frozen=True, kw_only=True):
    """One checklist item as reported: item, pass criterion, actual result, owner."""

    checklist: str
    item_id: str
    item: str
    criterion: str
    actual: str
    owner: str
    status: Annotated[str, one_of(*CHECKLIST_STATUSES)]
    required: bool = True


class CauseCategory(StrEnum):
    """Who a cause belongs to, broadly: the kind of fault behind it."""

    HARDWARE = "hardware"
    FIRMWARE = "firmware"
    DRIVER = "driver/runtime"  # vendor-neutral: the GPU driver and its runtime (ROCm, CUDA) (issue 30)
    CONFIGURATION = "configuration"
    FABRIC = "fabric"
    EVIDENCE = "evidence/tooling"


class Cause(Record, frozen=True, kw_only=True):
    """A root cause: findings of one node (or the fleet) that one fault explains, under one headline.

    Causes change what is shown, never what blocks: the verdict is computed from the findings, and a
    cause's severity is the worst of its own findings. `findings` are indexes into the owning
    `NodeReport.findings` (or `GateReport.fleet_findings` for fleet causes); every finding belongs to
    exactly one cause.
    """

    key: Annotated[Name, Meta(description='stable within its node: "device.order", "bandwidth:mesh/all_reduce"')]
    node: NodeName
    severity: Severity
    headline: str
    category: CauseCategory
    owner: Annotated[str, Meta(description='the checklists\' vocabulary: "platform on-call", "network on-call"')]
    rules: tuple[RuleIdText, ...] = ()
    findings: Annotated[tuple[Count, ...], ALWAYS, Meta(extra_json_schema={"uniqueItems": True})] = ()
    next_step: str | None = None
    details: Annotated[tuple[str, ...], Meta(description="extra lines a person needs at once")] = ()


class NodeReport(Record, frozen=True, kw_only=True):
    """The judge's answer for one node."""

    node: NodeName
    verdict: Verdict
    findings: Annotated[tuple[Finding, ...], ALWAYS] = ()
    changes: Annotated[tuple[Change, ...], ALWAYS] = ()
    causes: Annotated[tuple[Cause, ...], Meta(description="the findings grouped by root cause")] = ()


class GateReport(Record, frozen=True, kw_only=True):
    """The judge's answer: verdict, per-node findings and changes, fleet findings, checklist rows."""

    schema_version: Annotated[str, const(REPORT_SCHEMA_VERSION), ALWAYS] = REPORT_SCHEMA_VERSION
    verdict: Verdict
    generated_at: DateTime
    tool_version: str
    plan_id: str | None = None
    policy_name: str | None = None
    nodes: Annotated[tuple[NodeReport, ...], ALWAYS] = ()
    fleet_findings: Annotated[tuple[Finding, ...], ALWAYS] = ()
    checklist: Annotated[tuple[ChecklistRow, ...], ALWAYS] = ()
    rules_evaluated: Annotated[
        tuple[RuleId, ...], Meta(description="every rule the judge ran, for one JUnit case each")
    ] = ()
    fleet_causes: Annotated[tuple[Cause, ...], Meta(description="fleet_findings grouped by root cause")] = ()

    @property
    def findings(self) -> tuple[Finding, ...]:
        """Every finding, fleet-level first, then per node in node order."""
        out: list[Finding] = list(self.fleet_findings)
        for node in self.nodes:
            out.extend(node.findings)
        return tuple(out)
