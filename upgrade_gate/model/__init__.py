"""The domain model shared by every stage: snapshots, class references, findings and reports.

All types are frozen, keyword-only msgspec Structs (`model.types.Record`; copy one with `replace`) with
tuples instead of lists, so a value that was validated once cannot drift. Identifiers are `NewType`s. One
module per document kind: `model.snapshot`, `model.reference`, `model.report`; `model.types` holds the
identifiers and the value constraints (msgspec `Meta` in `Annotated`) that the annotations carry. The JSON
Schemas of these documents are generated from the classes (`upgrade_gate.schemagen`, `python -m
upgrade_gate.schemas --write`), so the model, the codec (`upgrade_gate.codec`, driven by the annotations)
and the schemas cannot drift apart. Import from here: `from upgrade_gate.model import Snapshot`.
"""

from upgrade_gate.model.reference import ClassReference, MetricSummary
from upgrade_gate.model.report import (
    Cause,
    CauseCategory,
    Change,
    ChangeOp,
    ChecklistRow,
    Finding,
    GateReport,
    NodeReport,
    Severity,
    Verdict,
)
from upgrade_gate.model.snapshot import (
    LAST_PHASE,
    SNAPSHOT_SCHEMA_VERSION,
    EvidenceIssue,
    Gpu,
    GpuHealth,
    GpuLink,
    Host,
    IssueKind,
    KernelEvent,
    LinkType,
    Measurement,
    Nic,
    NicPort,
    NodeInfo,
    PcieLink,
    PhaseResult,
    PhaseStatus,
    ProbeStatus,
    RankDevice,
    RocmLibrary,
    Snapshot,
    Software,
    SriovFunction,
    measurements_of,
)
from upgrade_gate.model.types import Bdf, GpuSerial, NodeName, Record, RuleId, is_record, replace

__all__ = [
    "LAST_PHASE",
    "SNAPSHOT_SCHEMA_VERSION",
    "Bdf",
    "Cause",
    "CauseCategory",
    "Change",
    "ChangeOp",
    "ChecklistRow",
    "ClassReference",
    "EvidenceIssue",
    "Finding",
    "GateReport",
    "Gpu",
    "GpuHealth",
    "GpuLink",
    "GpuSerial",
    "Host",
    "IssueKind",
    "KernelEvent",
    "LinkType",
    "Measurement",
    "MetricSummary",
    "Nic",
    "NicPort",
    "NodeInfo",
    "NodeName",
    "NodeReport",
    "PcieLink",
    "PhaseResult",
    "PhaseStatus",
    "ProbeStatus",
    "RankDevice",
    "Record",
    "RocmLibrary",
    "RuleId",
    "Severity",
    "Snapshot",
    "Software",
    "SriovFunction",
    "Verdict",
    "is_record",
    "measurements_of",
    "replace",
]
