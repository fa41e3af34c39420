"""Bad input that reached the "internal error" exit 70 (2026-12-07 break test), now a one-line error naming the file
or ref with its documented code; and the per-measurement sample bound that keeps a gate's memory bounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import test_cli_exit_codes
from tests.judge_scenarios import mi300x_snapshot
from tests.test_cli_exit_codes import one_error_line, ug
from upgrade_gate.errors import ExitCode
from upgrade_gate.model.snapshot import MAX_SAMPLES
from upgrade_gate.snapshot.io import snapshot_to_dict, write_snapshot

store = test_cli_exit_codes.store  # the fixture: a store of one baseline, tagged v1


@pytest.fixture
def candidate(tmp_path: Path) -> Path:
    path = tmp_path / "cand.json"
    write_snapshot(mi300x_snapshot(), path)
    return path


def _edited(tmp_path: Path, edit: object) -> Path:
    data = snapshot_to_dict(mi300x_snapshot())
    assert callable(edit)
    edit(data)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_an_integer_no_python_int_reads_in_a_plan_is_exit_3_naming_it(
    tmp_path: Path, store: Path, candidate: Path
) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("id: x\nchange: {rocm: {from: '6.1.3', to: '6.2.0'}}\nbig: " + "9" * 5000 + "\n", encoding="utf-8")
    got = ug("gate", "--store", str(store), "--plan", str(plan), "--candidate", str(candidate))
    assert got.returncode == ExitCode.BAD_INPUT, got.stderr
    assert str(plan) in one_error_line(got.stderr)


def test_a_candidate_nested_thousands_deep_is_exit_3_naming_it(tmp_path: Path, store: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"a":' * 3000 + "1" + "}" * 3000, encoding="utf-8")
    got = ug("gate", "--store", str(store), "--candidate", str(deep))
    assert got.returncode == ExitCode.BAD_INPUT, got.stderr
    assert one_error_line(got.stderr).endswith(f"{deep}: nested too deep")


def test_a_ref_naming_a_path_inside_a_commit_is_exit_3(store: Path, candidate: Path) -> None:
    got = ug("gate", "--store", str(store), "--ref", "HEAD:nodes", "--candidate", str(candidate))
    assert got.returncode == ExitCode.BAD_INPUT, got.stderr
    assert "no ref 'HEAD:nodes'" in one_error_line(got.stderr)


def test_a_sample_no_float_holds_is_exit_3_in_baseline_save(tmp_path: Path, store: Path) -> None:
    def edit(d: dict) -> None:  # type: ignore[type-arg]
        d["phases"][1]["measurements"][0]["samples"][0] = int("9" * 400)

    snap = _edited(tmp_path, edit)
    got = ug("baseline", "save", "--store", str(store), str(snap))
    assert got.returncode == ExitCode.BAD_INPUT, got.stderr
    assert "a number too large for a float" in one_error_line(got.stderr)


def test_a_measurement_over_the_sample_bound_is_exit_3_naming_the_field(tmp_path: Path, store: Path) -> None:
    def edit(d: dict) -> None:  # type: ignore[type-arg]
        d["phases"][1]["measurements"][0]["samples"] = [100.0] * (MAX_SAMPLES + 1)

    snap = _edited(tmp_path, edit)
    got = ug("gate", "--store", str(store), "--candidate", str(snap))
    assert got.returncode == ExitCode.BAD_INPUT, got.stderr
    assert f"length <= {MAX_SAMPLES} - at `$.phases[1].measurements[0].samples`" in one_error_line(got.stderr)


def test_a_report_over_an_input_or_over_another_report_is_refused(tmp_path: Path, store: Path, candidate: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("id: x\n", encoding="utf-8")
    before = plan.read_bytes()
    got = ug(
        "gate", "--store", str(store), "--plan", str(plan), "--candidate", str(candidate), "--report", f"json:{plan}"
    )
    assert got.returncode == ExitCode.USAGE, got.stderr
    assert f"that is the input {plan}" in one_error_line(got.stderr)
    assert plan.read_bytes() == before  # nothing lost
    alias = tmp_path / "alias.json"
    alias.symlink_to(candidate)
    got = ug("gate", "--store", str(store), "--candidate", str(candidate), "--report", f"json:{alias}")
    assert got.returncode == ExitCode.USAGE and "the report would overwrite it" in one_error_line(got.stderr)
    out = tmp_path / "r.json"
    got = ug(
        "gate",
        "--store",
        str(store),
        "--candidate",
        str(candidate),
        "--report",
        f"json:{out}",
        "--report",
        f"html:{out}",
    )
    assert got.returncode == ExitCode.USAGE and "named twice (json and html)" in one_error_line(got.stderr)
    assert not out.exists()


def test_a_report_inside_the_baseline_store_is_refused(tmp_path: Path, store: Path, candidate: Path) -> None:
    # break test 2026-12-07: `--report json:store/nodes/N.json` wrote over the store's checkout (the verdict
    # was right, reads come from git objects, but the store was left dirty)
    mirror = next(store.rglob("*.json"))
    before = mirror.read_bytes()
    got = ug("gate", "--store", str(store), "--candidate", str(candidate), "--report", f"json:{mirror}")
    assert got.returncode == ExitCode.USAGE, got.stderr
    assert f"inside the baseline store {store}" in one_error_line(got.stderr)
    assert mirror.read_bytes() == before
    beside = tmp_path / "beside-the-store.json"
    got = ug("gate", "--store", str(store), "--candidate", str(candidate), "--report", f"json:{beside}")
    assert got.returncode in (ExitCode.PASS, ExitCode.BLOCK), got.stderr


def test_a_report_inside_an_input_folder_is_refused(tmp_path: Path, store: Path, candidate: Path) -> None:
    # break test 2026-12-07: `--report json:BUNDLE/manifest.json` overwrote a capture bundle's evidence
    folder = tmp_path / "candidates"
    folder.mkdir()
    (folder / "node.json").write_bytes(candidate.read_bytes())
    inside = folder / "manifest.json"
    got = ug("gate", "--store", str(store), "--candidates", str(folder), "--report", f"json:{inside}")
    assert got.returncode == ExitCode.USAGE, got.stderr
    assert f"inside the input {folder}" in one_error_line(got.stderr)
    assert not inside.exists()


def test_a_fifo_whose_writer_holds_it_open_is_refused_after_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gate --plan FIFO` blocked forever while a writer held the FIFO open without finishing (2026-12-07)."""
    import os
    import threading

    from upgrade_gate import docio
    from upgrade_gate.errors import InputError

    fifo = tmp_path / "plan.yaml"
    os.mkfifo(fifo)
    monkeypatch.setattr(docio, "PIPE_DEADLINE_S", 0.5)
    release, written = threading.Event(), threading.Event()

    def writer() -> None:
        with open(fifo, "wb") as w:  # opens once a reader has; writes a little, keeps it open
            w.write(b"id: x\n")
            w.flush()
            written.set()
            release.wait(10)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # let the writer's open return before read_bytes opens
        assert written.wait(10)
        with pytest.raises(InputError, match=r"still open but not finished after 0\.5 s"):
            docio.read_bytes(fifo)
        os.close(fd)
    finally:
        release.set()
        thread.join()


def test_a_checklist_folder_entry_that_is_not_a_file_is_named_not_skipped(tmp_path: Path) -> None:
    from upgrade_gate.errors import InputError
    from upgrade_gate.judge.checklist import load_checklists

    folder = tmp_path / "lists"
    folder.mkdir()
    (folder / "gone.yaml").symlink_to(tmp_path / "nowhere.yaml")
    with pytest.raises(InputError, match=r"gone\.yaml: a checklist name, but not a regular file"):
        load_checklists([str(folder)])
