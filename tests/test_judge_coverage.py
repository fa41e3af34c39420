"""The coverage table: every snapshot field is judged or declared informational, and `diff` and `gate`
agree because both read it (issue 10: fields the judge never looked at)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.judge_scenarios import NOW, mi300x_snapshot, upgrade_plan, upgraded
from upgrade_gate import codec, schemas
from upgrade_gate.cli.main import run
from upgrade_gate.errors import ExitCode
from upgrade_gate.judge.coverage import (
    COVERAGE,
    UNPLANNED,
    CoverageKind,
    coverage_of,
    schema_fields,
)
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.plan import ChangePlan, plan_from_dict
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.judge.rules import REGISTRY
from upgrade_gate.model import GateReport, Gpu, Severity, Snapshot, Software, Verdict, replace


def test_coverage_every_snapshot_schema_field_is_judged_or_informational() -> None:
    fields = set(schema_fields(schemas.load_schema("snapshot")))
    unjudged = sorted(fields - set(COVERAGE))
    assert not unjudged, f"snapshot fields with no coverage entry (judge them or say why not): {unjudged}"
    stale = sorted(set(COVERAGE) - fields)
    assert not stale, f"coverage entries for fields the schema does not have: {stale}"


def test_coverage_entries_name_registered_rules_and_give_reasons() -> None:
    for path, cov in COVERAGE.items():
        if cov.kind is CoverageKind.INFORMATIONAL:
            assert cov.reason and cov.rule is None, path
        else:
            assert cov.rule in REGISTRY, f"{path}: {cov.rule} is not a registered rule"
        if cov.kind is CoverageKind.CHECKED:
            assert cov.reason, path


def test_coverage_schema_walk_sees_nested_arrays_maps_and_refs() -> None:
    schema = {
        "$defs": {
            "port": {"type": "object", "properties": {"mtu": {"type": ["integer", "null"]}}},
            "nic": {
                "type": "object",
                "properties": {
                    "ports": {"type": "array", "items": {"$ref": "#/$defs/port"}},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "fw": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
        },
        "type": "object",
        "properties": {"nic": {"anyOf": [{"$ref": "#/$defs/nic"}, {"type": "null"}]}},
    }
    assert list(schema_fields(schema)) == ["nic", "nic.ports[]", "nic.ports[].mtu", "nic.tags", "nic.fw"]


def test_coverage_maps_diff_paths_to_schema_fields() -> None:
    assert coverage_of("gpus[serial=692409006566,partition=3].firmware.PM") == (
        "gpus[].firmware",
        COVERAGE["gpus[].firmware"],
    )
    assert coverage_of("nics[name=ionic_0].ports[port=1].mtu") == ("nics[].ports[].mtu", COVERAGE["nics[].ports[].mtu"])
    assert coverage_of("gpus[bdf=0000:05:00.0]") == ("gpus[]", COVERAGE["gpus[]"])
    assert coverage_of("measurements") == ("measurements[]", COVERAGE["measurements[]"])
    found = coverage_of("measurements[key=mesh/all_reduce/busbw/1024].n_samples")
    assert found is not None and found[0] == "measurements[].samples"


# --------------------------------------------------------------------------- the issue's cases


def _gpu3(snap: Snapshot, **changes: object) -> Snapshot:
    gpus = tuple(replace(g, **changes) if g.index == 3 else g for g in snap.gpus)  # type: ignore[arg-type]
    return replace(snap, gpus=gpus)


def _mtu(snap: Snapshot) -> Snapshot:
    nic = snap.nics[2]
    nics = (*snap.nics[:2], replace(nic, ports=(replace(nic.ports[0], mtu=1500),)), *snap.nics[3:])
    return replace(snap, nics=nics)


def _nic_part(snap: Snapshot) -> Snapshot:
    nics = (*snap.nics[:2], replace(snap.nics[2], vendor_part_id="4129"), *snap.nics[3:])
    return replace(snap, nics=nics)


CASES: dict[str, tuple[Callable[[Snapshot], Snapshot], str]] = {
    "compute_partition SPX->CPX": (lambda s: _gpu3(s, compute_partition="CPX"), "compute_partition"),
    "memory_partition NPS1->NPS4": (lambda s: _gpu3(s, memory_partition="NPS4"), "memory_partition"),
    "numa_node 0->1": (lambda s: _gpu3(s, numa_node=1), "numa_node"),
    "vram halved": (lambda s: _gpu3(s, vram_total_mib=s.gpus[3].vram_total_mib // 2), "vram_total_mib"),  # type: ignore[operator]
    "compute_units -16": (lambda s: _gpu3(s, compute_units=s.gpus[3].compute_units - 16), "compute_units"),  # type: ignore[operator]
    "NIC port MTU 4096->1500": (_mtu, "mtu"),
    "NIC vendor part id": (_nic_part, "vendor_part_id"),
}


def _same_software(snap: Snapshot) -> Snapshot:
    """The candidate on the baseline's software, so that only the field under test differs."""
    base = mi300x_snapshot()
    return replace(snap, software=replace(base.software))


def _gate(candidate: Snapshot, plan: ChangePlan | None = None) -> GateReport:
    baseline = mi300x_snapshot()
    return judge(
        baselines={baseline.node.name: baseline},
        candidates=[candidate],
        plan=plan,
        policy=load_policy(),
        now=NOW,
        tool_version="test",
    )


def _write(path: Path, snap: Snapshot) -> Path:
    path.write_text(json.dumps(codec.to_jsonable(snap)), encoding="utf-8")
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_coverage_unjudged_field_change_blocks_and_diff_agrees(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mutate, field = CASES[case]
    same = _same_software(mi300x_snapshot(seed=2))
    assert _gate(same).verdict is Verdict.PASS  # a re-capture with noise only passes
    candidate = mutate(same)
    report = _gate(candidate)
    assert report.verdict is Verdict.BLOCK, case
    blocking = [f for f in report.findings if f.severity is Severity.BLOCK]
    assert [f.rule for f in blocking] == [UNPLANNED]
    assert blocking[0].path is not None and blocking[0].path.endswith(field)
    # diff on the same pair marks it UNEXPECTED and exits 1: the two read the same table
    base_file = _write(tmp_path / "base.json", mi300x_snapshot())
    cand_file = _write(tmp_path / "cand.json", candidate)
    assert run(["diff", str(base_file), str(cand_file)]) == ExitCode.BLOCK
    out = capsys.readouterr().out
    assert f"[UNEXPECTED, {UNPLANNED}]" in out and field in out


@pytest.mark.parametrize("case", sorted(CASES))
def test_coverage_field_change_the_plan_accepts_passes(case: str) -> None:
    mutate, field = CASES[case]
    candidate = mutate(_same_software(mi300x_snapshot(seed=2)))
    plan = plan_from_dict(
        {"id": "accept", "change": {}, "accept": [{"path": f"**.{field}", "reason": "planned repartition"}]},
        source="test",
    )
    assert _gate(candidate, plan).verdict is Verdict.PASS


def test_coverage_gate_blocks_whenever_diff_says_unexpected() -> None:
    """Every compared GPU scalar field, changed on one GPU: the gate blocks, naming the GPU."""
    gpu_fields = [p.removeprefix("gpus[].") for p, c in COVERAGE.items() if p.startswith("gpus[].")]
    scalar = [f for f in gpu_fields if COVERAGE[f"gpus[].{f}"].kind is CoverageKind.COMPARED and f != "firmware"]
    assert {"compute_partition", "numa_node", "serial", "unique_id", "vbios", "bdf", "index"} <= set(scalar)
    values: dict[str, object] = {
        "index": 9,
        "bdf": "0000:a5:00.0",
        "serial": "SWAPPED",
        "unique_id": "0x1234",
        "numa_node": 1,
        "vram_total_mib": 1,
        "compute_units": 1,
    }
    for field in scalar:
        value = values.get(field, "CHANGED")
        candidate = _gpu3(_same_software(mi300x_snapshot(seed=2)), **{field: value})
        report = _gate(candidate)
        assert report.verdict is Verdict.BLOCK, field


def test_coverage_plan_rocm_change_explains_build_and_amdsmi(tmp_path: Path) -> None:
    base = mi300x_snapshot()
    cand = upgraded()
    assert cand.software.rocm_build != base.software.rocm_build
    report = judge(
        baselines={base.node.name: base},
        candidates=[cand],
        plan=upgrade_plan(),
        policy=load_policy(),
        now=NOW,
        tool_version="test",
    )
    assert report.verdict is Verdict.PASS, [f.message for f in report.findings if f.severity is Severity.BLOCK]


def test_coverage_software_model_fields_are_all_covered() -> None:
    # the records the schema describes: a field added to the model must reach the table via the schema
    for cls, prefix in ((Software, "software."), (Gpu, "gpus[].")):
        for name in cls.__struct_fields__:  # ClassVars (RETIRED_FIELDS) are not fields
            assert f"{prefix}{name}" in COVERAGE, f"{prefix}{name}"
