"""Evidence the tool printed as a placeholder on every GPU, at the baseline and again after the change, is missing
evidence, never a pass (break test 2026-12-07, /tmp/brk17b/repro_f3.sh on that box: amd-smi printing N/A for
`vbios.version`, or for every firmware version, on all 8 GPUs of the fake node passed `baseline save` and then the
gate with nothing to report, since the diff sees an absence only against a value; `"[Not Supported]"` was kept as
the VBIOS itself)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.judge_scenarios import NOW, judge_one, mi300x_snapshot, upgrade_plan
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import Finding, Severity, Snapshot, Verdict, replace
from upgrade_gate.parse.sanity import error_text

VBIOS_NA = "amd-smi static printed N/A for vbios.version"
FIRMWARE_NA = "amdsmi_firmware: did not report it; rocmsmi: not captured"


def _without(snap: Snapshot, name: str, empty: object, why: str, *, gpus: int = 8) -> Snapshot:
    out = tuple(
        replace(g, **{name: empty}, na_reasons={**g.na_reasons, name: why}) if g.index < gpus else g for g in snap.gpus
    )
    return replace(snap, gpus=out)


def _unreported(report_findings: tuple[Finding, ...]) -> list[Finding]:
    return [f for f in report_findings if f.rule == "evidence.missing" and "not reported on" in f.message]


@pytest.mark.parametrize("printed", ["[Not Supported]", "[N/A]", "(N/A)", "N/A"])
def test_bracketed_placeholders_are_error_texts(printed: str) -> None:
    assert error_text(printed) == f"the tool printed {printed!r}"
    assert error_text("113-M3000100-102") is None and error_text("[1.2.3]") is None


def test_vbios_na_on_every_gpu_on_both_sides_blocks_as_missing_evidence() -> None:
    base = _without(mi300x_snapshot(), "vbios", None, VBIOS_NA)
    cand = _without(mi300x_snapshot(seed=2), "vbios", None, VBIOS_NA)
    report = judge_one(cand, base)
    (f,) = _unreported(report.findings)
    assert f.severity is Severity.BLOCK and f.path == "gpus[].vbios" and report.verdict is Verdict.BLOCK
    assert f.message == (
        f"vbios not reported on 8 of 8 GPU(s) nor in the baseline ({VBIOS_NA}; and on 7 more GPU(s)): "
        "nothing to judge it by, missing evidence"
    )


def test_an_mi300a_which_never_prints_its_vbios_is_not_blocked_for_it() -> None:
    """amd-smi static prints `VBIOS: VERSION: N/A` on every MI300A run (corpus amd-smi/static-mi300a-doc-example-
    driver6.9.0-rc5-elided.txt): that is the model, not missing evidence."""

    def apu(snap: Snapshot) -> Snapshot:
        return replace(snap, gpus=tuple(replace(g, product_name="AMD Instinct MI300A") for g in snap.gpus))

    base = _without(apu(mi300x_snapshot()), "vbios", None, VBIOS_NA)
    cand = _without(apu(mi300x_snapshot(seed=2)), "vbios", None, VBIOS_NA)
    assert not _unreported(judge_one(cand, base).findings)


def test_a_partition_whose_device_reports_the_value_is_not_missing() -> None:
    """VBIOS and firmware belong to the physical device: a secondary partition printing N/A where the device's
    first partition prints the value is not missing evidence."""
    snap = mi300x_snapshot()
    first = snap.gpus[0]
    second = replace(
        first, index=8, bdf=f"{str(first.bdf)[:-1]}1", vbios=None, na_reasons={**first.na_reasons, "vbios": VBIOS_NA}
    )
    cand = replace(mi300x_snapshot(seed=2), gpus=(*mi300x_snapshot(seed=2).gpus, second))
    assert not _unreported(judge_one(cand, replace(snap, gpus=(*snap.gpus, second))).findings)


def test_firmware_unreported_on_one_gpu_names_it() -> None:
    base = _without(mi300x_snapshot(), "firmware", {}, FIRMWARE_NA, gpus=1)
    cand = _without(mi300x_snapshot(seed=2), "firmware", {}, FIRMWARE_NA, gpus=1)
    (f,) = _unreported(judge_one(cand, base).findings)
    assert f.path == "gpus[0].firmware" and f.device == "gpu[0]" and FIRMWARE_NA in f.message


def test_a_value_the_baseline_had_is_left_to_the_diff() -> None:
    """Lost since the baseline: the diff's change (regrouped as "not reported" by the causes) speaks for it."""
    cand = _without(mi300x_snapshot(seed=2), "vbios", None, VBIOS_NA)
    report = judge_one(cand, mi300x_snapshot())
    assert not _unreported(report.findings) and report.verdict is Verdict.BLOCK


def test_a_value_reported_on_both_sides_has_no_finding() -> None:
    assert not _unreported(judge_one(mi300x_snapshot(seed=2)).findings)


def test_a_site_may_drop_a_field_from_the_list_and_it_is_named_loosened(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "name: vm-fleet\nrules:\n  - {id: evidence.missing, params: {unreported_gpu_fields: [firmware]}}\n", "utf-8"
    )
    policy = load_policy(path)
    base = _without(mi300x_snapshot(), "vbios", None, VBIOS_NA)
    cand = _without(mi300x_snapshot(seed=2), "vbios", None, VBIOS_NA)
    report = judge(baselines={base.node.name: base}, candidates=[cand], plan=upgrade_plan(), policy=policy, now=NOW)
    assert not _unreported(report.findings)
    assert any("unreported_gpu_fields" in line for line in policy.loosened("evidence.missing", None))
