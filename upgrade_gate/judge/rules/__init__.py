"""The closed set of rules, one module per family; `REGISTRY` maps every rule id to its spec.

A policy can only name ids registered here (the policy schema's enum lists them, and a test keeps the
two in step). Three ids have no per-node check: `checklist.unattested` and `checklist.unverified` are
produced by the checklist evaluation (`judge.checklist`) and `field.unplanned` by the judge after every
other rule (`rules.fields`, over the plan-marked diff); their policy entries set their severity.
"""

from __future__ import annotations

from collections.abc import Mapping

from upgrade_gate.judge.rules import (
    bandwidth,
    devices,
    evidence,
    fields,
    firmware,
    fleet,
    gpu_health,
    host,
    kernel,
    libraries,
    nic,
    pcie,
    software,
    thermal,
    topology,
    workload,
    workload_perturbation,
    workload_utilisation,
)
from upgrade_gate.judge.rules.base import RuleSpec, spec
from upgrade_gate.model import RuleId

CHECKLIST_SPECS = (
    spec(
        "checklist.unattested",
        "a manual checklist item nobody attested (--attest ITEM=NAME); optional items only warn",
        None,
        plan_can_accept=False,
    ),
    spec(
        "checklist.unverified",
        "an automatic checklist item whose rules or evidence did not pass",
        None,
        plan_can_accept=False,
    ),
)

_ALL: tuple[RuleSpec, ...] = (
    *devices.SPECS,
    *firmware.SPECS,
    *gpu_health.SPECS,
    *software.SPECS,
    *host.SPECS,
    *libraries.SPECS,
    *pcie.SPECS,
    *topology.SPECS,
    *nic.SPECS,
    *bandwidth.SPECS,
    *evidence.SPECS,
    *kernel.SPECS,
    *fleet.SPECS,
    *thermal.SPECS,
    *workload.SPECS,
    *workload_perturbation.SPECS,
    *workload_utilisation.SPECS,
    *fields.SPECS,
    *CHECKLIST_SPECS,
)

REGISTRY: Mapping[RuleId, RuleSpec] = {s.id: s for s in _ALL}
"""Every rule the judge knows, by id (the closed set a policy may name)."""

assert len(REGISTRY) == len(_ALL), "duplicate rule id"
