"""The snapshot: one node at one time, as the baseline store keeps it and the judge compares it.

`schemas/snapshot.schema.json` is generated from these classes (`python -m upgrade_gate.schemas
--write`); the constraints in the annotations are the schema's. Values a tool printed as N/A are
`None`, with the reason in the owning record's `na_reasons` (field name -> reason), never a guess.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar

from msgspec import Meta, field

from upgrade_gate.model.types import (
    ALWAYS,
    MAX_TEXT,
    BdfText,
    Count,
    DateTime,
    GpuSerial,
    Name,
    NodeNameText,
    OptText,
    Reasons,
    Record,
    Sha256,
    StrMap,
    Text,
    const,
    one_of,
)

SNAPSHOT_SCHEMA_VERSION = "1"


class NodeInfo(Record, frozen=True, kw_only=True):
    """Who the snapshot is of."""

    name: NodeNameText
    hostname: OptText = None
    node_class: Annotated[OptText, Meta(description='e.g. "mi300x-8gpu": fleet consistency and aggregates')] = None
    labels: StrMap = field(default_factory=dict)


class Software(Record, frozen=True, kw_only=True):
    """Versions of the software stack; null where no probe could tell (see the probes)."""

    RETIRED_FIELDS: ClassVar[tuple[str, ...]] = ("hip_runtime_version",)  # no probe ever filled it
    kernel: Annotated[OptText, ALWAYS] = None
    driver_version: Annotated[OptText, ALWAYS, Meta(description="amdgpu kernel driver")] = None
    rocm_version: Annotated[OptText, ALWAYS, Meta(description='release, "6.2.0"; compared with the plan')] = None
    rocm_build: Annotated[OptText, Meta(description='as the version file prints it, "6.2.0-66"')] = None
    amdsmi_version: OptText = None
    rccl_library: Annotated[
        OptText,
        Meta(description="file name librccl.so.1 resolves to under the ROCm lib dir (librccl.so.1.0.70200)"),
    ] = None
    na_reasons: Reasons = field(default_factory=dict)


class Host(Record, frozen=True, kw_only=True):
    """Host facts the incident names as causes: firmware (BIOS), kernel command line, OS release.

    Absent from snapshots saved before they were captured (read back with `captured` false).
    """

    captured: Annotated[bool, ALWAYS, Meta(description="false: the snapshot predates host facts")] = False
    bios_vendor: Annotated[OptText, Meta(description="/sys/class/dmi/id/bios_vendor")] = None
    bios_version: Annotated[OptText, Meta(description="/sys/class/dmi/id/bios_version")] = None
    bios_date: Annotated[OptText, Meta(description='/sys/class/dmi/id/bios_date, as printed ("01/25/2019")')] = None
    kernel_cmdline: Annotated[OptText, Meta(description="/proc/cmdline less BOOT_IMAGE=/initrd=")] = None
    os_id: Annotated[OptText, Meta(description='os-release ID ("ubuntu")')] = None
    os_version_id: Annotated[OptText, Meta(description='os-release VERSION_ID ("22.04")')] = None
    os_pretty_name: Annotated[OptText, Meta(description="os-release PRETTY_NAME")] = None
    na_reasons: Reasons = field(default_factory=dict)


CountMap = Annotated[dict[str, Count], Meta(max_length=64)]
"""Counter name as the tool prints it -> count."""


class GpuHealth(Record, frozen=True, kw_only=True):
    """A GPU's memory health counters, reset state and compute mode, as its vendor's tool printed them.

    Null where the tool printed N/A (the reason in `na_reasons`) or the GPU has no such mechanism: row
    remapping (A100 and later) and page retirement (Volta/Turing) are two generations of one repair.
    Judged by `gpu.health` (docs/vendors.md).
    """

    source: Annotated[Name, Meta(description='the probe that printed them ("nvidia_smi")')]
    ecc_mode: Annotated[OptText, ALWAYS, Meta(description='"Enabled" / "Disabled", as printed')] = None
    ecc_mode_pending: Annotated[
        OptText, Meta(description="the ECC mode the GPU takes at its next reset, as printed (added 2026-12)")
    ] = None
    ecc_volatile_uncorrectable: Annotated[
        CountMap,
        ALWAYS,
        Meta(description="uncorrectable ECC counts since the driver loaded, by the tool's counter name"),
    ] = field(default_factory=dict)
    ecc_aggregate_uncorrectable: Annotated[
        CountMap, ALWAYS, Meta(description="uncorrectable ECC counts over the GPU's life (kept in the inforom)")
    ] = field(default_factory=dict)
    remapped_rows_correctable: Annotated[Count | None, ALWAYS] = None
    remapped_rows_uncorrectable: Annotated[Count | None, ALWAYS] = None
    remap_pending: Annotated[bool | None, ALWAYS, Meta(description="a row remap waits for a GPU reset")] = None
    remap_failure: Annotated[bool | None, ALWAYS, Meta(description="a remap failed: the bank is out of spare rows")] = (
        None
    )
    retired_pages_single_bit: Annotated[Count | None, ALWAYS] = None
    retired_pages_double_bit: Annotated[Count | None, ALWAYS] = None
    retirement_pending: Annotated[bool | None, ALWAYS, Meta(description="pages wait for a reset to be retired")] = None
    reset_required: Annotated[bool | None, ALWAYS, Meta(description="the tool says the GPU needs a reset")] = None
    compute_mode: Annotated[
        OptText,
        Meta(description='"Default" / "Exclusive_Process" / "Prohibited": which processes may use the GPU (2026-12)'),
    ] = None
    na_reasons: Reasons = field(default_factory=dict)


class Gpu(Record, frozen=True, kw_only=True):
    """One GPU (or one compute partition of one) as the node enumerates it."""

    index: Annotated[int, Meta(ge=0, le=4095, description="enumeration order as HIP sees it (rocminfo)")]
    bdf: BdfText | None
    serial: Annotated[Annotated[GpuSerial, Meta(max_length=MAX_TEXT)] | None, ALWAYS] = None
    unique_id: Annotated[OptText, ALWAYS] = None
    product_name: Annotated[OptText, ALWAYS] = None
    gfx_target: Annotated[OptText, ALWAYS] = None
    device_id: Annotated[OptText, Meta(description='PCI device id, "0x74a1"')] = None
    numa_node: Annotated[int | None, ALWAYS] = None
    compute_partition: Annotated[OptText, ALWAYS, Meta(description="SPX/DPX/QPX/CPX/TPX")] = None
    memory_partition: Annotated[OptText, ALWAYS, Meta(description="NPS1/NPS2/NPS4")] = None
    vram_total_mib: Annotated[int | None, ALWAYS] = None
    compute_units: int | None = None
    firmware: Annotated[StrMap, ALWAYS, Meta(description="block -> version as printed")] = field(default_factory=dict)
    vbios: Annotated[OptText, ALWAYS] = None
    health: Annotated[
        GpuHealth | None,
        Meta(description="memory health counters; null where the tool does not report them (reason in na_reasons)"),
    ] = None
    na_reasons: Reasons = field(default_factory=dict)


class LinkType(StrEnum):
    """How two GPUs talk."""

    XGMI = "XGMI"
    NVLINK = "NVLINK"
    PCIE = "PCIE"
    UNKNOWN = "UNKNOWN"


class GpuLink(Record, frozen=True, kw_only=True):
    """One GPU pair of the topology matrix (a < b by BDF)."""

    a: BdfText
    b: BdfText
    link_type: LinkType
    hops: int | None = None
    weight: int | None = None
    access: Annotated[
        bool | None, Meta(description="peer access (amd-smi topology link_status ENABLED/DISABLED); null: not printed")
    ] = None


class PcieLink(Record, frozen=True, kw_only=True):
    """Current and maximum PCIe link of one device (from lspci LnkSta / LnkCap)."""

    bdf: BdfText
    vendor_device: Annotated[OptText, Meta(description='"1002:74a1"')] = None
    speed_gts: Annotated[float | None, ALWAYS] = None
    width: Annotated[int | None, ALWAYS] = None
    max_speed_gts: Annotated[float | None, ALWAYS] = None
    max_width: Annotated[int | None, ALWAYS] = None
    downgraded: bool = False


class NicPort(Record, frozen=True, kw_only=True):
    """One port of an RDMA device."""

    port: Annotated[int, Meta(ge=0, le=255)]
    state: Annotated[OptText, Meta(description="PORT_ACTIVE / ACTIVE / DOWN ...")] = None
    phys_state: OptText = None
    link_layer: Annotated[OptText, Meta(description="Ethernet / InfiniBand")] = None
    rate_gbps: float | None = None
    mtu: int | None = None
    gid_count: int | None = None
    roce_v2: bool | None = None
    netdev: OptText = None


class Nic(Record, frozen=True, kw_only=True):
    """One RDMA device (HCA / RNIC) with its ports and SR-IOV state."""

    name: Annotated[Name, Meta(description='RDMA device name, "mlx5_0", "ionic_3"')]
    bdf: Annotated[BdfText | None, ALWAYS] = None
    netdev: OptText = None
    fw_ver: Annotated[OptText, ALWAYS] = None
    node_guid: OptText = None
    vendor_part_id: OptText = None
    ports: Annotated[tuple[NicPort, ...], ALWAYS] = ()
    sriov_numvfs: Annotated[int | None, ALWAYS] = None
    sriov_totalvfs: Annotated[int | None, ALWAYS] = None
    na_reasons: Reasons = field(default_factory=dict)

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


class SriovFunction(Record, frozen=True, kw_only=True):
    """SR-IOV state of one physical function (GPU or NIC)."""

    bdf: BdfText
    numvfs: int | None
    totalvfs: int | None


class KernelEvent(Record, frozen=True, kw_only=True):
    """One classified dmesg event (RAS/ECC, ring timeout, reset, link degradation)."""

    kind: Annotated[str, Meta(description='pattern id from the data file, e.g. "amdgpu.gpu_reset"')]
    severity: Annotated[str, one_of("fatal", "error", "warn")]
    bdf: BdfText | None
    line_no: Count
    text: Text


class RocmLibrary(Record, frozen=True, kw_only=True):
    """One shared library of the node's ROCm tree (probe `rocm_libs`), keyed by soname."""

    soname: Name
    path: Annotated[Name, Meta(description="the real file, host root stripped")]
    symbols_sha256: Annotated[Sha256, Meta(description="hash of the exported symbol set (name@version binding type)")]
    symbol_count: Count
    file_sha256: Sha256


MAX_SAMPLES = 4096
"""Most samples one measurement may hold. What `validate` records stays under it (a sweep repeated
--samples <= 1024 times, re-measured to the policy's max_samples <= 1024; a training run of
UPGRADE_GATE_WORKLOAD_STEPS <= 1024 steps, pooled over at most 3 runs; at most 120 utilisation
samples). A bound for hostile input: the statistics compare every candidate sample with every baseline
one, so a measurement of millions of samples took gigabytes (2026-12-07)."""

Samples = Annotated[tuple[float, ...], Meta(max_length=MAX_SAMPLES)]


class Measurement(Record, frozen=True, kw_only=True):
    """A metric with its samples and the settings that produced it.

    `key` is flat and namespaced so it diffs well: `mesh/all_reduce/busbw/1048576`,
    `rail/ionic_0/bw_avg`, `mesh/all_reduce/avg_busbw`. Two measurements compare only when their
    `settings` (sweep sizes, iterations, ranks, NCCL_* env) are equal.
    """

    key: Name
    unit: Annotated[str, Meta(description='"GB/s", "Gb/s"')]
    samples: Samples
    settings: StrMap = field(default_factory=dict)
    source: Annotated[OptText, Meta(description="probe or phase that produced it")] = None
    higher_is_better: bool = True


class ProbeStatus(Record, frozen=True, kw_only=True):
    """What happened to one probe: the evidence trail that makes fail-closed possible."""

    name: str
    ok: bool
    reason: Annotated[OptText, ALWAYS] = None
    argv: tuple[str, ...] = ()
    exit_code: int | None = None
    duration_s: float | None = None
    timed_out: bool = False
    missing: bool = False
    required: Annotated[bool, Meta(description="a required probe that failed blocks; an optional one warns")] = True
    fallback_for: Annotated[tuple[str, ...], Meta(description="the failed probes this one stood in for")] = ()
    skipped: Annotated[bool, Meta(description="nothing to read (no SR-IOV capable device): ok, not run")] = False
    notes: Annotated[tuple[str, ...], Meta(description="what the parser skipped or noticed, one line each")] = ()


class IssueKind(StrEnum):
    """Why a fact of the snapshot cannot be taken at face value."""

    CONFLICT = "conflict"  # sources that answered disagree (driver version, port state)
    ERROR_VALUE = "error-value"  # the only answers were error texts, banners or undecodable bytes
    ABSENT_IN_SOURCE = "absent-in-source"  # one source reports a device or port another does not


class EvidenceIssue(Record, frozen=True, kw_only=True):
    """A fact the snapshot builder could not trust: the judge blocks on every one (evidence.missing)."""

    kind: IssueKind
    subject: Annotated[Name, Meta(description='snapshot path of the fact, "nics[name=ionic_0].ports[1].state"')]
    message: Annotated[str, Meta(description="one line naming the sources and what each printed")]
    values: Annotated[StrMap, Meta(description="source (probe name) -> value as printed")] = field(default_factory=dict)


class PhaseStatus(StrEnum):
    """Outcome of one CVF phase on one node."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"  # skipped by policy or config; never counted as passed by the judge
    ERROR = "error"  # the phase could not run or crashed: missing evidence
    NOT_RUN = "not-run"  # an earlier phase did not pass


class RankDevice(Record, frozen=True, kw_only=True):
    """One rank of a workload run and the GPU its runtime put it on (the workload phases' device map)."""

    rank: Annotated[int, Meta(ge=0, le=4095)]
    bdf: BdfText | None = None
    uuid: Annotated[OptText, Meta(description="as the runtime prints it (torch device properties)")] = None
    visible: Annotated[OptText, Meta(description="phase 7: the run's visible-device list (null: unpermuted)")] = None


LAST_PHASE = 7
"""CVF's phases 0-5, then upgrade-gate's workload phases: 6 `workload`, 7 `perturbation` (docs/workload.md)."""


class PhaseResult(Record, frozen=True, kw_only=True):
    """Result of one phase on one node, with the CVF label/annotations it implies."""

    phase: Annotated[int, Meta(ge=0, le=LAST_PHASE, description="CVF 0-5; 6 workload, 7 perturbation")]
    name: str
    status: PhaseStatus
    reason: OptText = None
    reasons: tuple[str, ...] = ()
    measurements: tuple[Measurement, ...] = ()
    labels: StrMap = field(default_factory=dict)
    annotations: StrMap = field(default_factory=dict)
    duration_s: float | None = None
    tool_duration_s: float | None = None
    peer: Annotated[OptText, Meta(description="phase 4/5 partner node(s)")] = None
    device_map: Annotated[
        tuple[RankDevice, ...], Meta(max_length=4096, description="phases 6-7: rank -> GPU as the workload saw it")
    ] = ()


def _most(n: int) -> Meta:
    return Meta(max_length=n)


class Snapshot(Record, frozen=True, kw_only=True):
    """One node at one time: identity, software, GPUs, links, NICs, measurements, phase results and probe
    health. Values a tool printed as N/A are null, with the reason in na_reasons."""

    schema_version: Annotated[str, const(SNAPSHOT_SCHEMA_VERSION), ALWAYS] = SNAPSHOT_SCHEMA_VERSION
    node: NodeInfo
    taken_at: DateTime
    tool_version: str
    software: Software
    host: Host = field(default_factory=Host)
    gpus: Annotated[tuple[Gpu, ...], _most(512), ALWAYS] = ()
    gpu_links: Annotated[tuple[GpuLink, ...], _most(16384), ALWAYS] = ()
    pcie: Annotated[tuple[PcieLink, ...], _most(4096), ALWAYS] = ()
    nics: Annotated[tuple[Nic, ...], _most(256), ALWAYS] = ()
    sriov: Annotated[tuple[SriovFunction, ...], _most(4096), ALWAYS] = ()
    events: Annotated[tuple[KernelEvent, ...], _most(100_000), ALWAYS] = ()
    event_patterns: Annotated[
        OptText,
        Meta(description="digest of the kernel-log pattern table that classified events (v<version>:<sha256 prefix>)"),
    ] = None
    measurements: Annotated[tuple[Measurement, ...], ALWAYS] = ()
    phases: Annotated[tuple[PhaseResult, ...], ALWAYS] = ()
    probes: Annotated[tuple[ProbeStatus, ...], _most(256), ALWAYS] = ()
    evidence_issues: Annotated[
        tuple[EvidenceIssue, ...], _most(4096), Meta(description="conflicting or error-text evidence (blocks)")
    ] = ()
    libraries: Annotated[
        Annotated[tuple[RocmLibrary, ...], _most(100_000)] | None,
        Meta(description="null: not recorded (older capture, or the probe failed)"),
    ] = None


def measurements_of(snapshot: Snapshot) -> tuple[Measurement, ...]:
    """Every measurement of a snapshot: its own and those of its phase results."""
    out = list(snapshot.measurements)
    for phase in snapshot.phases:
        out.extend(phase.measurements)
    return tuple(out)
