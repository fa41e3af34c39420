"""Issue 27: an evidence failure is the cause, and every finding that depends on it is folded under it.

The rule of `judge.cause_evidence`, tested as a rule: every probe of a real fake-node capture, broken
in every way a probe fails (binary missing, timed out, non-zero exit, output in no format, an error
text instead of output), on the candidate's side and on the baseline's, against the same healthy
other side. Each time the first blocking cause is that probe's tool, no blocking finding that depends
on the probe (by `snapshot.provenance`) is left outside it, and at most one other blocking cause remains.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.collect.bundle import Bundle, ProbeRecord
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.fakenode import Faults, build_fake_node, faults, mi300x_node
from upgrade_gate.judge.causes import group_causes
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import Cause, GateReport, NodeName, Severity, Snapshot, replace
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.snapshot.provenance import sources_of

NODE = NodeName("gpu-node-01")
FILE_ERROR = "AMDSMI_STATUS_FILE_ERROR - Error opening file\n"  # py-interface/amdsmi_exception.py
GARBAGE = "\x7fELF\x02\x01\x01\x00 @@@ ~~ #!%&*( 0x0x0x -- ??\nSegment"
NOW = "2026-12-05T12:00:00Z"
# Captures carry no phase results: the shipped policy for capture bundles (README, CI gate).
POLICY = load_policy(Path(__file__).resolve().parent.parent / "examples" / "policies" / "ci-bundles.yaml")
Breaker = Callable[[ProbeRecord], ProbeRecord]


def _result(record: ProbeRecord, **changes: object) -> ProbeRecord:
    return replace(record, result=replace(record.result, **changes))


KINDS: dict[str, Breaker] = {
    "missing": lambda r: _result(r, returncode=None, stdout="", missing=True),
    "timed out": lambda r: _result(r, returncode=None, stdout="", timed_out=True),
    "non-zero exit": lambda r: _result(r, returncode=1, stdout="", stderr="failed"),
    "unparseable": lambda r: _result(r, stdout=GARBAGE),
    "error text": lambda r: _result(r, stdout=FILE_ERROR),
}


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    node = build_fake_node(tmp_path_factory.mktemp("node") / "n", mi300x_node(NODE, seed=1), Faults())
    runner = LocalRunner(env=node.env(os.environ))
    return capture(runner, node=NODE, host_root=node.host_root, output_check=parser_check())


@pytest.fixture(scope="module")
def healthy_snapshot(healthy: Bundle) -> Snapshot:
    return build_snapshot(healthy)


def _probes() -> list[str]:
    """Every probe of the fake node's capture (the catalogue's, without the rocm-smi fallbacks)."""
    return [
        "rocminfo",
        "amdsmi_version",
        "amdsmi_list",
        "amdsmi_static",
        "amdsmi_firmware",
        "amdsmi_topology",
        "lspci",
        "ibv_devinfo",
        "rdma_link",
        "sysfs_sriov",
        "sysfs_ib",
        "driver_version",
        "rocm_version",
        "rocm_libs",
        "kernel",
        "dmesg",
        "bios",
        "kernel_cmdline",
        "os_release",
        "rccl_library",
    ]


def _break(bundle: Bundle, name: str, kind: str) -> Bundle:
    records = tuple(KINDS[kind](r) if r.name == name else r for r in bundle.records)
    assert any(r.name == name for r in bundle.records), f"{name} is not in the capture"
    return replace(bundle, records=records)


def _gate(baseline: Snapshot, candidate: Snapshot) -> GateReport:
    report = judge(baselines={NODE: baseline}, candidates=[candidate], plan=None, policy=POLICY, now=NOW)
    return group_causes(report, baselines={NODE: baseline}, candidates={NODE: candidate})


def _tool(snapshot: Snapshot, name: str) -> str:
    probe = next(p for p in snapshot.probes if p.name == name)
    return probe.argv[0] if probe.argv else name


def _assert_root_first(report: GateReport, broken: Snapshot, name: str, prefix: str) -> Cause | None:
    node = report.nodes[0]
    blocking = [c for c in node.causes if c.severity is Severity.BLOCK]
    failed = next(p for p in broken.probes if p.name == name)
    if failed.ok:  # the parser read the error text as "nothing" (rocm_libs, sysfs); an issue or nothing at all
        return None
    tool = _tool(broken, name)
    if prefix == "evidence.baseline" and not blocking:
        return None  # nothing of the candidate depends on it (amd-smi list when static answered)
    assert blocking, f"{name}: a failed probe must block"
    first = blocking[0]
    assert first.key in (f"{prefix}:{tool}", f"probe.fallback:{tool}"), [c.headline for c in blocking]
    assert tool in first.headline
    owned = set(first.findings)
    for i, f in enumerate(node.findings):
        if f.severity is Severity.BLOCK and f.path and name in sources_of(f.path)[:1]:
            assert i in owned, f"{f.message} depends on {name} but is not folded under it"
    assert len(blocking) <= 2, [c.headline for c in blocking]
    return first


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("name", _probes())
def test_cause_evidence_a_failed_candidate_probe_is_the_first_cause(
    healthy: Bundle, healthy_snapshot: Snapshot, name: str, kind: str
) -> None:
    broken = build_snapshot(_break(healthy, name, kind))
    _assert_root_first(_gate(healthy_snapshot, broken), broken, name, "evidence")


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("name", _probes())
def test_cause_evidence_a_failed_baseline_probe_is_the_first_cause(
    healthy: Bundle, healthy_snapshot: Snapshot, name: str, kind: str
) -> None:
    broken = build_snapshot(_break(healthy, name, kind))
    first = _assert_root_first(_gate(broken, healthy_snapshot), broken, name, "evidence.baseline")
    if first is not None:
        assert first.headline.startswith("the baseline's")


def test_cause_evidence_fallback_unique_id_is_not_a_change(tmp_path: Path, healthy_snapshot: Snapshot) -> None:
    """rocminfo hangs: amd-smi's `0x...` ASIC serial stands in for rocminfo's `GPU-...`: the same id."""
    node = build_fake_node(tmp_path / "n", mi300x_node(NODE, seed=1), Faults(tools={"rocminfo": faults.hang()}))
    runner = LocalRunner(env=node.env(os.environ))
    bundle = capture(runner, node=NODE, host_root=node.host_root, timeout=3, output_check=parser_check())
    candidate = build_snapshot(bundle)
    report = _gate(healthy_snapshot, candidate)
    assert not [f for f in report.findings if f.path and f.path.endswith(".unique_id")], "a format is not a change"
    causes = [c for c in report.nodes[0].causes if c.severity is Severity.BLOCK]
    assert [c.key for c in causes] == ["evidence:rocminfo"]
    assert causes[0].headline.startswith("rocminfo unusable (rocminfo: timed out after 3.0s)")


def test_cause_evidence_a_fallback_that_failed_in_part_says_so_in_the_headline(
    tmp_path: Path, healthy_snapshot: Snapshot
) -> None:
    """amd-smi missing, and rocm-smi's main probe prints garbage while its others answer: the headline said only
    "rocm-smi used", and the refused output came ~190 lines later (review 2026-12-07)."""
    broken = {"amd-smi": faults.missing(), "rocm-smi": faults.garbage(argv_prefix=("--showproductname",))}
    node = build_fake_node(tmp_path / "n", mi300x_node(NODE, seed=1), Faults(tools=broken))
    runner = LocalRunner(env=node.env(os.environ))
    bundle = capture(runner, node=NODE, host_root=node.host_root, timeout=3, output_check=parser_check())
    causes = [
        c for c in _gate(healthy_snapshot, build_snapshot(bundle)).nodes[0].causes if c.severity is Severity.BLOCK
    ]
    assert causes[0].headline.startswith("amd-smi unusable (amd-smi: missing binary); rocm-smi used, but its rocmsmi")
