"""Evidence a tool gave wrong, or did not give, never passes and never reads as a change (2026-12-07).

A black-box test of the capture path found outputs that passed the gate or led its verdict with a false
"changed" line. Each case here starts from a capture of a healthy fake node (the fake tools print the
real formats of the corpus: amd-smi `--json` as in amd-smi/static-json-mi300x-8gpu-...-fixture.json,
topology links as ROCm/amdsmi amdsmi_commands.py `topology()` prints them) and changes one probe's
recorded output the way the tester did. Repros: /tmp/brk14/parse/findings on the box of that day.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.capture_support import healthy_capture, stdout_of, with_stdout
from upgrade_gate.collect.bundle import Bundle
from upgrade_gate.judge.causes import group_causes
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import Cause, GateReport, IssueKind, NodeName, Snapshot, Verdict, replace
from upgrade_gate.snapshot.build import build_snapshot

POLICY = load_policy()
NODE = NodeName("gpu-node-01")


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    return healthy_capture(tmp_path_factory.mktemp("node"))


@pytest.fixture(scope="module")
def base(healthy: Bundle) -> Snapshot:
    return build_snapshot(healthy)


def _gate(baseline: Snapshot, candidate: Snapshot) -> GateReport:
    report = judge(
        baselines={NODE: baseline}, candidates=[candidate], plan=None, policy=POLICY, now="2026-12-01T12:00:00Z"
    )
    return group_causes(report, baselines={NODE: baseline}, candidates={NODE: candidate})


def _causes(report: GateReport) -> list[Cause]:
    """The node's causes, less the phases this capture did not run (no validate here: they block too)."""
    assert report.verdict is Verdict.BLOCK
    return [c for c in report.nodes[0].causes if not c.key.startswith("evidence:phases[")]


def _first_cause(report: GateReport) -> str:
    return _causes(report)[0].headline


def _findings(report: GateReport, rule: str) -> list[str]:
    return [f.message for f in report.findings if f.rule == rule]


# --------------------------------------------------------------------------- amd-smi topology


def test_peer_access_disabled_between_gpus_blocks(healthy: Bundle, base: Snapshot) -> None:
    topo = stdout_of(healthy, "amdsmi_topology")
    disabled = re.sub(
        r'"link_status": "ENABLED",(\s*)"link_type": "XGMI"', r'"link_status": "DISABLED",\1"link_type": "XGMI"', topo
    )
    assert disabled != topo
    snap = build_snapshot(with_stdout(healthy, "amdsmi_topology", disabled))
    assert snap.gpu_links and all(link.access is False for link in snap.gpu_links)
    assert all(link.access is True for link in base.gpu_links)
    changed = _findings(_gate(base, snap), "xgmi.link_changed")
    assert len(changed) == len(base.gpu_links) and all("access enabled -> " in m and "DISABLED" in m for m in changed)


def test_peer_access_disabled_on_both_sides_is_unchanged_and_a_baseline_without_it_reads_enabled(
    base: Snapshot,
) -> None:
    off = replace(base, gpu_links=tuple(replace(link, access=False) for link in base.gpu_links))
    assert not _findings(_gate(off, off), "xgmi.link_changed")
    old = replace(base, gpu_links=tuple(replace(link, access=None) for link in base.gpu_links))
    assert len(_findings(_gate(old, off), "xgmi.link_changed")) == len(base.gpu_links)
    assert not _findings(_gate(old, base), "xgmi.link_changed")


def test_peer_access_printed_na_where_the_baseline_had_it_is_missing_evidence(healthy: Bundle, base: Snapshot) -> None:
    """`link_status: "N/A"` on GPU 2's links read as "not printed", and the rule compared access only where the
    candidate printed it: a disabled link amd-smi could not name passed (break test 2026-12-07)."""
    entries = json.loads(stdout_of(healthy, "amdsmi_topology"))
    for entry in entries:
        for link in entry["links"]:
            if entry["gpu"] == 2 or link.get("gpu") == 2:
                link["link_status"] = "N/A"
    snap = build_snapshot(with_stdout(healthy, "amdsmi_topology", json.dumps(entries, indent=4)))
    assert sum(link.access is None for link in snap.gpu_links) == 7
    report = _gate(base, snap)
    (message,) = _findings(report, "xgmi.link_changed")
    assert "peer access not reported at 7 of the 28 pairs the baseline recorded it for" in message
    assert "amdsmi_topology printed no link_status for them" in message and "missing evidence" in message
    assert report.verdict is Verdict.BLOCK


def test_peer_access_lost_with_the_topology_probe_names_the_probe(base: Snapshot) -> None:
    """amd-smi's topology killed, hung or cut: rocm-smi stands in with type, hops and weight but no access."""
    probes = tuple(
        replace(p, ok=False, timed_out=True, reason="timed out after 30.0s") if p.name == "amdsmi_topology" else p
        for p in base.probes
    )
    lost = replace(base, probes=probes, gpu_links=tuple(replace(link, access=None) for link in base.gpu_links))
    messages = _findings(_gate(base, lost), "xgmi.link_changed")
    assert messages == [
        "GPU link matrix: peer access not reported at 28 of the 28 pairs the baseline recorded it for "
        "(amdsmi_topology timed out; its stand-in prints no peer access): missing evidence"
    ]


def test_topology_entry_of_a_gpu_cut_out_is_unparseable_not_a_smaller_matrix(healthy: Bundle, base: Snapshot) -> None:
    entries = json.loads(stdout_of(healthy, "amdsmi_topology"))
    cut = json.dumps([e for e in entries if e["gpu"] != 3], indent=4)
    snap = build_snapshot(with_stdout(healthy, "amdsmi_topology", cut))
    probe = next(p for p in snap.probes if p.name == "amdsmi_topology")
    assert not probe.ok and "0000:75:00.0" in (probe.reason or "") and "no entry" in (probe.reason or "")
    assert _gate(base, snap).verdict is Verdict.BLOCK


# --------------------------------------------------------------------------- amd-smi list against the others


def _list(healthy: Bundle, change: object) -> Snapshot:
    entries = json.loads(stdout_of(healthy, "amdsmi_list"))
    assert callable(change)
    return build_snapshot(with_stdout(healthy, "amdsmi_list", json.dumps(change(entries), indent=4)))


def test_gpu_missing_from_amdsmi_list_is_absent_in_source(healthy: Bundle, base: Snapshot) -> None:
    snap = _list(healthy, lambda es: [e for e in es if e["gpu"] != 3])
    issue = next(i for i in snap.evidence_issues if i.kind is IssueKind.ABSENT_IN_SOURCE)
    assert "75:00" in issue.message and "amd-smi list" in issue.message
    assert "absent from amd-smi list" in _first_cause(_gate(base, snap))


def test_two_bdfs_swapped_in_amdsmi_list_conflict_with_amdsmi_static(healthy: Bundle, base: Snapshot) -> None:
    def swap(es: list[dict[str, object]]) -> list[dict[str, object]]:
        es[2]["bdf"], es[3]["bdf"] = es[3]["bdf"], es[2]["bdf"]
        return es

    snap = _list(healthy, swap)
    conflicts = [i for i in snap.evidence_issues if i.kind is IssueKind.CONFLICT]
    assert {i.values["amdsmi_list"] for i in conflicts} == {"0000:65:00.0", "0000:75:00.0"}
    assert _first_cause(_gate(base, snap)).startswith("evidence conflict: amd-smi GPU 2")


def test_bdf_printed_na_in_amdsmi_list_is_an_error_value(healthy: Bundle, base: Snapshot) -> None:
    def na(es: list[dict[str, object]]) -> list[dict[str, object]]:
        es[3]["bdf"] = "N/A"
        return es

    snap = _list(healthy, na)
    assert any(
        i.kind is IssueKind.ERROR_VALUE and "printed N/A for GPU 3's BDF" in i.message for i in snap.evidence_issues
    )
    assert _gate(base, snap).verdict is Verdict.BLOCK


def test_bdf_listed_twice_in_amdsmi_list_leads_with_the_conflict_not_the_firmware_it_unmapped(
    healthy: Bundle, base: Snapshot
) -> None:
    def twice(es: list[dict[str, object]]) -> list[dict[str, object]]:
        es[3] = {**es[2], "gpu": 3}
        return es

    report = _gate(base, _list(healthy, twice))
    assert _first_cause(report).startswith("evidence conflict:")
    assert all(c.key.startswith(("evidence.issue:", "evidence.unreported:")) for c in _causes(report)[:3])


# --------------------------------------------------------------------------- versions


@pytest.mark.parametrize("printed", ["ERR", "N/A"])
def test_error_text_in_the_most_trusted_version_source_blocks_though_another_answered(
    healthy: Bundle, base: Snapshot, printed: str
) -> None:
    line = stdout_of(healthy, "rocm_version")
    path = line.split(":", 1)[0]
    snap = build_snapshot(with_stdout(healthy, "rocm_version", f"{path}:{printed}\n"))
    assert snap.software.rocm_version == base.software.rocm_version, "amd-smi's answer is kept"
    issue = next(i for i in snap.evidence_issues if i.subject == "software.rocm_version")
    assert issue.kind is IssueKind.ERROR_VALUE and "/opt/rocm/.info/version printed" in issue.message
    assert _first_cause(_gate(base, snap)).startswith("evidence error-value: software.rocm_version")


# --------------------------------------------------------------------------- unreported values lead


def test_partition_printed_na_leads_as_unreported_evidence_not_a_mode_change(healthy: Bundle, base: Snapshot) -> None:
    data = json.loads(stdout_of(healthy, "amdsmi_static"))
    gpus = data["gpu_data"] if isinstance(data, dict) else data
    gpus[3]["partition"]["compute_partition"] = "N/A"
    snap = build_snapshot(with_stdout(healthy, "amdsmi_static", json.dumps(data, indent=4)))
    gpu = next(g for g in snap.gpus if g.bdf == "0000:75:00.0")
    assert gpu.compute_partition is None
    assert gpu.na_reasons["compute_partition"] == "amd-smi static printed N/A for compute_partition"
    report = _gate(base, snap)
    cause = _causes(report)[0]
    assert cause.key.startswith("evidence.unreported:") and "printed N/A for compute_partition" in cause.headline
    assert cause.category.value == "evidence/tooling"


def test_uuid_printed_na_by_rocminfo_owns_the_identity_finding(healthy: Bundle, base: Snapshot) -> None:
    info = stdout_of(healthy, "rocminfo")
    uuid = base.gpus[3].unique_id
    assert uuid and uuid in info
    snap = build_snapshot(with_stdout(healthy, "rocminfo", info.replace(uuid, "N/A")))
    report = _gate(base, snap)
    first = _causes(report)[0]
    assert first.key == "evidence.issue:gpus[3].unique_id" and "printed 'N/A'" in first.headline
    owned = {report.nodes[0].findings[i].rule for i in first.findings}
    assert owned == {"evidence.missing", "device.identity_changed"}


def test_nic_pci_address_unreadable_leads_with_the_missing_sysfs_entry(healthy: Bundle, base: Snapshot) -> None:
    snap = build_snapshot(with_stdout(healthy, "sysfs_ib", ""))
    report = _gate(base, snap)
    first = _causes(report)[0]
    assert first.key.startswith("evidence.unreported:") and "infiniband entry" in first.headline
    assert "8 NICs" in first.headline
