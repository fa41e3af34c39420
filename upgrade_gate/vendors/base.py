"""What a GPU vendor is to upgrade-gate: its probes, parsers, pin words, fake shapes and phase commands.

A `Vendor` is data, one frozen value per vendor (`vendors.amd.AMD`, `vendors.nvidia.NVIDIA`), gathered by
`vendors.registry`. The probe catalogue (`collect.probes`) puts a vendor's probes around the common ones
(lspci, RDMA, host files, kernel), so every probe fact (argv, parser key, required, fallbacks) lives in one
catalogue entry; the snapshot builder picks the vendor's GPU step by `Vendor.name`; the judge words the
device-order pin with `Vendor.order_pin`. Nothing below this package names a vendor's tools.

Design decisions:
- The catalogue entry types live here, not in `collect.probes`, because a vendor module must name its
  probes without importing the collect stage (which imports the vendors: one direction only).
- A bundle or a snapshot says which vendor it is by the probes it carries (`marker_probe`): no field in
  the snapshot model names a vendor, so snapshots saved before this seam read as AMD, as they were.
- `fake_shapes` and `phase_commands` are names and argv as data: the fake nodes and the phases stay in
  their own stages and are checked against these names by tests (tests/test_vendor_seam.py).
- `kube` (`KubeFacts`) is what the Kubernetes executor needs to know of a vendor (its device plugin's
  resource, its discovery label, whether its tools live in a host directory, default images): facts the
  fleet stage reads, so no `if nvidia` sits in `fleet`. An empty default image means none is documented:
  the site must name one, and another vendor's default is refused (`fleet.launcher`, `fleet.workload_jobs`).
- `util` (`UtilSampler`) is phase 6's utilisation sample as argv; the readers (parsers) stay in the phase.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_TIMEOUT_S = 30.0
"""Seconds a probe may run unless the catalogue or `--timeout` says otherwise."""

GREP_ARGV = ("grep", "-H", ".")
"""Prefix of every file-read probe: grep's `path:value` form, one line per non-empty line."""

READLINK_ARGV = ("readlink", "-f", "--")
"""Prefix of the RCCL library probe: the real file behind the soname, one absolute path per line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandSpec:
    """A catalogue entry that runs one command."""

    name: str
    argv: tuple[str, ...]
    parser: str
    required: bool = True
    fallback_for: tuple[str, ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    absent_warns: bool = False  # True: newer than some recorded bundles, so a bundle without it warns


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSpec:
    """A catalogue entry that reads the files its globs match under the host root."""

    name: str
    globs: tuple[str, ...]  # relative to the host root
    parser: str = "sysfs-grep"
    required: bool = True
    timeout_s: float = DEFAULT_TIMEOUT_S
    argv: tuple[str, ...] = GREP_ARGV  # the command the matched files are appended to
    absent_warns: bool = False  # True: newer than some recorded bundles, so a bundle without it warns


ProbeSpec = CommandSpec | FileSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class OrderPin:
    """How a vendor's runtime is told the device order: the environment that pins the baseline's order."""

    uuid_var: str  # takes GPU-<uuid> lists: survives a re-enumeration
    index_var: str  # takes indices only: the fallback when a UUID is unknown
    fixed: tuple[tuple[str, str], ...] = ()  # set with either (CUDA_DEVICE_ORDER=PCI_BUS_ID)
    note: str = ""  # why the UUID form, in the vendor's words (no "; ": the console breaks lines there)

    def by_uuid(self, uuids: tuple[str, ...] | list[str]) -> str:
        """`export VAR=GPU-...,GPU-...`, after one `export K=V; ` per fixed variable."""
        return self._exports(self.uuid_var, uuids)

    def by_index(self, indices: tuple[str, ...] | list[str]) -> str:
        """`export VAR=3,2,1,0`, after one `export K=V; ` per fixed variable."""
        return self._exports(self.index_var, indices)

    def _exports(self, var: str, items: tuple[str, ...] | list[str]) -> str:
        # One variable per `export` statement, statements joined by "; ": the console report breaks a next
        # step at "; " and wraps a long `export NAME=a,b,...` list into shell lines (report.console).
        return "; ".join([*(f"export {k}={v}" for k, v in self.fixed), f"export {var}={','.join(items)}"])


@dataclass(frozen=True, slots=True, kw_only=True)
class KubeFacts:
    """How a vendor's GPUs appear on Kubernetes, and the images its cluster phases need by default."""

    gpu_resource: str  # the device plugin's extended resource (Job limits, `KubeNode.gpu_count`)
    node_label: tuple[str, str]  # the discovery label of a GPU node: phase 0's default selector
    mount_rocm: bool = False  # mount the host's /opt/rocm read-only: the tools are the node's (False: injected)
    unallocated_env: tuple[tuple[str, str], ...] = ()  # lets a Job without GPUs allocated see them (monitor Jobs)
    collective_image: str = ""  # phase 5's MPIJob image (collective tests, OpenMPI, sshd); "": none documented
    workload_image: str = ""  # phases 6-7's image (Python 3, torchrun, PyTorch); "": none documented


@dataclass(frozen=True, slots=True, kw_only=True)
class UtilSampler:
    """How phase 6 reads each GPU's utilisation: a listing (index -> BDF) if the sample lacks BDFs, then samples."""

    argv: tuple[str, ...]  # one sample of every GPU
    list_argv: tuple[str, ...] = ()  # run once before: the index -> BDF map (empty: the sample names BDFs)


@dataclass(frozen=True, slots=True, kw_only=True)
class Vendor:
    """One GPU vendor's facts (see the module docstring)."""

    name: str  # "amd", "nvidia": `--vendor` values and the snapshot builder's dispatch key
    title: str  # "AMD", "NVIDIA": for people
    marker_probe: str  # the probe whose record says a bundle or snapshot is this vendor's
    gpu_probes: tuple[ProbeSpec, ...]  # run first: GPU enumeration, identity, firmware, topology
    stack_probes: tuple[ProbeSpec, ...]  # after the fabric probes: driver and runtime versions, libraries
    dmesg_parser: str  # parser key of the kernel-log probe
    kernel_patterns: str  # data file of the kernel-log pattern table (upgrade_gate/data/)
    tail_probes: tuple[ProbeSpec, ...] = ()  # after the host facts
    anchor_probes: tuple[str, ...] = ()  # must be present even without a baseline (evidence.missing)
    pin: OrderPin
    fake_shapes: tuple[str, ...] = ()  # dotted names of the fake-node shape functions (module.function)
    phase_commands: Mapping[int, tuple[str, ...]] = field(default_factory=dict)  # CVF phase -> argv it runs
    tools: tuple[str, ...] = ()  # executables whose failure messages are this vendor's (for people and docs)
    gpu_evidence: tuple[str, ...] = ()  # probes that enumerate the GPUs: when they failed, "no GPU" is unknown
    no_gpu: str = ""  # phase 0's words for a node whose GPU probes ran and found none (local mode)
    kube: KubeFacts  # resource, discovery label, tool mount, default images (fleet.manifests, fleet.launcher)
    util: UtilSampler  # phase 6's utilisation sampling (validate.phases.workload_util)
    field_sources: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """The probes this vendor's snapshot step takes a value from, first choice first, by `snapshot.provenance`
    key (`gpus`: every GPU field; `gpus.numa_node`: one field; `gpu_links`; `software.driver_version`), where
    they are not the shared table's (AMD's, and the common fabric and host probes). The judge folds a finding
    under the failure of its value's source (`judge.cause_evidence`): a source it is not told of is never
    blamed, and a broken record then reads as change."""

    def order_pin(self, uuids: list[str] | tuple[str, ...]) -> str:
        """The pin of the baseline order by UUID, in this vendor's words."""
        return self.pin.by_uuid(uuids)
