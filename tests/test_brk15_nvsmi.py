"""Black-box findings 12 and 13 of 2026-12-07 (nvidia-smi -q -x): a health counter the candidate cannot give,
and the XML's PCIe link, never judged before.

12: an uncorrectable ECC counter printed N/A with ECC Enabled, or any judged health value the baseline's GPU had
and the candidate's lacks (N/A or absent: `<reset_required>`, `<remapped_rows>`, `<ecc_errors>`), is missing
evidence (`gpu.health`), never "no errors"; N/A on both sides (Turing's remapped rows, Ampere's retired pages,
counters with ECC Disabled) stays unjudged. 13: the XML's current link gen/width is cross-checked against
lspci's LnkSta for the same BDF; a disagreement, an N/A link or a GPU lspci lists no link for blocks
(`evidence.missing`, naming nvidia_smi).
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest

from tests.judge_scenarios import judge_one, mi300x_snapshot
from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.collect.bundle import Bundle
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.probes import probe_catalogue
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.fakenode.nvidia import build_nvidia_node, h100_node
from upgrade_gate.model import Finding, GateReport, GpuHealth, IssueKind, ProbeStatus, Severity, Snapshot, replace
from upgrade_gate.parse import lspci
from upgrade_gate.parse.nvidia_smi_xml import parse_nvidia_smi_xml
from upgrade_gate.snapshot import crosscheck
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.snapshot.nvidia import check_gpu_pcie, gpu_health
from upgrade_gate.vendors import NVIDIA

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"
A100 = "a100-sxm4-80gb-mig-q-x-driver535-telegraf.xml"
T4 = "tesla-t4-q-x-driver515-v11-throttle-reasons-telegraf.xml"
RTX = "rtx4000-sff-ada-q-x-driver595-v13-telegraf.xml"


def _health(name: str, *edits: tuple[str, str]) -> GpuHealth:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    for pattern, new in edits:
        text, n = re.subn(pattern, new, text)
        assert n >= 1, pattern
    health, why = gpu_health(parse_nvidia_smi_xml(text).gpus[0])
    assert health is not None, why
    return health


def _node(health: GpuHealth, *, others: GpuHealth, seed: int) -> Snapshot:
    snap = mi300x_snapshot(seed=seed)
    gpus = tuple(replace(g, health=health if g.index == 3 else others) for g in snap.gpus)
    return replace(snap, gpus=gpus, probes=(*snap.probes, ProbeStatus(name="nvidia_smi", ok=True)))


def _found(report: GateReport) -> list[Finding]:
    return [f for f in report.findings if f.rule == "gpu.health"]


def _judged(name: str, *edits: tuple[str, str]) -> list[Finding]:
    clean = _health(name)
    return _found(judge_one(_node(_health(name, *edits), others=clean, seed=2), _node(clean, others=clean, seed=1)))


# --------------------------------------------------------------------------- 12: health counters N/A or absent

ALL_UNC_NA = (r"<(\w*uncorrectable)>\d+</\1>", r"<\1>N/A</\1>")
DRAM_UNC_NA = (r"<dram_uncorrectable>\d+</dram_uncorrectable>", "<dram_uncorrectable>N/A</dram_uncorrectable>")


def test_brk15_nvsmi_one_na_counter_beside_printed_ones_is_named_in_the_snapshot() -> None:
    h = _health(A100, DRAM_UNC_NA)
    assert h.ecc_volatile_uncorrectable == {"sram_uncorrectable": 0}
    assert h.na_reasons["ecc_volatile_uncorrectable.dram_uncorrectable"] == (
        "nvidia-smi -q -x printed N/A for <volatile/dram_uncorrectable> (ECC Enabled)"
    )


@pytest.mark.parametrize(
    ("name", "edit", "paths"),
    [
        (A100, ALL_UNC_NA, {"ecc_volatile_uncorrectable", "ecc_aggregate_uncorrectable"}),
        (
            A100,
            DRAM_UNC_NA,
            {"ecc_volatile_uncorrectable.dram_uncorrectable", "ecc_aggregate_uncorrectable.dram_uncorrectable"},
        ),
        (
            A100,
            (r"(?s)<ecc_errors>.*?</ecc_errors>", ""),
            {"ecc_volatile_uncorrectable", "ecc_aggregate_uncorrectable"},
        ),
        (A100, ("<reset_required>No<", "<reset_required>N/A<"), {"reset_required"}),
        (RTX, (r"(?s)<remapped_rows>.*?</remapped_rows>", "<remapped_rows>N/A</remapped_rows>"), None),
        (RTX, (r"(?s)<remapped_rows>.*?</remapped_rows>", ""), None),
        (T4, (r"<pending_retirement>No</pending_retirement>", "<pending_retirement>N/A</pending_retirement>"), None),
        (A100, ("<current_ecc>Enabled<", "<current_ecc>N/A<"), {"ecc_mode"}),
    ],
    ids=["all_unc_na", "dram_unc_na", "ecc_errors_gone", "reset_na", "remap_na", "remap_gone", "retire_na", "ecc_na"],
)
def test_brk15_nvsmi_counter_the_candidate_cannot_give_blocks(
    name: str, edit: tuple[str, str], paths: set[str] | None
) -> None:
    found = _judged(name, edit)
    assert found and all(f.severity is Severity.BLOCK and "missing evidence" in f.message for f in found)
    assert all(f.actual is None and f.evidence == "nvidia_smi" for f in found)
    if paths is not None:
        assert {f.path.split(".health.", 1)[1] for f in found if f.path} == paths


def test_brk15_nvsmi_remap_na_names_each_judged_value() -> None:
    found = _judged(RTX, (r"(?s)<remapped_rows>.*?</remapped_rows>", "<remapped_rows>N/A</remapped_rows>"))
    assert sorted(f.path.rsplit(".", 1)[1] for f in found if f.path) == [
        "remap_failure",
        "remap_pending",
        "remapped_rows_uncorrectable",
    ]
    assert "the baseline's GPU had False, now nvidia-smi -q -x printed N/A for <remapped_rows>" in found[0].message


def test_brk15_nvsmi_ecc_enabled_na_counter_blocks_without_a_baseline_value() -> None:
    report = judge_one(_node(_health(T4, DRAM_UNC_NA), others=_health(T4), seed=2), mi300x_snapshot())
    found = _found(report)
    assert {f.path.rsplit(".health.", 1)[1] for f in found if f.path} == {
        "ecc_volatile_uncorrectable.dram_uncorrectable",
        "ecc_aggregate_uncorrectable.dram_uncorrectable",
    }
    assert all(f.severity is Severity.BLOCK for f in found)


@pytest.mark.parametrize("name", [A100, T4, RTX])
def test_brk15_nvsmi_na_on_both_sides_stays_unjudged(name: str) -> None:
    """A100: retired pages and remapped rows N/A; T4 (Turing): remapped rows N/A; RTX: ECC Disabled, its counters
    N/A. The same on both sides: no finding."""
    assert _judged(name) == []


def test_brk15_nvsmi_ecc_switched_off_is_one_mode_finding_not_missing_counters() -> None:
    off = ("<current_ecc>Enabled<", "<current_ecc>Disabled<")
    found = _judged(A100, off, ALL_UNC_NA)
    assert [f.path.rsplit(".", 1)[1] for f in found if f.path] == ["ecc_mode"]


# --------------------------------------------------------------------------- 13: the XML's PCIe link

_XML = (FIXTURES / A100).read_text(encoding="utf-8")  # GPU 0000:01:00.0, current Gen4 x16
_LSPCI = """0000:01:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 80GB] [10de:20b2] (rev a1)
\tSubsystem: NVIDIA Corporation Device [10de:147f]
\tCapabilities: [68] Express (v2) Endpoint, MSI 00
\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM not supported
\t\tLnkSta:\tSpeed {speed}GT/s (ok), Width x{width} (ok)
"""


def _issues(xml: str, pci_text: str | None) -> list[tuple[IssueKind, str, str]]:
    issues = crosscheck.Issues()
    check_gpu_pcie(parse_nvidia_smi_xml(xml), lspci.parse_lspci(pci_text) if pci_text else None, issues)
    return [(i.kind, i.subject, i.message) for i in issues.items]


def test_brk15_nvsmi_pcie_agreeing_sources_raise_nothing() -> None:
    assert _issues(_XML, _LSPCI.format(speed=16, width=16)) == []


@pytest.mark.parametrize(("speed", "width"), [(16, 8), (8, 16), (32, 16)])
def test_brk15_nvsmi_pcie_xml_and_lspci_disagree_is_a_conflict(speed: int, width: int) -> None:
    ((kind, subject, message),) = _issues(_XML, _LSPCI.format(speed=speed, width=width))
    assert (kind, subject) == (IssueKind.CONFLICT, "pcie[bdf=0000:01:00.0]")
    assert "nvidia-smi -q -x says its PCIe link runs Gen4 x16, lspci" in message


def test_brk15_nvsmi_pcie_na_link_is_an_error_value_even_without_lspci() -> None:
    xml = _XML.replace("<current_link_gen>4<", "<current_link_gen>N/A<").replace(
        "<current_link_width>16x<", "<current_link_width>N/A<"
    )
    for pci_text in (_LSPCI.format(speed=16, width=16), None):
        ((kind, _, message),) = _issues(xml, pci_text)
        assert kind is IssueKind.ERROR_VALUE
        assert "printed N/A for <current_link_gen>, N/A for <current_link_width>: its PCIe link cannot be read" in (
            message
        )


def test_brk15_nvsmi_pcie_gpu_lspci_lists_no_link_for_is_absent() -> None:
    other = _LSPCI.format(speed=16, width=16).replace("0000:01:00.0", "0000:02:00.0")
    ((kind, _, message),) = _issues(_XML, other)
    assert kind is IssueKind.ABSENT_IN_SOURCE and "lspci none for that BDF" in message


def _fake_bundle(tmp_path: Path) -> Bundle:
    spec = h100_node("gpu-node-01", seed=1)
    node = build_nvidia_node(tmp_path / spec.name, spec)
    return capture(
        LocalRunner(env=node.env(os.environ)),
        node=spec.name,
        host_root=node.host_root,
        output_check=parser_check(),
        probes=probe_catalogue(node.host_root, vendor=NVIDIA),
    )


def _with_nvidia_smi(bundle: Bundle, edit: tuple[str, str]) -> Bundle:
    records = []
    for r in bundle.records:
        if r.name == "nvidia_smi":
            text = r.result.stdout
            start = [m.start() for m in re.finditer(r"<gpu id=", text)][3]
            end = text.index("</gpu>", start)
            text = text[:start] + re.sub(edit[0], edit[1], text[start:end]) + text[end:]
            r = dataclasses.replace(r, result=dataclasses.replace(r.result, stdout=text))
        records.append(r)
    return dataclasses.replace(bundle, records=tuple(records))


def test_brk15_nvsmi_pcie_degraded_xml_link_blocks_the_gate_naming_nvidia_smi(tmp_path: Path) -> None:
    bundle = _fake_bundle(tmp_path)
    baseline = build_snapshot(bundle, node_class="h100-8gpu")
    assert baseline.evidence_issues == ()
    x8 = _with_nvidia_smi(bundle, (r"<current_link_width>16x<", "<current_link_width>8x<"))
    candidate = build_snapshot(x8, node_class="h100-8gpu")
    report = judge_one(candidate, baseline)
    # (the bare snapshots have no phase results: those findings are evidence.missing's too, and not this test's)
    (f,) = [f for f in report.findings if f.rule == "evidence.missing" and f.path and f.path.startswith("pcie")]
    assert f.severity is Severity.BLOCK and f.path == "pcie[bdf=0000:61:00.0]" and f.evidence == "lspci, nvidia_smi"
    assert f.message.endswith("GPU 3 (0000:61:00.0): nvidia-smi -q -x says its PCIe link runs Gen5 x8, lspci Gen5 "
                              "(32 GT/s) x16")  # fmt: skip
    assert [f for f in judge_one(baseline, baseline).findings if f.path and f.path.startswith("pcie")] == []
