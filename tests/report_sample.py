"""A small, hand-built GateReport used by the reporter golden tests."""

from __future__ import annotations

from upgrade_gate.model import (
    Change,
    ChangeOp,
    ChecklistRow,
    Finding,
    GateReport,
    NodeName,
    NodeReport,
    RuleId,
    Severity,
    Verdict,
)


def sample_report() -> GateReport:
    """Two nodes: one blocked by the incident's reversed order, one passing with a warning."""
    a, b = NodeName("gpu-node-01"), NodeName("gpu-node-02")
    order = Finding(
        rule=RuleId("device.order_changed"),
        severity=Severity.BLOCK,
        node=a,
        device="gpu[0]",
        path="gpus[0].bdf",
        expected="0000:05:00.0",
        actual="0000:f5:00.0",
        message="index 0 was 0000:05:00.0 (serial 692251001234), now 0000:f5:00.0 (serial 692251009999)",
        evidence="rocminfo",
        hint="HIP_VISIBLE_DEVICES=GPU-4b1e...,GPU-9a3f...",
        data={
            "order": [
                {
                    "index": 0,
                    "baseline": {"bdf": "0000:05:00.0", "id": "692251001234"},
                    "candidate": {"bdf": "0000:f5:00.0", "id": "692251009999"},
                    "moved": True,
                },
                {
                    "index": 1,
                    "baseline": {"bdf": "0000:f5:00.0", "id": "692251009999"},
                    "candidate": {"bdf": "0000:05:00.0", "id": "692251001234"},
                    "moved": True,
                },
            ]
        },
    )
    bw = Finding(
        rule=RuleId("bandwidth.regression"),
        severity=Severity.BLOCK,
        node=a,
        device=None,
        path="measurements[mesh/all_reduce/busbw/1073741824]",
        expected=301.2,
        actual=240.9,
        message="mesh all_reduce busbw at 1 GiB fell 20.0% (p=0.004, 5 vs 5 samples) | below tolerance 5%",
        evidence="phase2",
    )
    warn = Finding(
        rule=RuleId("identity.unverified"),
        severity=Severity.WARN,
        node=b,
        device="0000:05:00.0",
        message="GPU matched by BDF only: no serial or unique id <in> either snapshot & so identity is unverified",
    )
    return GateReport(
        verdict=Verdict.BLOCK,
        generated_at="2026-11-30T09:00:00Z",
        tool_version="0.1.0",
        plan_id="rocm-6.1.3-to-6.2.0",
        policy_name="default",
        nodes=(
            NodeReport(
                node=a,
                verdict=Verdict.BLOCK,
                findings=(order, bw),
                changes=(
                    Change(
                        op=ChangeOp.CHANGED,
                        path="software.rocm_version",
                        baseline="6.1.3",
                        candidate="6.2.0",
                        expected=True,
                        expected_by="change.rocm",
                    ),
                ),
            ),
            NodeReport(node=b, verdict=Verdict.PASS, findings=(warn,)),
        ),
        checklist=(
            ChecklistRow(
                checklist="canary",
                item_id="device-order",
                item="Every device index checked against its PCIe bus id",
                criterion="index -> BDF and serial unchanged",
                actual="gpu-node-01: order changed",
                owner="sre-oncall",
                status="fail",
            ),
            ChecklistRow(
                checklist="canary",
                item_id="rollback-path",
                item="Rollback path confirmed",
                criterion="attested by an operator",
                actual="not attested",
                owner="change-owner",
                status="unattested",
                required=False,
            ),
        ),
        rules_evaluated=(
            RuleId("device.order_changed"),
            RuleId("bandwidth.regression"),
            RuleId("sriov.vf_count"),
        ),
    )
