"""ROCm libraries in the snapshot (probe rocm_libs -> listing -> Snapshot.libraries) and rule library.unplanned."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.abi_support import AbiTrees, build_trees
from tests.judge_scenarios import NOW, mi300x_snapshot, upgrade_plan, upgraded
from upgrade_gate.abi.listing import parse_listing
from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.collect.bundle import load_bundle, write_bundle
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.errors import ParseError
from upgrade_gate.fakenode import build_fake_node, mi300x_node
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import Finding, ProbeStatus, RocmLibrary, Severity, Snapshot, Verdict, replace
from upgrade_gate.snapshot.build import build_snapshot


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> AbiTrees:
    return build_trees(tmp_path_factory.mktemp("abi-snap"))


def _node_snapshot(tmp_path: Path, libs: Path | None) -> Snapshot:
    """Capture a fake MI300X node whose host root holds `libs` as opt/rocm/lib, then replay the bundle."""
    node = build_fake_node(tmp_path / "node", mi300x_node("gpu-node-01", seed=1))
    lib_dir = node.host_root / "opt" / "rocm" / "lib"  # replaces the fake node's own (an empty librccl placeholder)
    shutil.rmtree(lib_dir)
    if libs is not None:
        shutil.copytree(libs, lib_dir, symlinks=True)
    env = node.env(os.environ)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    bundle = capture(LocalRunner(env=env), node="gpu-node-01", host_root=node.host_root, output_check=parser_check())
    write_bundle(bundle, tmp_path / "bundle")
    return build_snapshot(load_bundle(tmp_path / "bundle"))  # offline replay of the recorded listing


def test_snapshot_records_rocm_libraries_through_the_probe(trees: AbiTrees, tmp_path: Path) -> None:
    snap = _node_snapshot(tmp_path, trees.running)
    probe = next(p for p in snap.probes if p.name == "rocm_libs")
    assert probe.ok and probe.argv[:2] == ("upgrade-gate", "abi-list")
    assert snap.libraries is not None
    assert [(lib.soname, lib.path, lib.symbol_count) for lib in snap.libraries] == [
        ("libamdhip64.so.6", "/opt/rocm/lib/libamdhip64.so.6.0.0", 6),
        ("librocm_smi64.so.1", "/opt/rocm/lib/librocm_smi64.so.1", 2),
    ]


def test_snapshot_without_rocm_lib_folder_records_none_with_reason(tmp_path: Path) -> None:
    snap = _node_snapshot(tmp_path, None)
    probe = next(p for p in snap.probes if p.name == "rocm_libs")
    assert probe.ok and probe.skipped and "no files matched" in (probe.reason or "")
    assert snap.libraries == ()


def test_snapshot_with_a_corrupt_library_records_the_failure_and_the_gate_blocks(
    trees: AbiTrees, tmp_path: Path
) -> None:
    libs = tmp_path / "libs"
    shutil.copytree(trees.running, libs, symlinks=True)
    (libs / "librocm_smi64.so.1").write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + b"\xff" * 200)
    snap = _node_snapshot(tmp_path, libs)
    probe = next(p for p in snap.probes if p.name == "rocm_libs")
    assert not probe.ok and probe.exit_code == 3 and "corrupt ELF" in (probe.reason or "")
    assert snap.libraries is None
    base = replace(snap, libraries=(HIP5, SMI), probes=tuple(replace(p, ok=True) for p in snap.probes))
    report = judge(baselines={snap.node.name: base}, candidates=[snap], plan=None, policy=load_policy(), now=NOW)
    rules = {(f.rule, f.severity) for f in report.findings}
    assert ("library.unplanned", Severity.BLOCK) in rules and ("evidence.missing", Severity.WARN) in rules


def test_snapshot_of_a_rocm_folder_without_elf_libraries_records_none(tmp_path: Path) -> None:
    (tmp_path / "empty-libs").mkdir()
    (tmp_path / "empty-libs" / "libc.so").write_text("/* GNU ld script */\nGROUP ( libc.so.6 )\n")
    snap = _node_snapshot(tmp_path, tmp_path / "empty-libs")
    probe = next(p for p in snap.probes if p.name == "rocm_libs")
    assert probe.ok and not probe.skipped and snap.libraries == ()


def test_listing_parser_fails_closed_on_anything_else() -> None:
    with pytest.raises(ParseError, match="not JSON"):
        parse_listing("upgrade-gate: error: boom")
    with pytest.raises(ParseError, match="not a upgrade-gate-abi-list/1 document"):
        parse_listing('{"format": "other", "libraries": []}')
    with pytest.raises(ParseError, match=r"libraries\[0\] is malformed"):
        parse_listing('{"format": "upgrade-gate-abi-list/1", "libraries": [{"soname": "libx.so.1"}]}')


# --------------------------------------------------------------------------- rule library.unplanned

H1, H2, F1, F2 = "1" * 64, "2" * 64, "a" * 64, "b" * 64
HIP5 = RocmLibrary(soname="libamdhip64.so.5", path="/opt/rocm-6.1.3/lib/libamdhip64.so.5.7", symbols_sha256=H1,
                   symbol_count=400, file_sha256=F1)  # fmt: skip
SMI = RocmLibrary(soname="librocm_smi64.so.7", path="/opt/rocm-6.1.3/lib/librocm_smi64.so.7", symbols_sha256=H1,
                  symbol_count=90, file_sha256=F1)  # fmt: skip


def _run(baseline: Snapshot, candidate: Snapshot, **plan: object) -> list[Finding]:
    report = judge(
        baselines={baseline.node.name: baseline},
        candidates=[candidate],
        plan=upgrade_plan(**plan),
        policy=load_policy(),
        now=NOW,
    )
    return [f for f in report.findings if f.rule == "library.unplanned"]


def _same_version(libs: tuple[RocmLibrary, ...]) -> tuple[Snapshot, Snapshot]:
    """Baseline and candidate on the same ROCm (no ROCm change in the plan), with `libs` on the candidate."""
    base = replace(mi300x_snapshot(), libraries=(HIP5, SMI))
    return base, replace(mi300x_snapshot(seed=2, taken_at="2026-11-30T11:00:00Z"), libraries=libs)


NO_ROCM_CHANGE = {"change": {"firmware": [{"block": "RLC"}]}}


def test_rule_unchanged_libraries_pass() -> None:
    base, cand = _same_version((HIP5, SMI))
    assert _run(base, cand, **NO_ROCM_CHANGE) == []


def test_rule_library_changed_outside_the_plan_blocks() -> None:
    base, cand = _same_version((replace(HIP5, symbols_sha256=H2, symbol_count=401), replace(SMI, file_sha256=F2)))
    findings = _run(base, cand, **NO_ROCM_CHANGE)
    assert [(f.severity, f.path) for f in findings] == [
        (Severity.BLOCK, "libraries[soname=libamdhip64.so.5].symbols_sha256"),
        (Severity.BLOCK, "libraries[soname=librocm_smi64.so.7].file_sha256"),
    ]
    assert findings[0].message.startswith("libamdhip64.so.5: exported symbols changed outside the plan (400 -> 401")


def test_rule_rocm_upgrade_expects_new_builds_but_not_an_undeclared_soname_bump() -> None:
    base = replace(mi300x_snapshot(), libraries=(HIP5, SMI))
    hip6 = replace(HIP5, soname="libamdhip64.so.6", path="/opt/rocm-6.2.0/lib/libamdhip64.so.6.2", symbols_sha256=H2)
    cand = replace(upgraded(), libraries=(hip6, replace(SMI, symbols_sha256=H2, file_sha256=F2)))
    (gone,) = _run(base, cand)
    assert (
        gone.severity is Severity.BLOCK
        and gone.message == "libamdhip64.so.5 is gone (/opt/rocm-6.1.3/lib/libamdhip64.so.5.7)"
    )
    declared = {"from": "libamdhip64.so.5", "to": "libamdhip64.so.6"}
    change = {"rocm": {"from": "6.1.3", "to": "6.2.0"}, "driver": {"from": "6.7.0", "to": "6.8.5"}}
    assert _run(base, cand, change={**change, "sonames": [declared]}) == []
    unmet = _run(base, replace(cand, libraries=(HIP5, SMI)), change={**change, "sonames": [declared]})
    assert [f.message for f in unmet] == [
        "the plan moves libamdhip64.so.5 to libamdhip64.so.6, but the node still has libamdhip64.so.5"
    ]


def test_rule_lost_library_evidence_blocks() -> None:
    base, cand = _same_version(())
    probes = (
        *cand.probes,
        ProbeStatus(name="rocm_libs", ok=False, reason="upgrade-gate: missing binary", required=False),
    )
    (f,) = _run(base, replace(cand, libraries=None, probes=probes), **NO_ROCM_CHANGE)
    assert f.severity is Severity.BLOCK
    assert f.message.startswith("ROCm libraries not recorded (upgrade-gate: missing binary); the baseline has 2")


def test_rule_baseline_without_libraries_is_not_judged() -> None:
    base, cand = _same_version((HIP5,))
    report = judge(baselines={base.node.name: replace(base, libraries=None)}, candidates=[cand],
                   plan=upgrade_plan(**NO_ROCM_CHANGE), policy=load_policy(), now=NOW)  # fmt: skip
    assert report.verdict is Verdict.PASS
