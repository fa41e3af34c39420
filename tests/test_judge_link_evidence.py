"""Link evidence the judge must not drop: lspci's own downgraded verdict, impossible PCIe values, a port
whose physical state is not up, and two VF counts of one PF that disagree. Each is a BLOCK, never a PASS."""

from __future__ import annotations

import pytest

from tests.judge_scenarios import mi300x_snapshot, upgrade_plan, upgraded
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import Finding, GateReport, Snapshot, Verdict, replace

BASE = mi300x_snapshot()
POLICY = load_policy()


def run(candidate: Snapshot, baseline: Snapshot = BASE) -> GateReport:
    return judge(
        baselines={baseline.node.name: baseline},
        candidates=[candidate],
        plan=upgrade_plan(),
        policy=POLICY,
        now="2026-11-30T12:00:00Z",
    )


def only(report: GateReport, rule: str) -> list[Finding]:
    return [f for f in report.findings if f.rule == rule]


def with_link(snap: Snapshot, index: int, **fields: object) -> Snapshot:
    pcie = list(snap.pcie)
    pcie[index] = replace(pcie[index], **fields)
    return replace(snap, pcie=tuple(pcie))


def with_port(snap: Snapshot, nic: int, **fields: object) -> Snapshot:
    nics = list(snap.nics)
    nics[nic] = replace(nics[nic], ports=(replace(nics[nic].ports[0], **fields),))
    return replace(snap, nics=tuple(nics))


def with_nic_vfs(snap: Snapshot, nic: int, numvfs: int | None) -> Snapshot:
    nics = list(snap.nics)
    nics[nic] = replace(nics[nic], sriov_numvfs=numvfs)
    return replace(snap, nics=tuple(nics))


def test_judge_link_evidence_unedited_pair_passes() -> None:
    report = run(upgraded())
    assert report.verdict is Verdict.PASS
    assert not only(report, "pcie.downgrade") and not only(report, "nic.port_state")
    assert not only(report, "sriov.vf_count")


# --------------------------------------------------------------------------- pcie


def test_judge_link_evidence_downgraded_at_maximum_blocks() -> None:
    report = run(with_link(upgraded(), 0, downgraded=True))
    assert report.verdict is Verdict.BLOCK
    (f,) = only(report, "pcie.downgrade")
    assert f.device == "0000:05:00.0" and f.path == "pcie[bdf=0000:05:00.0]"
    assert f.message == (
        "PCIe link 0000:05:00.0 runs Gen5 (32 GT/s) x16: lspci marks it downgraded, yet that is its maximum "
        "Gen5 (32 GT/s) x16 (the evidence disagrees)"
    )


def test_judge_link_evidence_downgraded_with_unknown_width_blocks() -> None:
    # lspci's verdict cannot be confirmed from the parsed values: it is not dropped.
    base = with_link(BASE, 0, width=None)
    report = run(with_link(upgraded(), 0, downgraded=True, width=None), baseline=base)
    (f,) = only(report, "pcie.downgrade")
    assert "lspci marks it downgraded, yet neither speed nor width is below its maximum" in f.message


def test_judge_link_evidence_downgraded_below_maximum_is_one_finding() -> None:
    (f,) = only(run(with_link(upgraded(), 2, width=8, downgraded=True)), "pcie.downgrade")
    assert "below its maximum Gen5 (32 GT/s) x16" in f.message and "disagrees" not in f.message


@pytest.mark.parametrize(
    ("fields", "shown"),
    [
        ({"speed_gts": 64.0}, "Gen6 (64 GT/s) x16"),
        ({"width": 4294967295}, "Gen5 (32 GT/s) x4294967295"),
    ],
)
def test_judge_link_evidence_above_maximum_blocks(fields: dict[str, object], shown: str) -> None:
    report = run(with_link(upgraded(), 0, **fields))
    assert report.verdict is Verdict.BLOCK
    (f,) = only(report, "pcie.downgrade")
    assert f.message == (
        f"PCIe link 0000:05:00.0 runs {shown}: above its maximum Gen5 (32 GT/s) x16, which no link trains to "
        "(garbled evidence)"
    )
    assert f.actual == shown


# --------------------------------------------------------------------------- nic ports


@pytest.mark.parametrize("phys", ["DISABLED", "POLLING", "LINK_DOWN", "Error", None])
def test_judge_link_evidence_phys_state_not_up_blocks(phys: str | None) -> None:
    report = run(with_port(upgraded(), 0, phys_state=phys))
    assert report.verdict is Verdict.BLOCK
    (f,) = only(report, "nic.port_state")
    assert f.device == "ionic_0" and f.path == "nics[name=ionic_0].ports[port=1].phys_state"
    shown = "absent" if phys is None else phys
    assert f.message == f"NIC ionic_0 port 1: state PORT_ACTIVE but physical state {shown}, expected LINK_UP"
    assert (f.expected, f.actual) == ("LINK_UP", phys)


def test_judge_link_evidence_phys_state_already_down_in_baseline_still_blocks() -> None:
    # As for `state`: a port that is not up blocks whatever the baseline showed.
    base = with_port(BASE, 0, phys_state="POLLING")
    (f,) = only(run(with_port(upgraded(), 0, phys_state="POLLING"), baseline=base), "nic.port_state")
    assert f.path == "nics[name=ionic_0].ports[port=1].phys_state"


@pytest.mark.parametrize("phys", ["LINK_UP", "LINK_UP (5)", "LinkUp", "5: LinkUp"])
def test_judge_link_evidence_phys_state_up_spellings_pass(phys: str) -> None:
    # ibv_devinfo -v `phys_state: LINK_UP (5)` (stored without the code), rdma link `physical_state
    # LINK_UP`, ibstat `Physical state: LinkUp`, sysfs `phys_state` `5: LinkUp`.
    assert not only(run(with_port(upgraded(), 0, phys_state=phys)), "nic.port_state")


def test_judge_link_evidence_port_down_is_one_finding() -> None:
    (f,) = only(run(with_port(upgraded(), 1, state="PORT_DOWN", phys_state="DISABLED")), "nic.port_state")
    assert f.path == "nics[name=ionic_1].ports[port=1].state" and "(phys DISABLED)" in f.message


# --------------------------------------------------------------------------- sr-iov


@pytest.mark.parametrize("numvfs", [3, 0, -1, None])
def test_judge_link_evidence_nic_vf_count_disagrees_with_sysfs_blocks(numvfs: int | None) -> None:
    report = run(with_nic_vfs(upgraded(), 2, numvfs))
    assert report.verdict is Verdict.BLOCK
    (f,) = only(report, "sriov.vf_count")
    assert f.device == "0000:66:00.0" and f.path == "nics[name=ionic_2].sriov_numvfs"
    shown = "absent" if numvfs is None else numvfs
    assert f.message == (
        f"PF 0000:66:00.0: sysfs sriov_numvfs 4 vs NIC ionic_2 sriov_numvfs {shown}: the evidence disagrees"
    )
    assert (f.expected, f.actual) == (4, numvfs)


def test_judge_link_evidence_negative_vf_count_in_both_sources_blocks() -> None:
    cand = upgraded()
    cand = with_nic_vfs(cand, 2, -1)
    cand = replace(cand, sriov=tuple(replace(s, numvfs=-1) if s.bdf == "0000:66:00.0" else s for s in cand.sriov))
    base = with_nic_vfs(BASE, 2, -1)
    base = replace(base, sriov=tuple(replace(s, numvfs=-1) if s.bdf == "0000:66:00.0" else s for s in base.sriov))
    report = run(cand, baseline=base)
    assert report.verdict is Verdict.BLOCK
    (f,) = only(report, "sriov.vf_count")
    assert f.message == "PF 0000:66:00.0: sriov_numvfs -1 (sysfs, NIC ionic_2): a negative VF count is garbled evidence"
    assert f.path == "nics[name=ionic_2].sriov_numvfs" and f.actual == -1


def test_judge_link_evidence_consistent_vf_loss_is_one_finding() -> None:
    cand = upgraded()
    cand = with_nic_vfs(cand, 2, 3)
    cand = replace(cand, sriov=tuple(replace(s, numvfs=3) if s.bdf == "0000:66:00.0" else s for s in cand.sriov))
    (f,) = only(run(cand), "sriov.vf_count")
    assert f.message == "PF 0000:66:00.0: 3 VFs enabled, baseline 4"
