"""The dmesg rule through the site-owned fatal-error map (issue 10 items 3 and the map).

Events come from real kernel logs (tests/fixtures/dmesg, see its PROVENANCE.md) parsed by the real parser;
the node is the MI300X scenario node (gfx942: family mi300).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.judge_scenarios import NOW, mi300x_snapshot, upgrade_plan, upgraded
from upgrade_gate.errors import ConfigError
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import Policy, load_policy
from upgrade_gate.model import Finding, KernelEvent, Severity, Snapshot, Verdict, replace
from upgrade_gate.parse.dmesg import family_of, load_default_patterns, parse_dmesg

BASE = mi300x_snapshot()


def _events(name: str, **kwargs: object) -> tuple[KernelEvent, ...]:
    return parse_dmesg((FIXTURES / "dmesg" / name).read_text(encoding="utf-8"), **kwargs).events  # type: ignore[arg-type]


def _policy(tmp_path: Path, text: str) -> Policy:
    path = tmp_path / "site.yaml"
    path.write_text(text, encoding="utf-8")
    return load_policy(path)


def _dmesg(candidate: Snapshot, policy: Policy | None = None, baseline: Snapshot | None = BASE) -> list[Finding]:
    report = judge(
        baselines={baseline.node.name: baseline} if baseline is not None else {},
        candidates=[candidate],
        plan=upgrade_plan(),
        policy=policy or load_policy(),
        now=NOW,
    )
    return [f for f in report.findings if f.rule == "dmesg.fatal"]


def _blocking(findings: list[Finding]) -> set[str]:
    return {f.path or "" for f in findings if f.severity is Severity.BLOCK}


# --------------------------------------------------------------------------- shipped defaults


def test_dead_mi210s_fatal_init_and_probe_failure_block_by_default() -> None:
    candidate = replace(upgraded(), events=_events("mi210x2-fatal-init-probe-failed-error-12-amdgpu6.16.13.txt"))
    findings = _dmesg(candidate)
    assert _blocking(findings) == {"events[kind=amdgpu.fatal_init]", "events[kind=amdgpu.probe_failed]"}
    assert {f.device for f in findings} == {"0000:c3:00.0", "0000:83:00.0"}
    probe = next(f for f in findings if f.device == "0000:c3:00.0" and "probe" in (f.path or ""))
    assert probe.message.endswith("amdgpu: probe of 0000:c3:00.0 failed with error -12")


@pytest.mark.parametrize(
    "name",
    [
        "rdna3-ring-gfx-timeout-ring-reset-failed-mode2.txt",
        "journal-error-ring-gfx-timeout-baco-reset-cosmic-comp.txt",
        "navi10-kernel7.0-ring-reset-failed-baco-no-amdgpu-prefix.txt",
    ],
)
def test_ring_timeouts_and_resets_block_by_default(name: str) -> None:
    report = judge(
        baselines={BASE.node.name: BASE},
        candidates=[replace(upgraded(), events=_events(name))],
        plan=upgrade_plan(),
        policy=load_policy(),
        now=NOW,
    )
    assert report.verdict is Verdict.BLOCK
    blocked = {f.path for f in report.findings if f.rule == "dmesg.fatal" and f.severity is Severity.BLOCK}
    assert {"events[kind=amdgpu.ring_timeout]", "events[kind=amdgpu.gpu_reset_begin]"} <= blocked


def test_family_of_gfx_targets() -> None:
    assert [family_of(t) for t in ("gfx942", "gfx90a", "gfx950", "gfx1100", None)] == [
        "mi300",
        "mi200",
        "mi350",
        "gfx1100",
        None,
    ]


# --------------------------------------------------------------------------- the site's map

BOOT_BURST = """\
kernel_events:
  patterns:
    - {id: amdgpu.gpu_reset_begin, families: [mi300], baseline_rate: tolerate}
    - {id: amdgpu.asic_reset, families: [mi300], baseline_rate: tolerate}
    - {id: amdgpu.gpu_reset_succeeded, families: [mi300], baseline_rate: tolerate}
"""
_RESETS = (
    "[   12.100000] amdgpu 0000:05:00.0: amdgpu: GPU reset begin!\n"
    "[   12.200000] amdgpu 0000:05:00.0: amdgpu: MODE1 reset\n"
    "[   12.300000] amdgpu 0000:05:00.0: amdgpu: GPU reset succeeded, trying to resume\n"
)  # the reset lines of corpus dmesg/mi300x-8gpu-aca-hw-error-..., on one of the scenario node's GPUs


def test_burst_the_baseline_shows_at_the_same_rate_is_reported_not_blocking(tmp_path: Path) -> None:
    policy = _policy(tmp_path, BOOT_BURST)
    burst = parse_dmesg(_RESETS).events
    findings = _dmesg(replace(upgraded(), events=burst), policy, baseline=replace(BASE, events=burst))
    assert len(findings) == 3 and all(f.severity is Severity.INFO for f in findings)
    assert all("tolerated at that rate" in f.message and "kernel_events.patterns[" in f.message for f in findings)


def test_burst_above_the_baseline_rate_or_without_a_baseline_still_blocks(tmp_path: Path) -> None:
    policy = _policy(tmp_path, BOOT_BURST)
    once = parse_dmesg(_RESETS).events
    twice = parse_dmesg(_RESETS + _RESETS.replace("12.", "13.")).events
    more = _dmesg(replace(upgraded(), events=twice), policy, baseline=replace(BASE, events=once))
    assert _blocking(more) == {
        "events[kind=amdgpu.gpu_reset_begin]",
        "events[kind=amdgpu.asic_reset]",
        "events[kind=amdgpu.gpu_reset_succeeded]",
    }
    assert _blocking(_dmesg(replace(upgraded(), events=once), policy, baseline=BASE)) == _blocking(more)
    assert _blocking(_dmesg(replace(upgraded(), events=once), policy, baseline=None)) == _blocking(more)


def test_override_for_another_family_does_not_apply(tmp_path: Path) -> None:
    policy = _policy(tmp_path, BOOT_BURST.replace("[mi300]", "[mi200]"))
    burst = parse_dmesg(_RESETS).events
    findings = _dmesg(replace(upgraded(), events=burst), policy, baseline=replace(BASE, events=burst))
    assert len(_blocking(findings)) == 3


def test_site_regrades_a_shipped_pattern(tmp_path: Path) -> None:
    policy = _policy(tmp_path, "kernel_events:\n  patterns:\n    - {id: amdgpu.vram_lost, severity: fatal}\n")
    events = parse_dmesg("[  316.082669] amdgpu 0000:05:00.0: VRAM is lost due to GPU reset!\n").events
    assert _blocking(_dmesg(replace(upgraded(), events=events), policy)) == {"events[kind=amdgpu.vram_lost]"}
    default = _dmesg(replace(upgraded(), events=events))
    assert [f.severity for f in default] == [Severity.WARN]


SITE_PATTERN = """\
kernel_events:
  patterns:
    - id: site.ptl_disabled
      regex: 'PTL is disabled'
      severity: fatal
      families: [mi300]
"""


def test_site_pattern_extends_the_table_and_blocks(tmp_path: Path) -> None:
    policy = _policy(tmp_path, SITE_PATTERN)
    table = policy.kernel_events.table
    assert table.patterns[0].id == "site.ptl_disabled" and table.digest != load_default_patterns().digest
    line = "[   13.000001] amdgpu 0000:05:00.0: amdgpu: PTL is disabled\n"
    candidate = replace(upgraded(), events=parse_dmesg(line, table).events, event_patterns=table.digest)
    assert _blocking(_dmesg(candidate, policy)) == {"events[kind=site.ptl_disabled]"}


def test_snapshot_classified_without_the_site_patterns_blocks(tmp_path: Path) -> None:
    policy = _policy(tmp_path, SITE_PATTERN)
    line = "[   13.000001] amdgpu 0000:05:00.0: amdgpu: PTL is disabled\n"
    shipped = load_default_patterns()
    stale = replace(upgraded(), events=parse_dmesg(line).events, event_patterns=shipped.digest)
    findings = _dmesg(stale, policy)
    assert _blocking(findings) == {"event_patterns"}
    assert "rebuild the snapshot from its capture bundle" in findings[0].message
    assert _dmesg(stale) == []  # without the site's pattern the shipped table finds nothing in that line


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("{id: site.x, severity: fatal}", "needs regex and severity"),
        ("{id: site.x, regex: '(', severity: fatal}", "bad regex"),
        ("{id: amdgpu.asic_reset, severity: loud}", "severity"),
        ("{id: amdgpu.asic_reset, baseline_rate: sometimes}", "baseline_rate"),
        ("{id: amdgpu.asic_reset, colour: red}", "colour"),
    ],
)
def test_site_map_errors_name_the_entry(tmp_path: Path, entry: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _policy(tmp_path, f"kernel_events:\n  patterns:\n    - {entry}\n")


def test_snapshot_built_with_the_site_table_records_it_and_is_not_stale(tmp_path: Path) -> None:
    import os

    from upgrade_gate.collect.capture import capture
    from upgrade_gate.collect.runner import LocalRunner
    from upgrade_gate.fakenode import build_fake_node
    from upgrade_gate.fakenode.spec import mi300x_node
    from upgrade_gate.snapshot.build import build_snapshot

    policy = _policy(tmp_path, SITE_PATTERN)
    node = build_fake_node(tmp_path / "node", mi300x_node("site-node"))
    bundle = capture(LocalRunner(env=node.env(os.environ)), node="site-node", host_root=node.host_root)
    shipped = build_snapshot(bundle)
    assert shipped.event_patterns == load_default_patterns().digest
    site = build_snapshot(bundle, patterns=policy.kernel_events.table)
    assert site.event_patterns == policy.kernel_events.table.digest
    assert not any(f.path == "event_patterns" for f in _dmesg(site, policy))
    assert any(f.path == "event_patterns" for f in _dmesg(shipped, policy))
