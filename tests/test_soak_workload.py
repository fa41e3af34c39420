"""The soak watches the workload (issue 25, item 4): the cadence, the observation's view and policy, what
an observation records, fail closed when the due run gave no evidence, and the window page's charts.

Observations here take the canary's snapshot as `window observe --snapshot` does (real captures of
fake nodes, with phase 6 results in the shape of a real run from tests/workload_support.py); the same
observation with the Jobs on the real control plane, the script training in them, is in
tests/test_fleet_workload_real.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.test_validate_support import snapshot_of
from tests.workload_support import with_workload
from upgrade_gate.fakenode import Faults, build_fake_node, mi300x_node
from upgrade_gate.fleet.soak_workload import ran_workload, workload_due, workload_metrics
from upgrade_gate.fleet.window import Actor
from upgrade_gate.fleet.window_rollout import key_metrics, observe_window
from upgrade_gate.fleet.window_state import load_window, save_window
from upgrade_gate.judge.observe import observation_policy, observation_view
from upgrade_gate.judge.plan import plan_from_dict
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import NodeInfo, NodeName, Snapshot, replace
from upgrade_gate.report.window_html import render_window_html
from upgrade_gate.store.gitstore import BaselineStore

NODE, CLASS = NodeName("gpu-01"), "mi300x-8gpu"
T0 = "2026-12-01T00:00:00Z"
DAY = 86400.0
PLAN = {
    "id": "rocm-6.2.0",
    "change": {"rocm": {"from": "6.1.3", "to": "6.2.0"}, "driver": {"from": "6.7.0", "to": "6.8.5"}},
}


def _at(hours: float) -> str:
    return datetime.fromtimestamp(datetime(2026, 12, 1, tzinfo=UTC).timestamp() + hours * 3600, UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )


def _window(workload_every_s: float | None) -> dict[str, Any]:
    soak: dict[str, Any] = {"started_at": T0, "duration_s": 3 * DAY, "every_s": 6 * 3600.0, "min_observations": 2,
                            "mesh": False, "observations": []}  # fmt: skip
    if workload_every_s is not None:
        soak["workload_every_s"] = workload_every_s
    return {
        "schema_version": "1", "id": "w1", "change_id": "rocm-6.2.0", "state": "soaking",
        "plan": {"id": "rocm-6.2.0", "source": "plan.yaml", "sha256": "0" * 64, "document": PLAN},
        "class_label": "upgrade-gate/node-class", "namespace": "upgrade-gate",
        "canaries": [{"node": NODE, "class": CLASS, "idle": True, "busy_pods": []}],
        "classes": [], "excluded": [],
        "history": [{"action": "validate", "by": "op", "at": T0, "state": "soaking"}],
        "soak": soak,
    }  # fmt: skip


def _observation(hours: float, *, workload: bool) -> dict[str, Any]:
    metrics = {"kernel_events": 0.0, **({"workload/samples_per_s": 1500.0} if workload else {})}
    return {"at": _at(hours), "by": "cron", "verdict": "PASS", "nodes": {NODE: {"verdict": "PASS", "causes": []}},
            "metrics": {NODE: metrics}}  # fmt: skip


@pytest.fixture(scope="module")
def snaps(tmp_path_factory: pytest.TempPathFactory) -> tuple[Snapshot, Snapshot]:
    """The canary before the change (its baseline, with a reference run) and after it (no phases)."""
    root = tmp_path_factory.mktemp("soak-workload")
    info = NodeInfo(name=NODE, node_class=CLASS)
    before = build_fake_node(root / "before", mi300x_node(NODE, seed=1), Faults())
    after_spec = mi300x_node(NODE, seed=1, rocm_version="6.2.0", driver_version="6.8.5")
    after = build_fake_node(root / "after", after_spec, Faults())
    return with_workload(replace(snapshot_of(before), node=info)), replace(snapshot_of(after), node=info)


@pytest.fixture
def store(tmp_path: Path, snaps: tuple[Snapshot, Snapshot]) -> BaselineStore:
    st = BaselineStore(tmp_path / "store")
    st.init()
    st.save([snaps[0]], tag="rocm-6.1.3", message="baseline with a reference training run")
    return st


def _observe(store: BaselineStore, hours: float, snap: Snapshot) -> dict[str, Any]:
    outcome = observe_window(store, "w1", actor=Actor(by="cron", at=_at(hours)), policy=load_policy(),
                             snapshots={NODE: snap})  # fmt: skip
    return dict(outcome.record.doc["soak"]["observations"][-1])


# --------------------------------------------------------------------------- cadence


def test_soak_workload_due_first_then_once_the_cadence_has_passed() -> None:
    soak = _window(DAY)["soak"]
    assert workload_due(soak, datetime(2026, 12, 1, 6, tzinfo=UTC))  # the first observation trains
    soak["observations"] = [_observation(6, workload=True), _observation(12, workload=False)]
    assert not workload_due(soak, datetime(2026, 12, 2, 5, 59, tzinfo=UTC))  # 23h59 after the last run
    assert workload_due(soak, datetime(2026, 12, 2, 6, tzinfo=UTC))  # an observation without one does not count
    assert not workload_due(_window(None)["soak"], datetime(2026, 12, 9, tzinfo=UTC))  # no cadence: never
    assert [ran_workload(o) for o in soak["observations"]] == [True, False]


def test_soak_workload_plan_key_reaches_the_record() -> None:
    from upgrade_gate.fleet.rollout import begin_soak

    plan = plan_from_dict({**PLAN, "soak": {"duration": "72h", "every": "6h", "workload_every": "24h"}}, source="t")
    doc: dict[str, Any] = {}
    begin_soak(doc, plan.soak, at=T0)
    assert doc["soak"]["workload_every_s"] == DAY
    begin_soak(doc, plan_from_dict(PLAN, source="t").soak, at=T0)
    assert "workload_every_s" not in doc["soak"]  # records of soaks without it stay as they were


def test_soak_workload_view_and_policy_keep_phase_6_only_when_it_runs(snaps: tuple[Snapshot, Snapshot]) -> None:
    base = snaps[0]
    assert [p.phase for p in observation_view(base, mesh=False, workload=True).phases] == [6]
    assert observation_view(base, mesh=False).phases == ()
    policy = observation_policy(load_policy(), mesh=True, workload=True)
    (evidence,) = (r for r in policy.rules if r.id == "evidence.missing")
    assert tuple(evidence.params["required_phases"]) == (2, 6) and policy.name.endswith("(observation, mesh, workload)")
    assert workload_metrics(base) == {
        "workload/samples_per_s": pytest.approx(1528.0, rel=0.05), "workload/init_s": 1.2,
        "workload/collective_timeouts": 0.0,
    }  # fmt: skip


# --------------------------------------------------------------------------- observations


def test_soak_workload_due_run_without_evidence_blocks(store: BaselineStore, snaps: tuple[Snapshot, Snapshot]) -> None:
    """Fail closed: the first observation is due to train; a canary snapshot without phase 6 (the run
    could not happen) is missing evidence, the observation blocks and the window is blocked."""
    save_window(store, _window(DAY), "test: a soaking window watching the workload daily")
    last = _observe(store, 6, snaps[1])
    assert last["verdict"] == "BLOCK", last
    assert any("evidence.missing" in c and "phase 6 (workload)" in c for c in last["nodes"][NODE]["causes"]), last
    assert load_window(store, "w1").doc["state"] == "blocked"


def test_soak_workload_watches_throughput_timeouts_and_init(
    store: BaselineStore, snaps: tuple[Snapshot, Snapshot]
) -> None:
    """A daily run: the first observation trains and records its numbers; the next (6 h later) does not
    train and records none, though its snapshot carries a run; 24 h after the first, the run is 35%
    slower with RCCL timeouts and a 9.8 s init: BLOCK naming each against the baseline. The page
    charts them."""
    base, after = snaps
    save_window(store, _window(DAY), "test: a soaking window watching the workload daily")
    first = _observe(store, 6, with_workload(after, seed=2))
    assert first["verdict"] == "PASS", first
    assert set(first["metrics"][NODE]) == {"kernel_events", "workload/samples_per_s", "workload/init_s",
                                           "workload/collective_timeouts"}  # fmt: skip
    second = _observe(store, 12, with_workload(after, seed=3))
    assert second["verdict"] == "PASS" and set(second["metrics"][NODE]) == {"kernel_events"}, second
    assert _observe(store, 18, after)["verdict"] == "PASS"  # not due: no run needed
    slow = with_workload(after, seed=4, rate=1000.0, timeouts=3, init_s=9.8)
    last = _observe(store, 30, slow)
    causes = " | ".join(last["nodes"][NODE]["causes"])
    assert last["verdict"] == "BLOCK", causes
    for rule in ("workload.throughput", "workload.collective_timeouts", "workload.init_time"):
        assert rule in causes, (rule, causes)
    assert "baseline 1" in causes and "candidate 9.8 s" in causes
    assert last["metrics"][NODE]["workload/collective_timeouts"] == 3.0
    assert last["metrics"][NODE]["workload/samples_per_s"] == pytest.approx(1000.0, rel=0.05)

    doc = load_window(store, "w1").doc
    page = render_window_html(doc, {NODE: key_metrics(base)})
    for title in ("reference training run: samples/s (median step)", "process start to first step (s)",
                  "NCCL/RCCL timeouts in its log"):  # fmt: skip
        assert f"{NODE}: reference training run: {title.split(': ', 1)[-1]}" in page, title
    assert page.count("<svg") == 4  # kernel events and the three workload charts
    assert "the reference training run (phase 6) every 86400 s" in page
