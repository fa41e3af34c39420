"""Phases 4 and 5 between fake nodes through the launcher: pairing, the odd node out, no peer, few workers.

Rail devices come from CVF's pod naming (`PHASE4_IB_DEV_PREFIX`, here `ionic_`, the fake NICs' names)
where no snapshot is given, which keeps these tests free of captures; one test uses a real snapshot.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_validate_support import fast_config, healthy_spec, launcher_for, make_node, snapshot_of
from upgrade_gate.fakenode import FakeNode, Faults, faults
from upgrade_gate.model import NodeName, PhaseResult, PhaseStatus
from upgrade_gate.validate import cvf
from upgrade_gate.validate.config import CvfConfig
from upgrade_gate.validate.launcher import LocalLauncher
from upgrade_gate.validate.phases import ClusterPhase, RailPhase
from upgrade_gate.validate.phases.rail import pair_nodes
from upgrade_gate.validate.pipeline import run_pipeline

NAMES = ("node-01", "node-02", "node-03")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, FakeNode]:
    root = tmp_path_factory.mktemp("fleet")
    return {name: make_node(root, healthy_spec(name)) for name in NAMES}


def _config(**extra: str) -> CvfConfig:
    return fast_config(PHASE4_IB_DEV_PREFIX="ionic_", UPGRADE_GATE_SAMPLES="2", **extra)


def _run(nodes: list[str], launcher: LocalLauncher, **kwargs: object) -> dict[NodeName, tuple[PhaseResult, ...]]:
    config = kwargs.pop("config", None) or _config()
    return run_pipeline(nodes, phases=[RailPhase(), ClusterPhase()], config=config, launcher=launcher, **kwargs)  # type: ignore[arg-type]


def test_validate_multinode_pairing_is_sorted_consecutive_with_odd_node_out() -> None:
    pairs, odd = pair_nodes(tuple(NodeName(n) for n in ("c", "a", "e", "b", "d")))
    assert pairs == [("a", "b"), ("c", "d")] and odd == "e"
    assert pair_nodes((NodeName("a"),)) == ([], "a")


def test_validate_multinode_two_nodes_pass_rails_and_cluster_rccl(fleet: dict[str, FakeNode]) -> None:
    results = _run(["node-01", "node-02"], launcher_for(fleet["node-01"], fleet["node-02"]))
    for name, other in (("node-01", "node-02"), ("node-02", "node-01")):
        rail, cluster = results[NodeName(name)]
        assert rail.status is PhaseStatus.PASSED, rail.reasons
        assert rail.peer == other and rail.labels == {cvf.RAIL_BANDWIDTH: "passed"}
        assert {m.key for m in rail.measurements} == {"rail/ionic_0/write_bw", "rail/ionic_1/write_bw"}
        m = rail.measurements[0]
        assert m.unit == "Gb/s" and m.settings == {"msg_size": "65536", "qps": "1", "peer": other}
        assert m.samples[0] > 380
        assert len(m.samples) == 2  # every rail runs UPGRADE_GATE_SAMPLES times, so the judge can rank-test it
        assert rail.annotations[f"{cvf.RAIL_BANDWIDTH}-peer"] == other
        assert set(rail.annotations) >= {f"{cvf.RAIL_BANDWIDTH}-rail-0", f"{cvf.RAIL_BANDWIDTH}-rail-1"}
        assert cluster.status is PhaseStatus.PASSED, cluster.reasons
        assert cluster.peer == other
        keys = {m.key for m in cluster.measurements}
        assert {"cluster/all_reduce/avg_busbw", "cluster/all_gather/avg_busbw", "cluster/all_reduce/busbw/1024"} <= keys
        avg = next(m for m in cluster.measurements if m.key == "cluster/all_reduce/avg_busbw")
        assert len(avg.samples) == 2 and avg.settings["ranks"] == "16"
        assert (
            rail.tool_duration_s is not None
            and rail.duration_s is not None
            and 0 < rail.tool_duration_s <= rail.duration_s
        )


def test_validate_multinode_odd_node_is_paired_again_with_a_passed_node(fleet: dict[str, FakeNode]) -> None:
    results = _run(list(NAMES), launcher_for(*fleet.values()), config=_config(SKIP_RCCL_TEST="true"))
    odd = results[NodeName("node-03")][0]
    assert odd.status is PhaseStatus.PASSED, odd.reasons
    assert odd.peer == "node-01"
    assert {m.settings["peer"] for m in odd.measurements} == {"node-01"}
    first = results[NodeName("node-01")][0]
    assert first.peer == "node-02"  # the re-pairing run is reported for the odd node only


def test_validate_multinode_odd_node_without_a_passed_partner_is_not_passed(
    fleet: dict[str, FakeNode], tmp_path: Path
) -> None:
    # the client (second node of the pair) measures: its rail 0 plateaus at 300 Gb/s
    slow = make_node(tmp_path, faults.set_rail_bandwidth(fleet["node-02"].spec, 0, 300.0))
    results = _run(list(NAMES), launcher_for(fleet["node-01"], slow, fleet["node-03"]))
    for name in ("node-01", "node-02"):
        rail, cluster = results[NodeName(name)]
        assert rail.status is PhaseStatus.FAILED
        assert rail.reason is not None and rail.reason.startswith(
            "below-threshold:rail-0(node-01:ionic_0<->node-02:ionic_0)=2"
        )
        assert rail.annotations[f"{cvf.RAIL_BANDWIDTH}-failed-rails"] == "0"
        assert cluster.status is PhaseStatus.NOT_RUN
    odd, cluster = results[NodeName("node-03")]
    assert odd.status is PhaseStatus.FAILED and odd.labels == {cvf.RAIL_BANDWIDTH: "failed"}
    assert odd.reason == "no peer: the odd node out needs a partner that passed phase 4, and none did"
    assert cluster.status is PhaseStatus.NOT_RUN


def test_validate_multinode_single_node_is_never_passed(fleet: dict[str, FakeNode]) -> None:
    launcher = launcher_for(fleet["node-01"])
    rail, cluster = _run(["node-01"], launcher)[NodeName("node-01")]
    assert (
        rail.status is PhaseStatus.FAILED and rail.reason == "no peer: phase 4 needs a partner node and none was given"
    )
    assert cluster.status is PhaseStatus.NOT_RUN
    (alone,) = run_pipeline(["node-01"], phases=[ClusterPhase()], config=_config(), launcher=launcher)[
        NodeName("node-01")
    ]
    assert alone.status is PhaseStatus.FAILED
    assert alone.reason == "too few workers: 1 < PHASE5_MIN_WORKERS 2 (node-01)"
    assert alone.labels == {cvf.CLUSTER_VALIDATION_STATUS: "failed"}


def test_validate_multinode_spare_peer_partners_a_single_node(fleet: dict[str, FakeNode]) -> None:
    results = _run(["node-01"], launcher_for(fleet["node-01"], fleet["node-02"]), peers=["node-02"])
    assert list(results) == ["node-01"]  # the spare partner is not reported
    rail, cluster = results[NodeName("node-01")]
    assert rail.status is PhaseStatus.PASSED and rail.peer == "node-02"
    assert cluster.status is PhaseStatus.PASSED and cluster.peer == "node-02"


def test_validate_multinode_unreachable_peer_is_an_error_naming_it(fleet: dict[str, FakeNode]) -> None:
    rail, _ = _run(["node-01"], launcher_for(fleet["node-01"]), peers=["node-09"])[NodeName("node-01")]
    assert rail.status is PhaseStatus.ERROR
    assert rail.reason is not None and "node node-09: the local executor runs commands on this host only" in rail.reason


def test_validate_multinode_missing_ib_write_bw_fails_both_nodes(fleet: dict[str, FakeNode], tmp_path: Path) -> None:
    broken = make_node(tmp_path, fleet["node-02"].spec, Faults(tools={"ib_write_bw": faults.missing()}))
    results = _run(["node-01", "node-02"], launcher_for(fleet["node-01"], broken))
    for name in ("node-01", "node-02"):
        rail = results[NodeName(name)][0]
        assert rail.status is PhaseStatus.ERROR
        assert rail.reason is not None and "ib_write_bw: missing binary" in rail.reason


def test_validate_multinode_cluster_below_threshold_fails_every_node(
    fleet: dict[str, FakeNode], tmp_path: Path
) -> None:
    config = _config(
        TESTS_JSON='{"tests": [{"name": "all_gather_perf", "threshold": 1000}]}', SKIP_RAIL_BANDWIDTH_TEST="true"
    )
    results = _run(["node-01", "node-02"], launcher_for(fleet["node-01"], fleet["node-02"]), config=config)
    for name in ("node-01", "node-02"):
        skipped, cluster = results[NodeName(name)]
        assert skipped.status is PhaseStatus.SKIPPED
        assert cluster.status is PhaseStatus.FAILED
        assert cluster.reason is not None
        assert cluster.reason.startswith("bus-bw-below-threshold: mpirun all_gather_perf Avg bus bandwidth")
        assert cluster.reason.endswith("< TESTS_JSON all_gather_perf 1000 GB/s")


def test_validate_multinode_rails_come_from_the_snapshot(fleet: dict[str, FakeNode]) -> None:
    snapshot = snapshot_of(fleet["node-01"])
    config = fast_config(PHASE4_RAIL_COUNT="1")
    results = run_pipeline(
        ["node-01", "node-02"],
        phases=[RailPhase()],
        config=config,
        launcher=launcher_for(fleet["node-01"], fleet["node-02"]),
        snapshots={"node-01": snapshot, "node-02": snapshot},
    )
    rail = results[NodeName("node-02")][0]
    assert rail.status is PhaseStatus.PASSED, rail.reasons
    assert [m.key for m in rail.measurements] == ["rail/ionic_0/write_bw"]
