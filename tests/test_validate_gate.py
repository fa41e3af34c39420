"""`validate --out` feeds `gate`: a 15% mesh-bandwidth drop vs the baseline blocks, an unchanged node passes.

`validate` runs phases 0-3 on one node (there is no peer for the rail and cluster phases), so the
policy says so: phases 4-5 are not required and the per-rail bandwidth count is not checked. Everything
else is the default, fail-closed policy.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.test_validate_support import FAST, healthy_spec, make_node
from upgrade_gate.cli.main import run
from upgrade_gate.fakenode import FakeNode, NodeSpec, faults
from upgrade_gate.snapshot.io import load_snapshot
from upgrade_gate.store.gitstore import BaselineStore

SINGLE_NODE_POLICY = """\
name: single-node-phases-0-3
description: one node validated alone; phases 4-5 need a peer and run in the change window
rules:
  - id: evidence.missing
    params: {required_phases: [1, 2, 3]}
  - id: bandwidth.threshold
    params: {check_rail_count: false}
"""


def _validate(node: FakeNode, out: Path, config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["validate", "--node", node.spec.name, "--host-root", str(node.host_root), "--config", str(config)]
    with monkeypatch.context() as patch:  # the fake tools alone on PATH for validate; git back for the store
        patch.setenv("PATH", str(node.bin_dir))
        assert run([*args, "--samples", "5", "--out", str(out)]) == 0


def _spec(tmp: Path, spec: NodeSpec) -> FakeNode:
    return make_node(tmp, spec)


def test_validate_gate_blocks_a_15_percent_mesh_drop_and_passes_an_unchanged_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "cvf.yaml"
    config.write_text(yaml.safe_dump(dict(FAST)), encoding="utf-8")
    policy = tmp_path / "policy.yaml"
    policy.write_text(SINGLE_NODE_POLICY, encoding="utf-8")
    spec = healthy_spec()
    baseline = tmp_path / "baseline.json"
    _validate(_spec(tmp_path / "before", spec), baseline, config, monkeypatch)
    store = tmp_path / "store"
    with BaselineStore(store) as baselines:
        baselines.save([load_snapshot(baseline)], message="baseline before the change")

    same = tmp_path / "same.json"
    _validate(_spec(tmp_path / "same", spec), same, config, monkeypatch)
    assert run(["gate", "--store", str(store), "--candidate", str(same), "--policy", str(policy)]) == 0

    slower = tmp_path / "slower.json"
    _validate(_spec(tmp_path / "slower", faults.scale_mesh_bandwidth(spec, 0.85)), slower, config, monkeypatch)
    avg = next(m for p in load_snapshot(slower).phases for m in p.measurements if m.key == "mesh/all_reduce/avg_busbw")
    assert min(avg.samples) > 100  # above CVF's absolute threshold: only the baseline comparison can catch it
    capsys.readouterr()
    assert run(["gate", "--store", str(store), "--candidate", str(slower), "--policy", str(policy)]) == 1
    out = capsys.readouterr().out
    assert "bandwidth.regression" in out and "evidence.missing" not in out
