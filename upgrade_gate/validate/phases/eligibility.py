"""Phase 0, eligibility: is this node a candidate for the GPU phases (and the NIC phases 3-5)?

Cluster mode (the executor passes the node's labels): every `NODE_SELECTOR_LABELS` pair must be on the
node (CVF's default selects `feature.node.kubernetes.io/amd-gpu=true`), and when any of phases 3-5 is
requested the node must also carry `feature.node.kubernetes.io/amd-nic=true` (CVF intersects the input
of its NIC phases with that label). Local mode (no labels): the snapshot's own facts stand in for the
NFD labels - at least one GPU, and at least one RDMA NIC when phases 3-5 are requested.

Design decisions:
- A node without the evidence (no snapshot, or the probes that would have found the GPUs failed) is an
  `error` naming the probe, not a `failed` "no GPU": an upgrade that broke rocminfo must not look like a
  node that never had GPUs.
- Local mode speaks the node's vendor (`vendors.vendor_of` its snapshot's probes): the GPU probes whose
  failure is an `error` and the "no GPU" words are the vendor's (`Vendor.gpu_evidence`, `Vendor.no_gpu`:
  "no NVIDIA GPU found ... nvidia-smi ... lsmod" on an NVIDIA node).
- Cluster mode speaks the node's vendor too (`EligibilityPhase(vendor)`, the executor's per-vendor run):
  CVF's default selector is AMD's NFD label; where the config keeps that default, an NVIDIA node is asked
  for its own discovery label instead (`Vendor.kube.node_label`: `nvidia.com/gpu.present=true`, GPU Feature
  Discovery). A `NODE_SELECTOR_LABELS` the site set to anything else is used as written. The NIC label
  stays CVF's `amd-nic=true` for every vendor (docs/vendors.md: NFD labels no network controller by default,
  so there is no documented vendor-neutral key; a ConnectX fleet labels its NIC nodes so, or skips 3-5).
- Phase 0 writes no CVF label (CVF marks candidates with `amd.com/cluster-validation-candidate=true`,
  which is the executor's business).
"""

from __future__ import annotations

from upgrade_gate.model import PhaseResult, Snapshot
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.phase import Outcome, PhaseContext
from upgrade_gate.vendors import AMD, Vendor, vendor_of

_NIC_PROBES = ("ibv_devinfo", "rdma_link")


class EligibilityPhase:
    """Phase 0."""

    number = 0
    name = cvf.PHASE_NAMES[0]
    label_key: str | None = None

    def __init__(self, vendor: Vendor = AMD) -> None:
        self.vendor = vendor

    def selector(self, config: CvfConfig) -> tuple[tuple[str, str], ...]:
        """`NODE_SELECTOR_LABELS`, with CVF's default (AMD's label) replaced by this vendor's own."""
        if config.node_selector_labels == (AMD.kube.node_label,):
            return (self.vendor.kube.node_label,)
        return config.node_selector_labels

    def run(self, ctx: PhaseContext) -> PhaseResult:
        """Check the node's labels (cluster mode) or its snapshot (local mode)."""
        out = Outcome()
        nic_needed = bool(ctx.requested & cvf.NIC_PHASES)
        if ctx.node_labels is not None:
            labels = ctx.node_labels
            wanted = list(self.selector(ctx.config))
            if nic_needed:
                wanted.append((cvf.NFD_AMD_NIC, "true"))
            for key, value in dict(wanted).items():
                actual = labels.get(key)
                if actual != value:
                    shown = "no such label" if actual is None else f"{key}={actual}"
                    why = "phases 3-5 need it" if key == cvf.NFD_AMD_NIC else "NODE_SELECTOR_LABELS needs it"
                    out.fail(f"node label {key}={value} missing ({shown}); {why}")
        elif ctx.snapshot is None:
            out.error("no snapshot of the node: local eligibility is decided from its GPUs and NICs")
        else:
            _check_snapshot(out, ctx.snapshot, nic_needed)
        return out.result(self, ctx.config)

    def budget_s(self, config: CvfConfig, *, samples: int, nodes: int) -> float:
        """Phase 0 runs no tool."""
        return 30.0

    def plan(self, config: CvfConfig, *, samples: int) -> tuple[str, ...]:
        """Dry-run description."""
        selector = ", ".join(f"{k}={v}" for k, v in self.selector(config))
        return (
            f"cluster mode: node labels {selector} (and {cvf.NFD_AMD_NIC}=true when phases 3-5 run)",
            "local mode: the snapshot has >= 1 GPU (and >= 1 RDMA NIC when phases 3-5 run)",
        )


def _failed_probes(snapshot: Snapshot, names: tuple[str, ...]) -> list[str]:
    return [f"{p.name}: {p.reason or 'failed'}" for p in snapshot.probes if p.name in names and not p.ok]


def _check_snapshot(out: Outcome, snapshot: Snapshot, nic_needed: bool) -> None:
    if not snapshot.gpus:
        vendor = vendor_of(p.name for p in snapshot.probes)
        broken = _failed_probes(snapshot, vendor.gpu_evidence)
        if broken:
            out.error("no GPU evidence: " + "; ".join(broken))
        else:
            out.fail(vendor.no_gpu)
    if nic_needed and not snapshot.nics:
        broken = _failed_probes(snapshot, _NIC_PROBES)
        if broken:
            out.error("no RDMA NIC evidence: " + "; ".join(broken))
        else:
            out.fail(f"no RDMA NIC found on the node (stands in for {cvf.NFD_AMD_NIC}=true); phases 3-5 need one")
