"""`upgrade-gate gate` and `upgrade-gate diff` end to end: store, documents, reports, every exit code."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.judge_scenarios import NODE, SERIALS, mi300x_snapshot, reverse_order, upgraded
from upgrade_gate.cli.main import run
from upgrade_gate.errors import ExitCode
from upgrade_gate.snapshot.io import write_snapshot
from upgrade_gate.store.gitstore import BaselineStore

JUDGE = FIXTURES / "judge"
PLAN = JUDGE / "plans" / "rocm-6.2.0.yaml"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    with BaselineStore(path) as st:
        st.save([mi300x_snapshot()], tag="rocm-6.1.3", message="baseline before ROCm 6.2.0")
    return path


def _write(tmp_path: Path, name: str, snap: object) -> Path:
    path = tmp_path / name
    write_snapshot(snap, path)  # type: ignore[arg-type]
    return path


def _gate(store: Path, *args: str) -> list[str]:
    return ["gate", "--store", str(store), "--now", "2026-11-30T12:00:00Z", *args]


def test_cli_gate_incident_exits_1_and_prints_the_permutation(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cand = _write(tmp_path, "cand.json", reverse_order(upgraded()))
    code = run(_gate(store, "--ref", "rocm-6.1.3", "--candidate", str(cand), "--plan", str(PLAN)))
    out = capsys.readouterr().out
    assert code == ExitCode.BLOCK
    assert "BLOCK" in out and "device.order_changed" in out
    assert "GPU enumeration order changed: 8 of 8 indices moved (reversed)" in out  # one cause
    assert "    was    05:00.0  15:00.0  65:00.0" in out and "    now    f5:00.0  e5:00.0  95:00.0" in out
    assert "U=GPU-28246ce5673b4aa0," in out and "export ROCR_VISIBLE_DEVICES=$U" in out
    assert run(_gate(store, "--ref", "rocm-6.1.3", "--candidate", str(cand), "--plan", str(PLAN), "--verbose")) == 1
    verbose = capsys.readouterr().out  # every finding, as the rule wrote it
    assert f"index 0 was 0000:05:00.0 (serial {SERIALS[0]}), now 0000:f5:00.0" in verbose.replace("\n", " ")


def test_cli_gate_names_the_rules_a_policy_switches_off_and_refuses_an_empty_solo_policy(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Break test, 2026-12-07: a policy `inherit_default: false` with `rules: []` passed a reversed GPU order,
    and one switching device.order_changed off passed it with "nothing to report". The first is refused
    (exit 3, naming the policy and what it leaves out); the second is the operator's decision, said on
    stderr beside the verdict."""
    cand = _write(tmp_path, "cand.json", reverse_order(upgraded()))
    solo, off = tmp_path / "solo.yaml", tmp_path / "off.yaml"
    solo.write_text("name: solo\ninherit_default: false\nrules: []\n", encoding="utf-8")
    off.write_text("name: site\nrules:\n  - {id: device.order_changed, enabled: false}\n", encoding="utf-8")
    args = ("--ref", "rocm-6.1.3", "--candidate", str(cand), "--plan", str(PLAN), "--policy")
    assert run(_gate(store, *args, str(solo))) == ExitCode.BAD_INPUT
    assert f"{solo}: policy: $.inherit_default: false leaves " in capsys.readouterr().err
    code = run(_gate(store, *args, str(off)))
    err = capsys.readouterr().err
    assert f"warning: policy site ({off}) switches off 1 rule(s): device.order_changed; " in err
    assert code in (ExitCode.PASS, ExitCode.BLOCK)  # what the other rules make of it: the notice is the point


def test_cli_gate_order_intact_exits_0_and_writes_reports(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cand = _write(tmp_path, "cand.json", upgraded())
    out_json, out_junit, out_md = tmp_path / "r.json", tmp_path / "r.xml", tmp_path / "r.md"
    code = run(
        _gate(
            store,
            "--candidate", str(cand), "--plan", str(PLAN),
            "--report", f"json:{out_json}", "--report", f"junit:{out_junit}", "--report", f"markdown:{out_md}",
        )
    )  # fmt: skip
    assert code == ExitCode.PASS, capsys.readouterr().out
    doc = json.loads(out_json.read_text(encoding="utf-8"))
    assert doc["verdict"] == "PASS" and doc["plan_id"] == "rocm-6.2.0"
    assert doc["generated_at"] == "2026-11-30T12:00:00Z"
    assert ET.parse(out_junit).getroot() is not None
    assert "PASS" in out_md.read_text(encoding="utf-8")


def test_cli_gate_judges_a_node_without_baseline_against_its_class(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    newcomer = upgraded(node="mi300x-node-09")  # same class, no baseline of its own in the store
    cand = _write(tmp_path, "new.json", reverse_order(newcomer))
    code = run(_gate(store, "--candidate", str(cand), "--plan", str(PLAN)))
    out = capsys.readouterr().out.replace("\n", " ")
    assert code == ExitCode.BLOCK
    assert "fleet.odd_one_out" in out and "GPU order departs from class mi300x-8gpu" in out
    assert "nothing to judge it against" not in out


def test_cli_gate_checklists_need_attestations(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cand = _write(tmp_path, "cand.json", upgraded())
    base = _gate(store, "--candidate", str(cand), "--plan", str(PLAN), "--checklist", "pre-change")
    assert run(base) == ExitCode.BLOCK
    assert "checklist.unattested" in capsys.readouterr().out
    attest = ["--attest", "pre.hip-binary-compat=alice", "--attest", "pre.library-symbols=alice"]
    attest += ["--attest", "pre.rollback-plan=bob"]
    assert run(base + attest) == ExitCode.PASS


@pytest.mark.parametrize(
    ("option", "document", "field"),
    [
        ("--plan", JUDGE / "plans" / "bad-unknown-key.yaml", "targt"),
        ("--plan", JUDGE / "plans" / "bad-version-float.yaml", "$.change.rocm.to"),
        ("--policy", JUDGE / "policies" / "bad-param.yaml", "$.rules[0].params.tolerence"),
        ("--policy", JUDGE / "policies" / "bad-rule.yaml", "$.rules[0].id"),
        ("--cvf-config", JUDGE / "cvf-config-bad.yaml", "PHASE2_BW_TRESHOLD"),
        ("--checklist", JUDGE / "plans" / "rocm-6.2.0.yaml", "checklist schema"),
    ],
)
def test_cli_gate_bad_document_exits_3_naming_the_field(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, document: Path, field: str
) -> None:
    cand = _write(tmp_path, "cand.json", upgraded())
    code = run(_gate(store, "--candidate", str(cand), option, str(document)))
    err = capsys.readouterr().err
    assert code == ExitCode.BAD_INPUT
    assert document.name in err and field in err
    assert len(err.strip().splitlines()) == 1


def test_cli_gate_bad_candidate_exits_3(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "cand.json"
    bad.write_text('{"schema_version": "1"}', encoding="utf-8")
    assert run(_gate(store, "--candidate", str(bad))) == ExitCode.BAD_INPUT
    assert "cand.json" in capsys.readouterr().err
    assert run(_gate(store, "--candidate", str(tmp_path / "nope.tar.gz"))) == ExitCode.BAD_INPUT


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("severity", "FATAL", "Invalid enum value 'FATAL' - at `$.events[0].severity`"),
        # "2" is the columnar form since issue 29 (docs/schema-v2.md): a version no release wrote is refused
        ("schema_version", "3", "schema_version '3': this upgrade-gate reads snapshot schema 1 and 2"),
        ("taken_at", "yesterday", "Expected an RFC 3339 date-time (2025-06-08T10:00:00Z) - at `$.taken_at`"),
    ],
)
def test_cli_gate_candidate_outside_the_schema_exits_3_not_pass(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: str, says: str
) -> None:
    """What the schema alone constrains (a `str` enum, a const, a date-time) is refused in a candidate too:
    a fatal kernel event spelled "FATAL" was read as no fatal event, and the node passed."""
    from upgrade_gate import codec

    data = codec.to_jsonable(upgraded())
    data["events"] = [{"kind": "amdgpu.gpu_reset", "severity": "fatal", "bdf": None, "line_no": 1, "text": "reset"}]
    folder = tmp_path / "candidates"
    folder.mkdir()
    (folder / "fine.json").write_text(json.dumps(data), encoding="utf-8")
    assert run(_gate(store, "--candidates", str(folder), "--plan", str(PLAN))) == ExitCode.BLOCK  # dmesg.fatal
    capsys.readouterr()
    if field == "severity":
        data["events"][0]["severity"] = value
    else:
        data[field] = value
    (folder / "fine.json").write_text(json.dumps(data), encoding="utf-8")
    assert run(_gate(store, "--candidates", str(folder), "--plan", str(PLAN))) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"upgrade-gate: error: {folder / 'fine.json'}: {says}"  # after the plan's -2% +/- 8% notice
    assert [ln for ln in err if "error" in ln.split(":")[0] or ln.startswith("upgrade-gate: error")] == err[-1:]


def test_cli_gate_store_problems_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cand = _write(tmp_path, "cand.json", upgraded())
    assert run(_gate(tmp_path / "no-store", "--candidate", str(cand))) == ExitCode.ENVIRONMENT
    (tmp_path / "not-a-store").mkdir()
    assert run(_gate(tmp_path / "not-a-store", "--candidate", str(cand))) == ExitCode.ENVIRONMENT
    assert "not-a-store" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder"])
def test_cli_gate_a_candidate_that_is_no_document_exits_3_without_waiting(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """A FIFO nobody writes to once blocked `open` forever; /dev/zero was read until memory ran out."""
    import os

    bad = tmp_path / "cand.json"
    if kind == "fifo":
        os.mkfifo(bad)
    elif kind == "dev-zero":
        bad.symlink_to("/dev/zero")
    else:
        bad.mkdir()
    assert run(_gate(store, "--candidate", str(bad))) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert str(bad) in err and len(err.strip().splitlines()) == 1
    if kind == "dev-zero":
        assert "over the 64 MiB" in err
    if kind == "fifo":
        assert "nothing to read (a pipe or FIFO nobody wrote to)" in err


def test_cli_gate_reads_a_plan_from_a_pipe(store: Path, tmp_path: Path) -> None:
    """`--plan <(render-plan)`: a pipe with a writer is read to its end (opened without waiting is not
    read as empty)."""
    import subprocess
    import sys

    cand = _write(tmp_path, "cand.json", upgraded())
    script = "\n".join(
        [
            "import os, sys",
            "from upgrade_gate.cli.main import run",
            "r, w = os.pipe()",
            "data = open(sys.argv[1], 'rb').read()",
            "if os.fork() == 0:",
            "    os.close(r); os.write(w, data); os._exit(0)",
            "os.close(w)",
            "sys.exit(run(['gate', '--store', sys.argv[2], '--candidate', sys.argv[3], '--plan', f'/dev/fd/{r}']))",
        ]
    )
    argv = [sys.executable, "-c", script, str(PLAN), str(store), str(cand)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == ExitCode.PASS, proc.stderr


def test_cli_gate_attest_without_a_checklist_is_a_usage_error(store: Path, tmp_path: Path) -> None:
    """Nothing would read the attestation: a silent no-op once, exit 0."""
    cand = _write(tmp_path, "cand.json", upgraded())
    assert run(_gate(store, "--candidate", str(cand), "--attest", "pre.rollback-plan=bob")) == ExitCode.USAGE


@pytest.mark.parametrize(
    "extra",
    [["--attest", "pre.rollback-plan"], ["--report", "pdf:out.pdf"], ["--now", "yesterday"]],
)
def test_cli_gate_bad_flags_exit_2(store: Path, tmp_path: Path, extra: list[str]) -> None:
    cand = _write(tmp_path, "cand.json", upgraded())
    assert run(["gate", "--store", str(store), "--candidate", str(cand), *extra]) == ExitCode.USAGE


def test_cli_diff_marks_expected_changes_and_sets_the_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = _write(tmp_path, "base.json", mi300x_snapshot())
    cand = _write(tmp_path, "cand.json", upgraded())
    assert run(["diff", str(base), str(cand), "--plan", str(PLAN)]) == ExitCode.PASS
    out = capsys.readouterr().out
    assert "software.rocm_version: '6.1.3' -> '6.2.0'  [expected (change.rocm)]" in out
    assert out.rstrip().endswith("4 change(s), 0 unexpected")
    assert run(["diff", str(base), str(cand), "--json"]) == ExitCode.BLOCK
    doc = json.loads(capsys.readouterr().out)
    assert doc["unexpected"] == 4 and doc["candidate"]["node"] == NODE
    rocm = next(c for c in doc["changes"] if c["path"] == "software.rocm_version")
    assert rocm == {
        "op": "changed",
        "path": "software.rocm_version",
        "baseline": "6.1.3",
        "candidate": "6.2.0",
        "expected": False,
        "expected_by": None,
        "judged": "UNEXPECTED, software.rocm",
    }


def test_cli_diff_does_not_call_expected_what_gate_cannot_accept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # break test 2026-12-07: `accept: [{path: "**"}]` made diff call a reversed GPU order expected (exit 0)
    base = _write(tmp_path, "base.json", mi300x_snapshot())
    cand = _write(tmp_path, "cand.json", reverse_order(upgraded()))
    star = tmp_path / "star.yaml"
    star.write_text(  # `**` alone is refused since (below); a glob over every GPU path still accepts no order
        PLAN.read_text(encoding="utf-8").replace("accept:\n", 'accept:\n  - {path: "gpus**"}\n', 1), encoding="utf-8"
    )
    assert run(["diff", str(base), str(cand), "--plan", str(star)]) == ExitCode.BLOCK
    out = capsys.readouterr().out
    assert "[UNEXPECTED, device.order_changed]" in out
    assert "software.rocm_version: '6.1.3' -> '6.2.0'  [expected (change.rocm)]" in out
    star.write_text(star.read_text(encoding="utf-8").replace('"gpus**"', '"**"'), encoding="utf-8")
    assert run(["diff", str(base), str(cand), "--plan", str(star)]) == ExitCode.BAD_INPUT
    assert "$.accept[0].path: '**' names no field" in capsys.readouterr().err


def test_cli_diff_bad_plan_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _write(tmp_path, "base.json", mi300x_snapshot())
    code = run(["diff", str(base), str(base), "--plan", str(JUDGE / "plans" / "bad-unknown-key.yaml")])
    assert code == ExitCode.BAD_INPUT and "targt" in capsys.readouterr().err


def test_cli_gate_reads_a_capture_bundle_candidate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    from upgrade_gate.collect.bundle import write_bundle
    from upgrade_gate.collect.capture import capture
    from upgrade_gate.collect.runner import LocalRunner
    from upgrade_gate.fakenode import Faults, build_fake_node, mi300x_node
    from upgrade_gate.snapshot.build import build_snapshot

    node = build_fake_node(tmp_path / "node", mi300x_node("fake-node-01"), Faults())
    bundle = capture(LocalRunner(env=node.env(os.environ)), node="fake-node-01", host_root=node.host_root)
    write_bundle(bundle, tmp_path / "bundle.tar.gz")
    with BaselineStore(tmp_path / "store") as st:
        st.save([build_snapshot(bundle)])
    policy = tmp_path / "capture-only.yaml"  # a capture has no CVF phase results
    policy.write_text("phases: {not_applicable: {'*': [1, 2, 3, 4, 5]}}\n", encoding="utf-8")
    args = ["--candidate", str(tmp_path / "bundle.tar.gz"), "--policy", str(policy)]
    code = run(_gate(tmp_path / "store", *args))
    out = capsys.readouterr().out
    assert code == ExitCode.PASS, out
    assert "fake-node-01" in out
