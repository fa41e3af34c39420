"""Phase 1 on NVIDIA nodes (issue 30): `dcgmi diag -r 2` through the real pipeline and launcher on a fake 8x H100
node whose dcgmi prints the corpus DCGM 3.3.3 table; fails name the test and GPUs, missing evidence is an error."""

from __future__ import annotations

import os
from pathlib import Path

from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.probes import probe_catalogue
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.fakenode.nvidia import DRIVER_570, NvidiaNodeSpec, build_nvidia_node, h100_node, with_driver
from upgrade_gate.fakenode.nvidia_render import render_dcgmi_diag, write_stub_tool
from upgrade_gate.model import PhaseResult, PhaseStatus, replace
from upgrade_gate.parse.dcgmi import parse_dcgmi_diag
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.validate.config import default_config
from upgrade_gate.validate.launcher import LocalLauncher
from upgrade_gate.validate.phases.dcgm import DcgmAcceptancePhase
from upgrade_gate.validate.phases.eligibility import EligibilityPhase
from upgrade_gate.validate.pipeline import run_pipeline
from upgrade_gate.vendors import NVIDIA

NODE = "gpu-node-01"


def _phases(
    tmp_path: Path, spec: NvidiaNodeSpec, *, remove: str | None = None, dcgm_spec: NvidiaNodeSpec | None = None
) -> tuple[PhaseResult, ...]:
    node = build_nvidia_node(tmp_path / "node", spec)
    env = node.env(os.environ)
    bundle = capture(
        LocalRunner(env=env),
        node=NODE,
        host_root=node.host_root,
        output_check=parser_check(),
        probes=probe_catalogue(node.host_root, vendor=NVIDIA),
    )
    snapshot = build_snapshot(bundle)
    if remove is not None:
        (node.bin_dir / remove).unlink()
    if dcgm_spec is not None:  # dcgmi answers as another node would (another driver loaded since the capture)
        write_stub_tool(node, "dcgmi", {tuple(NVIDIA.phase_commands[1][1:]): render_dcgmi_diag(dcgm_spec)})
    return run_pipeline(
        [NODE],
        phases=(EligibilityPhase(), DcgmAcceptancePhase()),
        config=default_config(),
        launcher=LocalLauncher({NODE: env}),
        snapshots={NODE: snapshot},
    )[NODE]


def test_nvidia_phases_healthy_node_passes_eligibility_and_dcgm(tmp_path: Path) -> None:
    results = _phases(tmp_path, h100_node(NODE, seed=1))
    assert [(r.phase, r.status) for r in results] == [(0, PhaseStatus.PASSED), (1, PhaseStatus.PASSED)]
    assert results[1].name == "gpu-hw-acceptance"


def test_nvidia_phases_dcgm_fail_names_the_test_and_gpu(tmp_path: Path) -> None:
    results = _phases(tmp_path, replace(h100_node(NODE, seed=1), dcgm_failed_gpus=(3,)))
    assert results[1].status is PhaseStatus.FAILED
    assert results[1].reason == "dcgmi diag -r 2: GPU Memory failed on GPU 3"
    assert len(results[1].reasons) == 1, results[1].reasons  # the other 7 GPUs passed: no coverage error


def test_nvidia_phases_missing_dcgmi_is_an_error_never_a_pass(tmp_path: Path) -> None:
    results = _phases(tmp_path, h100_node(NODE, seed=1), remove="dcgmi")
    assert results[1].status is PhaseStatus.ERROR
    assert (results[1].reason or "").startswith("dcgmi diag -r 2: ")


def test_nvidia_phases_dcgm_on_another_driver_than_captured_fails(tmp_path: Path) -> None:
    spec = h100_node(NODE, seed=1)
    results = _phases(tmp_path, spec, dcgm_spec=with_driver(spec, DRIVER_570))
    assert results[1].status is PhaseStatus.FAILED
    assert results[1].reason == "dcgmi diag -r 2: ran against driver 570.158.01, the snapshot captured 550.127.05"


def test_nvidia_phases_fake_dcgmi_keeps_the_real_table_layout() -> None:
    spec = h100_node(NODE, seed=1)
    text = render_dcgmi_diag(spec)
    diag = parse_dcgmi_diag(text)
    assert diag.driver_version == spec.driver.version and diag.device_ids == ("2330",) * 8
    assert {len(line) for line in text.splitlines()[1:]} == {78}  # the corpus table's width, every row
