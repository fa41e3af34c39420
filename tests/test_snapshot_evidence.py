"""Evidence sanity at the edge (issue 10 #6/#7, issue 12, issue 13): error texts, conflicts, absences.

Each case starts from a capture of a healthy fake node (the fake tools print the real formats of the
corpus) and changes one probe's recorded output the way a real failure does, using real texts:
- amd-smi's missing-group banner (ROCm/amdsmi amdsmi_cli/amdsmi_helpers.py `check_required_groups`)
  and its `AMDSMI_STATUS_FILE_ERROR - Error opening file` value (py-interface/amdsmi_exception.py);
- amd-smi's inbox-driver `amdgpu version: Linuxversion6.17.0(...)` (ROCm/ROCm issue #5536, fixture
  amd-smi/version-26.0.2-inbox-driver-proc-version-rocm7.0.2.txt);
- `rdma link show` with `state DOWN physical_state DISABLED` (corpus ibv_devinfo/rdma-link-show-bnxt_re-...);
- non-UTF-8 bytes decoded the way the bundle reader decodes them (`errors="replace"`).
The snapshots are then judged with the default policy: each must BLOCK, naming the sources.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.capture_support import healthy_capture, stdout_of
from tests.conftest import FIXTURES
from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.collect.bundle import Bundle
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.fakenode import Faults, build_fake_node, mi300x_node
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import IssueKind, NodeName, Severity, Snapshot, Verdict, replace
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.snapshot.io import dumps_snapshot, loads_snapshot

BANNER = "WARNING: User is missing the following required groups: render, video. Please add user to these groups.\n"
FILE_ERROR = "AMDSMI_STATUS_FILE_ERROR - Error opening file"
POLICY = load_policy()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    return healthy_capture(tmp_path_factory.mktemp("node"))


def _edit(bundle: Bundle, name: str, stdout: str | None = None, *, skipped: bool = False) -> Bundle:
    records = []
    for r in bundle.records:
        if r.name == name:
            if skipped:
                r = replace(r, result=replace(r.result, stdout=""), skipped=True, note="no files matched")
            else:
                assert stdout is not None
                r = replace(r, result=replace(r.result, stdout=stdout))
        records.append(r)
    return replace(bundle, records=tuple(records))


def _gate(baseline: Snapshot, candidate: Snapshot) -> list[str]:
    report = judge(
        baselines={NodeName("gpu-node-01"): baseline},
        candidates=[candidate],
        plan=None,
        policy=POLICY,
        now="2026-12-01T12:00:00Z",
    )
    blocking = [f.message for f in report.findings if f.severity is Severity.BLOCK]
    assert (report.verdict is Verdict.BLOCK) == bool(blocking)
    return blocking


def _no_render(bundle: Bundle) -> Bundle:
    """amd-smi run by a user outside the render group, on a node without /sys/module/amdgpu/version."""
    bundle = _edit(bundle, "driver_version", skipped=True)
    version = stdout_of(bundle, "amdsmi_version").replace('"6.7.0"', f'"{FILE_ERROR}"')
    static = re.sub(
        r'("driver": \{\s*"name": "amdgpu",\s*"version": )"6\.7\.0"',
        rf'\1"{FILE_ERROR}"',
        stdout_of(bundle, "amdsmi_static"),
    )
    assert FILE_ERROR in version and FILE_ERROR in static
    bundle = _edit(bundle, "amdsmi_version", BANNER + version)
    return _edit(bundle, "amdsmi_static", BANNER + static)


def test_evidence_healthy_capture_has_no_issue_and_passes_against_itself(healthy: Bundle) -> None:
    snap = build_snapshot(healthy)
    assert snap.evidence_issues == ()
    assert snap.software.driver_version == "6.7.0"
    # Phases and rails were not run here, so the gate blocks on those; never on evidence issues.
    assert not [m for m in _gate(snap, snap) if m.startswith("evidence ")]


def test_evidence_amdsmi_error_text_is_missing_not_the_driver_version(healthy: Bundle) -> None:
    snap = build_snapshot(_no_render(healthy))
    assert snap.software.driver_version is None
    why = snap.software.na_reasons["driver_version"]
    assert "/dev/dri/renderD*" in why and "render, video" in why
    issues = [i for i in snap.evidence_issues if i.subject == "software.driver_version"]
    assert [i.kind for i in issues] == [IssueKind.ERROR_VALUE]
    assert issues[0].values == {"amdsmi_static": FILE_ERROR, "amdsmi_version": FILE_ERROR}
    static = next(p for p in snap.probes if p.name == "amdsmi_static")
    assert static.ok and any("missing-group warning" in n for n in static.notes)
    assert loads_snapshot(dumps_snapshot(snap), source="t") == snap


def test_evidence_same_error_on_both_sides_blocks(healthy: Bundle) -> None:
    """The issue's case: the same error on both sides hid an unplanned driver change."""
    base = build_snapshot(_no_render(healthy))
    blocking = _gate(base, base)
    assert any("software.driver_version unknown" in m and "renderD" in m for m in blocking), blocking


def test_evidence_inbox_driver_proc_version_is_not_a_driver_version(healthy: Bundle) -> None:
    line = (FIXTURES / "amd-smi" / "version-26.0.2-inbox-driver-proc-version-rocm7.0.2.txt").read_text()
    bundle = _edit(_edit(healthy, "driver_version", skipped=True), "amdsmi_version", line)
    static = re.sub(
        r'("driver": \{\s*"name": "amdgpu",\s*"version": )"6\.7\.0"', r'\1"N/A"', stdout_of(bundle, "amdsmi_static")
    )
    snap = build_snapshot(_edit(bundle, "amdsmi_static", static))
    assert snap.software.driver_version is None
    assert "/proc/version" in snap.software.na_reasons["driver_version"]
    assert [i.kind for i in snap.evidence_issues if i.subject == "software.driver_version"] == [IssueKind.ERROR_VALUE]


def test_evidence_driver_sources_that_disagree_block_naming_both(healthy: Bundle) -> None:
    static = stdout_of(healthy, "amdsmi_static").replace('"version": "6.7.0"', '"version": "6.8.5"')
    snap = build_snapshot(_edit(healthy, "amdsmi_static", static))
    assert snap.software.driver_version == "6.7.0", "the kernel's own module version is the most trusted"
    conflict = next(i for i in snap.evidence_issues if i.subject == "software.driver_version")
    assert conflict.kind is IssueKind.CONFLICT
    assert conflict.values == {"driver_version": "6.7.0", "amdsmi_static": "6.8.5", "amdsmi_version": "6.7.0"}
    blocking = _gate(build_snapshot(healthy), snap)
    assert any("sources disagree" in m and "'6.8.5'" in m and "/sys/module/amdgpu/version" in m for m in blocking)


def test_evidence_rocm_build_and_release_are_one_fact(healthy: Bundle) -> None:
    """/opt/rocm/.info/version prints 6.1.3-122, amd-smi 6.1.3: the same release, no conflict."""
    assert "-" in stdout_of(healthy, "rocm_version")
    assert not [i for i in build_snapshot(healthy).evidence_issues if i.subject == "software.rocm_version"]


def test_evidence_port_down_in_rdma_link_while_ibv_devinfo_says_active_blocks(healthy: Bundle) -> None:
    links = stdout_of(healthy, "rdma_link")
    down = links.replace(
        "link ionic_3/1 state ACTIVE physical_state LINK_UP", "link ionic_3/1 state DOWN physical_state DISABLED"
    )
    assert down != links and "PORT_ACTIVE" in stdout_of(healthy, "ibv_devinfo")
    snap = build_snapshot(_edit(healthy, "rdma_link", down))
    nic = next(n for n in snap.nics if n.name == "ionic_3")
    assert nic.ports[0].state == "DOWN" and nic.ports[0].phys_state == "DISABLED"
    issue = next(i for i in snap.evidence_issues if i.subject == "nics[name=ionic_3].ports[1].state")
    assert issue.kind is IssueKind.CONFLICT
    assert issue.values == {"ibv_devinfo": "PORT_ACTIVE/LINK_UP", "rdma_link": "DOWN/DISABLED"}
    report = judge(
        baselines={NodeName("gpu-node-01"): build_snapshot(healthy)},
        candidates=[snap],
        plan=None,
        policy=POLICY,
        now="2026-12-01T12:00:00Z",
    )
    found = [f for f in report.findings if f.severity is Severity.BLOCK and f.device == "ionic_3"]
    assert any("rdma link DOWN/DISABLED" in f.message and "ibv_devinfo PORT_ACTIVE" in f.message for f in found)


def test_evidence_device_vanished_from_rdma_link_is_missing_evidence(healthy: Bundle) -> None:
    links = "".join(
        line for line in stdout_of(healthy, "rdma_link").splitlines(keepends=True) if "ionic_5/" not in line
    )
    snap = build_snapshot(_edit(healthy, "rdma_link", links))
    issue = next(i for i in snap.evidence_issues if i.subject == "nics[name=ionic_5]")
    assert issue.kind is IssueKind.ABSENT_IN_SOURCE
    assert issue.values == {"ibv_devinfo": "present", "rdma_link": "absent"}
    assert any("ionic_5" in m and "absent from rdma link" in m for m in _gate(build_snapshot(healthy), snap))


def test_evidence_undecodable_nic_name_is_a_broken_probe_not_a_new_device(healthy: Bundle) -> None:
    raw = stdout_of(healthy, "ibv_devinfo").encode()
    broken = raw.replace(b"hca_id:\tionic_0", b"hca_id:\tionic_\xff\xfe").decode("utf-8", errors="replace")
    assert "ionic_\ufffd\ufffd" in broken
    snap = build_snapshot(_edit(healthy, "ibv_devinfo", broken))
    assert not any("\ufffd" in n.name for n in snap.nics)
    probe = next(p for p in snap.probes if p.name == "ibv_devinfo")
    assert not probe.ok and "not UTF-8" in (probe.reason or "")
    blocking = _gate(build_snapshot(healthy), snap)
    assert any("ibv_devinfo" in m and "not UTF-8" in m for m in blocking)


def test_evidence_undecodable_gpu_serial_is_missing_not_a_new_board(healthy: Bundle) -> None:
    static = stdout_of(healthy, "amdsmi_static")
    serial = re.search(r'"product_serial": "([^"]+)"', static)
    assert serial is not None
    snap = build_snapshot(_edit(healthy, "amdsmi_static", static.replace(serial.group(1), "69\ufffd\ufffd06566", 1)))
    gpu = next(g for g in snap.gpus if "serial" in g.na_reasons and "not UTF-8" in g.na_reasons["serial"])
    assert gpu.serial is None
    assert any(i.subject == f"gpus[{gpu.index}].serial" for i in snap.evidence_issues)


def test_evidence_schema_accepts_issues_and_notes(healthy: Bundle, tmp_path: Path) -> None:
    snap = build_snapshot(_no_render(healthy))
    text = dumps_snapshot(snap)
    assert '"evidence_issues"' in text and '"notes"' in text
    assert loads_snapshot(text, source=str(tmp_path)) == snap


def test_evidence_rocmsmi_fallback_firmware_does_not_diff_against_amdsmi(healthy: Bundle, tmp_path: Path) -> None:
    """Issue 13: rocm-smi names and prints firmware differently; the fallback itself must not diff."""
    from upgrade_gate.fakenode import faults

    node = build_fake_node(
        tmp_path / "node", mi300x_node("gpu-node-01", seed=1), Faults(tools={"amd-smi": faults.missing()})
    )
    fallback = capture(
        LocalRunner(env=node.env(os.environ)), node="gpu-node-01", host_root=node.host_root, output_check=parser_check()
    )
    assert "MEC firmware version" in stdout_of(fallback, "rocmsmi")
    base, cand = build_snapshot(healthy), build_snapshot(fallback)
    assert [g.firmware for g in cand.gpus] == [g.firmware for g in base.gpus]
    report = judge(
        baselines={NodeName("gpu-node-01"): base},
        candidates=[cand],
        plan=None,
        policy=POLICY,
        now="2026-12-01T12:00:00Z",
    )
    assert not [f for f in report.findings if f.rule.startswith("firmware")], "no firmware finding from the fallback"


def test_evidence_ibstat_is_a_third_port_state_source() -> None:
    """ibstat (real Azure 8x CX-6 output, ends in `ibpanic` for mlx5_8) against an `rdma link show` of the
    same devices in iproute2's format (corpus rdma-link-show-bnxt_re-...): mlx5_2 DOWN there, Active in ibstat."""
    from upgrade_gate.model import Nic
    from upgrade_gate.parse import rdma
    from upgrade_gate.snapshot import crosscheck

    ibstat = rdma.parse_ibstat(
        (FIXTURES / "ibv_devinfo" / "ibstat-a100-azure-8x-cx6-hdr-ibpanic-exit255-gpud.txt").read_text()
    )
    names = [ca.name for ca in ibstat.cas]
    lines = [
        f"link {n}/1 state {'DOWN' if n == 'mlx5_2' else 'ACTIVE'} "
        f"physical_state {'DISABLED' if n == 'mlx5_2' else 'LINK_UP'} \n"
        for n in names
    ]
    links = rdma.parse_rdma_link("".join(lines) + "link mlx5_8/1 state ACTIVE physical_state LINK_UP \n")
    issues = crosscheck.Issues()
    nics = crosscheck.check_nics(
        [Nic(name=n) for n in [*names, "mlx5_8"]],
        crosscheck.port_views(None, links, ibstat),
        issues,
        incomplete=("ibstat",),
    )
    by_name = {n.name: n for n in nics}
    assert by_name["mlx5_2"].ports[0].state == "DOWN"
    assert by_name["mlx5_0"].ports[0].state == "ACTIVE" and by_name["mlx5_8"].ports[0].state == "ACTIVE"
    conflicts = [i for i in issues.items if i.kind is IssueKind.CONFLICT]
    assert [i.subject for i in conflicts] == ["nics[name=mlx5_2].ports[1].state"]
    assert conflicts[0].values == {"rdma_link": "DOWN/DISABLED", "ibstat": "Active/LinkUp"}
    # mlx5_8 vanished while ibstat ran: its ibpanic already says so (the probe fails), not repeated here
    assert not [i for i in issues.items if i.kind is IssueKind.ABSENT_IN_SOURCE]


def test_evidence_nic_firmware_error_text_is_missing(healthy: Bundle) -> None:
    ibv = stdout_of(healthy, "ibv_devinfo").replace("fw_ver:\t\t\t\t1.117.1-a-63", "fw_ver:\t\t\t\tN/A", 1)
    sysfs_ib = stdout_of(healthy, "sysfs_ib").replace("ionic_0/fw_ver:1.117.1-a-63", "ionic_0/fw_ver:N/A")
    snap = build_snapshot(_edit(_edit(healthy, "ibv_devinfo", ibv), "sysfs_ib", sysfs_ib))
    nic = next(n for n in snap.nics if n.name == "ionic_0")
    assert nic.fw_ver is None and "N/A" in nic.na_reasons["fw_ver"]
    assert any(i.subject == "nics[name=ionic_0].fw_ver" for i in snap.evidence_issues)
