"""Host facts (issue 10 item 12): BIOS, kernel command line, OS release and RCCL library, parsed,
recorded in the snapshot (fake node and real capture) and judged: a change outside the plan blocks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.judge_scenarios import NOW, mi300x_snapshot, upgrade_plan, upgraded
from upgrade_gate.collect.bundle import load_bundle, write_bundle
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.errors import ParseError
from upgrade_gate.fakenode import build_fake_node
from upgrade_gate.fakenode.spec import mi300x_node
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.plan import plan_from_dict
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import Host, Severity, Snapshot, Verdict, replace
from upgrade_gate.parse.host import parse_host_files, parse_rccl_readlink
from upgrade_gate.snapshot.build import build_snapshot

CMDLINE = (
    "BOOT_IMAGE=/vmlinuz-6.8.0-55-generic root=/dev/mapper/ubuntu--vg-ubuntu--lv ro amd_iommu=on iommu=pt "
    "idle=poll hugepagesz=2M hugepages=8192 amdgpu.noretry=0"
)

# --------------------------------------------------------------------------- parsers


def test_parse_host_files_reads_dmi_cmdline_and_os_release_under_a_host_root() -> None:
    text = (
        "/host/sys/class/dmi/id/bios_vendor:American Megatrends International, LLC.\n"
        "/host/sys/class/dmi/id/bios_version:F5\n"
        "/host/sys/class/dmi/id/bios_date:01/25/2019\n"
        f"/host/proc/cmdline:{CMDLINE}\n"
    )
    got = parse_host_files(text)
    assert got.bios == {
        "bios_vendor": "American Megatrends International, LLC.",
        "bios_version": "F5",
        "bios_date": "01/25/2019",
    }
    assert got.cmdline == CMDLINE and got.os_release == {}


def test_parse_host_files_os_release_of_debian_12() -> None:
    got = parse_host_files((FIXTURES / "host" / "os-release-debian12-grep.txt").read_text(encoding="utf-8"))
    assert got.os_release["ID"] == "debian"
    assert got.os_release["VERSION_ID"] == "12"
    assert got.os_release["PRETTY_NAME"] == "Debian GNU/Linux 12 (bookworm)"
    assert got.os_release_file == "/etc/os-release"


def test_parse_host_files_prefers_etc_over_usr_lib_and_skips_comments() -> None:
    text = (
        "/etc/os-release:# written by the image build\n/etc/os-release:ID=ubuntu\n"
        "/usr/lib/os-release:ID=debian\n/etc/os-release:PRETTY_NAME='It''s'\n"
    )
    got = parse_host_files(text)
    assert got.os_release["ID"] == "ubuntu" and got.os_release_file == "/etc/os-release"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("grep: /sys/class/dmi/id/bios_version: Permission denied\n", "could not read"),
        ("/sys/class/dmi/id/product_serial:XYZ\n", "known host file"),
        ("/proc/cmdline:a\n/proc/cmdline:b\n", "more than one line"),
        ("/etc/os-release:this is not key value\n", "KEY=VALUE"),
        ('/etc/os-release:ID="ubuntu\n', "unterminated"),
        ("/sys/class/dmi/id/bios_version:   \n", "blank"),
    ],
)
def test_parse_host_files_refuses_what_it_cannot_vouch_for(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_host_files(text)


def test_parse_rccl_readlink_names_the_real_library_file() -> None:
    got = parse_rccl_readlink("/opt/rocm-7.2.0/lib/librccl.so.1.0.70200\n")
    assert (got.name, got.path) == ("librccl.so.1.0.70200", "/opt/rocm-7.2.0/lib/librccl.so.1.0.70200")


@pytest.mark.parametrize(
    "text", ["", "librccl.so.1\n", "/usr/lib/libc.so.6\n", "/a/librccl.so.1.0.1\n/b/librccl.so.1.0.2\n"]
)
def test_parse_rccl_readlink_refuses_anything_else(text: str) -> None:
    with pytest.raises(ParseError):
        parse_rccl_readlink(text)


# --------------------------------------------------------------------------- capture -> snapshot


def _fake_snapshot(tmp_path: Path, **spec_changes: str) -> Snapshot:
    spec = replace(mi300x_node("host-facts-node"), **spec_changes)
    node = build_fake_node(tmp_path / "node", spec)
    bundle = capture(LocalRunner(env=node.env(os.environ)), node=spec.name, host_root=node.host_root)
    return build_snapshot(bundle)


def test_fake_node_serves_host_facts_into_the_snapshot(tmp_path: Path) -> None:
    snap = _fake_snapshot(tmp_path)
    assert snap.host == Host(
        captured=True,
        bios_vendor="American Megatrends International, LLC.",
        bios_version="2.1",
        bios_date="03/15/2024",
        kernel_cmdline="root=/dev/mapper/ubuntu--vg-ubuntu--lv ro amd_iommu=on iommu=pt",  # BOOT_IMAGE= dropped
        os_id="ubuntu",
        os_version_id="22.04",
        os_pretty_name="Ubuntu 22.04.4 LTS",
    )
    assert snap.software.rccl_library == "librccl.so.1.0.60103"
    assert all(p.ok for p in snap.probes if p.name in ("bios", "kernel_cmdline", "os_release", "rccl_library"))


def test_host_without_dmi_or_rocm_records_the_reason(tmp_path: Path) -> None:
    node = build_fake_node(tmp_path / "node", mi300x_node("no-dmi"))
    for name in ("bios_vendor", "bios_version", "bios_date"):
        (node.host_root / "sys/class/dmi/id" / name).unlink()
    (node.host_root / "opt/rocm/lib/librccl.so.1").unlink()
    bundle = capture(LocalRunner(env=node.env(os.environ)), node="no-dmi", host_root=node.host_root)
    # A skipped RCCL probe records readlink's bare prefix: the bundle reader must accept it as a real skip.
    snap = build_snapshot(load_bundle(write_bundle(bundle, tmp_path / "no-dmi.tar.gz")))
    assert snap.host.captured and snap.host.bios_version is None
    assert snap.host.na_reasons["bios_version"].startswith("bios: no files matched ")
    assert snap.software.rccl_library is None
    assert "librccl.so.1" in snap.software.na_reasons["rccl_library"]


# --------------------------------------------------------------------------- judge

POLICY = load_policy()
HOST = Host(
    captured=True,
    bios_vendor="AMI",
    bios_version="2.1",
    bios_date="03/15/2024",
    kernel_cmdline="BOOT_IMAGE=/vmlinuz-5.15.0-119-generic ro iommu=pt",
    os_id="ubuntu",
    os_version_id="22.04",
    os_pretty_name="Ubuntu 22.04.4 LTS",
)


def _with(snap: Snapshot, rccl: str | None = "librccl.so.1.0.60103", **host: str | None) -> Snapshot:
    return replace(snap, host=replace(HOST, **host), software=replace(snap.software, rccl_library=rccl))


def _judge(candidate: Snapshot, baseline: Snapshot, plan: object = None) -> list[tuple[str, Severity, str]]:
    report = judge(
        baselines={baseline.node.name: baseline},
        candidates=[candidate],
        plan=plan if plan is not None else upgrade_plan(),  # type: ignore[arg-type]
        policy=POLICY,
        now=NOW,
    )
    # The scenario snapshots carry seeded bandwidth noise; the curve statistics may ask for a re-measure
    # (a warning) there. These tests are about host facts, so bandwidth findings are left out.
    return [(f.rule, f.severity, f.message) for f in report.findings if not f.rule.startswith("bandwidth.")]


BASE = _with(mi300x_snapshot())
AFTER = _with(upgraded(), rccl="librccl.so.1.0.60200")


def test_host_unchanged_passes_and_rocm_plan_explains_the_rccl_library() -> None:
    assert _judge(AFTER, BASE) == []


@pytest.mark.parametrize(
    ("field", "value", "rule"),
    [
        ("bios_version", "2.3", "host.bios"),
        ("bios_date", "09/02/2024", "host.bios"),
        (
            "kernel_cmdline",
            "BOOT_IMAGE=/vmlinuz-5.15.0-119-generic ro iommu=pt amdgpu.noretry=0",
            "host.kernel_cmdline",
        ),
        ("os_version_id", "24.04", "host.os_release"),
        ("bios_version", None, "host.bios"),
    ],
)
def test_host_change_outside_the_plan_blocks(field: str, value: str | None, rule: str) -> None:
    findings = _judge(_with(upgraded(), rccl="librccl.so.1.0.60200", **{field: value}), BASE)
    assert [(r, s) for r, s, _ in findings] == [(rule, Severity.BLOCK)]


def test_bios_update_accepted_by_the_plan_is_info() -> None:
    plan = upgrade_plan(accept=[{"path": "host.bios_version", "to": "2.3", "reason": "vendor BIOS 2.3"}])
    findings = _judge(_with(upgraded(), rccl="librccl.so.1.0.60200", bios_version="2.3"), BASE, plan)
    assert [(r, s) for r, s, _ in findings] == [("host.bios", Severity.INFO)]


def test_kernel_update_moves_boot_image_without_a_cmdline_change(tmp_path: Path) -> None:
    """The snapshot drops BOOT_IMAGE= (the kernel image's path), so a planned kernel update is no cmdline change."""
    before = _fake_snapshot(tmp_path / "a")
    after = _fake_snapshot(tmp_path / "b", kernel="6.8.0-55-generic")
    assert before.host.kernel_cmdline == after.host.kernel_cmdline
    assert "BOOT_IMAGE" not in (after.host.kernel_cmdline or "")


def test_rccl_library_change_without_rocm_in_the_plan_blocks() -> None:
    plan = plan_from_dict({"id": "bios", "change": {"driver": {"from": "6.7.0", "to": "6.8.5"}}}, source="t")
    candidate = _with(mi300x_snapshot(driver="6.8.5"), rccl="librccl.so.1.0.60200")
    findings = _judge(candidate, BASE, plan)
    assert ("software.rccl", Severity.BLOCK) in [(r, s) for r, s, _ in findings]


def test_baseline_without_host_facts_warns_to_rebaseline() -> None:
    old = mi300x_snapshot()  # saved before host facts existed: host.captured is False
    findings = _judge(AFTER, old)
    assert {(r, s) for r, s, _ in findings} == {
        ("host.bios", Severity.WARN),
        ("host.kernel_cmdline", Severity.WARN),
        ("host.os_release", Severity.WARN),
    }
    assert (
        judge(baselines={old.node.name: old}, candidates=[AFTER], plan=upgrade_plan(), policy=POLICY, now=NOW).verdict
        is Verdict.PASS
    )


def test_diff_and_gate_agree_on_a_bios_change() -> None:
    from upgrade_gate.judge.diff import diff_snapshots
    from upgrade_gate.judge.plan import mark_expected

    candidate = _with(upgraded(), rccl="librccl.so.1.0.60200", bios_version="2.3")
    changes = {c.path: c for c in mark_expected(diff_snapshots(BASE, candidate), upgrade_plan())}
    assert changes["host.bios_version"].expected is False
    assert changes["software.rccl_library"].expected is True  # ships with the planned ROCm
    plan = upgrade_plan(accept=[{"path": "host.bios_version", "to": "2.3"}])
    assert {c.path: c for c in mark_expected(diff_snapshots(BASE, candidate), plan)}["host.bios_version"].expected
