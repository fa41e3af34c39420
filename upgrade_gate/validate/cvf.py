"""CVF vocabulary for the phase pipeline: phase numbers, names, label keys, label values, annotations.

Design decisions:
- The keys are exactly those AMD's Cluster Validation Framework writes (ROCm/gpu-operator,
  example/gpu-validation-cluster: `PHASE{N}_LABEL_KEY` and `PHASE_FAILURE_REASON_ANNOTATION_SUFFIX` of
  the `cluster-validation-config` ConfigMap): one label per phase 1-5 with the values `passed` /
  `failed` (phase 1 also `skipped`), the annotation `<label-key>-failure-reason` on a failed phase and
  `<label-key>-measured-bw` for a measured bandwidth.
- This module is the one home of the CVF names and of label values (issue 17): the phase label keys,
  the annotation keys (`failure_reason_key`, `measured_bw_key`) and the label-value rules
  (`is_label_value`, `label_value`). It sits in `validate`, below `fleet` in the import layers, so the
  phases and the Kubernetes executor use the same definitions; `fleet.labels` imports them from here
  and adds only what the fleet alone names (upgrade-gate's own keys, DNS names, Job names).
- Where CVF writes `passed` for a node it did not test (a SKIP_* flag, an unpaired phase-4 node),
  upgrade-gate writes `skipped` or `failed`: the label says what happened, never more.
- An error (the phase could not produce evidence) is written as `failed` (CVF has no `error` value) with
  the reason in the annotation; a phase that was not run writes no label at all, like CVF.
- Label values are limited to 63 characters of `[A-Za-z0-9._-]`, alphanumeric at both ends (the
  Kubernetes rule, apimachinery `IsValidLabelValue`). CVF itself only ever writes the fixed words
  `passed` / `failed` / `skipped` as values and puts free text in annotations, so it has no sanitiser
  of its own to copy; `label_value` maps free text (a change id, a node name) into the rule: a valid
  value is kept as is; otherwise every run of other characters becomes one `-`, runs of `-` collapse,
  the ends are trimmed to alphanumerics, the text is cut to 54 characters and `-<8 hex of the
  SHA-256 of the original>` is appended, so two texts that clean up alike stay distinct.
  Annotation values have no such syntax limit; they are capped at `MAX_ANNOTATION_CHARS` (CVF caps its
  phase-3 reasons at 250 bytes, the helper library at 200 000) so a node object stays small.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from upgrade_gate.model import PhaseStatus

NFD_AMD_GPU = "feature.node.kubernetes.io/amd-gpu"
NFD_AMD_NIC = "feature.node.kubernetes.io/amd-nic"

GPU_HW_ACCEPTANCE = "amd.com/gpu-hw-acceptance"
GPU_MESH_VALIDATION = "amd.com/gpu-mesh-validation"
NIC_HEALTH = "amd.com/nic-health"
RAIL_BANDWIDTH = "amd.com/rail-bandwidth"
CLUSTER_VALIDATION_STATUS = "amd.com/cluster-validation-status"
CVF_CANDIDATE = "amd.com/cluster-validation-candidate"  # a node that passed phase 0
CVF_CONFIGMAP = "cluster-validation-config"  # CVF's thresholds (and upgrade-gate's) in the namespace

WORKLOAD_VALIDATION = "amd.com/gpu-workload-validation"
"""upgrade-gate's label of phase 6 (the reference training run), written like CVF's labels."""
PERTURBATION_VALIDATION = "amd.com/gpu-device-order-perturbation"
"""upgrade-gate's label of phase 7 (the device-order perturbation run)."""

PHASE_LABELS: Mapping[int, str] = {
    1: GPU_HW_ACCEPTANCE,
    2: GPU_MESH_VALIDATION,
    3: NIC_HEALTH,
    4: RAIL_BANDWIDTH,
    5: CLUSTER_VALIDATION_STATUS,
}
"""The CVF label each phase writes (phase 0 writes none)."""

PHASE_NAMES: Mapping[int, str] = {
    0: "eligibility",
    1: "gpu-hw-acceptance",
    2: "gpu-mesh-validation",
    3: "nic-health",
    4: "rail-bandwidth",
    5: "cluster-rccl",
    6: "workload",
    7: "perturbation",
}
"""Short names of the phases as upgrade-gate reports them."""

NIC_PHASES = frozenset({3, 4, 5})
"""Phases that need the NFD `amd-nic=true` label (CVF intersects their input with it)."""

FAILURE_REASON_SUFFIX = "-failure-reason"
MEASURED_BW_SUFFIX = "-measured-bw"
MAX_LABEL_VALUE = 63
MAX_ANNOTATION_CHARS = 1024

_LABEL_VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def failure_reason_key(label_key: str) -> str:
    """The annotation CVF writes next to a failed phase label."""
    return label_key + FAILURE_REASON_SUFFIX


def measured_bw_key(label_key: str) -> str:
    """The annotation carrying a phase's measured bandwidth."""
    return label_key + MEASURED_BW_SUFFIX


def is_label_value(value: str) -> bool:
    """True for a valid Kubernetes label value (empty allowed)."""
    return len(value) <= MAX_LABEL_VALUE and _LABEL_VALUE_RE.fullmatch(value) is not None


def label_value(text: str) -> str:
    """`text` as a valid label value: unchanged when valid, else cleaned, cut and suffixed with a hash."""
    if is_label_value(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    cleaned = re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9._-]+", "-", text)).strip("-_.")
    cleaned = cleaned[: MAX_LABEL_VALUE - len(digest) - 1].rstrip("-_.")
    return f"{cleaned}-{digest}" if cleaned else digest


def annotation_value(text: str) -> str:
    """`text` capped at MAX_ANNOTATION_CHARS (with a marker when cut)."""
    if len(text) <= MAX_ANNOTATION_CHARS:
        return text
    return text[: MAX_ANNOTATION_CHARS - 15] + " ...(truncated)"


def status_label(status: PhaseStatus) -> str | None:
    """The CVF label value a phase status writes; None writes no label (phase not run)."""
    if status is PhaseStatus.PASSED:
        return "passed"
    if status is PhaseStatus.SKIPPED:
        return "skipped"
    if status in (PhaseStatus.FAILED, PhaseStatus.ERROR):
        return "failed"
    return None


def labels_for(
    label_key: str | None,
    status: PhaseStatus,
    reasons: tuple[str, ...],
    *,
    measured_bw: float | None = None,
    extra: Mapping[str, str] | None = None,
    failure_suffix: str = FAILURE_REASON_SUFFIX,
) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) CVF-style for one phase result; `extra` maps annotation suffixes to values."""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    value = status_label(status)
    if label_key is None or value is None:
        return labels, annotations
    labels[label_key] = label_value(value)
    if reasons and status is not PhaseStatus.PASSED:
        annotations[label_key + failure_suffix] = annotation_value("; ".join(reasons))
    if measured_bw is not None:
        annotations[measured_bw_key(label_key)] = f"{measured_bw:.2f}"
    for suffix, text in (extra or {}).items():
        annotations[f"{label_key}-{suffix}"] = annotation_value(text)
    return labels, annotations
