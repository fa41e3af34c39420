"""The streaming gate's workers: node reports travel back msgpack-encoded and decode to the same reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.judge_scenarios import mi300x_snapshot, set_firmware, upgrade_plan, upgraded
from upgrade_gate.cli.gate_stream import gate_streaming
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import Snapshot, Verdict, replace
from upgrade_gate.snapshot.io import write_snapshot
from upgrade_gate.store.gitstore import BaselineStore


def test_gate_stream_forked_workers_give_the_reports_of_a_single_process(tmp_path: Path) -> None:
    names = [f"node-{i:02d}" for i in range(6)]
    bases = [
        replace(mi300x_snapshot(seed=i + 1), node=replace(mi300x_snapshot().node, name=n)) for i, n in enumerate(names)
    ]
    paths = []
    for i, base in enumerate(bases):
        cand = replace(upgraded(seed=i + 7), node=base.node)
        if i == 3:
            cand = set_firmware(cand, "PLDM_BUNDLE", "01.25.17.07")  # a node with a blocking finding
        path = tmp_path / f"{base.node.name}.json"
        write_snapshot(cand, path)
        paths.append(path)
    with BaselineStore(tmp_path / "store") as st:
        st.save(bases, message="baselines")
        policy = load_policy()
        one = gate_streaming(st, None, paths, plan=None, policy=policy, now="2026-12-01T00:00:00Z", workers=1)
        two = gate_streaming(st, None, paths, plan=None, policy=policy, now="2026-12-01T00:00:00Z", workers=2)
    assert two == one
    assert [n.node for n in two.nodes] == names
    assert any(n.changes for n in two.nodes) and any(n.findings for n in two.nodes)


def test_gate_stream_json_report_streamed_node_by_node_is_the_canonical_document(tmp_path: Path) -> None:
    import json

    from upgrade_gate.judge.judge import judge
    from upgrade_gate.report.interface import ReportContext
    from upgrade_gate.report.json_report import render_json, report_to_dict, write_json

    bases = {}
    cands = []
    for i in range(3):
        base = replace(mi300x_snapshot(seed=i + 1), node=replace(mi300x_snapshot().node, name=f"n{i}"))
        bases[base.node.name] = base
        cand = replace(upgraded(seed=i + 5), node=base.node)
        cands.append(set_firmware(cand, "PLDM_BUNDLE", "01.25.17.07") if i == 1 else cand)
    report = judge(baselines=bases, candidates=cands, plan=None, policy=load_policy(), now="2026-12-01T00:00:00Z")
    ctx = ReportContext(report=report, baselines=bases, candidates={c.node.name: c for c in cands})
    path = tmp_path / "report.json"
    write_json(ctx, path)
    text = path.read_text(encoding="utf-8")
    assert text == render_json(ctx)
    # the layout every other file uses (json.dumps sort_keys, indent 2), for a report without exponent floats
    assert text == json.dumps(report_to_dict(report), sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    empty = replace(report, nodes=())
    assert render_json(ReportContext(report=empty)) == (
        json.dumps(report_to_dict(empty), sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    )


def test_gate_stream_ends_its_workers_without_signalling_them(tmp_path: Path) -> None:
    """The CLI installs Python SIGTERM handlers that forked workers inherit; `Pool.terminate` signalled
    them at the end of every run and a worker could hang on the task queue's lock. Now a run that
    completes ends its pool by close/join: no process of the tree receives SIGTERM."""
    import os
    import signal

    marker = tmp_path / "signalled"

    def record(signum: int, frame: object) -> None:
        marker.write_text(f"{os.getpid()}\n", encoding="utf-8")
        raise SystemExit(143)

    names = [f"node-{i:02d}" for i in range(4)]
    bases = [
        replace(mi300x_snapshot(seed=i + 1), node=replace(mi300x_snapshot().node, name=n)) for i, n in enumerate(names)
    ]
    paths = []
    for i, base in enumerate(bases):
        path = tmp_path / f"{base.node.name}.json"
        write_snapshot(replace(upgraded(seed=i + 7), node=base.node), path)
        paths.append(path)
    previous = signal.signal(signal.SIGTERM, record)
    try:
        with BaselineStore(tmp_path / "store") as st:
            st.save(bases, message="baselines")
            report = gate_streaming(
                st, None, paths, plan=None, policy=load_policy(), now="2026-12-01T00:00:00Z", workers=2
            )
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert [n.node for n in report.nodes] == names
    assert not marker.exists(), f"a worker was sent SIGTERM: {marker.read_text(encoding='utf-8')}"


def _small_fleet(tmp_path: Path, count: int) -> tuple[list[Snapshot], list[Path]]:
    names = [f"node-{i:02d}" for i in range(count)]
    bases = [
        replace(mi300x_snapshot(seed=i + 1), node=replace(mi300x_snapshot().node, name=n)) for i, n in enumerate(names)
    ]
    paths = []
    for i, base in enumerate(bases):
        cand = replace(upgraded(seed=i + 7), node=base.node)
        if i % 3 == 1:
            cand = set_firmware(cand, "PLDM_BUNDLE", "01.25.17.07")  # nodes with a blocking finding
        path = tmp_path / f"{base.node.name}.json"
        write_snapshot(cand, path)
        paths.append(path)
    return bases, paths


@pytest.mark.parametrize("workers", [1, 2])
def test_gate_spooled_writes_the_report_gate_streaming_writes_byte_for_byte(tmp_path: Path, workers: int) -> None:
    """The spooled gate (the nodes' JSON texts made in the workers, kept in a temporary file, the parent
    holding a summary line per node) writes the same JSON report and the same console summary as the
    in-memory one, a plan canary that sent no candidate included."""
    from upgrade_gate.cli.gate_stream import Spool, console_summary, gate_spooled, summary_text
    from upgrade_gate.report.interface import ReportContext
    from upgrade_gate.report.json_report import write_json, write_json_texts

    bases, paths = _small_fleet(tmp_path, 7)
    plan = upgrade_plan(canaries={"nodes": ["node-00", "node-06"]})
    kept = paths[:6]  # node-06, a canary with a baseline, sent nothing: evidence.missing
    with BaselineStore(tmp_path / "store") as st:
        st.save(bases, message="baselines")
        policy = load_policy()
        whole = gate_streaming(st, None, kept, plan=plan, policy=policy, now="2026-12-01T00:00:00Z", workers=workers)
        with Spool() as spool:
            spooled = gate_spooled(
                st, None, kept, spool, plan=plan, policy=policy, now="2026-12-01T00:00:00Z", workers=workers
            )
            write_json_texts(spooled.report, spooled.texts(), tmp_path / "spooled.json")
            summary = summary_text(spooled.report, [line for line, _ in spooled.lines], reports=["json:x"])
    write_json(ReportContext(report=whole), tmp_path / "whole.json")
    assert (tmp_path / "spooled.json").read_bytes() == (tmp_path / "whole.json").read_bytes()
    assert summary == console_summary(whole, reports=["json:x"])
    assert spooled.report.verdict is whole.verdict is Verdict.BLOCK
    assert (
        [line.node for line, _ in spooled.lines] == [n.node for n in whole.nodes] == [f"node-{i:02d}" for i in range(7)]
    )
    assert spooled.report.rules_evaluated == whole.rules_evaluated and "evidence.missing" in whole.rules_evaluated
    assert spooled.report.nodes == ()


def test_gate_cli_fleet_with_json_reports_spools_and_other_formats_do_not(tmp_path: Path) -> None:
    """`gate` over more than SUMMARY_FROM_NODES candidates with only JSON reports takes the spooled path;
    a report in another format needs the nodes in memory (the in-memory path): the same JSON either way."""
    from unittest import mock

    from upgrade_gate.cli import gate_stream
    from upgrade_gate.cli.main import run

    bases, paths = _small_fleet(tmp_path, 4)
    with BaselineStore(tmp_path / "store") as st:
        st.save(bases, message="baselines")
    argv = ["gate", "--store", str(tmp_path / "store"), "--now", "2026-12-01T00:00:00Z"]
    argv += [a for p in paths for a in ("--candidate", str(p))]
    with mock.patch.object(gate_stream, "SUMMARY_FROM_NODES", 2):  # read by the command when it runs
        spy = mock.patch.object(gate_stream, "gate_spooled", wraps=gate_stream.gate_spooled)
        with spy as spooled:
            assert run([*argv, "--report", f"json:{tmp_path / 'a.json'}"]) == 1
            assert spooled.call_count == 1
            assert (
                run([*argv, "--report", f"json:{tmp_path / 'b.json'}", "--report", f"junit:{tmp_path / 'b.xml'}"]) == 1
            )
            assert spooled.call_count == 1
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_gate_stream_plan_canaries_that_reported_are_judged_once_not_also_missing(tmp_path: Path) -> None:
    """Regression: a plan naming its canaries made the streaming gate report every canary that DID send a
    candidate a second time, as `evidence.missing` (the judge was handed the whole canary list for the
    absent ones), so a clean change window blocked. Only a canary without a candidate is missing."""
    bases, paths = _small_fleet(tmp_path, 3)
    clean = [paths[0], paths[2]]  # node-01 (the one with unplanned firmware) sends nothing
    plan = upgrade_plan(canaries={"nodes": ["node-00", "node-01", "node-02"]})
    with BaselineStore(tmp_path / "store") as st:
        st.save(bases, message="baselines")
        report = gate_streaming(st, None, clean, plan=plan, policy=load_policy(), now="2026-12-01T00:00:00Z")
    assert [n.node for n in report.nodes] == ["node-00", "node-02", "node-01"]  # the judged, then the missing
    assert [n.verdict for n in report.nodes[:2]] == [Verdict.PASS, Verdict.PASS]
    assert [f.rule for f in report.nodes[2].findings] == ["evidence.missing"]


def test_gate_spool_that_runs_out_of_disk_is_an_environment_failure_naming_the_folder(tmp_path: Path) -> None:
    """A full temporary folder while a fleet's report texts are spooled: exit 4 (environment) with a line
    that says where and what to do, not a raw OSError and never a verdict."""
    import errno
    from unittest import mock

    from upgrade_gate.cli.gate_stream import Spool
    from upgrade_gate.errors import EnvironmentFailure, ExitCode

    with Spool() as spool:
        assert spool.put(b"abc") == (0, 3)
        full = OSError(errno.ENOSPC, "No space left on device")
        with mock.patch.object(spool._file, "write", side_effect=full), pytest.raises(EnvironmentFailure) as caught:
            spool.put(b"more")
        assert list(spool.texts([(0, 3)])) == [b"abc"]
    assert caught.value.exit_code is ExitCode.ENVIRONMENT
    message = str(caught.value)
    assert "No space left on device" in message and "TMPDIR" in message and "\n" not in message


@pytest.mark.parametrize("workers", [1, 2])
def test_gate_stream_two_candidates_for_one_node_are_bad_input_naming_the_second(tmp_path: Path, workers: int) -> None:
    """Found as the second one's result arrives, not after the whole fleet was judged."""
    from upgrade_gate.errors import InputError

    names = [f"node-{i:02d}" for i in range(5)]
    paths = []
    for i, name in enumerate(names):
        path = tmp_path / f"{name}.json"
        write_snapshot(replace(upgraded(seed=i + 1), node=replace(mi300x_snapshot().node, name=name)), path)
        paths.append(path)
    again = tmp_path / "copy-of-node-01.json"
    again.write_bytes(paths[1].read_bytes())
    with BaselineStore(tmp_path / "store") as st:
        st.save([mi300x_snapshot()], message="a baseline")
        with pytest.raises(InputError, match=rf"two candidate snapshots for node node-01 \(the second: {again}\)"):
            gate_streaming(
                st, None, [*paths[:3], again, *paths[3:]], plan=None, policy=load_policy(), now="2026-12-01T00:00:00Z",
                workers=workers,
            )  # fmt: skip


def test_gate_candidates_directory_refuses_what_it_cannot_read_instead_of_skipping_it(tmp_path: Path) -> None:
    """A `--candidates` folder: `.json` in any case and bundles are read, hidden entries passed over, and
    anything else is exit 3 naming it; it used to be skipped, so that node went unjudged with nothing said."""
    from upgrade_gate.cli.gate_stream import candidate_paths
    from upgrade_gate.errors import InputError

    folder = tmp_path / "cands"
    folder.mkdir()
    write_snapshot(upgraded(), folder / "a.json")
    write_snapshot(upgraded(), folder / "b.JSON")
    (folder / ".seen").write_text("x", encoding="utf-8")
    (folder / "c.tgz").write_bytes(b"")
    bundle = folder / "d"
    bundle.mkdir()
    (bundle / "manifest.json").write_text("{}", encoding="utf-8")
    assert [p.name for p in candidate_paths([], [folder])] == ["a.json", "b.JSON", "c.tgz", "d"]
    (folder / "e.json.bak").write_text("{}", encoding="utf-8")
    (folder / "f").mkdir()  # a bundle directory that lost its manifest
    with pytest.raises(InputError) as err:
        candidate_paths([], [folder])
    assert str(err.value) == (
        f"--candidates {folder}: 2 entries are neither a snapshot (.json) nor a capture bundle (.tar.gz, .tgz, "
        "a directory with manifest.json): e.json.bak, f/; move them out, or list the candidates in a file"
    )
