"""Class references: prevailing order, firmware, software, VF counts and metric medians; odd ones out."""

from __future__ import annotations

import pytest

from tests.test_store_gitstore import BDFS, snapshot_for
from upgrade_gate import schemas
from upgrade_gate.errors import InputError, SchemaError
from upgrade_gate.model import Measurement, MetricSummary, Nic, PhaseResult, PhaseStatus, replace
from upgrade_gate.store.aggregate import (
    aggregate_class,
    class_reference_from_document,
    class_reference_to_document,
    deviations,
    odd_ones_out,
    prevailing,
)

REVERSED = tuple(reversed(BDFS))


def _fleet() -> list:
    return [
        snapshot_for("node-a", busbw=(350.0, 352.0, 348.0)),
        snapshot_for("node-b", busbw=(340.0,)),
        snapshot_for("node-c", busbw=(360.0, 362.0)),
        snapshot_for("node-d", bdfs=REVERSED, smc="00.85.113.00", numvfs=4, rocm="6.2.0", busbw=(300.0,)),
    ]


def test_aggregate_takes_the_prevailing_state() -> None:
    ref = aggregate_class("mi300x-4gpu", _fleet())
    assert ref.nodes == ("node-a", "node-b", "node-c", "node-d")
    assert ref.gpu_order == BDFS
    assert ref.firmware == {
        "gpu/PSP_SOSDRV": "00.36.02.59",
        "gpu/SMC": "00.85.112.00",
        "gpu/vbios": "113-M3000100-102",
        "nic/4106/fw_ver": "1.90.0",
    }
    assert ref.software == {"driver_version": "6.8.5", "kernel": "6.8.0-45-generic", "rocm_version": "6.1.3"}
    assert ref.sriov == {"0000:06:00.0": 8}


def test_aggregate_metric_is_median_and_mad_of_node_medians() -> None:
    (metric,) = aggregate_class("mi300x-4gpu", _fleet()).metrics
    # per-node medians: 350, 340, 361, 300 -> median 345; |dev| 5, 5, 16, 45 -> MAD 10.5
    assert metric == MetricSummary(
        key="mesh/all_reduce/avg_busbw",
        unit="GB/s",
        median=345.0,
        spread=10.5,
        n_nodes=4,
        settings={"max_bytes": "2147483648", "min_bytes": "1024", "step_factor": "2"},
        higher_is_better=True,
    )


def test_aggregate_metric_records_the_prevailing_direction() -> None:
    fleet = _fleet()
    fleet[3] = replace(fleet[3], measurements=tuple(replace(m, higher_is_better=False) for m in fleet[3].measurements))
    (metric,) = aggregate_class("mi300x-4gpu", fleet).metrics
    assert metric.higher_is_better is True and metric.n_nodes == 3  # one node's flipped flag is not the class's
    document = class_reference_to_document(aggregate_class("mi300x-4gpu", fleet))
    assert class_reference_from_document(document, source="ref.json").metrics[0].higher_is_better is True


def test_aggregate_metric_uses_only_the_prevailing_settings() -> None:
    fleet = _fleet()
    other = Measurement(
        key="mesh/all_reduce/avg_busbw", unit="GB/s", samples=(10.0,), settings={"min_bytes": "8388608"}
    )
    fleet[1] = replace(fleet[1], measurements=(other,))
    phase = PhaseResult(phase=2, name="mesh", status=PhaseStatus.PASSED, measurements=fleet[0].measurements)
    fleet[0] = replace(fleet[0], measurements=(), phases=(phase,))  # phase measurements count
    (metric,) = aggregate_class("c", fleet).metrics
    assert metric.n_nodes == 3
    assert metric.median == 350.0
    assert metric.settings["min_bytes"] == "1024"


def test_aggregate_result_does_not_depend_on_input_order() -> None:
    fleet = [*_fleet()[:2], snapshot_for("node-e", smc="9"), snapshot_for("node-f", smc="9")]
    assert aggregate_class("c", fleet) == aggregate_class("c", list(reversed(fleet)))
    assert prevailing(["b", "a", "b", "a", None, None]) == "a"
    assert prevailing([]) is None


def test_aggregate_nic_firmware_is_keyed_by_part() -> None:
    fleet = [
        replace(s, nics=(*s.nics, Nic(name="mlx5_0", fw_ver="28.39.1002", vendor_part_id="4129"))) for s in _fleet()
    ]
    ref = aggregate_class("c", fleet)
    assert ref.firmware["nic/4106/fw_ver"] == "1.90.0"
    assert ref.firmware["nic/4129/fw_ver"] == "28.39.1002"


def test_aggregate_refuses_empty_and_duplicate_input() -> None:
    with pytest.raises(InputError, match="no snapshots"):
        aggregate_class("c", [])
    with pytest.raises(InputError, match="node-a"):
        aggregate_class("c", [snapshot_for("node-a"), snapshot_for("node-a")])


def test_aggregate_reference_round_trips_through_its_schema() -> None:
    reference = aggregate_class("c", _fleet())
    document = class_reference_to_document(reference)
    schemas.validate("class-reference", document, source="t")
    assert class_reference_from_document(document, source="t") == reference
    document["sriov"]["0000:06:00.0"] = -1
    with pytest.raises(SchemaError, match="sriov"):
        class_reference_from_document(document, source="t")


def test_odd_ones_out_names_each_difference() -> None:
    fleet = _fleet()
    ref = aggregate_class("mi300x-4gpu", fleet)
    assert odd_ones_out(ref, fleet[0]) == ()
    lines = odd_ones_out(ref, fleet[3])
    assert "gpus[0].bdf: 0000:75:00.0 (class: 0000:05:00.0)" in lines
    assert "gpus[3].firmware.SMC: 00.85.113.00 (class: 00.85.112.00)" in lines
    assert "software.rocm_version: 6.2.0 (class: 6.1.3)" in lines
    assert "sriov[0000:06:00.0].numvfs: 4 (class: 8)" in lines
    assert len(lines) == 4 + 4 + 1 + 1


def test_odd_ones_out_reports_missing_gpus_and_firmware() -> None:
    fleet = _fleet()
    ref = aggregate_class("mi300x-4gpu", fleet)
    short = replace(fleet[0], gpus=fleet[0].gpus[:3], nics=(), sriov=())
    found = {d.path: d for d in deviations(ref, short)}
    assert found["gpu_count"].actual == 3 and found["gpu_count"].expected == 4
    assert found["gpus[3]"].actual is None and found["gpus[3]"].expected == BDFS[3]
    assert str(found["sriov[0000:06:00.0].numvfs"]) == "sriov[0000:06:00.0].numvfs: absent (class: 8)"
