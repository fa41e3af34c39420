"""Black-box findings 14 and 15 (brk15): ib_write_bw rows that contradict each other or the format, an
output without its `Device :` line, and the RVS 1.3 summary's GPU list.

Inputs are real outputs from tests/fixtures (copies of ../shared/corpus, sources in their PROVENANCE.md)
with one line changed, removed or repeated, as each case says, or the RVS user guide's example.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.collect.runner import CommandResult
from upgrade_gate.errors import ParseError
from upgrade_gate.model import Gpu, NodeInfo, NodeName, Snapshot, Software
from upgrade_gate.parse import perftest as pt
from upgrade_gate.parse.rvs import parse_rvs
from upgrade_gate.validate.config import Stage
from upgrade_gate.validate.phase import Outcome
from upgrade_gate.validate.phases.acceptance import _judge_run
from upgrade_gate.validate.phases.rail import RailPhase, _NodeRails

PERFTEST = FIXTURES / "perftest"
RVS = FIXTURES / "rvs"
# prasad-nair-amd/alibaba README.md "Test 9": ib_write_bw -a on ionic_0 with ROCm memory, client side.
CLIENT = "ib_write_bw-gdr-use_rocm-ionic0-client-a-MiB-mi355x.txt"
ROW_8M = " 8388608    5000             19044.44            19044.43                    0.002381\n"
# oracle-quickstart/oci-gpu-quickstarts amd/MI355X/README-MI355X.md: RVS 1.3.0 summary of 8x MI355X.
OCI = "rvs-1.3.0-summary-mi355x-8gpu-all-pass-oci.txt"
OCI_BDFS = (
    "0000:0a:00.0", "0000:23:00.0", "0000:5a:00.0", "0000:72:00.0",
    "0000:8b:00.0", "0000:a4:00.0", "0000:d9:00.0", "0000:f1:00.0",
)  # fmt: skip
GPU_6_7 = (
    "+---------------------------------------------------------------------+\n"
    "| AMD Instinct MI355X - 16143      | AMD Instinct MI355X - 8465       |\n"
    "| 6 - 8 - 0000:d9:00.0             | 7 - 6 - 0000:f1:00.0             |\n"
)


def _text(folder: Path, name: str) -> str:
    return (folder / name).read_text(encoding="utf-8")


def _client() -> str:
    text = _text(PERFTEST, CLIENT)
    assert text.count(ROW_8M) == 1
    return text


# ------------------------------------------------------------------------------------------ perftest


def test_perftest_size_repeated_with_other_numbers_is_refused_naming_both_lines() -> None:
    """Finding 14 (dup-largest-row.txt): the client output with a second 8 MiB row, average 1.50 MiB/s.
    Both rows were kept and `largest` took the first: 159.76 Gb/s whichever row is real."""
    second = ROW_8M.replace("19044.43", "1.50")
    with pytest.raises(ParseError, match=r"second, different row for 8388608 bytes \(first on line 53\)") as info:
        pt.parse_ib_write_bw(_client().replace(ROW_8M, ROW_8M + second))
    assert info.value.line_no == 54


def test_perftest_size_repeated_within_one_table_is_refused() -> None:
    """The client output (one run, one table header) with its 8 MiB row printed twice, identically: only a
    capture holding the server's echo too (a second table header) may repeat a row."""
    with pytest.raises(ParseError, match="8388608 bytes printed 2 times under 1 table header"):
        pt.parse_ib_write_bw(_client().replace(ROW_8M, ROW_8M + ROW_8M))
    # The superbench loopback capture (server and client interleaved, two table headers) repeats its
    # 8 MiB row exactly, as perftest's one-way server prints the client's report: still one row.
    mixed = pt.parse_ib_write_bw(_text(PERFTEST, "ib_write_bw-loopback-all-sizes-interleaved-superbench.txt"))
    assert [r.bytes for r in mixed.rows].count(8388608) == 1


def test_perftest_peak_below_average_is_refused() -> None:
    """Finding 14 (avg-above-peak.txt): the client output's 8 MiB row with BW peak 1.00 under its average
    19044.43 (not a -D run: no "BW peak won't be measured" warning, and the peak is not 0.00)."""
    bad = ROW_8M.replace("19044.44", "1.00")
    with pytest.raises(ParseError, match=r"BW peak 1\.00 is below BW average 19044\.43") as info:
        pt.parse_ib_write_bw(_client().replace(ROW_8M, bad))
    assert info.value.line_no == 53


def test_perftest_unmeasured_peak_is_still_accepted() -> None:
    """A peak of 0.00 is perftest's "not measured" (-D): the SC24 bnxt_re0 capture, which prints no
    warning, and the RoCE bidirectional capture, which does."""
    for name in (
        "ib_write_bw-bnxt_re0-400g-3qp-duration-rdma_cm-scc24.txt",
        "ib_write_bw-roce-100g-bidir-cpufreq-warning.txt",
    ):
        (row,) = pt.parse_ib_write_bw(_text(PERFTEST, name)).rows
        assert row.bw_peak == 0.0 and row.bw_average > 0


def test_perftest_every_real_output_with_settings_names_its_device() -> None:
    """Every recorded output that prints the settings header prints `Device :` too; only the hand-trimmed
    8 MiB fragment has neither (so no measurement is ever made of it)."""
    without = []
    for path in sorted(PERFTEST.glob("*.txt")):
        result = pt.parse_ib_write_bw(path.read_text(encoding="utf-8"))
        assert (result.device is None) == (result.num_qps is None), path.name
        if result.device is None:
            without.append(path.name)
    assert without == ["ib_write_bw-ionic-pollara-expected-8M-row-fragment-tabs.txt"]


def _without_device_line() -> str:
    """Finding 14 (no-device-line.txt): the client output with its `Dual-port ... Device : ionic_0` line removed."""
    line = " Dual-port       : OFF          Device         : ionic_0\n"
    text = _client()
    assert text.count(line) == 1
    return text.replace(line, "")


def test_perftest_measurement_without_device_line_is_refused() -> None:
    result = pt.parse_ib_write_bw(_without_device_line())
    assert result.device is None and result.num_qps == 1  # parsed: the parser does not know the rail
    with pytest.raises(ParseError, match="no 'Device :' header: cannot check that the output is for rail 'ionic_0'"):
        pt.to_measurement(result, rail="ionic_0", peer=None)


def test_rail_phase_run_without_device_line_is_an_error_not_a_measurement() -> None:
    """Phase 4 judges the client's output against the client's rail device: without the `Device :` line
    the run was measured for whichever rail was asked (the device check was skipped)."""
    argv = ("ib_write_bw", "-d", "ionic_0", "-i", "1", "-F", "--report_gbits", "10.0.0.2")
    result = CommandResult(argv=argv, returncode=0, stdout=_without_device_line(), stderr="", duration_s=5.5)
    server = CommandResult(argv=argv[:-1], returncode=0, stdout="", stderr="", duration_s=6.0)
    both = (_NodeRails(), _NodeRails())
    assert RailPhase._judge(result, server, "rail-0(a:ionic_0<->b:ionic_0)", both, device="ionic_0") is None
    for side in both:
        (error,) = side.out.errors
        assert error.startswith(
            "parse-failed:rail-0(a:ionic_0<->b:ionic_0): ib_write_bw: no 'Device :' header: "
            "cannot check that the output is for rail 'ionic_0'"
        )
    whole = CommandResult(argv=argv, returncode=0, stdout=_client(), stderr="", duration_s=5.5)
    measured = RailPhase._judge(whole, server, "rail-0", (_NodeRails(),), device="ionic_0")
    assert measured is not None and measured.key == "rail/ionic_0/write_bw"


# ----------------------------------------------------------------------------------------------- RVS


def test_rvs_summary_gpu_list_is_read() -> None:
    """Finding 15: the summary's GPU list was not read (`gpus: ()`)."""
    oci = parse_rvs(_text(RVS, OCI))
    assert tuple(g.bdf for g in oci.gpus) == OCI_BDFS
    first = oci.gpus[0]
    assert (first.name, first.gpu_id, first.index, first.device_id) == ("AMD Instinct MI355X", 21010, 3, None)
    assert [g.index for g in oci.gpus] == [3, 5, 4, 2, 7, 9, 8, 6]  # KFD node ids, listed by BDF
    mi210 = parse_rvs(_text(RVS, "rvs-1.3.0-summary-mi210x2-iet-gst-fail-rocm7.2.0.txt"))
    assert [(g.bdf, g.gpu_id, g.index) for g in mi210.gpus] == [("0000:01:00.0", 20068, 1), ("0000:02:00.0", 48932, 2)]
    assert mi210.first_failure == "action_5"  # the verdicts are as before


def test_rvs_summary_count_not_matching_its_list_is_refused() -> None:
    """Finding 15 (rvs-gpu-missing.txt): the OCI summary ("GPUs | 8") with the GPU 6/7 row pair removed."""
    text = _text(RVS, OCI)
    assert GPU_6_7 in text
    with pytest.raises(ParseError, match="'GPUs' says 8 but the GPU list names 6") as info:
        parse_rvs(text.replace(GPU_6_7, ""))
    assert info.value.line_no == 10


def test_rvs_summary_gpu_list_out_of_format_is_refused() -> None:
    """The OCI summary with GPU 6 and 7 swapped in the id row only, then with the id row cut."""
    text = _text(RVS, OCI)
    ids = "| 6 - 8 - 0000:d9:00.0             | 7 - 6 - 0000:f1:00.0             |\n"
    swapped = "| 7 - 6 - 0000:f1:00.0             | 6 - 8 - 0000:d9:00.0             |\n"
    with pytest.raises(ParseError, match="GPU 7 listed where GPU 6 belongs"):
        parse_rvs(text.replace(ids, swapped))
    with pytest.raises(ParseError, match="GPU row without its 'ID - Node ID - BDF' row"):
        parse_rvs(text.replace(ids, ""))


# The RVS user guide's RVS 1.6.75 example (ROCm/ROCmValidationSuite docs/ug1main.md @21584e14, GPUP
# section, 4-space indentation removed): the GPU list without the "GPU Name - GPU ID" label rows.
GUIDE_1_6 = """\
+=====================================================================+
|                 ROCm Validation Suite (RVS) Summary                 |
+=====================================================================+
|                           System Overview                           |
+---------------------------------------------------------------------+
| Operating System                 | Ubuntu 22.04.5 LTS               |
| RVS version                      | 1.6.75                           |
| ROCm version                     | 7.2.1-81                         |
| amdgpu version                   | 6.16.13                          |
| GPUs                             | 8                                |
+---------------------------------------------------------------------+
| AMD Instinct MI355X - 42583      | AMD Instinct MI355X - 27226      |
| 0 - 2 - 0000:05:00.0             | 1 - 3 - 0000:15:00.0             |
+---------------------------------------------------------------------+
| AMD Instinct MI355X - 36479      | AMD Instinct MI355X - 17010      |
| 2 - 4 - 0000:65:00.0             | 3 - 5 - 0000:75:00.0             |
+---------------------------------------------------------------------+
| AMD Instinct MI355X - 1590       | AMD Instinct MI355X - 51771      |
| 4 - 6 - 0000:85:00.0             | 5 - 7 - 0000:95:00.0             |
+---------------------------------------------------------------------+
| AMD Instinct MI355X - 11806      | AMD Instinct MI355X - 57875      |
| 6 - 8 - 0000:e5:00.0             | 7 - 9 - 0000:f5:00.0             |
+=====================================================================+
| Action Name                      | Module         | Result          |
+=====================================================================+
| RVS-GPUP-TC1                     | GPUP           | PASS            |
+---------------------------------------------------------------------+
"""


def test_rvs_summary_gpu_list_without_label_rows_and_with_an_odd_count() -> None:
    guide = parse_rvs(GUIDE_1_6)
    assert guide.version == "1.6.75" and [g.gpu_id for g in guide.gpus][-2:] == [11806, 57875]
    # An odd count puts GPU 0 beside the label rows (rvsexec_do_yaml.cpp `systemOverview`): the OCI
    # summary cut to its first three GPUs in that layout.
    head = _text(RVS, OCI).split("| GPUs ", 1)[0]
    actions = _text(RVS, OCI).split(
        "+=====================================================================+\n| Action", 1
    )[1]
    odd = (
        head + "| GPUs                             | 3                                |\n"
        "+---------------------------------------------------------------------+\n"
        "| GPU Name - GPU ID                | AMD Instinct MI355X - 21010      |\n"
        "| ID - Node ID - BDF               | 0 - 3 - 0000:0a:00.0             |\n"
        "+---------------------------------------------------------------------+\n"
        "| AMD Instinct MI355X - 56525      | AMD Instinct MI355X - 28206      |\n"
        "| 1 - 5 - 0000:23:00.0             | 2 - 4 - 0000:5a:00.0             |\n"
        "+=====================================================================+\n| Action" + actions
    )
    assert [g.bdf for g in parse_rvs(odd).gpus] == list(OCI_BDFS[:3])
    with pytest.raises(ParseError, match="'GPUs' says 4 but the GPU list names 3"):
        parse_rvs(odd.replace("| 3                                |", "| 4                                |"))


def _snapshot(bdfs: tuple[str, ...]) -> Snapshot:
    gpus = tuple(Gpu(index=i, bdf=bdf) for i, bdf in enumerate(bdfs))  # type: ignore[arg-type]
    return Snapshot(
        node=NodeInfo(name=NodeName("mi355x-a")), taken_at="2026-12-01T00:00:00Z", tool_version="test",
        software=Software(), gpus=gpus,
    )  # fmt: skip


def _rvs_run(text: str) -> tuple[bool, Outcome]:
    stage = Stage(name="rvs", framework="RVS", recipe="gst_single", timeout_s=60)
    result = CommandResult(
        argv=("rvs", "-c", "gst_single.conf", "-j"), returncode=0, stdout=text, stderr="", duration_s=1
    )
    out = Outcome()
    return _judge_run(stage, result, out, _snapshot(OCI_BDFS)), out


def test_acceptance_gpu_without_a_result_fails_naming_it() -> None:
    """The OCI summary with GPU 6 and 7 removed and its count made 6 (a run that never saw them, as when
    HIP does not show RVS a GPU), on a node whose snapshot has all 8: it passed before."""
    text = (
        _text(RVS, OCI)
        .replace(GPU_6_7, "")
        .replace("| GPUs                             | 8  ", "| GPUs                             | 6  ")
    )
    assert len(parse_rvs(text).gpus) == 6
    passed, out = _rvs_run(text)
    assert not passed
    assert out.failures == [
        "stage-rvs: rvs gst_single: no result for GPU 0000:d9:00.0, 0000:f1:00.0: the RVS summary lists 6 GPU(s), "
        "not the node's 8 (a GPU HIP does not show RVS is never tested)"
    ]
    passed, out = _rvs_run(_text(RVS, OCI))
    assert passed and not out.reasons


def test_acceptance_summary_with_no_gpu_fails() -> None:
    """The OCI summary as RVS prints it when it found no GPU ("No GPUs detected !", N/A), actions all PASS."""
    text = _text(RVS, OCI)
    head, rest = text.split("| GPUs ", 1)
    _, actions = rest.split("+=====================================================================+\n| Action Name", 1)
    none = (
        head + "| GPUs                             | No GPUs detected !               |\n"
        "+---------------------------------------------------------------------+\n"
        "| GPU Name - GPU ID                | N/A                              |\n"
        "| ID - Node ID - BDF               |                                  |\n"
        "+---------------------------------------------------------------------+\n"
        "| Action Name" + actions
    )
    parsed = parse_rvs(none)
    assert parsed.gpus == () and parsed.passed
    passed, out = _rvs_run(none)
    assert not passed and out.failures == [
        "stage-rvs: rvs gst_single: no GPU has a result: the RVS summary lists no GPU ('No GPUs detected !')"
    ]
