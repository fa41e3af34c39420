"""RVS and AGFHC parsers on the real corpus, plus failure forms built from the same line formats."""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.errors import ParseError
from upgrade_gate.parse import rvs

DIR = FIXTURES / "rvs"
CASES = sorted(DIR.glob("*.txt"))
AGFHC = "agfhc-1.23.2-mi350x-all_lvl1-pass.txt"
GST = "rvs-gst-mi300x-one-gpu-excerpt.txt"
SUMMARY_FAIL = "rvs-1.3.0-summary-mi210x2-iet-gst-fail-rocm7.2.0.txt"
SUMMARY_PASS = "rvs-1.3.0-summary-mi355x-8gpu-all-pass-oci.txt"


def _text(name: str) -> str:
    return (DIR / name).read_text(encoding="utf-8")


def test_rvs_gpu_list_reads_bdf_ids_and_never_passes() -> None:
    r = rvs.parse_rvs(_text("rvs-1.1.0-g-list-mi300x-8gpu.txt"))
    assert r.version == "1.1.0" and len(r.gpus) == 8
    gpu = r.gpus[5]
    assert (gpu.bdf, gpu.index, gpu.gpu_id, gpu.name, gpu.device_id) == (
        "0000:bd:00.0",
        7,
        705,
        "AMD Instinct MI300X",
        29857,
    )
    assert r.actions == () and not r.passed


def test_rvs_gst_action_passes_with_met_true() -> None:
    r = rvs.parse_rvs(_text(GST))
    (action,) = r.actions
    assert (action.name, action.module, action.passed, action.status) == (
        "gst-639Tflops-4K4K8K-rand-fp16",
        "gst",
        True,
        "PASS",
    )
    assert action.details[0].endswith("Target GFLOPS: 639000 met: TRUE")
    assert r.passed and r.first_failure is None


def test_rvs_met_false_fails_the_action() -> None:
    # Same line format as the corpus excerpt, verdict substituted.
    r = rvs.parse_rvs(_text(GST).replace("met: TRUE", "met: FALSE"))
    assert not r.passed and r.first_failure == "gst-639Tflops-4K4K8K-rand-fp16"
    assert r.actions[0].status == "FAIL"


def test_rvs_error_line_fails_and_missing_verdict_is_not_a_pass() -> None:
    err = _text(GST) + "[ERROR ] [  2478.1 ] [gst-639Tflops-4K4K8K-rand-fp16] [GPU:: 55354] GPU hang\n"
    assert rvs.parse_rvs(err).actions[0].passed is False
    no_verdict = "\n".join(line for line in _text(GST).splitlines() if "met:" not in line)
    r = rvs.parse_rvs(no_verdict)
    assert r.actions[0].passed is None and r.actions[0].status == "NO-VERDICT" and not r.passed


def test_rvs_rejects_json_logs_and_unrelated_text() -> None:
    with pytest.raises(ParseError, match="JSON logs"):
        rvs.parse_rvs('{"gst": []}')
    with pytest.raises(ParseError, match="neither RVS actions"):
        rvs.parse_rvs("hello\n")


def test_rvs_summary_box_fail_rows_and_bracketed_log_lines() -> None:
    r = rvs.parse_rvs(_text(SUMMARY_FAIL))
    assert r.summary and r.version == "1.3.0" and r.errors == ()
    assert [a.name for a in r.actions] == [f"action_{i}" for i in range(1, 10)]
    assert [a.status for a in r.actions] == ["PASS"] * 4 + ["FAIL", "FAIL"] + ["PASS"] * 3
    iet = r.actions[4]
    assert iet.module == "IET" and iet.passed is False
    # the excerpt's verdict lines and RVS-ERROR name action_5 in brackets: they land on it, not on action_9
    assert "RVS-ERROR [iet] [action_5] Action failed to run successfully." in iet.details
    assert sum("pass: FALSE" in d for d in iet.details) == 2 and iet.details[-1] == "summary: FAIL"
    assert r.actions[8].details == ("summary: PASS",)
    assert not r.passed and r.first_failure == "action_5"


def test_rvs_summary_box_all_pass_is_an_explicit_verdict() -> None:
    r = rvs.parse_rvs(_text(SUMMARY_PASS))
    assert r.summary and r.version == "1.3.0" and len(r.gpus) == 8  # the summary lists the 8 GPUs (brk15)
    assert [a.module for a in r.actions] == ["GPUP", "PEQT", "PEBB", "PBQT", "IET", "GST", "BABEL", "MEM", "PESM"]
    assert r.passed and r.first_failure is None


def test_rvs_summary_quiet_mode_rows_with_colour_codes() -> None:
    # `rvs -q` prints each row as its action ends: "\\r| name | MODULE | ESC[32mPASS ... ESC[0m  |"
    # (rvsexec do_yaml); substituted into the real box of the OCI run, with action_6 turned red FAIL.
    lines = []
    for line in _text(SUMMARY_PASS).splitlines():
        if line.startswith("| action_"):
            word, colour = ("FAIL", 31) if "action_6" in line else ("PASS", 32)
            line = "\r" + line.replace("| PASS            |", f"| \x1b[{colour}m{word}          \x1b[0m  |")
        lines.append(line)
    r = rvs.parse_rvs("\n".join(lines) + "\n")
    assert [a.status for a in r.actions].count("FAIL") == 1 and r.first_failure == "action_6"


def test_rvs_summary_must_list_every_logged_action_and_be_closed() -> None:
    box = _text(SUMMARY_PASS)
    logged = _text(GST) + box
    with pytest.raises(ParseError, match="logged but is not in the summary"):
        rvs.parse_rvs(logged)
    cut = box[: box.index("| action_7")]
    with pytest.raises(ParseError, match="summary box not closed"):
        rvs.parse_rvs(cut)
    with pytest.raises(ParseError, match="summary row"):
        rvs.parse_rvs(box.replace("| PASS            |", "| SKIPPED         |", 1))


def test_rvs_error_lines_fail_their_action_or_the_run() -> None:
    # RVS-ERROR formats from rvs::logger::Err / rvsexec (substituted into the real GST excerpt).
    gst = _text(GST)
    named = rvs.parse_rvs(gst + "RVS-ERROR [gst] [gst-639Tflops-4K4K8K-rand-fp16] GPU hang\n")
    assert named.actions[0].passed is False and named.errors == ()
    cli = rvs.parse_rvs(gst + "RVS-ERROR [CLI] action 'gst-639Tflops-4K4K8K-rand-fp16' could not create action\n")
    assert cli.actions[0].passed is False
    run = rvs.parse_rvs(gst + "RVS-ERROR [CLI] Invalid value provided for -p (--parallel) option.\n")
    assert run.actions[0].passed is True and not run.passed
    assert run.first_failure == "RVS-ERROR [CLI] Invalid value provided for -p (--parallel) option."


def test_agfhc_all_pass_with_success_return_code() -> None:
    r = rvs.parse_agfhc(_text(AGFHC))
    assert [t.name for t in r.tests] == [
        "gfx_bf16ri-1-1",
        "gfx_fp16ri-1-1",
        "gfx_fp8ri-1-1",
        "hbm_bw-1-1",
        "xgmi_a2a-1-1",
    ]
    assert r.tests[3].module == "HBM BW" and r.tests[3].details == ("[00:01:02/00:01:05]",)
    assert (r.product, r.mode, r.total, r.executed, r.skipped) == ("MI350X", "BM SPX NPS1", 5, 5, 0)
    assert (r.summary, r.return_name, r.return_code) == ("All Tests Passed", "AGFHC_SUCCESS", 0)
    assert r.passed and r.first_failure is None


def test_agfhc_failed_test_and_nonzero_return_code() -> None:
    # Status word and return code substituted into the corpus line formats (no real failure capture).
    failed = _text(AGFHC).replace("PASS: hbm_bw-1-1", "FAIL: hbm_bw-1-1")
    r = rvs.parse_agfhc(failed)
    assert not r.passed and r.first_failure == "hbm_bw-1-1" and r.tests[3].status == "FAIL"
    code = _text(AGFHC).replace("AGFHC_SUCCESS [0]", "AGFHC_TEST_FAILURE [3]")
    r = rvs.parse_agfhc(code)
    assert not r.passed and r.first_failure == "AGFHC_TEST_FAILURE [3]"


def test_agfhc_truncated_or_empty_runs_do_not_pass() -> None:
    text = _text(AGFHC)
    cut = rvs.parse_agfhc(text[: text.index("Summary:")])
    assert cut.return_code is None and not cut.passed
    assert cut.first_failure == "no AGFHC return code (run killed or truncated)"
    info = "Summary:\n  Tests: 0 Total, 0 Executed, 0 Skipped\nProgram exiting with return code AGFHC_SUCCESS [0]\n"
    empty = rvs.parse_agfhc(info)
    assert not empty.passed and empty.first_failure == "no tests executed"
    with pytest.raises(ParseError, match="5 executed, 4 test lines"):
        rvs.parse_agfhc(text.replace("    PASS: hbm_bw-1-1                      [00:01:02/00:01:05]\n", ""))
    with pytest.raises(ParseError, match="no AGFHC test lines"):
        rvs.parse_agfhc("garbage\n")
