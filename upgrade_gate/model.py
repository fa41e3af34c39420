"""The domain model shared by every stage: snapshots, measurements, phase results, findings.

All types are frozen, slotted, keyword-only dataclasses with tuples instead of lists, so a value that
was validated once cannot drift. Identifiers are `NewType`s. JSON in and out goes through
`upgrade_gate.codec` (generic, driven by these annotations) and is checked against the JSON Schemas in
`schemas/` at every edge. Values a tool printed as N/A are `None`, and the reason lives in
the owning record's `na_reasons` (field name -> reason), never a guessed default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NewType

NodeName = NewType("NodeName", str)
Bdf = NewType("Bdf", str)  # lower-case dddd:bb:dd.f
GpuSerial = NewType("GpuSerial", str)
RuleId = NewType("RuleId", str)

SNAPSHOT_SCHEMA_VERSION = "1"


# --------------------------------------------------------------------------- snapshot


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInfo:
    """Who the snapshot is of."""

    name: NodeName
    hostname: str | None = None
    node_class: str | None = None  # e.g. "mi300x-8gpu"; used for fleet consistency and aggregates
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Software:
    """Versions of the software stack; None where no probe could tell (see the probes)."""

    kernel: str | None = None
    driver_version: str | None = None  # amdgpu kernel driver
    rocm_version: str | None = None  # release, "6.2.0"; compared with the change plan
    rocm_build: str | None = None  # as the version file prints it, "6.2.0-66"
    amdsmi_version: str | None = None
    hip_runtime_version: str | None = None
    rccl_library: str | None = None  # file librccl.so.1 resolves to, "librccl.so.1.0.70200" (ships with ROCm)
    na_reasons: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Host:
    """Host facts the incident names as causes: firmware (BIOS), kernel command line, OS release.

    A snapshot saved before these were captured has every field None and no reasons (`captured` False).
    """

    captured: bool = False  # False: the snapshot predates host facts (none of the probes was asked for)
    bios_vendor: str | None = None  # /sys/class/dmi/id/bios_vendor
    bios_version: str | None = None  # /sys/class/dmi/id/bios_version
    bios_date: str | None = None  # /sys/class/dmi/id/bios_date, as printed ("01/25/2019")
    kernel_cmdline: str | None = None  # /proc/cmdline less BOOT_IMAGE=/initrd= (the kernel image's path)
    os_id: str | None = None  # os-release ID ("ubuntu")
    os_version_id: str | None = None  # os-release VERSION_ID ("22.04")
    os_pretty_name: str | None = None  # os-release PRETTY_NAME
    na_reasons: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    """One GPU (or one compute partition of one) as the node enumerates it."""

    index: int  # enumeration order as HIP sees it (rocminfo GPU agent order)
    bdf: Bdf | None
    serial: GpuSerial | None = None
    unique_id: str | None = None
    product_name: str | None = None
    gfx_target: str | None = None
    device_id: str | None = None  # PCI device id, "0x74a1"
    numa_node: int | None = None
    compute_partition: str | None = None  # SPX/DPX/QPX/CPX/TPX
    memory_partition: str | None = None  # NPS1/NPS2/NPS4
    vram_total_mib: int | None = None
    compute_units: int | None = None
    firmware: dict[str, str] = field(default_factory=dict)  # block -> version as printed
    vbios: str | None = None
    na_reasons: dict[str, str] = field(default_factory=dict)


class LinkType(StrEnum):
    """How two GPUs talk."""

    XGMI = "XGMI"
    PCIE = "PCIE"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuLink:
    """One GPU pair of the topology matrix (a < b by BDF)."""

    a: Bdf
    b: Bdf
    link_type: LinkType
    hops: int | None = None
    weight: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PcieLink:
    """Current and maximum PCIe link of one device (from lspci LnkSta / LnkCap)."""

    bdf: Bdf
    vendor_device: str | None = None  # "1002:74a1"
    speed_gts: float | None = None
    width: int | None = None
    max_speed_gts: float | None = None
    max_width: int | None = None
    downgraded: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class NicPort:
    """One port of an RDMA device."""

    port: int
    state: str | None = None  # PORT_ACTIVE / ACTIVE / DOWN ...
    phys_state: str | None = None
    link_layer: str | None = None  # Ethernet / InfiniBand
    rate_gbps: float | None = None
    mtu: int | None = None
    gid_count: int | None = None
    roce_v2: bool | None = None
    netdev: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Nic:
    """One RDMA device (HCA / RNIC) with its ports and SR-IOV state."""

    name: str  # RDMA device name, "mlx5_0", "ionic_3"
    bdf: Bdf | None = None
    netdev: str | None = None
    fw_ver: str | None = None
    node_guid: str | None = None
    vendor_part_id: str | None = None
    ports: tuple[NicPort, ...] = ()
    sriov_numvfs: int | None = None
    sriov_totalvfs: int | None = None
    na_reasons: dict[str, str] = field(default_factory=dict)

    @property
    def gid_count(self) -> int | None:
        """Total GIDs over all ports, None if no port reported."""
        counts = [p.gid_count for p in self.ports if p.gid_count is not None]
        return sum(counts) if counts else None

    @property
    def roce_v2(self) -> bool | None:
        """True when any port carries a RoCE v2 GID."""
        flags = [p.roce_v2 for p in self.ports if p.roce_v2 is not None]
        return any(flags) if flags else None


@dataclass(frozen=True, slots=True, kw_only=True)
class SriovFunction:
    """SR-IOV state of one physical function (GPU or NIC)."""

    bdf: Bdf
    numvfs: int | None
    totalvfs: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelEvent:
    """One classified dmesg event (RAS/ECC, ring timeout, reset, link degradation)."""

    kind: str  # pattern id from the data file, e.g. "amdgpu.gpu_reset"
    severity: str  # "fatal" / "error" / "warn"
    bdf: Bdf | None
    line_no: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RocmLibrary:
    """One shared library of the node's ROCm tree (probe `rocm_libs`), keyed by soname."""

    soname: str
    path: str  # the real file, host root stripped
    symbols_sha256: str  # hash of the exported symbol set (name@version binding type)
    symbol_count: int
    file_sha256: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    """A metric with its samples and the settings that produced it.

    `key` is flat and namespaced so it diffs well: `mesh/all_reduce/busbw/1048576`,
    `rail/ionic_0/bw_avg`, `mesh/all_reduce/avg_busbw`. Two measurements compare only when their
    `settings` (sweep sizes, iterations, ranks, NCCL_* env) are equal.
    """

    key: str
    unit: str  # "GB/s", "Gb/s"
    samples: tuple[float, ...]
    settings: dict[str, str] = field(default_factory=dict)
    source: str | None = None  # probe or phase that produced it
    higher_is_better: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeStatus:
    """What happened to one probe: the evidence trail that makes fail-closed possible."""

    name: str
    ok: bool
    reason: str | None = None
    argv: tuple[str, ...] = ()
    exit_code: int | None = None
    duration_s: float | None = None
    timed_out: bool = False
    missing: bool = False
    required: bool = True  # a required probe that failed blocks; an optional one warns
    fallback_for: tuple[str, ...] = ()  # the failed probes this one stood in for
    skipped: bool = False  # nothing to read (e.g. no SR-IOV capable device): ok, recorded, not run
    notes: tuple[str, ...] = ()  # what the parser skipped or noticed (a recognised preamble), one line each


class IssueKind(StrEnum):
    """Why a fact of the snapshot cannot be taken at face value."""

    CONFLICT = "conflict"  # sources that answered disagree (driver version, port state)
    ERROR_VALUE = "error-value"  # the only answers were error texts, banners or undecodable bytes
    ABSENT_IN_SOURCE = "absent-in-source"  # one source reports a device or port another does not


@dataclass(frozen=True, slots=True, kw_only=True)
class EvidenceIssue:
    """A fact the snapshot builder could not trust: the judge blocks on every one (evidence.missing)."""

    kind: IssueKind
    subject: str  # snapshot path of the fact: "software.driver_version", "nics[name=ionic_0].ports[1].state"
    message: str  # one line naming the sources and what each printed
    values: dict[str, str] = field(default_factory=dict)  # source (probe name) -> value as printed


class PhaseStatus(StrEnum):
    """Outcome of one CVF phase on one node."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"  # skipped by policy or config; never counted as passed by the judge
    ERROR = "error"  # the phase could not run or crashed: missing evidence
    NOT_RUN = "not-run"  # an earlier phase did not pass


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseResult:
    """Result of one phase on one node, with the CVF label/annotations it implies."""

    phase: int
    name: str
    status: PhaseStatus
    reason: str | None = None
    reasons: tuple[str, ...] = ()
    measurements: tuple[Measurement, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    duration_s: float | None = None
    tool_duration_s: float | None = None
    peer: str | None = None  # phase 4/5 partner node(s)


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """One node at one time: the document the baseline store keeps and the judge compares."""

    schema_version: str = SNAPSHOT_SCHEMA_VERSION
    node: NodeInfo
    taken_at: str  # ISO 8601 UTC
    tool_version: str
    software: Software
    host: Host = field(default_factory=Host)
    gpus: tuple[Gpu, ...] = ()
    gpu_links: tuple[GpuLink, ...] = ()
    pcie: tuple[PcieLink, ...] = ()
    nics: tuple[Nic, ...] = ()
    sriov: tuple[SriovFunction, ...] = ()
    events: tuple[KernelEvent, ...] = ()
    event_patterns: str | None = None  # digest of the pattern table that classified `events` (None: unknown)
    measurements: tuple[Measurement, ...] = ()
    phases: tuple[PhaseResult, ...] = ()
    probes: tuple[ProbeStatus, ...] = ()
    evidence_issues: tuple[EvidenceIssue, ...] = ()  # conflicting or error-text evidence (blocks)
    libraries: tuple[RocmLibrary, ...] | None = None  # None: not recorded (older capture, probe failed)


def measurements_of(snapshot: Snapshot) -> tuple[Measurement, ...]:
    """Every measurement of a snapshot: its own and those of its phase results."""
    out = list(snapshot.measurements)
    for phase in snapshot.phases:
        out.extend(phase.measurements)
    return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricSummary:
    """One metric across the nodes of a class: median and spread of the per-node medians."""

    key: str
    unit: str
    median: float
    spread: float  # median absolute deviation of the per-node medians
    n_nodes: int
    settings: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassReference:
    """The prevailing state of a node class, for nodes without a baseline and the odd node out."""

    node_class: str
    nodes: tuple[NodeName, ...]
    gpu_order: tuple[str | None, ...] = ()  # prevailing BDF per index
    firmware: dict[str, str] = field(default_factory=dict)  # "gpu/<block>" or "nic/fw_ver" -> version
    software: dict[str, str] = field(default_factory=dict)
    sriov: dict[str, int] = field(default_factory=dict)  # PF BDF -> prevailing numvfs
    metrics: tuple[MetricSummary, ...] = ()


# --------------------------------------------------------------------------- judge


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """One difference at a JSON path (`gpus[serial=X].firmware.SMC`), owned by us, not deepdiff."""

    op: ChangeOp
    path: str
    baseline: object = None
    candidate: object = None
    expected: bool = False  # explained by the change plan
    expected_by: str | None = None  # which plan entry explained it


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One judged difference or failure."""

    rule: RuleId
    severity: Severity
    node: NodeName
    message: str
    device: str | None = None  # BDF, serial, NIC name or "gpu[3]"
    path: str | None = None
    expected: object = None
    actual: object = None
    evidence: str | None = None  # probe or phase file behind it
    hint: str | None = None  # e.g. an ordering pin the operator can apply


@dataclass(frozen=True, slots=True, kw_only=True)
class ChecklistRow:
    """One checklist item as reported: item, pass criterion, actual result, owner."""

    checklist: str
    item_id: str
    item: str
    criterion: str
    actual: str
    owner: str
    status: str  # "pass" / "fail" / "unattested" / "attested" / "n/a"
    required: bool = True


class CauseCategory(StrEnum):
    """Who a cause belongs to, broadly: the kind of fault behind it."""

    HARDWARE = "hardware"
    FIRMWARE = "firmware"
    DRIVER = "driver/ROCm"
    CONFIGURATION = "configuration"
    FABRIC = "fabric"
    EVIDENCE = "evidence/tooling"


@dataclass(frozen=True, slots=True, kw_only=True)
class Cause:
    """A root cause: findings of one node (or the fleet) that one fault explains, under one headline.

    Causes change what is shown, never what blocks: the verdict is computed from the findings, and a
    cause's severity is the worst of its own findings. `findings` are indexes into the owning
    `NodeReport.findings` (or `GateReport.fleet_findings` for fleet causes); every finding belongs to
    exactly one cause.
    """

    key: str  # stable within its node, e.g. "device.order", "bandwidth:mesh/all_reduce", "pcie.downgrade"
    node: NodeName
    severity: Severity
    headline: str
    category: CauseCategory
    owner: str  # the checklists' vocabulary: "platform on-call", "network on-call", ...
    rules: tuple[RuleId, ...] = ()
    findings: tuple[int, ...] = ()
    next_step: str | None = None
    details: tuple[str, ...] = ()  # extra lines a person needs at once (e.g. the permutation table)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeReport:
    """The judge's answer for one node."""

    node: NodeName
    verdict: Verdict
    findings: tuple[Finding, ...] = ()
    changes: tuple[Change, ...] = ()
    causes: tuple[Cause, ...] = ()  # the findings grouped by root cause (judge.causes)


@dataclass(frozen=True, slots=True, kw_only=True)
class GateReport:
    """The judge's whole answer: verdict, every finding, per-node results, the checklist."""

    schema_version: str = "1"
    verdict: Verdict
    generated_at: str
    tool_version: str
    plan_id: str | None = None
    policy_name: str | None = None
    nodes: tuple[NodeReport, ...] = ()
    fleet_findings: tuple[Finding, ...] = ()
    checklist: tuple[ChecklistRow, ...] = ()
    rules_evaluated: tuple[RuleId, ...] = ()  # every rule the judge ran, for one JUnit case each
    fleet_causes: tuple[Cause, ...] = ()  # fleet_findings grouped by root cause

    @property
    def findings(self) -> tuple[Finding, ...]:
        """Every finding, fleet-level first, then per node in node order."""
        out: list[Finding] = list(self.fleet_findings)
        for node in self.nodes:
            out.extend(node.findings)
        return tuple(out)
