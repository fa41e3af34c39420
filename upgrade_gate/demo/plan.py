"""The demo's change plan and policy, written to the work folder as YAML for people to read.

Both are written as text (with comments) and read back through the real loaders (`judge.plan.load_plan`,
`judge.policy.load_policy`, schema-checked), so the demo exercises exactly what `gate --plan --policy`
does with a user's files.

Design decision (2026-11): the demo runs CVF phases 0-3 only, on each fake node alone; phases 4 (per-rail
RDMA between node pairs) and 5 (multi-node RCCL) need nodes that reach each other. The default policy
requires phases 1-5, so the demo policy declares 4 and 5 not applicable to the demo's node class and
says why; on a real cluster they stay required.
"""

from __future__ import annotations

from pathlib import Path

from upgrade_gate.docio import write_text_atomic
from upgrade_gate.judge.plan import ChangePlan, load_plan
from upgrade_gate.judge.policy import Policy, load_policy

PLAN_FILE = "plan.yaml"
POLICY_FILE = "policy.yaml"

PLAN_TEXT = """\
# Change plan written by `upgrade-gate demo` (schema: schemas/change-plan.schema.json;
# every field is described in docs/configuration.md of the upgrade-gate repository).
id: rocm-6.1.3-to-6.2.0
description: >-
  ROCm 6.1.3 -> 6.2.0 with the amdgpu driver it ships (6.7.0 -> 6.8.5) on the mi300x-8gpu class.
  Nothing else is meant to change: GPU order and identity, firmware, VBIOS, NICs, VF counts, PCIe
  links and bandwidth must match each node's baseline.
change:
  rocm: {from: "6.1.3", to: "6.2.0"}     # must land exactly on 6.2.0 (a build suffix such as -66 is fine)
  driver: {from: "6.7.0", to: "6.8.5"}   # the amdgpu kernel driver of ROCm 6.2.0
canaries:
  # The default is 10% of a class, at least one node: 1 canary out of 8. This demo plan allows 25%
  # (2 canaries) so that one run can show two different failures.
  max_fraction: 0.25
  min: 1
"""
"""The plan as written to `<workdir>/plan.yaml`."""


POLICY_TEXT = """\
# Policy written by `upgrade-gate demo` (schema: schemas/policy.schema.json; reference:
# docs/configuration.md). It is laid over the shipped default policy (every rule on, fail closed), and
# changes two things only:
name: demo
description: The default policy; CVF phases 4-5 do not apply to the demo's stand-alone fake nodes.
phases:
  not_applicable:
    # Phases 4 (per-rail RDMA between node pairs) and 5 (multi-node RCCL) need nodes that reach each
    # other; the demo's fake nodes each run alone. On a real cluster leave them required.
    mi300x-8gpu: [4, 5]
rules:
  # The demo's training runs share the laptop's CPUs: their device initialisation (PyTorch's import, the
  # process group) moves by several seconds with the machine's load, which a GPU node's does not. Init
  # time blocks here at 10 s more than the baseline (the default, 2 s, is for the incident: 1.2 s -> 9.8 s).
  - {id: workload.init_time, severity: block, params: {max_ratio: 2.0, min_increase_s: 10.0}}
"""
"""The policy as written to `<workdir>/policy.yaml`."""


def write_plan(path: Path) -> Path:
    """Write the demo plan to `path` and return it."""
    write_text_atomic(path, PLAN_TEXT)
    return path


def read_plan(path: Path) -> ChangePlan:
    """Load the plan back through the real loader (schema-checked)."""
    return load_plan(path)


def write_policy(path: Path) -> Path:
    """Write the demo policy to `path` and return it."""
    write_text_atomic(path, POLICY_TEXT)
    return path


def read_policy(path: Path) -> Policy:
    """Load the policy back through the real loader (laid over the shipped default)."""
    return load_policy(path)


def summarize(plan: ChangePlan) -> str:
    """One line: what the plan changes, e.g. "ROCm 6.1.3 -> 6.2.0, driver 6.7.0 -> 6.8.5"."""
    parts = []
    for label, change in (
        ("ROCm", plan.change.rocm),
        ("amdgpu driver", plan.change.driver),
        ("kernel", plan.change.kernel),
        ("VBIOS", plan.change.vbios),
        ("NIC firmware", plan.change.nic_firmware),
    ):
        if change is not None:
            parts.append(f"{label} {change.from_version or 'any'} -> {change.to_version}")
    for fw in plan.change.firmware:
        parts.append(f"firmware {fw.block} {fw.from_version or 'any'} -> {fw.to_version or 'any'}")
    return ", ".join(parts) or "no planned change"
