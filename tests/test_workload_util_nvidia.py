"""Phase 6's utilisation sampling on NVIDIA nodes (issue 30): nvidia-smi's documented query CSV
(`--query-gpu=index,pci.bus_id,utilization.gpu --format=csv,noheader,nounits`) on a fake 8x H100 node,
the same measurements as amd-smi's, and the refusals that leave the phase passed with missing evidence."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.test_validate_support import fast_config
from tests.test_workload_phase import _Recording, _run
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.probes import probe_catalogue
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.errors import ParseError
from upgrade_gate.fakenode import FakeNode
from upgrade_gate.fakenode.nvidia import build_nvidia_node, h100_node
from upgrade_gate.fakenode.nvidia_render import write_stub_tool
from upgrade_gate.model import PhaseStatus, Snapshot
from upgrade_gate.parse.nvidia_smi_query import UTIL_ARGV, parse_nvidia_smi_query_util
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.validate.phases import select_phases, workload_util
from upgrade_gate.validate.phases.workload import visible_var
from upgrade_gate.vendors import NVIDIA

SAMPLED = {"UPGRADE_GATE_WORKLOAD_UTIL_INTERVAL_S": "0.3"}
SITE = Path(__file__).parent / "fixtures" / "workload" / "site_workload.py"
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
    "NVIDIA driver is installed and running.\n"
)


def _nvidia(tmp_path: Path) -> tuple[FakeNode, Snapshot]:
    node = build_nvidia_node(tmp_path / "node", h100_node("node-01", seed=1))
    bundle = capture(
        LocalRunner(env=node.env(os.environ)),
        node="node-01",
        host_root=node.host_root,
        probes=probe_catalogue(node.host_root, vendor=NVIDIA),
    )
    return node, build_snapshot(bundle)


def _site(snap: Snapshot) -> str:
    return f"{sys.executable} {SITE} ok {','.join(str(g.bdf) for g in snap.gpus)}"


def test_nvidia_util_argv_is_the_vendors_and_parses_to_bdfs() -> None:
    assert NVIDIA.util.argv == UTIL_ARGV and not NVIDIA.util.list_argv
    got = parse_nvidia_smi_query_util("0, 00000000:1B:00.0, 97\n1, 00000000:43:00.0, [N/A]\n")
    assert got == {"0000:1b:00.0": 97.0, "0000:43:00.0": None}


@pytest.mark.parametrize(
    ("text", "form"),
    [
        ("0, 00000000:1B:00.0, 97 %\n", "has a unit"),
        ("index, pci.bus_id, utilization.gpu [%]\n", "names line"),
        ("0, 00000000:1B:00.0, [Unknown Error]\n", "error text"),
        ("0, 00000000:1B:00.0, 97, 41\n", "4 fields, expected 3"),
        ("0, 00000000:1B:00.0, 97\n0, 00000000:43:00.0, 96\n", "printed twice"),
        (NO_DRIVER, "NVIDIA-SMI has failed"),
        ("", "empty output"),
    ],
)
def test_nvidia_util_query_refuses_each_form_by_name(text: str, form: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_nvidia_smi_query_util(text)
    assert form.lower() in str(err.value).lower()


def test_workload_util_nvidia_node_is_sampled_with_nvidia_smi(tmp_path: Path) -> None:
    """Every GPU of the H100 node gets its curve from nvidia-smi's query, the tool named in the settings."""
    node, snap = _nvidia(tmp_path)
    (six,) = _run(node, snap, {6}, UPGRADE_GATE_WORKLOAD_COMMAND=_site(snap), **SAMPLED)
    assert six.status is PhaseStatus.PASSED, six.reasons
    curves = {m.key: m for m in six.measurements if m.key.endswith("/gfx_util_pct")}
    assert sorted(curves) == sorted(f"workload/gpu{g.index}/gfx_util_pct" for g in snap.gpus)
    for gpu in snap.gpus:
        curve = curves[f"workload/gpu{gpu.index}/gfx_util_pct"]
        assert curve.settings["tool"] == " ".join(UTIL_ARGV) and curve.settings["bdf"] == str(gpu.bdf)
        assert len(curve.samples) >= 2 and all(96.0 <= v <= 99.0 for v in curve.samples)  # before and after
    assert not any("not sampled" in r or "failed" in r for r in six.reasons), six.reasons


def test_workload_util_nvidia_smi_failure_message_is_missing_evidence_not_a_value(tmp_path: Path) -> None:
    """nvidia-smi printing its no-driver message (exit 0 here) is refused: no curve, no spread, a note."""
    node, snap = _nvidia(tmp_path)
    write_stub_tool(node, "nvidia-smi", {UTIL_ARGV[1:]: NO_DRIVER})
    (six,) = _run(node, snap, {6}, UPGRADE_GATE_WORKLOAD_COMMAND=_site(snap), **SAMPLED)
    assert six.status is PhaseStatus.PASSED, six.reasons  # sampling never decides phase 6's status
    assert not [m for m in six.measurements if "util" in m.key]
    notes = [r for r in six.reasons if r.startswith(workload_util.NOTE)]
    assert len(notes) == 1 and notes[0].startswith(f"utilisation: {' '.join(UTIL_ARGV)} failed before the run")
    assert "NVIDIA-SMI has failed" in notes[0] and "not sampled further" in notes[0]


def test_workload_util_plan_line_names_the_vendors_tool() -> None:
    assert " ".join(UTIL_ARGV) in workload_util.plan_line(2.0, NVIDIA)
    assert "amd-smi list --json; amd-smi monitor -u" in workload_util.plan_line(2.0)


def test_workload_phase_dry_run_plan_names_the_vendors_utilisation_tool() -> None:
    (six,) = select_phases(frozenset({6}), NVIDIA)
    assert any(" ".join(UTIL_ARGV) in line for line in six.plan(fast_config(), samples=1))
    (amd,) = select_phases(frozenset({6}))
    assert any("amd-smi monitor -u" in line for line in amd.plan(fast_config(), samples=1))


def test_perturbation_on_an_nvidia_node_permutes_cuda_visible_devices(tmp_path: Path) -> None:
    """Phase 7 permutes the variable CUDA reads: HIP's default would leave an NVIDIA run unpermuted (a
    perturbation that never happened). A site's own variable is used as written."""
    node, snap = _nvidia(tmp_path)
    launcher = _Recording(node)  # type: ignore[arg-type]
    (_six, seven) = _run(node, snap, {6, 7}, launcher, UPGRADE_GATE_WORKLOAD_COMMAND=_site(snap))
    permuted = [a[1] for a in launcher.argvs if a[0] == "env"]
    assert permuted == ["CUDA_VISIBLE_DEVICES=7,6,5,4,3,2,1,0", "CUDA_VISIBLE_DEVICES=1,2,3,4,5,6,7,0"], seven.reasons
    (plan_seven,) = select_phases(frozenset({7}), NVIDIA)
    assert "env CUDA_VISIBLE_DEVICES=N-1" in plan_seven.plan(fast_config(), samples=1)[0]
    assert visible_var(fast_config(UPGRADE_GATE_WORKLOAD_VISIBLE_VAR="ROCR_VISIBLE_DEVICES"), NVIDIA) == (
        "ROCR_VISIBLE_DEVICES"
    )
