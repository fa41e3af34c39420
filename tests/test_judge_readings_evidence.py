"""Readings that are no evidence: garbled phase 2 thermal readings and the RCCL library under a ROCm plan.

The pair is the scenarios' healthy one (baseline `mi300x_snapshot()`, candidate `upgraded()`, plan
tests/fixtures/judge/plans/rocm-6.2.0.yaml, the default policy), which passes unedited. Each test edits
one reading the way a broken tool, a hand edit or a lost probe would, and expects a finding that names
the field; none may pass silently.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.judge_scenarios import NOW, mi300x_snapshot, upgraded, with_software
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.plan import ChangePlan, load_plan
from upgrade_gate.judge.policy import Policy, load_policy
from upgrade_gate.model import Finding, GateReport, Measurement, Severity, Snapshot, Verdict, replace

PLAN = load_plan(Path(__file__).parent / "fixtures" / "judge" / "plans" / "rocm-6.2.0.yaml")
POLICY = load_policy(None)
TEMP = "thermal/gpu0/temp_c_max"
POWER = "thermal/gpu0/power_w_mean"
OLD_RCCL = "librccl.so.1.0.60103"
NEW_RCCL = "librccl.so.1.0.60200"


def _report(
    candidate: Snapshot, baseline: Snapshot | None = None, *, plan: ChangePlan | None = PLAN, policy: Policy = POLICY
) -> GateReport:
    base = baseline if baseline is not None else mi300x_snapshot()
    return judge(baselines={base.node.name: base}, candidates=[candidate], plan=plan, policy=policy, now=NOW)


def _rule(report: GateReport, rule: str) -> list[Finding]:
    return [f for n in report.nodes for f in n.findings if f.rule == rule]


def _edit(snap: Snapshot, key: str, change: Callable[[Measurement], Measurement | None]) -> Snapshot:
    """`snap` with the measurement `key` of its phases changed (None: removed)."""

    def edited(ms: tuple[Measurement, ...]) -> tuple[Measurement, ...]:
        out = (change(m) if m.key == key else m for m in ms)
        return tuple(m for m in out if m is not None)

    return replace(snap, phases=tuple(replace(p, measurements=edited(p.measurements)) for p in snap.phases))


def _samples(*values: float) -> Callable[[Measurement], Measurement]:
    return lambda m: replace(m, samples=values)


def _removed(m: Measurement) -> None:
    return None


def _thermal_policy(**params: object) -> Policy:
    rules = tuple(replace(e, params={**e.params, **params}) if e.id == "thermal.outlier" else e for e in POLICY.rules)
    return replace(POLICY, rules=rules)


# --------------------------------------------------------------------------- thermal readings


def test_readings_evidence_the_unedited_pair_passes() -> None:
    report = _report(upgraded())
    assert report.verdict is Verdict.PASS
    assert _rule(report, "thermal.outlier") == [] and _rule(report, "software.rccl") == []


GARBLED = {
    "temp-zero": (TEMP, _samples(0.0)),
    "temp-minus-one": (TEMP, _samples(-1.0)),
    "temp-scaled-tenth": (TEMP, lambda m: replace(m, samples=tuple(round(s * 0.1, 4) for s in m.samples))),
    "temp-millidegrees": (TEMP, lambda m: replace(m, samples=tuple(s * 1000 for s in m.samples))),
    "temp-nan": (TEMP, _samples(float("nan"))),
    "temp-fahrenheit": (TEMP, lambda m: replace(m, unit="F")),
    "temp-other-tool": (TEMP, lambda m: replace(m, settings={**m.settings, "tool": "ipmitool sdr type Temperature"})),
    "temp-other-sensor": (TEMP, lambda m: replace(m, settings={**m.settings, "sensor": "edge"})),
    "power-no-samples": (POWER, _samples()),
    "power-removed": (POWER, _removed),
    "power-zero": (POWER, _samples(0.0)),
    "power-minus-one": (POWER, _samples(-1.0)),
    "power-milliwatts": (POWER, lambda m: replace(m, unit="mW")),
}


@pytest.mark.parametrize("case", GARBLED)
def test_readings_evidence_a_garbled_or_lost_thermal_reading_is_missing_evidence(case: str) -> None:
    key, change = GARBLED[case]
    report = _report(_edit(upgraded(), key, change))
    thermal = _rule(report, "thermal.outlier")
    assert report.verdict is Verdict.BLOCK, case
    assert [(f.severity, f.path, f.device) for f in thermal] == [
        (Severity.BLOCK, f"measurements[key={key}]", "0000:05:00.0")
    ], [f.message for f in thermal]
    assert key in thermal[0].message and "\n" not in thermal[0].message


def test_readings_evidence_garbled_readings_follow_the_missing_evidence_severity() -> None:
    candidate = _edit(_edit(upgraded(), TEMP, _samples(-1.0)), POWER, _removed)
    report = _report(candidate, policy=_thermal_policy(missing_evidence="warn"))
    assert report.verdict is Verdict.PASS
    assert {(f.path, f.severity) for f in _rule(report, "thermal.outlier")} == {
        (f"measurements[key={TEMP}]", Severity.WARN),
        (f"measurements[key={POWER}]", Severity.WARN),
    }


def test_readings_evidence_a_garbled_temperature_is_not_compared_with_peers_or_baseline() -> None:
    report = _report(_edit(upgraded(), TEMP, _samples(64000.0)))  # amdgpu hwmon's millidegrees leaked
    (only,) = _rule(report, "thermal.outlier")
    assert "peers" not in only.message and "baseline" not in only.message


def test_readings_evidence_a_sensor_na_on_both_sides_passes() -> None:
    """A GPU model whose socket power amd-smi prints as N/A has no power reading before or after."""
    report = _report(_edit(upgraded(), POWER, _removed), _edit(mi300x_snapshot(), POWER, _removed))
    assert report.verdict is Verdict.PASS
    assert _rule(report, "thermal.outlier") == []


def test_readings_evidence_a_garbled_baseline_reading_makes_no_outlier() -> None:
    report = _report(upgraded(), _edit(mi300x_snapshot(), TEMP, _samples(-1.0)))
    assert _rule(report, "thermal.outlier") == []


# --------------------------------------------------------------------------- RCCL under a ROCm plan

BASE_RCCL = with_software(mi300x_snapshot(), rccl_library=OLD_RCCL)


def test_readings_evidence_a_new_rccl_library_under_the_rocm_plan_passes() -> None:
    report = _report(with_software(upgraded(), rccl_library=NEW_RCCL), BASE_RCCL)
    assert report.verdict is Verdict.PASS and _rule(report, "software.rccl") == []


@pytest.mark.parametrize("value", [None, "N/A", "Error: ldconfig failed", "", "/opt/rocm/lib/librccl.so.1"])
def test_readings_evidence_rccl_library_unreadable_under_the_rocm_plan_blocks(value: str | None) -> None:
    candidate = replace(upgraded(), software=replace(upgraded().software, rccl_library=value))
    report = _report(candidate, BASE_RCCL)
    (found,) = _rule(report, "software.rccl")
    assert report.verdict is Verdict.BLOCK
    assert (found.severity, found.path, found.expected, found.actual) == (
        Severity.BLOCK,
        "software.rccl_library",
        OLD_RCCL,
        value,
    )
    assert "RCCL library" in found.message and "\n" not in found.message


def test_readings_evidence_rccl_library_lost_names_the_probe_reason() -> None:
    software = upgraded().software
    why = "rccl_library: no files matched /opt/rocm/lib/librccl.so.1"
    candidate = replace(upgraded(), software=replace(software, na_reasons={**software.na_reasons, "rccl_library": why}))
    (found,) = _rule(_report(candidate, BASE_RCCL), "software.rccl")
    assert found.severity is Severity.BLOCK and why in found.message


def test_readings_evidence_rccl_library_unchanged_by_a_rocm_change_warns() -> None:
    report = _report(with_software(upgraded(), rccl_library=OLD_RCCL), BASE_RCCL)
    (found,) = _rule(report, "software.rccl")
    assert report.verdict is Verdict.PASS
    assert (found.severity, found.path, found.actual) == (Severity.WARN, "software.rccl_library", OLD_RCCL)
    assert "6.1.3 -> 6.2.0" in found.message


def test_readings_evidence_garbled_rccl_library_blocks_even_against_a_baseline_without_one() -> None:
    """A baseline saved before the RCCL library was captured compares nothing, but an error text is no file."""
    report = _report(with_software(upgraded(), rccl_library="Error: ldconfig failed"))
    (found,) = _rule(report, "software.rccl")
    assert found.severity is Severity.BLOCK and found.path == "software.rccl_library"
    assert _rule(_report(upgraded()), "software.rccl") == []  # neither side captured it: nothing to judge


def test_readings_evidence_garbled_rccl_library_blocks_without_a_rocm_plan() -> None:
    report = _report(with_software(mi300x_snapshot(), rccl_library="N/A"), BASE_RCCL, plan=None)
    (found,) = _rule(report, "software.rccl")
    assert found.severity is Severity.BLOCK and "N/A" in found.message


def test_thermal_rule_knows_the_programs_phase_2_reads() -> None:
    """`thermal.TOOLS` names the programs of phase 2's argv (kept apart so the judge does not import the phase)."""
    from upgrade_gate.judge.rules.thermal import TOOLS
    from upgrade_gate.validate.phases.nvidia_thermal import ARGV as NVIDIA_ARGV
    from upgrade_gate.validate.phases.nvidia_thermal import SENSORS as NVIDIA_SENSORS
    from upgrade_gate.validate.phases.thermal import MONITOR_ARGV, ROCMSMI_ARGV

    assert {MONITOR_ARGV[0], ROCMSMI_ARGV[0], NVIDIA_ARGV[0]} == TOOLS
    from upgrade_gate.judge.rules.thermal import SENSORS

    # the sensors the NVIDIA sampler records are the ones the rule reads (temperature.gpu, power.draw)
    assert (SENSORS["nvidia-smi"]["temp_c_max"], SENSORS["nvidia-smi"]["power_w_mean"]) == NVIDIA_SENSORS


def test_thermal_rule_reads_nvidia_smi_readings_by_their_own_sensors() -> None:
    """issue 30: phase 2 on NVIDIA records temperature.gpu ("gpu") and power.draw ("board power") by
    nvidia-smi; the rule reads them (they were refused as unknown, which blocked every NVIDIA node), and
    still refuses AMD's sensor names from nvidia-smi."""
    from upgrade_gate.judge.rules.thermal import _unusable
    from upgrade_gate.model import Measurement

    tool = "nvidia-smi --query-gpu=index,pci.bus_id,temperature.gpu,temperature.memory,power.draw"
    temp = Measurement(
        key="thermal/gpu0/temp_c_max", unit="C", samples=(61.0, 63.0), settings={"tool": tool, "sensor": "gpu"}
    )
    power = Measurement(
        key="thermal/gpu0/power_w_mean", unit="W", samples=(640.0,), settings={"tool": tool, "sensor": "board power"}
    )
    assert _unusable(temp, "temp_c_max") is None and _unusable(power, "power_w_mean") is None
    amd_words = Measurement(
        key="thermal/gpu0/temp_c_max", unit="C", samples=(61.0,), settings={"tool": tool, "sensor": "hotspot"}
    )
    assert _unusable(amd_words, "temp_c_max") == ("its sensor is 'hotspot', not 'gpu'", "hotspot")
