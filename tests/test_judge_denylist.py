"""The denylist is read at the store's HEAD, whatever `--ref` says (issue 10 item 9): the README's CI
workflow (`gate --ref rocm-6.1.3`) blocks a GPU denied after the tag was cut."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.test_examples import CI_POLICY, CONFIGMAP, PLAN, _bash, _github_script
from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.cli.main import run
from upgrade_gate.collect.bundle import write_bundle
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.demo.fleet import ROCM_6_1_3, ROCM_6_2_0, node_spec
from upgrade_gate.fakenode import NodeSpec, build_fake_node
from upgrade_gate.model import NodeName
from upgrade_gate.snapshot.build import build_snapshot
from upgrade_gate.store.gitstore import BaselineStore

NODE = NodeName("gpu-node-01")


def _bundle(spec: NodeSpec, root: Path, out: Path) -> None:
    node = build_fake_node(root, spec)
    bundle = capture(
        LocalRunner(env=node.env(os.environ)), node=spec.name, host_root=node.host_root, output_check=parser_check()
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    write_bundle(bundle, out)


@pytest.fixture(scope="module")
def ci_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CI checkout: baselines tagged rocm-6.1.3, the example plan/policy/ConfigMap, one canary bundle."""
    root = tmp_path_factory.mktemp("denylist-ci")
    before = node_spec(NODE, ROCM_6_1_3)
    node = build_fake_node(root / "before", before)
    snap = build_snapshot(
        capture(LocalRunner(env=node.env(os.environ)), node=NODE, host_root=node.host_root, output_check=parser_check())
    )
    folder = root / "ci"
    with BaselineStore(folder / "baselines") as st:
        st.save([snap], tag="rocm-6.1.3")
    for sub, src in (("plans", PLAN), ("policies", CI_POLICY), ("cvf", CONFIGMAP)):
        (folder / sub).mkdir(parents=True, exist_ok=True)
        shutil.copy(src, folder / sub / src.name)
    _bundle(node_spec(NODE, ROCM_6_2_0), root / "after", folder / "bundles" / f"{NODE}.tar.gz")
    return folder


def _serial(folder: Path) -> str:
    with BaselineStore(folder / "baselines") as st:
        serial = st.load(NODE, "rocm-6.1.3").gpus[3].serial
    assert serial is not None
    return serial


def test_denylist_ci_workflow_passes_before_and_blocks_after_a_deny(ci_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "ci"
    shutil.copytree(ci_folder, folder, symlinks=True)
    summary = tmp_path / "summary.md"
    summary.write_text("", encoding="utf-8")
    done = _bash(_github_script(), folder, {"GITHUB_STEP_SUMMARY": str(summary)})
    assert done.returncode == 0, done.stdout + done.stderr
    serial = _serial(folder)
    # the GPU fails in the change window: denied today, after the rocm-6.1.3 tag
    assert run(["baseline", "deny", serial, "--reason", "RVS gst failed", "--store", str(folder / "baselines")]) == 0
    done = _bash(_github_script(), folder, {"GITHUB_STEP_SUMMARY": str(summary)})
    assert done.returncode == 1, done.stdout + done.stderr
    junit = (folder / "reports" / "upgrade-gate.xml").read_text(encoding="utf-8")  # the report CI publishes
    assert "device.denylisted" in junit and serial in junit and "RVS gst failed" in junit


def test_denylist_gate_ref_reads_baselines_at_ref_and_denylist_at_head(
    ci_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "ci"
    shutil.copytree(ci_folder, folder, symlinks=True)
    store = folder / "baselines"
    serial = _serial(folder)
    assert run(["baseline", "deny", serial, "--reason", "ECC storm", "--store", str(store)]) == 0
    capsys.readouterr()
    args = [
        "gate",
        "--store",
        str(store),
        "--candidate",
        str(folder / "bundles" / f"{NODE}.tar.gz"),
        "--plan",
        str(folder / "plans" / PLAN.name),
        "--policy",
        str(folder / "policies" / CI_POLICY.name),
    ]
    for ref in ("rocm-6.1.3", "HEAD"):
        report = tmp_path / f"report-{ref}.json"
        assert run([*args, "--ref", ref, "--report", f"json:{report}"]) == 1
        doc = json.loads(report.read_text(encoding="utf-8"))
        denied = [f for n in doc["nodes"] for f in n["findings"] if f["rule"] == "device.denylisted"]
        assert [f["severity"] for f in denied] == ["block"] and "ECC storm" in denied[0]["message"]
    # `baseline denylist --ref` still shows history as it was at the tag
    capsys.readouterr()
    assert run(["baseline", "denylist", "--store", str(store), "--ref", "rocm-6.1.3"]) == 0
    assert serial not in capsys.readouterr().out
