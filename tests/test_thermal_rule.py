"""`thermal.outlier` on hand-built snapshots (tests/judge_scenarios.py): class slot, own baseline, the
severity knob, and that temperatures are never judged as bandwidth.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.judge_scenarios import NODE, NODE_CLASS, NOW, mi300x_snapshot, upgrade_plan, upgraded
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import Policy, load_policy
from upgrade_gate.model import ClassReference, Finding, Measurement, NodeName, Severity, Snapshot, Verdict, replace
from upgrade_gate.store.aggregate import aggregate_class


def _heat(snap: Snapshot, delta: float, gpus: Callable[[int], bool] = lambda i: True) -> Snapshot:
    """`delta` °C more on the hottest reading of the selected GPUs."""

    def warmer(m: Measurement) -> Measurement:
        parts = m.key.split("/")
        if parts[0] == "thermal" and parts[-1] == "temp_c_max" and gpus(int(parts[1].removeprefix("gpu"))):
            return replace(m, samples=tuple(s + delta for s in m.samples))
        return m

    phases = tuple(replace(p, measurements=tuple(warmer(m) for m in p.measurements)) for p in snap.phases)
    return replace(snap, phases=phases)


def _policy(**params: object) -> Policy:
    policy = load_policy(None)
    severity = params.pop("severity", None)
    rules = tuple(
        replace(
            e,
            params={**e.params, **params},
            severity=severity if isinstance(severity, Severity) else e.severity,
        )
        if e.id == "thermal.outlier"
        else e
        for e in policy.rules
    )
    return replace(policy, rules=rules)


def _findings(
    candidate: Snapshot,
    *,
    baseline: Snapshot | None = None,
    reference: ClassReference | None = None,
    policy: Policy | None = None,
) -> tuple[Verdict, list[Finding]]:
    report = judge(
        baselines={NODE: baseline} if baseline is not None else {},
        candidates=(candidate,),
        plan=upgrade_plan(),
        policy=policy or load_policy(None),
        references={NODE_CLASS: reference} if reference is not None else {},
        now=NOW,
    )
    return report.verdict, [f for n in report.nodes for f in n.findings]


def _class(n: int = 3) -> ClassReference:
    return aggregate_class(NODE_CLASS, [mi300x_snapshot(node=f"mi300x-node-{i:02d}", seed=i) for i in range(2, 2 + n)])


def test_thermal_rule_healthy_node_has_no_thermal_findings() -> None:
    verdict, found = _findings(upgraded(), baseline=mi300x_snapshot(), reference=_class())
    assert verdict is Verdict.PASS, [f.message for f in found if f.severity is Severity.BLOCK]
    assert [f for f in found if f.rule == "thermal.outlier"] == []


def test_thermal_rule_a_node_hotter_than_its_class_slot_blocks_without_a_baseline() -> None:
    hot = _heat(upgraded(), 12.0)  # every GPU: the peers agree with each other, the class does not
    _, found = _findings(hot, reference=_class())
    thermal = [f for f in found if f.rule == "thermal.outlier"]
    assert len(thermal) == 8 and {f.severity for f in thermal} == {Severity.BLOCK}
    first = thermal[0]
    assert first.message.startswith("GPU 0 (0000:05:00.0) ran at ")
    assert "above class mi300x-8gpu in this slot (median " in first.message and "over 3 nodes)" in first.message
    assert first.path == "measurements[key=thermal/gpu0/temp_c_max]" and first.device == "0000:05:00.0"
    assert isinstance(first.expected, float) and isinstance(first.actual, float) and first.actual > first.expected
    assert not [f for f in found if f.rule == "thermal.outlier" and "peers" in f.message]
    _, two_nodes = _findings(hot, reference=_class(2))
    assert not [f for f in two_nodes if f.rule == "thermal.outlier"]  # the median of two nodes is no class


def test_thermal_rule_a_node_hotter_than_its_baseline_blocks() -> None:
    _, found = _findings(_heat(upgraded(), 13.0), baseline=mi300x_snapshot())
    thermal = [f for f in found if f.rule == "thermal.outlier"]
    assert len(thermal) == 8 and all("above its own baseline" in f.message for f in thermal)
    assert all("threshold 10 °C" in f.message for f in thermal)


def test_thermal_rule_severity_and_thresholds_are_policy_knobs() -> None:
    one_hot = _heat(upgraded(), 15.0, lambda i: i == 5)
    verdict, found = _findings(one_hot, baseline=mi300x_snapshot(), policy=_policy(severity=Severity.WARN))
    assert verdict is Verdict.PASS
    assert {f.severity for f in found if f.rule == "thermal.outlier"} == {Severity.WARN}
    _, lenient = _findings(
        one_hot, baseline=mi300x_snapshot(), policy=_policy(threshold_c=20.0, baseline_threshold_c=20.0)
    )
    assert not [f for f in lenient if f.rule == "thermal.outlier"]
    _, few = _findings(one_hot, policy=_policy(min_peers=8), reference=_class())
    assert not [f for f in few if f.rule == "thermal.outlier" and "peers" in f.message]


def test_thermal_readings_are_never_judged_as_bandwidth() -> None:
    warmer = _heat(upgraded(), 9.0)  # +14% in °C: a "regression" to a relative bandwidth tolerance
    _, found = _findings(warmer, baseline=mi300x_snapshot(), reference=_class())
    assert [f.rule for f in found if "thermal/" in (f.path or "")] == []
    cooler = replace(
        upgraded(),
        phases=tuple(
            replace(p, measurements=tuple(m for m in p.measurements if not m.key.startswith("thermal/")))
            for p in upgraded().phases
        ),
    )
    _, missing = _findings(cooler, baseline=mi300x_snapshot())
    rules = {f.rule for f in missing if "thermal" in (f.path or "") or f.device == "thermal"}
    assert rules == {"thermal.outlier"}  # absent readings: thermal evidence missing, not bandwidth.not_comparable
    (gone,) = [f for f in missing if f.rule == "thermal.outlier"]
    assert gone.severity is Severity.BLOCK and "not sampled" in gone.message
    assert gone.node == NodeName(NODE)


def test_thermal_observations_record_the_gap_and_the_window_page_draws_it() -> None:
    from upgrade_gate.fleet.rollout import add_observation, begin_soak
    from upgrade_gate.fleet.window_rollout import key_metrics
    from upgrade_gate.judge.plan import SoakSettings
    from upgrade_gate.report.window_html import render_window_html

    calm, hot = key_metrics(upgraded()), key_metrics(_heat(upgraded(), 14.0, lambda i: i == 2))
    assert calm["thermal/gap_c"] < 5.0 and hot["thermal/gap_c"] > 10.0
    assert hot["thermal/temp_c_max"] > calm["thermal/temp_c_max"]
    doc: dict[str, object] = {
        "id": "w1",
        "state": "soaking",
        "change_id": "rocm-6.2.0",
        "canaries": [{"node": "n1", "class": "c"}],
        "history": [],
    }
    begin_soak(doc, SoakSettings(duration_s=72 * 3600, every_s=6 * 3600, min_observations=2, mesh=True), at=NOW)
    for at, values in (("2026-12-01T06:00:00Z", calm), ("2026-12-01T12:00:00Z", hot)):
        add_observation(doc, at=at, by="cron", nodes={"n1": (True, [])}, metrics={"n1": values})
    page = render_window_html(doc, {"n1": calm})
    assert "hottest GPU above the others" in page
    assert page.count("<svg") == 3  # mesh bus bandwidth, kernel events and the temperature gap


def test_thermal_rule_readings_follow_the_slot_when_the_order_changes() -> None:
    from tests.judge_scenarios import reverse_order

    hot = reverse_order(_heat(upgraded(), 15.0, lambda i: i == 0))  # slot 05:00.0 is hot, now enumerated 7th
    _, found = _findings(hot, baseline=mi300x_snapshot())
    thermal = [f for f in found if f.rule == "thermal.outlier"]
    assert thermal and all(f.message.startswith("GPU 7 (0000:05:00.0) ran at ") for f in thermal), thermal
    assert {f.path for f in thermal} == {"measurements[key=thermal/gpu0/temp_c_max]"}  # the key phase 2 wrote
