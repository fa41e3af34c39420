"""Checklists: shipped items from the incident, automatic evidence, attestations, what blocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.judge_scenarios import NOW, mi300x_snapshot, reverse_order, upgrade_plan, upgraded
from tests.workload_support import with_workload
from upgrade_gate.errors import ConfigError, InputError, NotFoundError
from upgrade_gate.judge.checklist import (
    SHIPPED,
    Checklist,
    ChecklistInputs,
    checklist_from_dict,
    counts_under,
    evaluate_checklists,
    load_checklist,
)
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.judge.rules import REGISTRY
from upgrade_gate.model import Finding, GateReport, NodeName, NodeReport, RuleId, Severity, Snapshot, Verdict


def _gate(candidate: Snapshot, checklists: list[Checklist], attest: dict[str, str]) -> GateReport:
    base = with_workload(mi300x_snapshot())
    return judge(
        baselines={base.node.name: base},
        candidates=[candidate],
        plan=upgrade_plan(),
        policy=load_policy(),
        checklists=checklists,
        attestations=attest,
        now=NOW,
    )


def _attest_all(checklists: list[Checklist]) -> dict[str, str]:
    return {it.id: "alice" for cl in checklists for it in cl.items if it.attest}


def test_checklist_shipped_ones_load_and_cover_the_incident() -> None:
    loaded = [load_checklist(name) for name in SHIPPED]
    ids = {it.id for cl in loaded for it in cl.items}
    assert {"pre.compare-topology", "canary.device-order", "canary.allreduce-sweep", "observe.canary-fraction"} <= ids
    assert all(it.criterion and it.owner for cl in loaded for it in cl.items)


def test_checklist_all_attested_and_healthy_passes_with_rows() -> None:
    lists = [load_checklist(n) for n in SHIPPED]
    report = _gate(with_workload(upgraded(), seed=2), lists, _attest_all(lists))
    assert report.verdict is Verdict.PASS, [f.message for f in report.findings]
    rows = {r.item_id: r for r in report.checklist}
    assert rows["pre.compare-topology"].status == "pass"
    assert rows["pre.hip-binary-compat"].status == "attested" and rows["pre.hip-binary-compat"].owner == "alice"
    assert rows["observe.canary-fraction"].actual.startswith("pass:")
    assert "checklist.unattested" in report.rules_evaluated


def test_checklist_unattested_required_blocks_and_optional_warns() -> None:
    lists = [load_checklist("observe")]
    skip = ("observe.watch-72h", "observe.first-training-cycle")
    attest = {k: v for k, v in _attest_all(lists).items() if k not in skip}
    report = _gate(with_workload(upgraded(), seed=2), lists, attest)
    found = {f.device: f.severity for f in report.fleet_findings}
    assert found == {"observe.watch-72h": Severity.BLOCK, "observe.first-training-cycle": Severity.WARN}
    assert report.verdict is Verdict.BLOCK
    row = next(r for r in report.checklist if r.item_id == "observe.watch-72h")
    assert (row.status, row.actual, row.owner) == ("unattested", "not attested", "platform on-call")


def test_checklist_automatic_item_fails_on_the_incident() -> None:
    lists = [load_checklist("canary")]
    report = _gate(reverse_order(upgraded()), lists, _attest_all(lists))
    row = next(r for r in report.checklist if r.item_id == "canary.device-order")
    assert row.status == "fail" and "mi300x-node-01: device.order_changed (1 blocking finding)" in row.actual
    assert any(f.rule == "checklist.unverified" and f.device == "canary.device-order" for f in report.fleet_findings)


def test_checklist_item_without_evidence_is_unverified() -> None:
    lists = [load_checklist("pre-change")]
    report = judge(
        baselines={},
        candidates=[upgraded()],
        plan=None,
        policy=load_policy(),
        checklists=lists,
        attestations=_attest_all(lists),
        now=NOW,
    )
    row = next(r for r in report.checklist if r.item_id == "pre.compare-topology")
    assert row.status == "unverified" and "no baseline for mi300x-node-01" in row.actual
    assert "rule device.order_changed did not run" in row.actual


def test_checklist_canary_share_above_ten_percent_fails() -> None:
    lists = [load_checklist("observe")]
    base = mi300x_snapshot()
    report = judge(
        baselines={base.node.name: base},
        candidates=[upgraded()],
        plan=upgrade_plan(canaries={"max_fraction": 0.25}),
        policy=load_policy(),
        checklists=lists,
        attestations=_attest_all(lists),
        now=NOW,
    )
    row = next(r for r in report.checklist if r.item_id == "observe.canary-fraction")
    assert row.status == "fail" and "max_fraction is 25%, above 10%" in row.actual


def test_checklist_unknown_attestation_is_bad_input() -> None:
    with pytest.raises(InputError, match=r"pre\.rollbak-plan"):
        _gate(upgraded(), [load_checklist("pre-change")], {"pre.rollbak-plan": "bob"})


def test_checklist_bad_documents(tmp_path: Path) -> None:
    item = {"id": "x.one", "item": "i", "criterion": "c", "owner": "o"}
    with pytest.raises(ConfigError, match=r"neither attest nor rules"):
        checklist_from_dict({"name": "x", "title": "t", "items": [item]}, source="x.yaml")
    with pytest.raises(ConfigError, match=r"unknown rule 'device.ordr'"):
        checklist_from_dict({"name": "x", "title": "t", "items": [{**item, "rules": ["device.ordr"]}]}, source="x.yaml")
    with pytest.raises(ConfigError, match=r"x\.yaml: checklist schema: \$\.items\[0\]"):
        checklist_from_dict({"name": "x", "title": "t", "items": [{**item, "colour": "red"}]}, source="x.yaml")
    with pytest.raises(NotFoundError, match="no such checklist"):
        load_checklist(str(tmp_path / "missing.yaml"))


def _odd(path: str, device: str | None = None) -> Finding:
    return Finding(
        rule=RuleId("fleet.odd_one_out"),
        severity=Severity.BLOCK,
        node=NodeName("gpu-node-02"),
        message=f"{path}: odd",
        device=device,
        path=path,
    )


def test_checklist_counts_a_finding_only_under_the_items_its_rule_and_path_belong_to() -> None:
    # the demo's gpu-node-02: 23 bandwidth odd-one-out findings are bandwidth, not device order
    base, cand = mi300x_snapshot(), upgraded()
    bandwidth = tuple(_odd(f"measurements[key=mesh/all_reduce/busbw/{1 << n}]") for n in range(10, 32))
    order = _odd("gpus.order")
    node = NodeReport(node=cand.node.name, verdict=Verdict.BLOCK, findings=(*bandwidth, order))
    name = cand.node.name
    inputs = ChecklistInputs(
        node_reports=[node],
        candidates={name: cand},
        baselines={name: base},
        evaluated={name: frozenset(REGISTRY)},
        plan=upgrade_plan(),
        policy=load_policy(),
    )
    canary = load_checklist("canary")
    rows, _ = evaluate_checklists([canary], inputs, _attest_all([canary]))
    by_id = {r.item_id: r for r in rows}
    assert "(1 blocking finding)" in by_id["canary.device-order"].actual
    assert "22 blocking" not in by_id["canary.device-order"].actual
    assert "fleet.odd_one_out (22 blocking findings)" in by_id["canary.allreduce-sweep"].actual
    items = {it.id: it for it in canary.items}
    assert counts_under(items["canary.device-order"], order)
    assert not counts_under(items["canary.device-order"], bandwidth[0])
    assert counts_under(items["canary.allreduce-sweep"], bandwidth[0])
    assert not counts_under(items["canary.plan-landed"], order)


def test_checklist_paths_must_narrow_one_of_the_items_rules() -> None:
    doc = {
        "name": "x",
        "title": "x",
        "items": [
            {
                "id": "x.a",
                "item": "a",
                "criterion": "c",
                "owner": "o",
                "rules": ["device.order_changed"],
                "paths": {"fleet.odd_one_out": ["gpus"]},
            }
        ],
    }
    with pytest.raises(ConfigError, match="not one of the item's rules"):
        checklist_from_dict(doc, source="t")


def test_checklist_workload_items_without_workload_evidence_are_unverified_never_pass() -> None:
    """issue 25: the training run, the perturbation, mixed precision, RCCL latency and the loss curve take
    their evidence from phases 6-7 (and 2); without it they read `unverified` and block, never `pass`."""
    lists = [load_checklist("canary")]
    base = mi300x_snapshot()
    report = judge(
        baselines={base.node.name: base},
        candidates=[upgraded()],
        plan=upgrade_plan(),
        policy=load_policy(),
        checklists=lists,
        attestations=_attest_all(lists),
        now=NOW,
    )
    rows = {r.item_id: r for r in report.checklist}
    for item in ("canary.standard-benchmark", "canary.device-order-perturbation", "canary.mixed-precision"):
        assert rows[item].status == "unverified", (item, rows[item].actual)
        assert "phase 6 has no result (it did not run)" in rows[item].actual
    assert "phase 7 has no result" in rows["canary.device-order-perturbation"].actual
    assert {f.device for f in report.fleet_findings if f.rule == "checklist.unverified"} >= {
        "canary.standard-benchmark", "canary.device-order-perturbation", "canary.mixed-precision"
    }  # fmt: skip
    assert report.verdict is Verdict.BLOCK


def test_checklist_workload_items_pass_on_workload_evidence_and_fail_on_its_findings() -> None:
    lists = [load_checklist("canary")]
    rows = {r.item_id: r for r in _gate(with_workload(upgraded(), seed=2), lists, _attest_all(lists)).checklist}
    assert rows["canary.device-order-perturbation"].status == "pass"
    assert rows["canary.mixed-precision"].status == "pass"
    moved = with_workload(upgraded(), seed=2, perturbed_order=[7, 6, 5, 4, 3, 2, 1, 0])
    rows = {r.item_id: r for r in _gate(moved, lists, _attest_all(lists)).checklist}
    row = rows["canary.device-order-perturbation"]
    assert row.status == "fail" and "workload.index_dependent" in row.actual


def test_checklist_an_unverified_item_may_be_attested_a_failing_one_never() -> None:
    """issue 25 item 6: an item with no evidence is `unverified` or attested by a named person; an
    attestation of an automatic item was silently ignored. It never overrides failing evidence."""
    lists = [load_checklist("canary")]
    base = mi300x_snapshot()
    attest = {**_attest_all(lists), "canary.mixed-precision": "alice"}
    report = judge(
        baselines={base.node.name: base}, candidates=[upgraded()], plan=upgrade_plan(), policy=load_policy(),
        checklists=lists, attestations=attest, now=NOW,
    )  # fmt: skip
    row = next(r for r in report.checklist if r.item_id == "canary.mixed-precision")
    assert (row.status, row.owner) == ("attested", "alice")
    assert row.actual.startswith("attested by alice (no evidence: ") and "phase 6 has no result" in row.actual
    assert "canary.mixed-precision" not in {f.device for f in report.fleet_findings}
    moved = with_workload(upgraded(), seed=2, perturbed_order=[7, 6, 5, 4, 3, 2, 1, 0])
    attest = {**_attest_all(lists), "canary.device-order-perturbation": "alice"}
    report = _gate(moved, lists, attest)
    row = next(r for r in report.checklist if r.item_id == "canary.device-order-perturbation")
    assert row.status == "fail" and "an attestation does not override failing evidence" in row.actual
    assert "canary.device-order-perturbation" in {f.device for f in report.fleet_findings}
    assert report.verdict is Verdict.BLOCK


def test_checklist_an_item_whose_rule_the_policy_lowered_and_that_spoke_is_unverified(tmp_path: Path) -> None:
    # break test 2026-12-07: `severity: info` on workload.throughput made a -58% run read `pass` under
    # "throughput ... as in the baseline"
    path = tmp_path / "p.yaml"
    path.write_text("name: site\nrules:\n  - {id: workload.throughput, severity: info}\n", encoding="utf-8")
    lists = [load_checklist("canary")]
    base = with_workload(mi300x_snapshot())
    slow = with_workload(upgraded(), seed=2, rate=641.0)
    items = [it.id for cl in lists for it in cl.items if "workload.throughput" in it.rules]
    assert items
    for policy, status in ((load_policy(path), "unverified"), (load_policy(), "fail")):
        report = judge(
            baselines={base.node.name: base},
            candidates=[slow],
            plan=upgrade_plan(),
            policy=policy,
            checklists=lists,
            attestations=_attest_all(lists),
            now=NOW,
        )
        rows = {r.item_id: r for r in report.checklist}
        for item in items:
            assert rows[item].status == status, rows[item].actual
        if status == "unverified":
            assert (
                "rule workload.throughput found something, but the policy lowered it to info" in rows[items[0]].actual
            )
            assert report.verdict is Verdict.BLOCK
