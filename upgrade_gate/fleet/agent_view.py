"""What the node agent observes every 30 s: the cheap probes, and the judge's view trimmed to them.

The agent runs beside workloads that hold every GPU, every 30 seconds, so it runs only the probes that
read files or ask the kernel, in milliseconds, without opening a device: `AGENT_PROBES`. It leaves out
`rocminfo` (starts the HSA runtime on /dev/kfd), the amd-smi / rocm-smi probes (open every GPU's DRM
node; seconds on 8 GPUs), `ibv_devinfo` (opens the verbs devices) and `rocm_libs` (reads every ROCm
library: tens of CPU seconds, for a fact that changes only with an install, which `rocm_version` and
`rccl_library` already see). The full capture stays the job of `fleet watch` (CronJob) and the window.

Design decisions
- Both sides are trimmed alike (as `judge.observe` does for the phases): the facts only the left-out
  probes produce (GPUs and their link matrix, amd-smi's version, the ROCm library list, the verbs-only
  fields of each NIC: GUID, part id, port link layer, rate, MTU, GIDs, RoCE v2) are the baseline's on
  both sides, so no rule compares something against nothing; and the probe records of the left-out
  probes are removed from both, with `evidence.missing` requiring only the agent's probes. A NIC the
  agent does not see, or sees anew, is still a change: only the fields of a NIC present on both sides
  are carried.
- Everything the agent's probes produce is judged exactly as at the gate: kernel, driver and ROCm
  versions, RCCL library, host facts (BIOS, kernel command line, OS), PCIe links (speed and width
  downgrades), SR-IOV VF counts, NIC firmware and port state (`rdma link`), kernel events (dmesg).
"""

from __future__ import annotations

from pathlib import Path

from upgrade_gate.collect.probes import CATALOGUE, Probe, probe_catalogue
from upgrade_gate.judge.observe import observation_policy, observation_view
from upgrade_gate.judge.policy import Policy
from upgrade_gate.model import Nic, NicPort, Snapshot, replace

AGENT_PROBES = (
    "lspci",
    "rdma_link",
    "sysfs_sriov",
    "sysfs_ib",
    "driver_version",
    "rocm_version",
    "kernel",
    "dmesg",
    "bios",
    "kernel_cmdline",
    "os_release",
    "rccl_library",
)
"""The catalogue probes the agent runs (each reads files or asks the kernel; none opens a device)."""

LEFT_OUT = {
    "rocminfo": "starts the HSA runtime on /dev/kfd",
    "amdsmi_version": "opens the GPUs' DRM nodes",
    "amdsmi_list": "opens the GPUs' DRM nodes",
    "amdsmi_static": "opens the GPUs' DRM nodes (seconds on 8 GPUs)",
    "amdsmi_firmware": "opens the GPUs' DRM nodes",
    "amdsmi_topology": "opens the GPUs' DRM nodes",
    "rocmsmi": "a fallback of the amd-smi probes",
    "rocmsmi_topo": "a fallback of the amd-smi probes",
    "ibv_devinfo": "opens the RDMA verbs devices (/dev/infiniband)",
    "rocm_libs": "reads every ROCm library (tens of CPU seconds); rocm_version and rccl_library see installs",
}
"""Why each other catalogue probe is not the agent's (docs/agent.md lists this table)."""

_PORT_FIELDS = ("link_layer", "rate_gbps", "mtu", "gid_count", "roce_v2")  # from ibv_devinfo only
_NIC_FIELDS = ("node_guid", "vendor_part_id")  # from ibv_devinfo only


def agent_probes(host_root: Path, *, timeout_s: float) -> tuple[Probe, ...]:
    """The agent's probes under `host_root`, in catalogue order, each bounded by `timeout_s`."""
    wanted = set(AGENT_PROBES)
    return tuple(p for p in probe_catalogue(host_root, timeout_s=timeout_s) if p.name in wanted)


def _carry_nic(seen: Nic, base: Nic) -> Nic:
    ports = {p.port: p for p in base.ports}
    carried: list[NicPort] = []
    for port in seen.ports:
        old = ports.get(port.port)
        carried.append(replace(port, **{f: getattr(old, f) for f in _PORT_FIELDS}) if old is not None else port)
    reasons = {k: v for k, v in seen.na_reasons.items() if k != "ports" or "ports" in base.na_reasons}
    return replace(seen, **{f: getattr(base, f) for f in _NIC_FIELDS}, ports=tuple(carried), na_reasons=reasons)


def _trim(snapshot: Snapshot) -> Snapshot:
    wanted = set(AGENT_PROBES)
    return observation_view(replace(snapshot, probes=tuple(p for p in snapshot.probes if p.name in wanted)), mesh=False)


def agent_views(baseline: Snapshot, candidate: Snapshot) -> tuple[Snapshot, Snapshot]:
    """The baseline and the agent's candidate, trimmed alike to what the agent observes."""
    nics = {n.name: n for n in baseline.nics}
    seen = tuple(_carry_nic(n, nics[n.name]) if n.name in nics else n for n in candidate.nics)
    carried = replace(
        candidate,
        gpus=baseline.gpus,
        gpu_links=baseline.gpu_links,
        libraries=baseline.libraries,
        software=replace(candidate.software, amdsmi_version=baseline.software.amdsmi_version),
        nics=seen,
    )
    return _trim(baseline), _trim(carried)


def agent_policy(policy: Policy) -> Policy:
    """The observation policy with `evidence.missing` requiring only the agent's own probes."""
    observed = observation_policy(policy, mesh=False)
    rules = []
    for entry in observed.rules:
        if entry.id == "evidence.missing":
            required = tuple(p for p in entry.strings("required_probes") if p in AGENT_PROBES)
            entry = replace(entry, params={**entry.params, "required_probes": required})
        rules.append(entry)
    return replace(observed, rules=tuple(rules), name=f"{policy.name} (node agent)")


def check_catalogue() -> None:
    """Every catalogue probe is either the agent's or left out with a reason (a new probe must choose)."""
    names = {spec.name for spec in CATALOGUE}
    unknown = names - set(AGENT_PROBES) - set(LEFT_OUT)
    stale = (set(AGENT_PROBES) | set(LEFT_OUT)) - names
    if unknown or stale:
        raise ValueError(
            f"agent probe lists out of step with the catalogue: new {sorted(unknown)}, gone {sorted(stale)}"
        )
