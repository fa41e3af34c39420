"""CVF and upgrade-gate label/annotation keys, value sanitising, and Kubernetes name validation (pure).

Design decisions
- The CVF keys are exactly those AMD's Cluster Validation Framework writes (docs/architecture.md, "CVF
  compatibility"): one label per phase with the values `passed` / `failed` (phase 1 also `skipped`),
  the annotation `<label-key>-failure-reason` on a failed phase and `<label-key>-measured-bw` for a
  measured bandwidth. Eligibility comes from the NFD labels `feature.node.kubernetes.io/amd-gpu=true`
  and `.../amd-nic=true`; candidates carry `amd.com/cluster-validation-candidate=true`.
- Our own keys live under the `upgrade-gate/` prefix (a valid DNS-1123 subdomain) so they never collide
  with CVF's and `kubectl get nodes -L upgrade-gate/canary` reads naturally.
- Names are validated *before* they reach a Job name, a label or a selector: a node name that is not a
  DNS-1123 subdomain raises `InvalidNameError` naming the node, instead of a 422 from the API server
  halfway through a fleet run (or, worse, a selector that silently matches something else).
- The CVF keys, the annotation keys and the label-value rules (`is_label_value`, `label_value`: free
  text into 63 characters of `[A-Za-z0-9._-]`, alphanumeric at both ends) have one home,
  `validate.cvf`, which the phases use too (issue 17); this module re-exports the CVF keys the fleet
  code reads and adds what the fleet alone names. Annotations carry the full text.
- Job names must be DNS-1123 labels of at most 63 characters, because the Job controller copies the
  name into the `job-name` label of its pods. `job_name` builds `ug-<purpose>-<node>-<run id>` and
  shortens the node part with a hash when needed.

Sources: Kubernetes API reference, "Object Names and IDs" and "Labels and Selectors" (syntax and
character set); apimachinery validation (`IsDNS1123Label`, `IsDNS1123Subdomain`, `IsQualifiedName`,
`IsValidLabelValue`).
"""

from __future__ import annotations

import hashlib
import re

from upgrade_gate.fleet.errors import InvalidNameError
from upgrade_gate.model import NodeName

# --------------------------------------------------------------------------- CVF keys
# The CVF keys are defined once, by the phases that write them (validate.cvf), and re-exported here.
from upgrade_gate.validate.cvf import CLUSTER_VALIDATION_STATUS as CLUSTER_VALIDATION_STATUS
from upgrade_gate.validate.cvf import CVF_CANDIDATE as CVF_CANDIDATE
from upgrade_gate.validate.cvf import CVF_CONFIGMAP as CVF_CONFIGMAP
from upgrade_gate.validate.cvf import GPU_HW_ACCEPTANCE as GPU_HW_ACCEPTANCE
from upgrade_gate.validate.cvf import GPU_MESH_VALIDATION as GPU_MESH_VALIDATION
from upgrade_gate.validate.cvf import NFD_AMD_GPU as NFD_AMD_GPU
from upgrade_gate.validate.cvf import NFD_AMD_NIC as NFD_AMD_NIC
from upgrade_gate.validate.cvf import NIC_HEALTH as NIC_HEALTH
from upgrade_gate.validate.cvf import PERTURBATION_VALIDATION as PERTURBATION_VALIDATION
from upgrade_gate.validate.cvf import PHASE_LABELS as PHASE_LABELS
from upgrade_gate.validate.cvf import RAIL_BANDWIDTH as RAIL_BANDWIDTH
from upgrade_gate.validate.cvf import WORKLOAD_VALIDATION as WORKLOAD_VALIDATION
from upgrade_gate.validate.cvf import is_label_value, label_value
from upgrade_gate.vendors import AMD

GPU_RESOURCE = AMD.kube.gpu_resource
"""`amd.com/gpu`: the default vendor's device-plugin resource; each node's own is its vendor's
(`Vendor.kube.gpu_resource`: `nvidia.com/gpu` on NVIDIA nodes, `fleet.executor.node_vendor`)."""
NODE_PHASE_LABELS = {**PHASE_LABELS, 6: WORKLOAD_VALIDATION, 7: PERTURBATION_VALIDATION}
"""Every phase label a run may leave on a node: CVF's (1-5) and upgrade-gate's CVF-style ones of the
workload phases (6 `amd.com/gpu-workload-validation`, 7 `amd.com/gpu-device-order-perturbation`)."""


# --------------------------------------------------------------------------- upgrade-gate keys

PREFIX = "upgrade-gate/"
CANARY = PREFIX + "canary"  # label and NoSchedule taint key; value: the change id
CHANGE_ID = PREFIX + "change-id"  # set on promote: the change the node now runs
WINDOW_STATE = PREFIX + "window-state"
NODE_CLASS = PREFIX + "node-class"  # default node-class label (configurable by the fleet code)
NODE = PREFIX + "node"  # on Jobs/pods: the node a Job validates
RUN_ID = PREFIX + "run-id"  # on Jobs: one fleet run
PURPOSE = PREFIX + "purpose"  # on Jobs: capture / phase1 ... phase5
CORDONED_BY = PREFIX + "cordoned-by"  # annotation: we cordoned it, so only we uncordon it
PEER_OF = PREFIX + "peer-of"  # annotation on a one-canary window's peer while phases 4-5 hold it: window id
NODES = PREFIX + "nodes"  # annotation on an MPIJob and its pod templates: the nodes it runs on (comma list)
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "upgrade-gate"

# Labels other controllers put on pods (we select by them, never write them).
JOB_NAME = "job-name"  # batch/v1 Job controller (also batch.kubernetes.io/job-name since 1.27)
MPI_JOB_NAME = "training.kubeflow.org/job-name"  # Kubeflow MPI operator
MPI_JOB_ROLE = "training.kubeflow.org/job-role"  # launcher / worker


# --------------------------------------------------------------------------- syntax

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL_RE = re.compile(_DNS_LABEL)
_DNS_SUBDOMAIN_RE = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_NAME_PART_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")

MAX_NAME_PART = 63
MAX_DNS_LABEL = 63
MAX_DNS_SUBDOMAIN = 253


def is_dns_label(value: str) -> bool:
    """RFC 1123 label: lower-case alphanumerics and '-', at most 63 characters."""
    return len(value) <= MAX_DNS_LABEL and _DNS_LABEL_RE.fullmatch(value) is not None


def is_dns_subdomain(value: str) -> bool:
    """RFC 1123 subdomain: dot-separated DNS labels, at most 253 characters."""
    return len(value) <= MAX_DNS_SUBDOMAIN and _DNS_SUBDOMAIN_RE.fullmatch(value) is not None


def is_qualified_name(key: str) -> bool:
    """A valid label/annotation/taint key: `[prefix/]name`, prefix a DNS subdomain."""
    prefix, sep, name = key.rpartition("/")
    if sep and not is_dns_subdomain(prefix):
        return False
    return 0 < len(name) <= MAX_NAME_PART and _NAME_PART_RE.fullmatch(name) is not None


def validate_node_name(name: str) -> NodeName:
    """Return `name` as a NodeName, or raise InvalidNameError naming it."""
    if not is_dns_subdomain(name):
        raise InvalidNameError(
            f"node {name!r}: not a valid Kubernetes node name (lower-case letters, digits, '-' and '.', "
            f"at most {MAX_DNS_SUBDOMAIN} characters, alphanumeric at both ends)"
        )
    return NodeName(name)


def validate_label_key(key: str) -> str:
    """Return `key`, or raise InvalidNameError naming it."""
    if not is_qualified_name(key):
        raise InvalidNameError(f"label key {key!r}: not a valid Kubernetes qualified name")
    return key


def validate_label_value(value: str, *, key: str = "") -> str:
    """Return `value`, or raise InvalidNameError naming it (and its key)."""
    if not is_label_value(value):
        where = f" for {key}" if key else ""
        raise InvalidNameError(
            f"label value {value!r}{where}: at most 63 characters of letters, digits, '-', '_' and '.', "
            "alphanumeric at both ends"
        )
    return value


def _short_hash(text: str, length: int = 8) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def node_label_value(node: NodeName) -> str:
    """A node name as a label value (node names may be up to 253 characters, values only 63)."""
    return label_value(node)


def _dns_label_part(text: str, budget: int) -> str:
    """`text` squeezed into a DNS-label fragment of at most `budget` characters."""
    if is_dns_label(text) and len(text) <= budget:
        return text
    cleaned = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    digest = _short_hash(text, 6)
    keep = max(budget - len(digest) - 1, 0)
    head = cleaned[:keep].strip("-")
    return f"{head}-{digest}" if head else digest


def job_name(purpose: str, node: NodeName, run_id: str) -> str:
    """`ug-<purpose>-<node>-<run id>`: a DNS-1123 label of at most 63 characters."""
    for part, what in ((purpose, "purpose"), (run_id, "run id")):
        if not is_dns_label(part) or len(part) > 16:
            raise InvalidNameError(f"Job {what} {part!r}: at most 16 lower-case letters, digits and '-'")
    validate_node_name(node)
    fixed = len("ug-") + len(purpose) + 1 + 1 + len(run_id)
    name = f"ug-{purpose}-{_dns_label_part(node, MAX_DNS_LABEL - fixed)}-{run_id}"
    if not is_dns_label(name):  # pragma: no cover - guarded by construction
        raise InvalidNameError(f"Job name {name!r} for node {node!r} is not a DNS-1123 label")
    return name


def object_name(prefix: str, run_id: str) -> str:
    """A cluster object name `<prefix>-<run id>` that must be a DNS-1123 label (MPIJobs)."""
    name = f"{prefix}-{run_id}"
    if not is_dns_label(name):
        raise InvalidNameError(f"object name {name!r}: not a DNS-1123 label of at most 63 characters")
    return name
