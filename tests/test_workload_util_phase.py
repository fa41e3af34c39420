"""Phase 6's GPU utilisation sampling on fake nodes: the shipped training script run for real (PyTorch,
gloo, two ranks on the CPUs) while the fake node's `amd-smi monitor -u` answers from the real format.

The fake answers a cycle of tables (fakenode.render_util): a healthy GPU moves by a point, a jittery
one drops by its swing every other call, so any two samples while training show it; the tests assert
no sample count beyond that minimum and no timing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_validate_support import make_node
from tests.test_workload_phase import _node, _run
from upgrade_gate.fakenode import FakeNode, faults, mi300x_node
from upgrade_gate.fakenode.faults import FaultKind, Faults, ToolFault
from upgrade_gate.model import PhaseResult, PhaseStatus, Snapshot
from upgrade_gate.parse.amdsmi_monitor import parse_amdsmi_monitor
from upgrade_gate.validate.phases import workload_util

SPREAD = workload_util.SPREAD
# steps long enough (4 x 0.8 s) that two samples 0.3 s apart fall inside the training window on a loaded machine
SAMPLED = {"UPGRADE_GATE_WORKLOAD_UTIL_INTERVAL_S": "0.3"}


def _slow(spec):  # type: ignore[no-untyped-def]
    return faults.slow_workload(spec, step_delay_s=0.8)


def _measures(result: PhaseResult) -> dict[str, tuple[float, ...]]:
    return {m.key: m.samples for m in result.measurements}


def test_fake_amdsmi_monitor_u_answers_in_turn_from_the_real_format(tmp_path: Path) -> None:
    spec = faults.jittery_gpu(mi300x_node("node-01", seed=1, gpu_count=4, nic_count=0), gpu=1, swing_pct=30.0)
    node = make_node(tmp_path, spec)
    tables = [
        parse_amdsmi_monitor(
            subprocess.run(
                ["amd-smi", "monitor", "-u"], env=node.env(os.environ), capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(4)
    ]
    assert tables[0].columns == ("GPU", "GFX_CLK", "GFX%")
    slot1 = sorted(range(4), key=lambda i: spec.enumerated_gpus[i].bdf)[1]  # device slot 1 in BDF order
    jittery = [t.rows[slot1].gfx_util_pct for t in tables]
    steady = [t.rows[(slot1 + 1) % 4].gfx_util_pct for t in tables]
    assert jittery == [98.0, 68.0, 98.0, 68.0] and steady == [98.0, 97.0, 99.0, 98.0]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> tuple[FakeNode, Snapshot, PhaseResult]:
    node, snap = _node(tmp_path_factory.mktemp("util-healthy"), change=_slow)
    (six,) = _run(node, snap, {6}, **SAMPLED)
    return node, snap, six


def test_workload_util_phase_records_each_gpus_curve_and_a_small_spread(
    healthy: tuple[FakeNode, Snapshot, PhaseResult],
) -> None:
    _, snap, six = healthy
    assert six.status is PhaseStatus.PASSED, six.reasons
    got = _measures(six)
    for gpu in snap.gpus:
        curve = got[f"workload/gpu{gpu.index}/gfx_util_pct"]
        assert len(curve) >= 4 and set(curve) <= {97.0, 98.0, 99.0}  # before, >= 2 during, after
    (spread,) = got[SPREAD]
    assert 0.0 < spread <= 1.0  # healthy: 98 +- 1 point
    assert not [r for r in six.reasons if r.startswith("utilisation: ")]
    m = next(m for m in six.measurements if m.key == SPREAD)
    assert m.unit == "%" and m.settings["tool"] == "amd-smi monitor -u" and m.settings["worst"].startswith("gpu")


def test_workload_util_phase_names_the_jittery_gpu(tmp_path: Path) -> None:
    node, snap = _node(tmp_path, change=lambda s: faults.jittery_gpu(_slow(s), gpu=2, swing_pct=30.0))
    (six,) = _run(node, snap, {6}, **SAMPLED)
    assert six.status is PhaseStatus.PASSED, six.reasons  # jitter is the rule's to judge, never the status
    (spread,) = _measures(six)[SPREAD]
    assert 12.0 <= spread <= 15.0  # 98/68 alternating: 15 points when even, 12.5+ when odd
    worst = next(m for m in six.measurements if m.key == SPREAD).settings["worst"]
    jittery = sorted(str(g.bdf) for g in snap.gpus)[2]
    assert worst.endswith(f"({jittery})")


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (ToolFault(kind=FaultKind.MISSING), "amd-smi list --json failed (amd-smi: missing binary); not sampled"),
        (ToolFault(kind=FaultKind.GARBAGE, argv_prefix=("monitor",)), "amd-smi monitor -u failed before the run"),
        (
            ToolFault(kind=FaultKind.NONZERO, argv_prefix=("monitor",), stderr="boom"),
            "amd-smi monitor -u failed before",
        ),
    ],
)
def test_workload_util_sampling_failure_is_a_reason_and_no_spread_never_the_status(
    tmp_path: Path, fault: ToolFault, reason: str
) -> None:
    """A site workload (no PyTorch) that passes: the sampling's failure leaves phase 6 passed."""
    node, snap = _node(tmp_path)
    broken = make_node(tmp_path / "broken", node.spec, Faults(tools={"amd-smi": fault}))
    site = Path(__file__).parent / "fixtures" / "workload" / "site_workload.py"
    gpus = ",".join(str(g.bdf) for g in snap.gpus)
    command = f"{sys.executable} {site} ok {gpus}"
    (six,) = _run(broken, snap, {6}, UPGRADE_GATE_WORKLOAD_COMMAND=command, **SAMPLED)
    assert six.status is PhaseStatus.PASSED, six.reasons
    assert SPREAD not in _measures(six)
    notes = [r for r in six.reasons if r.startswith("utilisation: ")]
    assert len(notes) == 1 and reason in notes[0], six.reasons


def test_workload_util_record_keeps_the_latest_during_samples_and_the_before_one() -> None:
    """The bound keeps the end of the run (training), not its start (initialisation)."""
    record = workload_util.UtilRecord(interval_s=1.0)
    record.add(workload_util.UtilSample(when="before", at=0.0, done=0.1))
    for t in range(1, 6):
        record.add(workload_util.UtilSample(when="during", at=float(t), done=t + 0.1), keep=2)
    assert [(s.when, s.at) for s in record.samples] == [("before", 0.0), ("during", 4.0), ("during", 5.0)]
