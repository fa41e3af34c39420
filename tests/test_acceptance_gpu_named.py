"""Phase 1 names the GPU an RVS action failed on (issue 27: every device-level cause names the device), by
the id RVS prints, from the real RVS 1.3.0 log of two MI210s failing IET and GST (ROCm/ROCm#6031)."""

from __future__ import annotations

from pathlib import Path

from upgrade_gate.parse.rvs import parse_rvs
from upgrade_gate.validate.phases.acceptance import _failing_gpus

FIXTURE = Path(__file__).parent / "fixtures" / "rvs" / "rvs-1.3.0-summary-mi210x2-iet-gst-fail-rocm7.2.0.txt"


def test_the_failing_action_names_its_gpus_by_rvs_id() -> None:
    parsed = parse_rvs(FIXTURE.read_text(encoding="utf-8"))
    assert parsed.first_failure == "action_5"
    assert _failing_gpus(parsed) == " on GPU id 48932, 20068 (RVS's id: amd-smi list shows it as KFD_ID beside the BDF)"


def test_a_passing_run_names_no_gpu() -> None:
    text = (Path(__file__).parent / "fixtures" / "rvs" / "rvs-gst-mi300x-one-gpu-excerpt.txt").read_text(
        encoding="utf-8"
    )
    assert _failing_gpus(parse_rvs(text)) == ""
