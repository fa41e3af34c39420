"""The soak, waves and the class-wide cap as pure functions; the observation view; watch metrics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.judge_scenarios import mi300x_snapshot, reverse_order, upgrade_plan, upgraded
from upgrade_gate.errors import ConfigError
from upgrade_gate.fleet.rollout import (
    add_observation,
    begin_soak,
    choose_wave,
    held_nodes,
    observation_due,
    skip_soak,
    soak_status,
)
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.observe import observation_policy, observation_view
from upgrade_gate.judge.plan import SoakSettings, parse_duration, plan_from_dict
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import NodeName, Verdict
from upgrade_gate.report.prometheus import CONDITION_TYPE, node_condition, render_metrics

T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _plan(**extra: object) -> dict[str, object]:
    doc: dict[str, object] = {"id": "rocm-6.2.0", "change": {"rocm": {"to": "6.2.0"}}}
    doc.update(extra)
    return doc


# --------------------------------------------------------------------------- plan


def test_plan_soak_defaults_to_72_hours_every_6() -> None:
    plan = plan_from_dict(_plan(), source="p")
    assert plan.soak == SoakSettings(duration_s=72 * 3600, every_s=6 * 3600, min_observations=2, mesh=False)
    assert plan.waves == (1.0,)


def test_plan_soak_and_waves_are_read() -> None:
    soak = {"duration": "90m", "every": "30m", "mesh": True}
    plan = plan_from_dict(_plan(soak=soak, waves=[0.1, 0.25, 1]), source="p")
    assert (plan.soak.duration_s, plan.soak.every_s, plan.soak.mesh) == (5400, 1800, True)
    assert plan.waves == (0.1, 0.25, 1.0)
    assert parse_duration("1.5d") == 1.5 * 86400


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"waves": [0.5, 0.25, 1.0]}, "$.waves"),
        ({"waves": [0.1, 0.5]}, "$.waves"),
        ({"soak": {"duration": "72 hours"}}, "soak"),
        ({"soak": {"duration": "1h", "every": "6h"}}, "$.soak.every"),
    ],
)
def test_plan_bad_soak_or_waves_name_the_field(extra: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace("$", r"\$").replace(".", r"\.").replace("[", r"\[")):
        plan_from_dict(_plan(**extra), source="p")


# --------------------------------------------------------------------------- soak


def _soaking(duration: str = "72h", every: str = "6h") -> dict[str, object]:
    doc: dict[str, object] = {"id": "w1", "state": "soaking"}
    plan = plan_from_dict(_plan(soak={"duration": duration, "every": every}), source="p")
    begin_soak(doc, plan.soak, at=_iso(T0))
    return doc


def test_soak_72h_every_6h_on_an_injected_clock() -> None:
    doc = _soaking()
    assert not observation_due(doc, T0 + timedelta(hours=5))
    for hour in range(6, 73, 6):
        now = T0 + timedelta(hours=hour)
        assert observation_due(doc, now)
        status = soak_status(doc, now)
        assert status is not None
        if hour < 72:
            assert status.blockers(), hour
        assert add_observation(doc, at=_iso(now), by="cron", nodes={"n1": (True, ())}, metrics={"n1": {"bw": 300.0}})
    status = soak_status(doc, T0 + timedelta(hours=72))
    assert status is not None and status.blockers() == ()
    assert status.observations == 12
    assert "72h of 72h" in status.summary()


def test_soak_needs_two_observations_even_after_the_duration() -> None:
    doc = _soaking()
    add_observation(doc, at=_iso(T0 + timedelta(hours=71)), by="op", nodes={"n1": (True, ())})
    status = soak_status(doc, T0 + timedelta(hours=80))
    assert status is not None
    assert status.blockers() == ("1 of at least 2 observations taken",)


def test_a_blocked_observation_blocks_promote_and_a_skip_does_not_hide_it() -> None:
    doc = _soaking()
    add_observation(doc, at=_iso(T0 + timedelta(hours=6)), by="op", nodes={"n1": (True, ())})
    ok = add_observation(
        doc, at=_iso(T0 + timedelta(hours=30)), by="op", nodes={"n1": (False, ["device.order_changed: reversed"])}
    )
    assert not ok
    skip_soak(doc, by="op", at=_iso(T0 + timedelta(hours=31)), reason="hotfix")
    status = soak_status(doc, T0 + timedelta(hours=31))
    assert status is not None
    assert status.blockers() == ("1 observation(s) blocked",)


def test_skip_soak_allows_promote_before_the_duration() -> None:
    doc = _soaking()
    skip_soak(doc, by="op", at=_iso(T0 + timedelta(hours=1)), reason="security fix, CVE-2026-0001")
    status = soak_status(doc, T0 + timedelta(hours=1))
    assert status is not None and status.blockers() == ()
    assert "skipped" in status.summary()


def test_an_observation_with_no_nodes_is_not_a_pass() -> None:
    doc = _soaking()
    assert not add_observation(doc, at=_iso(T0), by="op", nodes={})


# --------------------------------------------------------------------------- waves and the cap


def _members(n: int) -> list[NodeName]:
    return [NodeName(f"node-{i:02d}") for i in range(n)]


def test_waves_10_25_100_on_20_nodes_within_a_cap_of_2() -> None:
    members = _members(20)
    completed = {"node-00", "node-01"}  # the canaries (10%)
    picks = []
    while True:
        choice = choose_wave(
            node_class="c", members=members, eligible=members, completed=completed, waves=(0.1, 0.25, 1.0),
            cap=2, held_elsewhere={},
        )  # fmt: skip
        if not choice.nodes:
            break
        assert len(choice.nodes) <= 2
        picks.append((choice.wave, len(choice.nodes)))
        completed |= set(choice.nodes)
    assert completed == set(members)
    assert picks[0] == (2, 2) and picks[1] == (2, 1)  # wave 2 = 25% = 5 nodes: 3 more, in two expands
    assert {w for w, _ in picks[2:]} == {3}


def test_cap_is_shared_by_every_open_window_of_the_class() -> None:
    windows = [
        {"id": "a", "state": "soaking", "canaries": [{"node": "node-03", "class": "c"}, {"node": "x", "class": "d"}]},
        {"id": "b", "state": "promoted", "canaries": [{"node": "node-04", "class": "c"}]},
        {"id": "c", "state": "planned", "canaries": [{"node": "node-05", "class": "c"}]},
    ]
    held = held_nodes(windows, "c", exclude="me")
    assert held == {"node-03": "a", "node-05": "c"}
    members = _members(20)
    choice = choose_wave(
        node_class="c", members=members, eligible=members, completed=set(), waves=(1.0,), cap=2, held_elsewhere=held
    )
    assert choice.nodes == ()
    assert "cap 2 reached by open window(s) a, c" in choice.note
    choice = choose_wave(
        node_class="c", members=members, eligible=members, completed=set(), waves=(1.0,), cap=3, held_elsewhere=held
    )
    assert len(choice.nodes) == 1 and not set(choice.nodes) & set(held)


# --------------------------------------------------------------------------- observation view


def test_observation_judges_the_snapshot_without_the_invasive_phases() -> None:
    policy = load_policy(None)
    plan = upgrade_plan()
    base = mi300x_snapshot()
    cand = upgraded()
    obs_policy = observation_policy(policy, mesh=False)
    healthy = judge(
        baselines={base.node.name: observation_view(base, mesh=False)},
        candidates=(observation_view(cand, mesh=False),),
        plan=plan,
        policy=obs_policy,
        now="2026-12-01T00:00:00Z",
    )
    assert healthy.verdict is Verdict.PASS, [f.message for f in healthy.findings if f.severity == "block"]
    drifted = judge(
        baselines={base.node.name: observation_view(base, mesh=False)},
        candidates=(observation_view(reverse_order(cand), mesh=False),),
        plan=plan,
        policy=obs_policy,
        now="2026-12-01T00:00:00Z",
    )
    assert drifted.verdict is Verdict.BLOCK
    assert "device.order_changed" in {f.rule for f in drifted.findings}


def test_a_mesh_observation_without_its_phase_2_blocks() -> None:
    policy = observation_policy(load_policy(None), mesh=True)
    base = mi300x_snapshot()
    cand = observation_view(upgraded(), mesh=False)  # phase 2 did not run
    report = judge(
        baselines={base.node.name: observation_view(base, mesh=True)},
        candidates=(cand,),
        plan=upgrade_plan(),
        policy=policy,
        now="2026-12-01T00:00:00Z",
    )
    assert report.verdict is Verdict.BLOCK
    assert any(f.rule == "evidence.missing" and "phase" in (f.path or "") for f in report.findings)


# --------------------------------------------------------------------------- watch outputs


def test_metrics_parse_as_prometheus_text_and_condition_names_the_rule() -> None:
    policy = observation_policy(load_policy(None), mesh=False)
    base = mi300x_snapshot()
    good = observation_view(upgraded(node="mi300x-node-01"), mesh=False)
    report = judge(
        baselines={base.node.name: observation_view(base, mesh=False)},
        candidates=(observation_view(reverse_order(good), mesh=False),),
        plan=upgrade_plan(),
        policy=policy,
        now="2026-12-01T00:00:00Z",
    )
    text = render_metrics(report, now=T0, taken_at={n.node: T0 - timedelta(minutes=5) for n in report.nodes})
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {"upgrade_gate_verdict", "upgrade_gate_blocked", "upgrade_gate_findings"} <= set(families)
    verdicts = {s.labels["verdict"]: s.value for s in families["upgrade_gate_verdict"].samples}
    assert verdicts == {"PASS": 0.0, "BLOCK": 1.0}
    ages = [s.value for s in families["upgrade_gate_evidence_age_seconds"].samples]
    assert ages == [300.0]
    rules = {s.labels["rule"] for s in families["upgrade_gate_findings"].samples}
    assert "device.order_changed" in rules
    condition = node_condition(report.nodes[0], now=T0)
    assert condition["type"] == CONDITION_TYPE and condition["status"] == "True"
    assert condition["reason"] == "device.order_changed"
    assert "\n" not in condition["message"]


def test_metric_labels_escape_quotes_and_newlines() -> None:
    from upgrade_gate.report.prometheus import _label

    assert _label('a"b\nc\\') == 'a\\"b\\nc\\\\'


def test_window_page_draws_each_canarys_observations_against_its_baseline() -> None:
    from upgrade_gate.report.window_html import render_window_html

    doc: dict[str, object] = {
        "id": "w1",
        "state": "soaking",
        "change_id": "rocm-6.2.0",
        "canaries": [{"node": "n1", "class": "c"}],
        "history": [{"at": _iso(T0), "action": "validate", "by": "op", "state": "soaking", "note": "<b>x</b>"}],
    }
    plan = plan_from_dict(_plan(soak={"duration": "72h", "every": "6h"}), source="p")
    begin_soak(doc, plan.soak, at=_iso(T0))
    for hour, bw in ((6, 300.0), (12, 290.0), (18, 281.0)):
        causes = [] if hour < 18 else ["<script>"]
        metrics = {"n1": {"mesh/all_reduce/avg_busbw": bw, "kernel_events": 0.0}}
        add_observation(
            doc, at=_iso(T0 + timedelta(hours=hour)), by="cron", nodes={"n1": (hour < 18, causes)}, metrics=metrics
        )
    page = render_window_html(doc, {"n1": {"mesh/all_reduce/avg_busbw": 305.0, "kernel_events": 0.0}})
    assert page.count("<svg") == 2  # bus bandwidth and kernel events over time
    assert "baseline" in page and "&lt;script&gt;" in page and "<script>" not in page
    assert "&lt;b&gt;x&lt;/b&gt;" in page
