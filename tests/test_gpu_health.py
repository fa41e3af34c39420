"""GPU health counters (issue 30): nvidia-smi -q -x's ECC, remapped rows, retired pages and reset state in the
snapshot (`Gpu.health`), judged by `gpu.health`. Real documents: the A100 (DTD v12, driver 535), Tesla T4 (v11,
515) and RTX 4000 SFF Ada (v13, 595) fixtures of tests/fixtures/nvidia-smi; faults are those documents with one
value changed (a pending remap, a pending retirement, reset required, grown ECC counts); end to end, the fake
H100 node with a pending remap through `capture` -> `baseline save` -> `gate`."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from tests.judge_scenarios import NOW, judge_one, mi300x_snapshot, upgrade_plan
from upgrade_gate.cli.main import run
from upgrade_gate.errors import ExitCode, ParseError
from upgrade_gate.fakenode.nvidia import build_nvidia_node, h100_node, with_pending_remap
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import Finding, GateReport, GpuHealth, ProbeStatus, Severity, Snapshot, replace
from upgrade_gate.parse.nvidia_smi_xml import parse_nvidia_smi_xml
from upgrade_gate.snapshot.gpus import AMD_HEALTH_NOT_CAPTURED
from upgrade_gate.snapshot.io import decode_snapshot, dumps_snapshot, loads_snapshot
from upgrade_gate.snapshot.nvidia import gpu_health

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"
A100 = "a100-sxm4-80gb-mig-q-x-driver535-telegraf.xml"
T4 = "tesla-t4-q-x-driver515-v11-throttle-reasons-telegraf.xml"
RTX = "rtx4000-sff-ada-q-x-driver595-v13-telegraf.xml"
RULE = "gpu.health"
POLICY_FILE = Path(__file__).resolve().parent.parent / "examples" / "policies" / "nvidia-bundles.yaml"


def _health(name: str, *edits: tuple[str, str]) -> GpuHealth:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    for old, new in edits:
        assert text.count(old) >= 1, old
        text = text.replace(old, new, 1)
    health, why = gpu_health(parse_nvidia_smi_xml(text).gpus[0])
    assert health is not None, why
    return health


def _node(
    health: GpuHealth | None, *, gpu: int = 0, others: GpuHealth | None = None, nvidia_smi: bool = True, seed: int = 1
) -> Snapshot:
    """The judge scenarios' node with `health` on GPU `gpu`, `others` (default: `health`) on the rest and, where
    `nvidia_smi`, a probe record of the probe that reports it."""
    snap = mi300x_snapshot(seed=seed)
    rest = others if others is not None else health
    gpus = tuple(replace(g, health=health if g.index == gpu else rest) for g in snap.gpus)
    probes = (*snap.probes, ProbeStatus(name="nvidia_smi", ok=True)) if nvidia_smi else snap.probes
    return replace(snap, gpus=gpus, probes=probes)


def _found(report: GateReport) -> list[Finding]:
    return [f for f in report.findings if f.rule == RULE]


# --------------------------------------------------------------------------- the mapping, on real documents


def test_gpu_health_a100_v12_ecc_counts_reset_status_and_na_repair_counters() -> None:
    h = _health(A100)
    assert (h.source, h.ecc_mode, h.reset_required) == ("nvidia_smi", "Enabled", False)
    assert h.ecc_volatile_uncorrectable == {"sram_uncorrectable": 0, "dram_uncorrectable": 0}
    assert h.ecc_aggregate_uncorrectable == {"sram_uncorrectable": 0, "dram_uncorrectable": 0}
    assert (
        h.remap_pending is None and h.na_reasons["remap_pending"] == "nvidia-smi -q -x printed N/A for <remapped_rows>"
    )
    assert h.retirement_pending is None and "N/A" in h.na_reasons["retirement_pending"]


def test_gpu_health_t4_v11_retired_pages_and_no_reset_element() -> None:
    h = _health(T4)
    assert (h.retired_pages_single_bit, h.retired_pages_double_bit, h.retirement_pending) == (0, 0, False)
    assert h.remapped_rows_uncorrectable is None and "N/A for <remapped_rows>" in h.na_reasons["remap_failure"]
    assert h.reset_required is None
    assert h.na_reasons["reset_required"] == "nvidia-smi -q -x printed no <gpu_reset_status/reset_required>"


def test_gpu_health_rtx_v13_remapped_rows_and_ecc_disabled_counters_named() -> None:
    h = _health(RTX)
    assert (h.remapped_rows_correctable, h.remapped_rows_uncorrectable, h.remap_pending, h.remap_failure) == (
        0,
        0,
        False,
        False,
    )
    assert h.ecc_mode == "Disabled" and h.ecc_volatile_uncorrectable == {} and h.ecc_aggregate_uncorrectable == {}
    assert h.na_reasons["ecc_volatile_uncorrectable"] == (
        "nvidia-smi -q -x printed N/A for <volatile/dram_uncorrectable>, <volatile/sram_uncorrectable_parity>, "
        "<volatile/sram_uncorrectable_secded> (ECC Disabled)"
    )


def test_gpu_health_none_with_the_reason_when_no_element_is_printed() -> None:
    text = (FIXTURES / T4).read_text(encoding="utf-8")
    start, end = text.index("<ecc_mode>"), text.index("<temperature>")
    health, why = gpu_health(parse_nvidia_smi_xml(text[:start] + text[end:]).gpus[0])
    assert health is None and why is not None and "printed no <ecc_errors>" in why


def test_gpu_health_amd_gpus_carry_none_with_not_captured() -> None:
    assert AMD_HEALTH_NOT_CAPTURED.startswith("not captured: ")


@pytest.mark.parametrize("version", ["1", "2"])
def test_gpu_health_round_trips_through_both_schema_versions(version: str) -> None:
    snap = _node(_health(RTX, ("<remapped_row_pending>No<", "<remapped_row_pending>Yes<")), others=_health(T4))
    text = dumps_snapshot(snap, version=version)
    assert loads_snapshot(text, source="t") == snap
    assert decode_snapshot(text, source="t") == snap  # the untrusted (strict) decoder too
    old = json.loads(dumps_snapshot(mi300x_snapshot(), version=version))
    for gpu in old["gpus"]:
        del gpu["health"]  # a document written before the field
    assert all(g.health is None for g in loads_snapshot(json.dumps(old), source="old").gpus)


# --------------------------------------------------------------------------- the rule


@pytest.mark.parametrize("name", [A100, T4, RTX])
def test_gpu_health_real_documents_pass(name: str) -> None:
    health = _health(name)
    assert _found(judge_one(_node(health, seed=2), _node(health))) == []
    report = judge_one(_node(health, seed=2), mi300x_snapshot())  # a baseline from before the field
    assert _found(report) == []  # nothing to warn about, and the block appearing is no unplanned change:
    assert [f.path for f in report.findings if f.rule == "field.unplanned"] == []


@pytest.mark.parametrize(
    ("name", "old", "new", "field"),
    [
        (RTX, "<remapped_row_pending>No<", "<remapped_row_pending>Yes<", "remap_pending"),
        (RTX, "<remapped_row_failure>No<", "<remapped_row_failure>Yes<", "remap_failure"),
        (T4, "<pending_retirement>No<", "<pending_retirement>Yes<", "retirement_pending"),
        (A100, "<reset_required>No<", "<reset_required>Yes<", "reset_required"),
    ],
)
def test_gpu_health_pending_or_failed_repair_and_reset_required_block(
    name: str, old: str, new: str, field: str
) -> None:
    before, after = _health(name), _health(name, (old, new))
    (f,) = _found(judge_one(_node(after, gpu=3, others=before, seed=2), _node(before)))
    assert f.severity is Severity.BLOCK and f.path is not None and f.path.endswith(f"health.{field}")
    assert f.device is not None and f.device in f.message and f"nvidia_smi: {field}" in f.message
    assert (f.expected, f.actual, f.evidence) == (False, True, "nvidia_smi")


def test_gpu_health_pending_remap_blocks_without_a_baseline_block() -> None:
    after = _health(RTX, ("<remapped_row_pending>No<", "<remapped_row_pending>Yes<"))
    (f,) = _found(judge_one(_node(after, others=_health(RTX), seed=2), mi300x_snapshot()))
    assert f.severity is Severity.BLOCK and "a row remap is pending" in f.message


def test_gpu_health_uncorrectable_ecc_grown_since_the_baseline_blocks() -> None:
    grown = (
        "<dram_uncorrectable>0</dram_uncorrectable>\n            </aggregate>",
        "<dram_uncorrectable>3</dram_uncorrectable>\n            </aggregate>",
    )
    (f,) = _found(judge_one(_node(_health(T4, grown), others=_health(T4), seed=2), _node(_health(T4))))
    assert f.severity is Severity.BLOCK
    assert f.message.endswith("ecc_aggregate_uncorrectable.dram_uncorrectable grew from 0 (baseline) to 3: new "
                              "uncorrectable errors")  # fmt: skip
    assert (f.expected, f.actual) == (0, 3)


def test_gpu_health_nonzero_unchanged_count_warns_and_the_knob_grades_it() -> None:
    old = ("<remapped_row_unc>0<", "<remapped_row_unc>2<")
    health, clean = _health(RTX, old), _health(RTX)
    (f,) = _found(judge_one(_node(health, others=clean, seed=2), _node(health, others=clean)))
    assert f.severity is Severity.WARN
    assert f.message.endswith("remapped_rows_uncorrectable is 2 (unchanged since the baseline: errors counted before)")
    (g,) = _found(judge_one(_node(health, others=clean, seed=2), mi300x_snapshot()))
    assert g.severity is Severity.WARN and "no baseline value to compare with" in g.message


def test_gpu_health_volatile_count_below_the_baseline_after_a_reboot_warns() -> None:
    vol = "<volatile>\n                <sram_correctable>0</sram_correctable>\n                <sram_uncorrectable>0<"
    base = _health(T4, (vol, vol.replace("<sram_uncorrectable>0<", "<sram_uncorrectable>5<")))
    after = _health(T4, (vol, vol.replace("<sram_uncorrectable>0<", "<sram_uncorrectable>1<")))
    (f,) = _found(judge_one(_node(after, others=_health(T4), seed=2), _node(base, others=_health(T4))))
    assert f.severity is Severity.WARN and "below the baseline's 5: the counter restarted" in f.message


def test_gpu_health_ecc_switched_off_blocks() -> None:
    off = ("<current_ecc>Enabled<", "<current_ecc>Disabled<")
    (f,) = _found(judge_one(_node(_health(T4, off), others=_health(T4), seed=2), _node(_health(T4))))
    assert f.severity is Severity.BLOCK and "ECC Enabled in the baseline, Disabled now" in f.message


def test_gpu_health_a100_records_the_pending_ecc_mode() -> None:
    assert (_health(A100).ecc_mode, _health(A100).ecc_mode_pending) == ("Enabled", "Enabled")
    off = _health(A100, ("<pending_ecc>Enabled<", "<pending_ecc>Disabled<"))
    assert (off.ecc_mode, off.ecc_mode_pending) == ("Enabled", "Disabled")


def test_gpu_health_ecc_switched_off_for_the_next_reset_blocks() -> None:
    """ECC still on, but off once the GPU resets (`<pending_ecc>Disabled`): the change is made, only not yet
    in force. It passed before (break test 2026-12-07); a mode pending back to the baseline's does not block."""
    pending_off = ("<pending_ecc>Enabled<", "<pending_ecc>Disabled<")
    found = _found(judge_one(_node(_health(T4, pending_off), others=_health(T4), seed=2), _node(_health(T4))))
    (f,) = found
    assert f.severity is Severity.BLOCK and f.path is not None and f.path.endswith(".ecc_mode_pending")
    assert "ECC Enabled now, Disabled after the next GPU reset (pending); Enabled in the baseline" in f.message
    back = _health(T4, ("<current_ecc>Enabled<", "<current_ecc>Disabled<"))  # off now, on again after a reset
    (f,) = _found(judge_one(_node(back, others=_health(T4), seed=2), _node(_health(T4))))
    assert "ECC Enabled in the baseline, Disabled now" in f.message  # the mode change alone, once


def test_gpu_health_a_pending_mig_mode_is_a_partition_change() -> None:
    """The MIG mode the next reset brings is recorded in `compute_partition` where it differs from the current
    one, so the diff sees a partition change (`<pending_mig>` was not read: break test 2026-12-07)."""
    from upgrade_gate.snapshot.nvidia import _gpu

    text = (FIXTURES / A100).read_text(encoding="utf-8")
    same = parse_nvidia_smi_xml(text).gpus[0]
    assert _gpu(same, None, lambda *_: "cut").compute_partition == "MIG Enabled"
    changed = parse_nvidia_smi_xml(text.replace("<pending_mig>Enabled<", "<pending_mig>Disabled<", 1)).gpus[0]
    assert _gpu(changed, None, lambda *_: "cut").compute_partition == "MIG Enabled (pending Disabled)"


def test_gpu_health_records_the_compute_mode_and_refuses_an_unknown_one() -> None:
    assert _health(A100).compute_mode == "Default" and _health(T4).compute_mode == "Default"
    with pytest.raises(ParseError, match="compute_mode"):
        _health(T4, ("<compute_mode>Default<", "<compute_mode>Exclusive<"))


def test_gpu_health_compute_prohibited_blocks_even_against_a_baseline_without_the_field() -> None:
    """No process can create a context on a Prohibited GPU; the mode was not recorded before (break test
    2026-12-07: a node whose GPU 0 was Prohibited passed)."""
    prohibited = _health(T4, ("<compute_mode>Default<", "<compute_mode>Prohibited<"))
    old = replace(_health(T4), compute_mode=None)  # a baseline saved before the field existed
    (f,) = _found(judge_one(_node(prohibited, others=_health(T4), seed=2), _node(old)))
    assert f.severity is Severity.BLOCK and "compute mode Prohibited: no process can create a context" in f.message


def test_gpu_health_another_compute_mode_than_the_baselines_blocks() -> None:
    exclusive = _health(T4, ("<compute_mode>Default<", "<compute_mode>Exclusive_Process<"))
    (f,) = _found(judge_one(_node(exclusive, others=_health(T4), seed=2), _node(_health(T4))))
    assert "compute mode Exclusive_Process: Default in the baseline" in f.message and f.path is not None
    assert f.path.endswith(".compute_mode")
    assert not _found(judge_one(_node(exclusive, seed=2), _node(exclusive)))  # a site's own mode, kept
    old = replace(_health(T4), compute_mode=None)
    assert not _found(judge_one(_node(exclusive, others=_health(T4), seed=2), _node(old, others=_health(T4))))


def test_gpu_health_missing_block_on_a_node_whose_probe_reports_it_blocks() -> None:
    candidate = _node(None, seed=2)
    gpus = tuple(replace(g, health=None, na_reasons={**g.na_reasons, "health": "cut"}) for g in candidate.gpus)
    found = _found(judge_one(replace(candidate, gpus=gpus), mi300x_snapshot()))
    assert len(found) == 8 and all(f.severity is Severity.BLOCK for f in found)
    assert "no health counters (cut; probe nvidia_smi reports it): missing evidence" in found[0].message


def test_gpu_health_block_vanished_since_the_baseline_blocks_even_without_the_probe() -> None:
    candidate = _node(None, others=_health(A100), nvidia_smi=False, seed=2)
    (f,) = _found(judge_one(candidate, _node(_health(A100), nvidia_smi=False)))
    assert f.severity is Severity.BLOCK and "the baseline's GPU had them" in f.message


def test_gpu_health_missing_evidence_knob_warns() -> None:
    policy = load_policy()
    entries = tuple(
        replace(e, params={**e.params, "missing_evidence": "warn"}) if e.id == RULE else e for e in policy.rules
    )
    candidate = _node(None, seed=2)
    gpus = tuple(replace(g, health=None) for g in candidate.gpus)
    report = judge(
        baselines={candidate.node.name: mi300x_snapshot()},
        candidates=[replace(candidate, gpus=gpus)],
        plan=upgrade_plan(),
        policy=replace(policy, rules=entries),
        now=NOW,
    )
    found = _found(report)
    assert found and all(f.severity is Severity.WARN for f in found)


def test_gpu_health_amd_node_without_the_block_has_no_finding() -> None:
    assert _found(judge_one(mi300x_snapshot(seed=2))) == []


# --------------------------------------------------------------------------- end to end on the fake H100 node


def _findings(report: Path) -> list[dict[str, str]]:
    return [f for node in json.loads(report.read_text())["nodes"] for f in node["findings"] if f["rule"] == RULE]


def _cli(*args: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return run(list(args))


def _capture(root: Path, spec_pending: bool, monkeypatch: pytest.MonkeyPatch) -> Path:
    spec = h100_node("gpu-node-01", seed=1)
    node = build_nvidia_node(root / "node", with_pending_remap(spec, 5) if spec_pending else spec)
    bundle = root / "bundle"
    argv = ["capture", "--vendor", "nvidia", "--node", "gpu-node-01", "--host-root", str(node.host_root)]
    with monkeypatch.context() as patch:
        patch.setenv("PATH", str(node.bin_dir))  # the fake node's tools alone; git is the store's, after
        assert _cli(*argv, "--out", str(bundle)) == ExitCode.PASS
    return bundle


def test_gpu_health_fake_h100_pending_remap_blocks_through_capture_and_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _capture(tmp_path / "before", False, monkeypatch)
    store, snap = tmp_path / "store", tmp_path / "before.json"
    assert _cli("snapshot", str(before), "--out", str(snap)) == ExitCode.PASS
    assert _cli("baseline", "save", "--store", str(store), str(snap)) == ExitCode.PASS
    gate = ["gate", "--store", str(store), "--policy", str(POLICY_FILE), "--now", "2026-12-03T10:00:00Z"]
    healthy = _capture(tmp_path / "again", False, monkeypatch)
    report = tmp_path / "healthy.json"
    _cli(*gate, "--candidate", str(healthy), "--report", f"json:{report}")
    assert _findings(report) == []
    faulty = _capture(tmp_path / "after", True, monkeypatch)
    report = tmp_path / "faulty.json"
    assert _cli(*gate, "--candidate", str(faulty), "--report", f"json:{report}") == ExitCode.BLOCK
    found = _findings(report)
    assert [(f["severity"], f["path"].rsplit(".", 1)[1]) for f in found] == [
        ("block", "remap_pending"),
        ("block", "remapped_rows_uncorrectable"),
    ]
    serial = h100_node("gpu-node-01", seed=1).gpus[5].serial  # nvidia-smi index 5: the sixth board by bus
    assert {f["device"] for f in found} == {f"serial={serial}"}
