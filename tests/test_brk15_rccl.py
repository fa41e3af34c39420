"""Black-box findings brk15 01-06 (2026-12): the rccl-tests/nccl-tests verdicts are read, never only parsed.

Every text here is a REAL output of tests/fixtures/rccl-tests/ (copies of ../shared/corpus/rccl-tests/, see
PROVENANCE.md) with the finding's mutation applied (the finding's filter.py, on the fake NVIDIA node's
nccl-tests 2.18.3 layout): mainly `nccl-tests-2.18.3-16rank-2node-allreduce-cx8.txt` (nccl-tests 2.18.3,
16 ranks on 2 nodes, `validation: 1`). The format's rules are NVIDIA/nccl-tests src/common.cu and
src/util.cu @a0b82b2 and ROCm/rccl-tests src/common.cu @ae3e635 (924521f for the old `error` column).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.test_validate_support import nic_snapshot
from upgrade_gate.errors import ParseError
from upgrade_gate.model import NodeName, PhaseStatus
from upgrade_gate.parse import rccl_tests as rt
from upgrade_gate.validate.config import parse_cvf_config
from upgrade_gate.validate.launcher import LocalLauncher
from upgrade_gate.validate.phase import Outcome, PhaseContext
from upgrade_gate.validate.phases.mesh import MeshPhase
from upgrade_gate.validate.phases.sweeps import SweepRun, check_requested, check_sweeps, requested_sweep

DIR = FIXTURES / "rccl-tests"
NCCL = "nccl-tests-2.18.3-16rank-2node-allreduce-cx8.txt"  # 16 ranks, avg 19.1617
A2A = "mi355x-8gpu-alltoall-zero-size-rows-radeon-graphics-name.txt"  # in-place #wrong N/A (alltoall)
ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+\s+\w+\s+-?\d+\s")


def _text(name: str = NCCL) -> str:
    return (DIR / name).read_text(encoding="utf-8")


def _cells(text: str, edit: dict[int, str]) -> str:
    """Every table row with the cells at the given whitespace-split positions replaced (finding filter.py)."""
    out = []
    for line in text.split("\n"):
        if ROW.match(line):
            cells = line.split()
            for col, value in edit.items():
                cells[col] = value
            line = "  " + "  ".join(cells)
        out.append(line)
    return "\n".join(out)


def _verdicts(text: str, *, ranks: int = 16) -> Outcome:
    out = Outcome()
    check_sweeps([SweepRun(rt.parse_rccl_tests(text))], out, tool="all_reduce_perf", threshold=None,
                 threshold_key="PHASE2_BW_THRESHOLD", ranks=ranks)  # fmt: skip
    return out


def test_brk15_real_outputs_still_parse_and_pass_the_verdict_checks() -> None:
    for name in (NCCL, A2A, "mi300x-2node-16rank-roce-allreduce-rocm6.4.2-rccl2.22.3.txt"):
        out = _verdicts(_text(name), ranks=rt.parse_rccl_tests(_text(name)).ranks or 0)
        assert not out.reasons, (name, out.reasons)


# 01: #wrong N/A while the header says validation: 1


def test_brk15_wrong_na_with_validation_on_is_a_parse_error() -> None:
    text = _cells(_text(), {8: "N/A", 12: "N/A"})  # finding 01: every #wrong N/A
    with pytest.raises(ParseError, match=r"out-of-place #wrong N/A in 24 row\(s\) while the header says validation: 1"):
        rt.parse_rccl_tests(text)


def test_brk15_in_place_wrong_na_only_where_the_collective_skips_the_check() -> None:
    with pytest.raises(ParseError, match="all_reduce_perf checks its in-place results"):
        rt.parse_rccl_tests(_cells(_text(), {12: "N/A"}))
    assert rt.parse_rccl_tests(_text(A2A)).rows[-1].in_place is not None  # alltoall: in-place never checked
    # No collective line (older outputs): the alltoall pattern (every in-place N/A) parses, a mix does not.
    bare = "\n".join(line for line in _text(A2A).split("\n") if "Collective test" not in line)
    rt.parse_rccl_tests(bare)
    mixed = bare.replace("0.00    N/A", "0.00      0", 1)
    with pytest.raises(ParseError, match="names no collective, and its in-place half mixes N/A with counts"):
        rt.parse_rccl_tests(mixed)


def test_brk15_phase_errors_on_unchecked_in_place_results_of_all_reduce() -> None:
    # An all_reduce output without its collective lines, in-place #wrong N/A: it parses (alltoall pattern),
    # but phase 2/5 collectives check both halves, so those results are no evidence.
    text = "\n".join(line for line in _text().split("\n") if "Collective test" not in line)
    out = _verdicts(_cells(text, {12: "N/A"}))
    assert out.failures == [] and len(out.errors) == 1
    assert "#wrong N/A for 24 result(s) (first 1024 B in-place" in out.errors[0]
    assert "validation: 1" in out.errors[0]


def test_brk15_validation_off_is_another_sweep_than_asked() -> None:
    text = _cells(_text().replace("validation: 1", "validation: 0"), {8: "N/A", 12: "N/A"})
    config = parse_cvf_config({"PHASE2_START_MSG_SIZE": "1K", "PHASE2_END_MSG_SIZE": "8G"}, source="test")
    out = Outcome()
    check_requested([SweepRun(rt.parse_rccl_tests(text))], out, tool="all_reduce_perf", asked=requested_sweep(config))
    assert any("validation 0 (asked 1)" in e for e in out.errors), out.errors


# 02: '# Out of bounds values : 12 FAILED'


def test_brk15_out_of_bounds_failed_fails_the_phase() -> None:
    text = _text().replace("Out of bounds values : 0 OK", "Out of bounds values : 12 FAILED")
    out = _verdicts(text)
    assert out.failures == [
        "all_reduce_perf: run 1: '# Out of bounds values : 12 FAILED': the tool's own data check found wrong "
        "results: data corruption"
    ]


def test_brk15_out_of_bounds_verdict_must_match_its_count() -> None:
    for footer in ("Out of bounds values : 12 OK", "Out of bounds values : 0 FAILED"):
        with pytest.raises(ParseError, match="FAILED exactly when out-of-bounds values > 0"):
            rt.parse_rccl_tests(_text().replace("Out of bounds values : 0 OK", footer))


def test_brk15_out_of_bounds_line_missing_is_an_error() -> None:
    out = _verdicts(_text().replace("# Out of bounds values : 0 OK\n", ""))
    assert out.errors == [
        "all_reduce_perf: run 1: no '# Out of bounds values' line: the tool's data-check verdict is missing"
    ]


def test_brk15_out_of_bounds_failed_fails_mesh_phase_end_to_end(tmp_path: Path) -> None:
    # The tool prints a real 8-rank capture with the finding's footer; the sweep asked is the capture's.
    capture = tmp_path / "out.txt"
    real = (DIR / "mi350x-8gpu-mpi-allreduce-rocm7.0-degraded-large-msgs.txt").read_text(encoding="utf-8")
    capture.write_text(real.replace("Out of bounds values : 0 OK", "Out of bounds values : 3 FAILED"), encoding="utf-8")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "all_reduce_perf").write_text(f"#!/bin/sh\nexec cat {capture}\n", encoding="utf-8")
    (bindir / "all_reduce_perf").chmod(0o755)
    keys = {"PHASE2_START_MSG_SIZE": "8", "PHASE2_END_MSG_SIZE": "8G", "PHASE2_ITER_COUNT": "20",
            "PHASE2_WARMUP_ITER_COUNT": "5", "PHASE2_BW_THRESHOLD": "50"}  # fmt: skip
    node = NodeName("node-01")
    ctx = PhaseContext(
        node=node,
        config=parse_cvf_config(keys, source="test"),
        launcher=LocalLauncher({node: {"PATH": f"{bindir}:/usr/bin:/bin"}}),
        snapshot=nic_snapshot(gpus=8),
        samples=1,
    )
    result = MeshPhase().run(ctx)
    assert result.status is PhaseStatus.FAILED
    assert any("'# Out of bounds values : 3 FAILED'" in r for r in result.reasons), result.reasons


# 03: '# Avg bus bandwidth : X FAILED' (NCCL_TESTS_MIN_BW)


def test_brk15_avg_bus_bandwidth_failed_fails_the_phase() -> None:
    out = _verdicts(_text().replace("# Avg bus bandwidth    : 19.1617 ", "# Avg bus bandwidth    : 19.1617 FAILED"))
    assert len(out.failures) == 1
    assert "'# Avg bus bandwidth : 19.1617 FAILED': below 0.9 x the NCCL_TESTS_MIN_BW" in out.failures[0]
    ok = _verdicts(_text().replace("# Avg bus bandwidth    : 19.1617 ", "# Avg bus bandwidth    : 19.1617 OK"))
    assert not ok.reasons


# 04: the footer must be the mean busbw of its rows


@pytest.mark.parametrize("footer", ["999.000", "19.17", "38.3234"])
def test_brk15_avg_footer_contradicting_its_rows_is_a_parse_error(footer: str) -> None:
    # 999 (finding 04), a shift of one printed digit, the out-of-place mean doubled
    text = _text().replace("Avg bus bandwidth    : 19.1617", f"Avg bus bandwidth    : {footer}")
    with pytest.raises(
        ParseError, match=rf"'# Avg bus bandwidth' {footer} disagrees with its own table: .* 48 results"
    ):
        rt.parse_rccl_tests(text)


def test_brk15_avg_footer_agrees_with_rows_in_every_real_output() -> None:
    rejected = {
        "mi355x-8gpu-allreduce-512K-16G-rows-elided-oci-doc.txt",
        "mi355x-8gpu-alltoall-512K-16G-rows-elided-oci-doc.txt",
    }
    for path in sorted(DIR.glob("*.txt")):
        if path.name not in rejected:
            rt.parse_rccl_tests(path.read_text(encoding="utf-8"))  # within the printed rounding


def test_brk15_half_unit_is_the_printed_rounding() -> None:
    assert [rt.half_unit(t) for t in ("126.83", "19.1617", "1.2e+04", "0")] == pytest.approx([0.005, 0.00005, 500, 0.5])


# 05: device (rank) lines


def test_brk15_duplicate_and_missing_rank_lines_are_a_parse_error() -> None:
    lines = _text().split("\n")
    at = [i for i, line in enumerate(lines) if line.startswith("#  Rank")]
    lines[at[4]] = lines[at[3]]  # finding 05: rank 3 twice, rank 4 missing
    with pytest.raises(ParseError, match=r"not ranks 0..15 in order; rank\(s\) 3 printed twice; rank\(s\) 4 missing"):
        rt.parse_rccl_tests("\n".join(lines))


def test_brk15_header_ngpus_must_match_the_rank_lines_per_process() -> None:
    one_proc = _text(A2A)  # 8 ranks of one pid, nGpus 8
    with pytest.raises(ParseError, match="printed 8 rank lines but the header's nThread 1 x nGpus 4 gives 4"):
        rt.parse_rccl_tests(one_proc.replace("nGpus 8", "nGpus 4"))
    with pytest.raises(ParseError, match="16 rank lines, not a multiple of the header's nThread 1 x nGpus 3"):
        rt.parse_rccl_tests(_text().replace("nGpus 1", "nGpus 3"))


def test_brk15_ranks_sharing_one_gpu_fail_the_phase() -> None:
    text = re.sub(r"\[0000:[0-9a-f]{2}:00\]", "[0000:06:00]", _text())  # every rank of each host on one GPU
    out = _verdicts(text)
    assert len(out.failures) == 1
    assert "ranks 0, 1, 2, 3, 4, 5, 6, 7 all ran on GPU 0000:06:00.0 of R6KD-CX8aaS-GPU-14" in out.failures[0]
    assert "(and 1 more shared GPU(s))" in out.failures[0]


def test_brk15_no_rank_lines_is_an_error() -> None:
    text = "\n".join(line for line in _text().split("\n") if not line.startswith("#  Rank"))
    out = _verdicts(text)
    assert out.errors == ["all_reduce_perf: run 1: no '#  Rank ... device' lines: cannot tell which GPUs ran"]


# 06: the old `error` column, values flagged '*' over the threshold


def test_brk15_error_column_asterisk_fails_the_phase() -> None:
    lines = [line.replace("#wrong", " error") if "redop" in line else line for line in _text().split("\n")]
    out = _verdicts(_cells("\n".join(lines), {8: "2e-01*", 12: "2e-01*"}))  # finding 06
    assert out.failures == [
        "all_reduce_perf: run 1: 48 result(s) with an error over the tool's threshold (error column marked '*', "
        "first 1024 B out-of-place: 2e-01*, line 27): data corruption"
    ]
    unflagged = _verdicts(_cells("\n".join(lines), {8: "2e-07", 12: "1e-07"}))
    assert not unflagged.reasons


def test_brk15_wrong_counts_are_read_as_printed() -> None:
    with pytest.raises(ParseError, match="only the old error column carries it"):
        rt.parse_rccl_tests(_cells(_text(), {8: "0*"}))
    big = rt.parse_rccl_tests(_cells(_text(), {8: "1.23457e+06"}))  # `%6g` of a large count
    assert big.wrong_total == 24 * 1234570
    assert "wrong values (#wrong)" in _verdicts(_cells(_text(), {8: "1.23457e+06"})).failures[0]


def test_brk15_merge_json_refuses_a_wrong_count_other_than_the_table() -> None:
    text_r = rt.parse_rccl_tests(_text("mi300x-8gpu-k8s-mpi-allreduce-develop-a7809b3.txt"))
    js = (DIR / "mi300x-8gpu-allreduce-array-from-source.json").read_text(encoding="utf-8")
    with pytest.raises(ParseError, match="JSON wrong None disagrees with the table's #wrong 0"):
        rt.merge_json(text_r, rt.parse_rccl_tests(js.replace('"wrong":"0"', '"wrong":"N/A"', 1)))
