"""Issue 26, "every reader has a cap": `parse` input, `--candidates` list files and folders.

Each cap is exceeded for real (a device, a sparse file, a list one path over) and must be exit 3 naming
the file and the cap, before the input is read whole. docs/limits.md is the table of every cap.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from upgrade_gate.cli import candidates
from upgrade_gate.cli.candidates import MAX_CANDIDATES, MAX_LIST_BYTES, candidate_paths
from upgrade_gate.cli.collect_cmds import MAX_PARSE_BYTES
from upgrade_gate.cli.main import run
from upgrade_gate.collect.members import DEFAULT_LIMITS
from upgrade_gate.errors import InputError, NotFoundError

REPO = Path(__file__).resolve().parents[1]


def test_parse_cmd_refuses_dev_zero_naming_it_and_the_cap(capsys: pytest.CaptureFixture[str]) -> None:
    """`parse --tool rocminfo /dev/zero` took 23 GB in 30 s; now it stops at the cap (exit 3)."""
    assert run(["parse", "--tool", "rocminfo", "/dev/zero"]) == 3
    err = capsys.readouterr().err
    assert err == "upgrade-gate: error: /dev/zero: over the 32 MiB a document may have; refused\n"


def test_parse_cmd_refuses_a_file_over_the_cap_before_reading_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = tmp_path / "rocminfo.txt"
    with big.open("wb") as fh:
        fh.truncate(MAX_PARSE_BYTES + 1)  # sparse: refused from its size, never read
    assert run(["parse", "--tool", "rocminfo", str(big)]) == 3
    assert f"{big}: {MAX_PARSE_BYTES + 1} bytes, over the 32 MiB" in capsys.readouterr().err


def test_parse_cap_is_what_a_bundle_member_may_hold() -> None:
    """Any file a capture bundle can carry can be parsed, and nothing larger is read."""
    assert DEFAULT_LIMITS.max_member_bytes == MAX_PARSE_BYTES


def test_parse_cmd_refuses_endless_stdin() -> None:
    """`parse -` from an endless pipe, through the real entry point: exit 3 naming standard input."""
    with open("/dev/zero", "rb") as zero:
        done = subprocess.run(
            [sys.executable, "-m", "upgrade_gate", "parse", "--tool", "rocminfo", "-"],
            stdin=zero,
            capture_output=True,
            text=True,
            cwd=REPO,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    assert done.returncode == 3, done.stderr
    assert done.stderr == "upgrade-gate: error: -: standard input is over the 32 MiB `parse` reads; refused\n"


def _list_file(path: Path, count: int) -> Path:
    path.write_text("".join(f"cands/node-{i:06d}.json\n" for i in range(count)), encoding="utf-8")
    return path


def test_candidates_list_file_at_the_cap_is_read(tmp_path: Path) -> None:
    listed = _list_file(tmp_path / "list.txt", MAX_CANDIDATES)
    paths = candidate_paths([], [listed])
    assert len(paths) == MAX_CANDIDATES
    assert paths[-1] == tmp_path / "cands" / f"node-{MAX_CANDIDATES - 1:06d}.json"


def test_candidates_list_file_one_path_over_the_cap_is_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A million-line list peaked at ~450 MiB of paths before its exit 3; now it stops at path 65,537."""
    listed = _list_file(tmp_path / "list.txt", MAX_CANDIDATES + 1)
    assert run(["gate", "--store", str(tmp_path / "store"), "--candidates", str(listed)]) == 3
    assert capsys.readouterr().err == (
        f"upgrade-gate: error: --candidates {listed}: over the 65,536 candidates one gate takes; refused "
        "(gate the fleet in parts)\n"
    )


def test_candidates_cap_counts_every_source_together(tmp_path: Path) -> None:
    listed = _list_file(tmp_path / "list.txt", 2)
    singles = [tmp_path / f"n{i}.json" for i in range(MAX_CANDIDATES - 1)]
    with pytest.raises(InputError, match=r"--candidates .*list\.txt: over the 65,536 candidates"):
        candidate_paths(singles, [listed])


def test_candidates_list_file_over_its_size_cap_is_refused_unread(tmp_path: Path) -> None:
    listed = tmp_path / "list.txt"
    with listed.open("wb") as fh:
        fh.truncate(MAX_LIST_BYTES + 1)
    with pytest.raises(InputError, match=r"--candidates .*list\.txt: 16777217 bytes, over the 16 MiB"):
        candidate_paths([], [listed])


def test_candidates_list_file_of_blank_lines_names_no_candidate(tmp_path: Path) -> None:
    """Blank lines and comments do not count against the cap (and are not split into a list at once)."""
    listed = tmp_path / "list.txt"
    listed.write_text("\n" * (MAX_CANDIDATES * 2) + "# only comments\r\n", encoding="utf-8")
    with pytest.raises(InputError, match="the list file names no candidate"):
        candidate_paths([], [listed])


def test_candidates_list_file_reads_crlf_lines(tmp_path: Path) -> None:
    listed = tmp_path / "list.txt"
    listed.write_bytes(b"a.json\r\nb.json\rc.json\n")
    assert [p.name for p in candidate_paths([], [listed])] == ["a.json", "b.json", "c.json"]


def test_candidates_folder_over_the_cap_is_refused_while_scanned(tmp_path: Path) -> None:
    folder = tmp_path / "cands"
    folder.mkdir()
    for name in ("a.json", "b.json", ".hidden"):
        (folder / name).write_text("{}", encoding="utf-8")
    singles = [tmp_path / f"n{i}.json" for i in range(MAX_CANDIDATES - 1)]
    with pytest.raises(InputError, match=rf"--candidates {folder}: over the 65,536 candidates"):
        candidate_paths(singles, [folder])
    assert [p.name for p in candidate_paths(singles[:-1], [folder])][-2:] == ["a.json", "b.json"]


def test_candidates_folder_with_a_symlink_loop_is_exit_3_naming_the_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A link loop inside `--candidates DIR` was an OSError, so exit 4 (environment); it is bad input."""
    folder = tmp_path / "cands"
    folder.mkdir()
    (folder / "a.json").symlink_to("b.json")
    (folder / "b.json").symlink_to("a.json")
    assert run(["gate", "--store", str(tmp_path / "store"), "--candidates", str(folder)]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"upgrade-gate: error: --candidates {folder}: a.json: unreadable: ")
    assert "symbolic links" in err and err.count("\n") == 1


def test_candidates_source_that_is_a_symlink_loop_is_not_found(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(NotFoundError, match=rf"--candidates {loop}: no such directory or list file"):
        candidate_paths([], [loop])


def test_candidates_folder_unreadable_is_exit_3(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads a folder whatever its mode")
    folder = tmp_path / "cands"
    folder.mkdir(mode=0o000)
    try:
        with pytest.raises(InputError, match=rf"--candidates {folder}: unreadable: Permission denied"):
            candidates.candidate_paths([], [folder])
    finally:
        folder.chmod(0o700)


def _frame(declared: int, payload: bytes) -> str:
    import base64
    import gzip

    from upgrade_gate.fleet.resultframe import BEGIN, END, PREFIX

    body = base64.b64encode(gzip.compress(payload)).decode("ascii")
    lines = [PREFIX + body[i : i + 76] for i in range(0, len(body), 76)]
    return "\n".join([f"{BEGIN} exit=0 bytes={declared} sha256={'0' * 64}", *lines, END, ""])


def test_result_frame_gzip_bomb_is_not_inflated_past_its_stated_size() -> None:
    """A pod log's frame is inflated at most to the size its header states: 64 MiB of zeros claimed as
    10 bytes fails its checksum having allocated kilobytes (gzip.decompress inflated all of it)."""
    import tracemalloc

    from upgrade_gate.errors import ParseError
    from upgrade_gate.fleet.resultframe import extract

    log = _frame(10, bytes(64 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(ParseError, match="result frame checksum mismatch"):
            extract(log)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20


def test_result_frame_stating_more_than_the_cap_is_refused_unread() -> None:
    from upgrade_gate.errors import ParseError
    from upgrade_gate.fleet.resultframe import MAX_PAYLOAD_BYTES, extract

    with pytest.raises(ParseError, match="result frame over the 128 MiB a result may have"):
        extract(_frame(MAX_PAYLOAD_BYTES + 1, b"x"))


def test_read_yaml_reads_no_more_than_a_yaml_document_may_have() -> None:
    """A policy, plan or ConfigMap path naming /dev/zero was read to 512 MiB before the 1 MiB YAML cap."""
    from upgrade_gate import docio

    with pytest.raises(InputError, match=r"^/dev/zero: over the 1 MiB a document may have; refused$"):
        docio.read_yaml(Path("/dev/zero"))


def test_store_blob_over_the_cap_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    """A baseline committed by hand as 64 MiB + 1 of zeros (~65 KB packed): the object's stated size is
    refused before its content is inflated (`zlib.decompress` inflated all of it; 10 GB for ~10 MB)."""
    import subprocess
    import tracemalloc

    from tests.test_store_gitstore import snapshot_for
    from upgrade_gate.store import layout
    from upgrade_gate.store.gitobjects import MAX_OBJECT_BYTES
    from upgrade_gate.store.gitstore import BaselineStore

    store = tmp_path / "store"
    with BaselineStore(store) as st:
        st.save([snapshot_for("node-01")], message="a baseline")
    with (store / layout.node_path("node-01")).open("wb") as fh:
        fh.truncate(MAX_OBJECT_BYTES + 1)
    for args in (["add", "-A"], ["-c", "user.name=x", "-c", "user.email=x@y", "commit", "-qm", "by hand"]):
        subprocess.run(["git", *args], cwd=store, check=True, capture_output=True)
    with BaselineStore(store) as st:
        tracemalloc.start()
        try:
            with pytest.raises(InputError, match=r"a git object over the 64 MiB a store object may have; refused"):
                st.load("node-01")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 16 << 20


def test_checklist_folder_over_the_cap_is_refused_before_any_is_loaded(tmp_path: Path) -> None:
    from upgrade_gate.judge.checklist import MAX_CHECKLIST_FILES, load_checklists

    folder = tmp_path / "lists"
    folder.mkdir()
    for i in range(MAX_CHECKLIST_FILES + 1):
        (folder / f"c{i:04d}.yaml").write_text("not: a checklist\n", encoding="utf-8")  # never loaded
    with pytest.raises(InputError, match=rf"^{folder}: over the 1024 checklists a folder may hold; refused$"):
        load_checklists([str(folder)])
