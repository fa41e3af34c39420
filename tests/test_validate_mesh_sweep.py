"""Phase 2 compares the sweep it asked for with the sweep the tool printed (issue 10 item 10).

The tool here is a one-line script that prints a REAL rccl-tests capture (corpus rccl-tests/mi350x-8gpu-
mpi-allreduce-rocm7.0-degraded-large-msgs.txt, run as `-b 8 -e 8G -f 2`, 8 ranks): the output of another
sweep than CVF's 1K..2G, as a replayed, swapped or flag-ignoring run would give. The threshold is set
below its average so that only the sweep mismatch can fail it.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import FIXTURES
from tests.test_validate_support import nic_snapshot
from upgrade_gate.model import NodeName, PhaseStatus, replace
from upgrade_gate.parse.rccl_tests import parse_rccl_tests
from upgrade_gate.validate.config import parse_cvf_config
from upgrade_gate.validate.launcher import LocalLauncher
from upgrade_gate.validate.phase import Outcome, PhaseContext
from upgrade_gate.validate.phases.mesh import MeshPhase
from upgrade_gate.validate.phases.sweeps import SweepRun, check_requested, requested_sweep

NODE = NodeName("node-01")
CAPTURE = FIXTURES / "rccl-tests" / "mi350x-8gpu-mpi-allreduce-rocm7.0-degraded-large-msgs.txt"


def _tool(tmp_path: Path) -> dict[str, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "all_reduce_perf"
    tool.write_text(f"#!/bin/sh\nexec cat {CAPTURE}\n", encoding="utf-8")
    tool.chmod(0o755)
    return {"PATH": f"{bindir}:/usr/bin:/bin"}


def _run(tmp_path: Path, **keys: str) -> tuple[PhaseStatus, tuple[str, ...]]:
    config = parse_cvf_config({"PHASE2_BW_THRESHOLD": "50", **keys}, source="test")
    ctx = PhaseContext(
        node=NODE,
        config=config,
        launcher=LocalLauncher({NODE: _tool(tmp_path)}),
        snapshot=nic_snapshot(gpus=8),
        samples=1,
    )
    result = MeshPhase().run(ctx)
    return result.status, result.reasons


def test_mesh_output_of_another_sweep_is_an_error_naming_each_difference(tmp_path: Path) -> None:
    status, reasons = _run(tmp_path)  # CVF defaults: 1K..2G, factor 2, 6 iters, 20 warmup
    assert status is PhaseStatus.ERROR
    (reason,) = [r for r in reasons if "another sweep" in r]
    assert reason == (
        "all_reduce_perf: run 1 swept another sweep than asked: minBytes 8 (asked 1024), "
        "maxBytes 8589934592 (asked 2147483648), iters 20 (asked 6), warmup iters 5 (asked 20); "
        "its numbers are not evidence"
    )


def test_mesh_output_of_the_asked_sweep_passes(tmp_path: Path) -> None:
    status, reasons = _run(
        tmp_path,
        PHASE2_START_MSG_SIZE="8",
        PHASE2_END_MSG_SIZE="8G",
        PHASE2_ITER_COUNT="20",
        PHASE2_WARMUP_ITER_COUNT="5",
    )
    assert status is PhaseStatus.PASSED, reasons


def test_check_requested_reports_a_reduced_max_bytes() -> None:
    result = parse_rccl_tests(CAPTURE.read_text(encoding="utf-8"))
    assert result.settings is not None
    reduced = replace(result, settings=replace(result.settings, max_bytes_reduced_to=4 << 30))
    out = Outcome()
    config = parse_cvf_config(
        {
            "PHASE2_START_MSG_SIZE": "8",
            "PHASE2_END_MSG_SIZE": "8G",
            "PHASE2_ITER_COUNT": "20",
            "PHASE2_WARMUP_ITER_COUNT": "5",
        },
        source="test",
    )
    check_requested([SweepRun(reduced)], out, tool="all_reduce_perf", asked=requested_sweep(config))
    assert out.errors and "reduced maxBytes for memory" in out.errors[0]
