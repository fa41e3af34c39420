"""`load_judge_inputs`: the one loader of the store's side of a judgement (gate, window validate, demo).

Against a real git store: baselines at the ref, class references saved at the ref (else aggregated
from the baselines at the ref), the denylist at HEAD; and `gate --checklist` (the in-memory path)
judges against the baseline at `--ref`, not HEAD.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_store_gitstore import snapshot_for
from upgrade_gate.cli.main import run
from upgrade_gate.errors import NotFoundError
from upgrade_gate.fleet.window_validate import judge_inputs
from upgrade_gate.judge.checklist import load_checklist
from upgrade_gate.model import GpuSerial, NodeName
from upgrade_gate.snapshot.io import write_snapshot
from upgrade_gate.store.aggregate import aggregate_class, class_reference_to_document
from upgrade_gate.store.gitstore import BaselineStore
from upgrade_gate.store.inputs import load_judge_inputs

CLASS = "mi300x-4gpu"


@pytest.fixture
def store(tmp_path: Path) -> BaselineStore:
    st = BaselineStore(tmp_path / "store")
    st.save([snapshot_for("node-a"), snapshot_for("node-b"), snapshot_for("node-c")], tag="old")
    st.save([snapshot_for("node-a", rocm="6.2.0", smc="00.90.0.0")], tag="new")
    st.deny("node-b-05", "failed burn-in")  # after both tags
    return st


def test_store_inputs_read_baselines_and_references_at_the_ref_and_the_denylist_at_head(
    store: BaselineStore,
) -> None:
    candidate = snapshot_for("node-a", rocm="6.2.0")
    old = load_judge_inputs(store, "old", [candidate], nodes=[NodeName("node-b"), NodeName("node-x")])
    assert sorted(old.baselines) == ["node-a", "node-b"]  # node-x has no baseline: left out
    assert old.baselines[NodeName("node-a")].software.rocm_version == "6.1.3"
    assert old.references[CLASS].firmware["gpu/SMC"] == "00.85.112.00"  # aggregated at "old"
    assert old.denylist == {GpuSerial("node-b-05"): "failed burn-in"}  # HEAD, although "old" predates it
    head = load_judge_inputs(store, None, [candidate])
    assert head.baselines[NodeName("node-a")].software.rocm_version == "6.2.0"
    assert head.pin == store.pin(None) != old.pin
    assert judge_inputs(store, [NodeName("node-a")], [candidate]) == (
        dict(head.baselines),
        dict(head.references),
        dict(head.denylist),
    )


def test_store_inputs_prefer_the_saved_class_reference(store: BaselineStore) -> None:
    saved = aggregate_class(CLASS, [snapshot_for("node-z", smc="SAVED")])
    store.save(
        [snapshot_for("node-c")],
        tag="with-class",
        documents={f"classes/{CLASS}.json": ("class-reference", class_reference_to_document(saved))},
    )
    inputs = load_judge_inputs(store, "with-class", [snapshot_for("node-a")])
    assert inputs.references[CLASS] == saved
    assert load_judge_inputs(store, "old", [snapshot_for("node-a")]).references[CLASS] != saved


def test_store_inputs_class_of_a_candidate_without_one_is_its_baselines(store: BaselineStore) -> None:
    candidate = snapshot_for("node-a", node_class=None)  # type: ignore[arg-type]
    assert set(load_judge_inputs(store, "old", [candidate]).references) == {CLASS}


def test_store_inputs_unknown_ref_is_not_found(store: BaselineStore) -> None:
    with pytest.raises(NotFoundError, match="no ref"):
        load_judge_inputs(store, "nope", [snapshot_for("node-a")])


def _rocm_findings(report: Path) -> list[str]:
    doc = json.loads(report.read_text(encoding="utf-8"))
    return [f["path"] for n in doc["nodes"] for f in n["findings"] if f["path"] == "software.rocm_version"]


def test_store_inputs_gate_with_checklists_honours_ref(store: BaselineStore, tmp_path: Path, capsys) -> None:
    # the candidate equals the "old" baseline; HEAD's baseline of node-a is on ROCm 6.2.0
    candidate = tmp_path / "node-a.json"
    write_snapshot(snapshot_for("node-a"), candidate)
    attest = [a for it in load_checklist("observe").items if it.attest for a in ("--attest", f"{it.id}=alice")]
    argv = ["gate", "--store", str(store.path), "--candidate", str(candidate), "--checklist", "observe", *attest]
    run([*argv, "--ref", "old", "--report", f"json:{tmp_path / 'old.json'}"])
    run([*argv, "--report", f"json:{tmp_path / 'head.json'}"])
    capsys.readouterr()
    assert _rocm_findings(tmp_path / "old.json") == []
    assert _rocm_findings(tmp_path / "head.json") == ["software.rocm_version"]
