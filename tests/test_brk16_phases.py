"""Black-box findings of brk16 (AMD): false passes in phase 1 (AGFHC, RVS without a summary), phase 3 and
the kernel-log scan.

Inputs are real outputs from tests/fixtures (copies of ../shared/corpus, sources in their PROVENANCE.md)
with one line changed, added or removed, as each case says; the RVS 1.1 log of 8 GPUs is the fake node's
rendering of the corpus gst excerpt (its format, fakenode/render_validation.py).
"""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES
from tests.test_validate_support import nic_snapshot
from upgrade_gate.collect.runner import CommandResult
from upgrade_gate.fakenode.render_validation import render_rvs_gst
from upgrade_gate.fakenode.spec import mi300x_node
from upgrade_gate.model import Bdf, Gpu, NodeInfo, NodeName, PhaseStatus, Snapshot, Software, replace
from upgrade_gate.parse.dmesg import parse_dmesg
from upgrade_gate.parse.rvs import parse_agfhc
from upgrade_gate.validate.config import Stage, default_config
from upgrade_gate.validate.launcher import LocalLauncher
from upgrade_gate.validate.phase import Outcome, PhaseContext
from upgrade_gate.validate.phases import NicHealthPhase
from upgrade_gate.validate.phases.acceptance import _judge_run

RVS = FIXTURES / "rvs"
AGFHC = "agfhc-1.23.2-mi350x-all_lvl1-pass.txt"
GST_ONE_GPU = "rvs-gst-mi300x-one-gpu-excerpt.txt"
MI300X_BDFS = tuple(
    Bdf(f"0000:{bus:02x}:00.0") for bus in (0x05, 0x15, 0x65, 0x75, 0x85, 0x95, 0xE5, 0xF5)
)  # fmt: skip


def _text(name: str) -> str:
    return (RVS / name).read_text(encoding="utf-8")


def _snapshot(bdfs: tuple[Bdf, ...] = MI300X_BDFS, *, partition: str | None = None) -> Snapshot:
    gpus = tuple(Gpu(index=i, bdf=bdf, compute_partition=partition) for i, bdf in enumerate(bdfs))
    return Snapshot(
        node=NodeInfo(name=NodeName("mi300x-a")), taken_at="2026-12-01T00:00:00Z", tool_version="test",
        software=Software(), gpus=gpus,
    )  # fmt: skip


def _run(framework: str, text: str, snapshot: Snapshot | None = None) -> tuple[bool, Outcome]:
    recipe = "xgmi_lvl1" if framework == "AGFHC" else "gst_single"
    stage = Stage(name="s", framework=framework, recipe=recipe, timeout_s=60)
    argv = ("agfhc", "-r", recipe) if framework == "AGFHC" else ("rvs", "-c", f"{recipe}.conf", "-j")
    result = CommandResult(argv=argv, returncode=0, stdout=text, stderr="", duration_s=1)
    out = Outcome()
    return _judge_run(stage, result, out, _snapshot() if snapshot is None else snapshot), out


# ------------------------------------------------------------------------- 01: AER, both wordings

# drivers/pci/pcie/aer.c `aer_error_severity_string`: "Uncorrected (Non-Fatal)", "Uncorrected (Fatal)",
# "Corrected" until "PCI/AER: Use 'Correctable' and 'Uncorrectable' spec terms for errors" (Bjorn
# Helgaas, linux-pci 2023-12-06) made them "Uncorrectable (Non-Fatal)", "Uncorrectable (Fatal)",
# "Correctable"; printed by aer_print_error as "PCIe Bus Error: severity=%s, type=%s, (%s)".
AER_LINE = (
    "[ 8123.441230] amdgpu 0000:05:00.0: PCIe Bus Error: severity={severity}, type=Transaction Layer, (Receiver ID)\n"
)


@pytest.mark.parametrize(
    ("severity", "kind", "level"),
    [
        ("Uncorrected (Fatal)", "pcie.aer_uncorrected_fatal", "fatal"),
        ("Uncorrectable (Fatal)", "pcie.aer_uncorrected_fatal", "fatal"),
        ("Uncorrected (Non-Fatal)", "pcie.aer_uncorrected_nonfatal", "error"),
        ("Uncorrectable (Non-Fatal)", "pcie.aer_uncorrected_nonfatal", "error"),
        ("Corrected", "pcie.aer_corrected", "warn"),
        ("Correctable", "pcie.aer_corrected", "warn"),
    ],
)
def test_dmesg_aer_severity_in_old_and_new_kernel_wording(severity: str, kind: str, level: str) -> None:
    """Finding 01: a real MI300X dmesg with one AER line added; the new wording was no event at all."""
    text = (FIXTURES / "dmesg" / "mi300x-8gpu-aca-hw-error-mode1-reset-rocm6.2.3.txt").read_text(encoding="utf-8")
    events = parse_dmesg(text + AER_LINE.format(severity=severity)).events
    (aer,) = [e for e in events if e.kind.startswith("pcie.aer")]
    assert (aer.kind, aer.severity, aer.bdf) == (kind, level, "0000:05:00.0")


# ------------------------------------------------------------------------- 07, 08: AGFHC


def test_agfhc_gpu_count_below_the_nodes_fails() -> None:
    """Finding 07: the AGFHC all-pass output saying `GPUs: 7` on a node whose snapshot has 8 GPUs."""
    text = _text(AGFHC)
    assert parse_agfhc(text).gpus == 8
    passed, out = _run("AGFHC", text.replace("GPUs: 8", "GPUs: 7"))
    assert not passed
    assert out.failures == [
        "stage-s: agfhc xgmi_lvl1: AGFHC tested 7 GPU(s) ('GPUs: 7'), the node has 8: a GPU AGFHC does not see "
        "is never tested"
    ]
    passed, out = _run("AGFHC", text)
    assert passed and not out.reasons


def test_agfhc_gpu_count_of_physical_devices_passes_on_a_partitioned_node() -> None:
    """A CPX node (8 devices, 8 partitions each, BDF function = partition): AGFHC's 8 is the devices'."""
    cpx = tuple(Bdf(f"{bdf[:-1]}{p}") for bdf in MI300X_BDFS for p in range(8))
    passed, out = _run("AGFHC", _text(AGFHC), _snapshot(cpx, partition="CPX"))
    assert passed and not out.reasons
    passed, out = _run("AGFHC", _text(AGFHC).replace("GPUs: 8", "GPUs: 7"), _snapshot(cpx, partition="CPX"))
    assert not passed and "the node has 64 (8 devices)" in out.failures[0]


def test_agfhc_without_a_gpu_count_is_an_error() -> None:
    """The Product line cut: how many GPUs AGFHC tested is unknown, so the run proves nothing of the node."""
    line = "Product: MI350X | GPUs: 8 | Mode: BM SPX NPS1 | Checks: dmesg- ras+ perf-\n"
    assert line in _text(AGFHC)
    passed, out = _run("AGFHC", _text(AGFHC).replace(line, ""))
    assert not passed and out.errors == [
        "stage-s: agfhc xgmi_lvl1: AGFHC printed no GPU count ('GPUs: N'): which GPUs were tested is unknown"
    ]


def _skipping(text: str) -> str:
    """Finding 08 (v_agfhcskip.py): only the first of the 5 tests executed, 4 skipped, AGFHC_SUCCESS [0]."""
    for title, line in (
        ("GFX fp16 rand int", "PASS: gfx_fp16ri-1-1                  [00:01:08/00:01:20]"),
        ("GFX fp8 rand int", "PASS: gfx_fp8ri-1-1                   [00:01:08/00:01:20]"),
        ("HBM BW", "PASS: hbm_bw-1-1                      [00:01:02/00:01:05]"),
        ("XGMI BW A2A", "PASS: xgmi_a2a-1-1                    [00:00:11/00:00:13]"),
    ):
        block = f"  {title}\n    {line}\n"
        assert block in text
        text = text.replace(block, "")
    summary = "Tests: 5 Total, 5 Executed, 0 Skipped | All Tests Passed"
    assert summary in text
    return text.replace(summary, "Tests: 5 Total, 1 Executed, 4 Skipped | All Tests Passed")


def test_agfhc_skipped_tests_fail_naming_the_count() -> None:
    parsed = parse_agfhc(_skipping(_text(AGFHC)))
    assert (parsed.total, parsed.executed, parsed.skipped, len(parsed.tests)) == (5, 1, 4, 1)
    assert not parsed.passed and parsed.first_failure == "4 of 5 tests skipped, 1 executed"
    passed, out = _run("AGFHC", _skipping(_text(AGFHC)))
    assert not passed
    assert out.failures == [
        "stage-s: agfhc xgmi_lvl1: 4 of 5 tests skipped, 1 executed: a skipped acceptance test is not a pass"
    ]


def test_agfhc_fewer_executed_than_total_without_skips_fails() -> None:
    """`5 Total, 4 Executed, 0 Skipped` (one test line removed): a test that neither ran nor was skipped."""
    block = "  HBM BW\n    PASS: hbm_bw-1-1                      [00:01:02/00:01:05]\n"
    text = _text(AGFHC).replace(block, "").replace("5 Executed", "4 Executed")
    parsed = parse_agfhc(text)
    assert not parsed.passed and parsed.first_failure == "1 of 5 tests not executed"


# ------------------------------------------------------------------------- 09: RVS 1.1 log, no summary


def _fake_rvs_log() -> str:
    """The fake node's RVS 1.1 gst log of 8 MI300X (each GPU's verdict `[GPU:: <KFD gpu id>] ... met: TRUE`)."""
    return render_rvs_gst(mi300x_node("gpu-node-01", seed=1)).stdout


def test_rvs_log_without_summary_and_a_gpu_per_node_gpu_passes() -> None:
    text = _fake_rvs_log()
    assert "Summary" not in text and text.count("met: TRUE") == 8
    passed, out = _run("RVS", text)
    assert passed and not out.reasons


def test_rvs_log_without_summary_missing_gpus_fails() -> None:
    """Finding 09 (v_rvs1gpu.py): the 8-GPU log with every GPU's lines but the first one's removed."""
    lines = _fake_rvs_log().splitlines(keepends=True)
    first = lines[2].split("[GPU:: ", 1)[1].split("]", 1)[0]
    kept = "".join(line for line in lines if "[GPU::" not in line or f"[GPU:: {first}]" in line)
    passed, out = _run("RVS", kept)
    assert not passed
    assert out.failures == [
        f"stage-s: rvs gst_single: action gst-639Tflops-4K4K8K-rand-fp16 has a verdict for 1 GPU (RVS id {first}), "
        "the node has 8: a GPU without a verdict was not tested"
    ]


def test_rvs_real_one_gpu_excerpt_fails_on_an_eight_gpu_node_and_passes_on_one() -> None:
    """The corpus gst excerpt (one MI300X, `[GPU:: 55354]`): a pass for a 1-GPU node only."""
    passed, out = _run("RVS", _text(GST_ONE_GPU))
    assert not passed and "has a verdict for 1 GPU (RVS id 55354), the node has 8" in out.failures[0]
    passed, out = _run("RVS", _text(GST_ONE_GPU), _snapshot(MI300X_BDFS[:1]))
    assert passed and not out.reasons


# ------------------------------------------------------------------------- 10: phase 3, NIC without RDMA


def _phase3(snapshot: Snapshot) -> tuple[PhaseStatus, tuple[str, ...]]:
    node = NodeName("node-01")
    ctx = PhaseContext(node=node, config=default_config(), launcher=LocalLauncher({node: {}}), snapshot=snapshot)
    result = NicHealthPhase().run(ctx)
    return result.status, result.reasons


def test_phase3_ainic_without_its_rdma_device_fails() -> None:
    """Finding 10: 8 AINICs in lspci, ionic_7's RDMA device gone (driver did not bind it)."""
    healthy = nic_snapshot()
    assert _phase3(healthy)[0] is PhaseStatus.PASSED
    gone = next(n for n in healthy.nics if n.name == "ionic_7")
    status, reasons = _phase3(replace(healthy, nics=tuple(n for n in healthy.nics if n.name != "ionic_7")))
    assert status is PhaseStatus.FAILED
    assert reasons == (f"rdma-devices:expected=8,actual=7 (no RDMA device on AINIC {gone.bdf})",)


def test_phase3_rdma_devices_of_unknown_bdf_are_counted() -> None:
    """Devices whose PF BDF is unknown may be any AINIC: fewer of them than AINICs still fails."""
    healthy = nic_snapshot()
    unknown = tuple(replace(n, bdf=None) for n in healthy.nics)
    assert _phase3(replace(healthy, nics=unknown))[0] is PhaseStatus.PASSED
    status, reasons = _phase3(replace(healthy, nics=unknown[:7]))
    assert status is PhaseStatus.FAILED
    assert reasons == ("rdma-devices:expected=8,actual=7 (an AINIC has no RDMA device)",)
