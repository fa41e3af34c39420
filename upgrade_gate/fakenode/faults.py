"""Fault injection for fake nodes: tool-level `Faults` and semantic faults as spec transforms.

Tool-level faults change how a fake executable behaves whatever its output would have been:
- HANG: sleeps far longer than any probe or phase timeout (the runner must kill it);
- MISSING: no executable is installed, so the command is not found (PATH is the fake bin dir alone);
- NONZERO: prints `stderr` and exits with `exit_code`, no stdout;
- GARBAGE: prints bytes that are no tool's format (binary noise and a truncated line) and exits 0.
A fault may be limited to calls whose arguments start with `argv_prefix` (e.g. only `firmware --json`
of amd-smi).

Semantic faults are a different `NodeSpec` (the tools then print a consistent picture of the broken
node): a NIC port down, an empty GID table, lost VFs, a downgraded PCIe link, low mesh or rail
bandwidth, a failing RVS/AGFHC test, a reversed GPU enumeration order, an injected dmesg event, a GPU that runs hot
under load, and the workload's faults (slower, collective timeouts in the log, slow init, index-pinned,
a diverging loss, broken output: `fakenode.workload`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from upgrade_gate.fakenode.spec import NodeSpec, PcieLinkSpec
from upgrade_gate.model import replace


class FaultKind(StrEnum):
    """How a fake tool misbehaves."""

    HANG = "hang"
    MISSING = "missing"
    NONZERO = "nonzero"
    GARBAGE = "garbage"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolFault:
    """One tool's misbehaviour."""

    kind: FaultKind
    exit_code: int = 1
    stderr: str = ""
    argv_prefix: tuple[str, ...] = ()  # () = every call of the tool

    def as_json(self) -> dict[str, object]:
        """The form the replay script reads."""
        return {
            "kind": str(self.kind),
            "exit_code": self.exit_code,
            "stderr": self.stderr,
            "argv_prefix": list(self.argv_prefix),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Faults:
    """Tool-level faults by tool name ("rocminfo", "amd-smi", "all_reduce_perf", ...)."""

    tools: Mapping[str, ToolFault] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tools", MappingProxyType(dict(self.tools)))
        for tool, fault in self.tools.items():
            if fault.kind is FaultKind.MISSING and fault.argv_prefix:
                raise ValueError(f"{tool}: a missing binary cannot depend on its arguments")

    def missing(self) -> frozenset[str]:
        """Tools that are not installed at all."""
        return frozenset(t for t, f in self.tools.items() if f.kind is FaultKind.MISSING)


def hang(*, argv_prefix: tuple[str, ...] = ()) -> ToolFault:
    """A tool that never finishes."""
    return ToolFault(kind=FaultKind.HANG, argv_prefix=argv_prefix)


def missing() -> ToolFault:
    """A tool that is not installed."""
    return ToolFault(kind=FaultKind.MISSING)


def nonzero(exit_code: int = 1, stderr: str = "", *, argv_prefix: tuple[str, ...] = ()) -> ToolFault:
    """A tool that fails with `exit_code` and one stderr line."""
    return ToolFault(kind=FaultKind.NONZERO, exit_code=exit_code, stderr=stderr, argv_prefix=argv_prefix)


def garbage(*, argv_prefix: tuple[str, ...] = ()) -> ToolFault:
    """A tool that exits 0 but prints output in no known format."""
    return ToolFault(kind=FaultKind.GARBAGE, argv_prefix=argv_prefix)


# --------------------------------------------------------------------------- semantic faults


def reverse_enumeration(spec: NodeSpec) -> NodeSpec:
    """The incident: the GPUs enumerate in reverse BDF order after the change."""
    return replace(spec, enumeration_order=tuple(reversed(spec.enumeration_order)))


def take_port_down(spec: NodeSpec, nic: int = 0) -> NodeSpec:
    """NIC `nic`'s port is DOWN / DISABLED (rdma link, ibv_devinfo; ib_write_bw on it fails)."""
    return _replace_nic(spec, nic, port_up=False)


def take_port_down_in_rdma_link_only(spec: NodeSpec, nic: int = 0) -> NodeSpec:
    """NIC `nic`'s port is DOWN / DISABLED in `rdma link` while ibv_devinfo still says PORT_ACTIVE."""
    return _replace_nic(spec, nic, rdma_link_up=False)


def empty_gid_table(spec: NodeSpec, nic: int = 0) -> NodeSpec:
    """NIC `nic` reports no GID at all (RoCE unusable although the port is ACTIVE)."""
    return _replace_nic(spec, nic, gid_count=0)


def drop_vfs(spec: NodeSpec, nic: int = 0, lost: int = 1) -> NodeSpec:
    """NIC `nic` has `lost` fewer SR-IOV VFs enabled (sysfs sriov_numvfs and lspci agree)."""
    current = spec.nics[nic].sriov_numvfs
    if lost > current:
        raise ValueError(f"NIC {nic} has only {current} VFs enabled, cannot lose {lost}")
    return _replace_nic(spec, nic, sriov_numvfs=current - lost)


def downgrade_gpu_link(spec: NodeSpec, gpu: int = 0, *, width: int = 8, speed_gts: float | None = None) -> NodeSpec:
    """GPU `gpu` (position in BDF order) trains at a lower width (and speed): lspci "(downgraded)"."""
    old = spec.gpus[gpu]
    link = _downgrade(old.link, width, speed_gts)
    gpus = tuple(replace(g, link=link) if i == gpu else g for i, g in enumerate(spec.gpus))
    return replace(spec, gpus=gpus)


def downgrade_nic_link(spec: NodeSpec, nic: int = 0, *, width: int = 8, speed_gts: float | None = None) -> NodeSpec:
    """NIC `nic` trains at a lower PCIe width (and speed)."""
    return _replace_nic(spec, nic, link=_downgrade(spec.nics[nic].link, width, speed_gts))


def scale_mesh_bandwidth(spec: NodeSpec, factor: float) -> NodeSpec:
    """Intra-node rccl-tests bus bandwidth times `factor` (0.8 = a 20% drop)."""
    return replace(spec, mesh=replace(spec.mesh, factor=factor))


def set_rail_bandwidth(spec: NodeSpec, nic: int, gbps: float) -> NodeSpec:
    """ib_write_bw on NIC `nic` plateaus at `gbps` Gb/s."""
    return _replace_nic(spec, nic, write_bw_gbps=gbps)


def fail_rvs(spec: NodeSpec, gpu: int = 0) -> NodeSpec:
    """RVS gst on GPU `gpu` (position in BDF order) misses its GFLOPS target."""
    return replace(spec, rvs_failed_gpus=tuple(sorted({*spec.rvs_failed_gpus, gpu})))


def fail_agfhc(spec: NodeSpec, test: str = "hbm_bw") -> NodeSpec:
    """AGFHC test `test` fails."""
    return replace(spec, agfhc_failed_tests=tuple(sorted({*spec.agfhc_failed_tests, test})))


def inject_dmesg_event(spec: NodeSpec, event: str) -> NodeSpec:
    """Append a kernel event (`spec.DMESG_ACA_MODE1_RESET`, `spec.DMESG_FATAL_INIT`) to dmesg."""
    return replace(spec, dmesg_events=(*spec.dmesg_events, event))


def run_hot(spec: NodeSpec, gpu: int = 0, delta_c: float = 14.0) -> NodeSpec:
    """GPU device `gpu` (slot in BDF order) runs `delta_c` °C hotter under load (amd-smi monitor)."""
    slots = sum(1 for g in spec.gpus if g.physical)
    if not 0 <= gpu < slots:
        raise ValueError(f"node {spec.name} has no GPU device {gpu}")
    hot = (*(h for h in spec.thermal.hot if h[0] != gpu), (gpu, delta_c))
    return replace(spec, thermal=replace(spec.thermal, hot=hot))


def jittery_gpu(spec: NodeSpec, gpu: int = 0, swing_pct: float = 30.0) -> NodeSpec:
    """GPU device `gpu` (slot in BDF order) drops `swing_pct` points of GFX% every other sample (amd-smi monitor -u)."""
    slots = sum(1 for g in spec.gpus if g.physical)
    if not 0 <= gpu < slots:
        raise ValueError(f"node {spec.name} has no GPU device {gpu}")
    jitter = (*(j for j in spec.workload.gfx_jitter if j[0] != gpu), (gpu, swing_pct))
    return replace(spec, workload=replace(spec.workload, gfx_jitter=jitter))


def workload(spec: NodeSpec, **changes: object) -> NodeSpec:
    """The node's fake GPUs treat the training script differently (`spec.WorkloadProfile` fields)."""
    return replace(spec, workload=replace(spec.workload, **changes))


def slow_workload(spec: NodeSpec, *, step_delay_s: float = 0.1) -> NodeSpec:
    """Every training step takes `step_delay_s` longer (a slower GPU or collective)."""
    return workload(spec, step_delay_s=step_delay_s)


def workload_timeouts(spec: NodeSpec, count: int = 4) -> NodeSpec:
    """The job's log carries `count` NCCL/RCCL watchdog timeouts (the incident: 0 -> 4.7 per hour)."""
    return workload(spec, collective_timeouts=count)


def slow_init(spec: NodeSpec, *, init_delay_s: float = 8.0) -> NodeSpec:
    """Device initialisation takes `init_delay_s` longer (the incident: 1.2 s -> 9.8 s)."""
    return workload(spec, init_delay_s=init_delay_s)


def index_pinned(spec: NodeSpec) -> NodeSpec:
    """The workload binds ranks by enumeration index, so a permuted device list moves them."""
    return workload(spec, index_pinned=True)


def diverging_loss(spec: NodeSpec, *, lr_scale: float = 40.0) -> NodeSpec:
    """The learning rate times `lr_scale`: the real loss diverges (or turns NaN when large enough)."""
    return workload(spec, lr_scale=lr_scale)


def broken_workload(spec: NodeSpec, output: str) -> NodeSpec:
    """The workload prints `nothing`, a `truncated` record, dies by `signal`, or sees an `unknown-gpu`."""
    if output not in ("nothing", "truncated", "signal", "unknown-gpu"):
        raise ValueError(f"unknown workload output fault {output!r}")
    return workload(spec, output=output)


def _downgrade(link: PcieLinkSpec, width: int, speed_gts: float | None) -> PcieLinkSpec:
    return replace(link, width=width, speed_gts=speed_gts if speed_gts is not None else link.speed_gts)


def _replace_nic(spec: NodeSpec, nic: int, **changes: object) -> NodeSpec:
    if not 0 <= nic < len(spec.nics):
        raise ValueError(f"node {spec.name} has no NIC {nic}")
    nics = tuple(replace(n, **changes) if i == nic else n for i, n in enumerate(spec.nics))
    return replace(spec, nics=nics)
