"""`baseline save` refuses a snapshot that cannot be a baseline (issue 10 item 11): exit 3, one line
naming the node and what is missing; `--force` saves it with a warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_store_gitstore import snapshot_for
from upgrade_gate.cli.baseline_cmds import baseline_problems
from upgrade_gate.cli.main import run
from upgrade_gate.errors import ExitCode
from upgrade_gate.model import ProbeStatus, Snapshot, replace
from upgrade_gate.snapshot.io import write_snapshot
from upgrade_gate.store.gitstore import BaselineStore

FAILED = tuple(
    ProbeStatus(name=name, ok=False, reason="binary missing", missing=True)
    for name in ("rocminfo", "amdsmi_static", "amdsmi_list", "lspci")
)


def _broken() -> Snapshot:
    return replace(snapshot_for("node-broken"), gpus=(), probes=FAILED)


def test_baseline_problems_names_what_is_missing() -> None:
    assert baseline_problems(snapshot_for("node-ok")) == []
    assert baseline_problems(_broken()) == [
        "no GPUs",
        "4 probe(s) failed (amdsmi_list, amdsmi_static, lspci, rocminfo)",
    ]
    # a failed probe a fallback stood in for, or an optional one, is no reason to refuse
    covered = replace(
        snapshot_for("node-ok"),
        probes=(
            ProbeStatus(name="amdsmi_static", ok=False, reason="exit 1"),
            ProbeStatus(name="rocmsmi", ok=True, fallback_for=("amdsmi_static",)),
            ProbeStatus(name="rdma_link", ok=False, reason="exit 1", required=False),
        ),
    )
    assert baseline_problems(covered) == []


def test_baseline_save_refuses_a_snapshot_that_cannot_be_a_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    write_snapshot(snapshot_for("node-ok"), good)
    write_snapshot(_broken(), bad)
    store = tmp_path / "store"
    assert run(["baseline", "save", str(good), str(bad), "--store", str(store)]) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "node-broken: cannot be a baseline: no GPUs; 4 probe(s) failed" in err[0] and "--force" in err[0]
    assert not store.exists() or not BaselineStore(store).nodes()  # nothing saved, not even the good node


def test_baseline_save_force_saves_with_a_loud_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    write_snapshot(_broken(), bad)
    store = tmp_path / "store"
    assert run(["baseline", "save", str(bad), "--store", str(store), "--force"]) == ExitCode.PASS
    captured = capsys.readouterr()
    assert "WARNING: node-broken: cannot be a baseline: no GPUs" in captured.err
    with BaselineStore(store) as st:
        assert st.nodes() == ("node-broken",)
