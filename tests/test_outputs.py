"""Outputs only replace regular files the tool may write (issue 26, case 4): a device or FIFO is written
through, a symlink, block device, socket or folder refused (exit 3, named), `-` is standard output.

Nothing here touches a real device destructively: devices are judged by `outpath.decide` on made-up
stat results; a FIFO, a socket and links are made in tmp_path; /dev/null is only written through."""

from __future__ import annotations

import os
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from tests.judge_scenarios import mi300x_snapshot
from tests.test_cli_exit_codes import env_with, one_error_line, ug
from upgrade_gate import docio, outpath
from upgrade_gate.errors import ExitCode, InputError
from upgrade_gate.snapshot.io import write_snapshot


def fake_stat(mode: int) -> os.stat_result:
    """An lstat result of a file of type `mode` (only st_mode is read)."""
    return os.stat_result((mode | 0o644, 1, 1, 1, 0, 0, 0, 0, 0, 0))


@pytest.mark.parametrize(
    ("mode", "action"),
    [
        (stat.S_IFREG, outpath.Action.REPLACE),
        (stat.S_IFCHR, outpath.Action.THROUGH),
        (stat.S_IFIFO, outpath.Action.THROUGH),
    ],
)
def test_outpath_decide_writes_files_and_writes_through_devices(mode: int, action: outpath.Action) -> None:
    assert outpath.decide(Path("/x/out"), fake_stat(mode)) is action


@pytest.mark.parametrize(
    ("mode", "word"),
    [
        (stat.S_IFLNK, "symbolic link"),
        (stat.S_IFBLK, "block device"),
        (stat.S_IFSOCK, "socket"),
        (stat.S_IFDIR, "folder"),
    ],
)
def test_outpath_decide_refuses_links_block_devices_sockets_and_folders(mode: int, word: str) -> None:
    with pytest.raises(InputError, match=f"^/x/out: is a {word}"):
        outpath.decide(Path("/x/out"), fake_stat(mode))


def test_outpath_decide_refuses_a_regular_file_this_user_may_not_write() -> None:
    with pytest.raises(InputError, match=r"^/x/out: not writable by this user \(mode 0644\)"):
        outpath.decide(Path("/x/out"), fake_stat(stat.S_IFREG), writable=False)


@pytest.mark.parametrize("name", ["-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_outpath_decide_stdout_names_are_standard_output_whatever_is_there(name: str) -> None:
    # /dev/stdout is a symlink: it must be written to the stream, never renamed over
    assert outpath.decide(Path(name), fake_stat(stat.S_IFLNK)) is outpath.Action.STDOUT
    assert outpath.action_for(Path(name)) is outpath.Action.STDOUT


def test_outpath_dev_full_is_written_through() -> None:
    # the decision for the real /dev/full (a character device), without writing to it
    assert outpath.decide(Path("/dev/full"), os.lstat("/dev/full")) is outpath.Action.THROUGH


def test_write_atomic_never_replaces_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me", encoding="utf-8")
    link = tmp_path / "report.json"
    link.symlink_to(target)
    with pytest.raises(InputError, match=r"report\.json: is a symbolic link"):
        docio.write_text_atomic(link, "{}")
    assert link.is_symlink() and target.read_text(encoding="utf-8") == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.txt", "report.json"]  # no temp left


def test_write_atomic_never_replaces_a_dangling_symlink(tmp_path: Path) -> None:
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(InputError, match="is a symbolic link"):
        docio.write_text_atomic(link, "{}")
    assert link.is_symlink() and not (tmp_path / "elsewhere.json").exists()


def test_write_atomic_writes_through_a_fifo_and_keeps_it_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the reader is there before the writer
    os.set_blocking(fd, True)

    want = 100_001

    def drain() -> None:
        # A FIFO read with no writer yet returns b"" (EOF): keep reading until the writer has come and
        # gone, so the reader stays open the whole time (closing early would leave the writer ENXIO).
        data = b""
        deadline = time.monotonic() + 60
        while len(data) < want and time.monotonic() < deadline:
            chunk = os.read(fd, 65536)
            if chunk:
                data += chunk
            else:
                time.sleep(0.01)
        os.close(fd)
        got.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    docio.write_atomic(fifo, (b"a" * 100_000, b"b"))
    reader.join(timeout=60)
    assert got == [b"a" * 100_000 + b"b"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_write_atomic_a_fifo_without_a_reader_is_refused_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="pipe: a FIFO with no reader"):
        docio.write_text_atomic(fifo, "x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_write_atomic_refuses_a_socket(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        with pytest.raises(InputError, match=r"s\.sock: is a socket"):
            docio.write_text_atomic(path, "x")
        assert stat.S_ISSOCK(os.lstat(path).st_mode)


def test_write_atomic_writes_through_dev_null() -> None:
    docio.write_text_atomic(Path("/dev/null"), "x" * 1000)
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)


def test_write_atomic_a_failed_write_through_names_the_path(tmp_path: Path) -> None:
    # a FIFO whose reader has gone: EPIPE, the same path /dev/full's ENOSPC takes, without touching it
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)

    def chunks():  # the reader closes after the first chunk went in
        yield b"x"
        os.close(fd)
        yield b"y" * 200_000

    import signal

    previous = signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python runs (SIGPIPE ignored)
    try:
        with pytest.raises(BrokenPipeError) as caught:
            docio.write_atomic(fifo, chunks())
        assert caught.value.filename == str(fifo)
    finally:
        signal.signal(signal.SIGPIPE, previous)


def test_write_atomic_refuses_a_read_only_file_it_would_replace(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root may write any file")
    path = tmp_path / "r.json"
    path.write_text("old", encoding="utf-8")
    path.chmod(0o444)
    with pytest.raises(InputError, match="not writable by this user"):
        docio.write_text_atomic(path, "new")
    assert path.read_text(encoding="utf-8") == "old"


def test_write_atomic_still_replaces_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("old", encoding="utf-8")
    docio.write_text_atomic(path, "new")
    assert path.read_text(encoding="utf-8") == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


# --------------------------------------------------------------------------- through the CLI


@pytest.fixture
def candidate(tmp_path: Path) -> Path:
    path = tmp_path / "cand.json"
    write_snapshot(mi300x_snapshot(), path)
    return path


@pytest.fixture
def store(tmp_path: Path) -> Path:
    from upgrade_gate.store.gitstore import BaselineStore

    path = tmp_path / "store"
    with BaselineStore(path) as st:
        st.save([mi300x_snapshot()], tag="v1")
    return path


@pytest.mark.parametrize("fmt", ["json", "junit", "html", "markdown"])
def test_cli_report_to_a_symlink_exits_3_naming_it(fmt: str, store: Path, candidate: Path, tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.write_text("keep", encoding="utf-8")
    link = tmp_path / f"r.{fmt}"
    link.symlink_to(precious)
    proc = ug("gate", "--store", str(store), "--candidate", str(candidate), "--report", f"{fmt}:{link}")
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    assert f"{link}: is a symbolic link" in one_error_line(proc.stderr)
    assert link.is_symlink() and precious.read_text(encoding="utf-8") == "keep"


def test_cli_report_to_dev_stdout_and_dash_goes_to_standard_output(store: Path, candidate: Path) -> None:
    for name in ("-", "/dev/stdout"):
        proc = ug("gate", "--store", str(store), "--candidate", str(candidate), "--report", f"junit:{name}")
        assert proc.returncode == ExitCode.PASS, proc.stderr
        assert "<testsuites" in proc.stdout


def test_cli_snapshot_out_to_a_symlink_exits_3(tmp_path: Path) -> None:
    from upgrade_gate.collect.bundle import write_bundle
    from upgrade_gate.collect.capture import capture
    from upgrade_gate.collect.probes import Probe
    from upgrade_gate.collect.runner import LocalRunner

    bundle = capture(LocalRunner(), node="n1", probes=[Probe(name="kernel", argv=("uname", "-r"), parser="uname-r")])
    write_bundle(bundle, tmp_path / "b.tar.gz")
    link = tmp_path / "snap.json"
    link.symlink_to(tmp_path / "target.json")
    proc = ug("snapshot", str(tmp_path / "b.tar.gz"), "--out", str(link), env=env_with())
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stderr
    assert f"{link}: is a symbolic link" in one_error_line(proc.stderr)
    assert link.is_symlink() and not (tmp_path / "target.json").exists()


def test_cli_report_to_a_full_device_exits_4_in_one_line_and_keeps_the_device(
    store: Path, candidate: Path, tmp_path: Path
) -> None:
    # a device node of its own (major 1, minor 7: what /dev/full is), so the real one is never at risk
    full = tmp_path / "full"
    try:
        os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except PermissionError:
        pytest.skip("making a device node needs root")
    proc = ug("gate", "--store", str(store), "--candidate", str(candidate), "--report", f"json:{full}")
    assert proc.returncode == ExitCode.ENVIRONMENT, proc.stderr
    assert one_error_line(proc.stderr) == f"upgrade-gate: error: {full}: No space left on device"
    assert stat.S_ISCHR(os.lstat(full).st_mode)


def test_bundle_tarball_to_a_symlink_is_refused_before_the_capture(tmp_path: Path) -> None:
    from upgrade_gate.collect.bundle import check_bundle_target

    target = tmp_path / "elsewhere.tar.gz"
    link = tmp_path / "b.tar.gz"
    link.symlink_to(target)
    with pytest.raises(InputError, match=r"b\.tar\.gz: is a symbolic link"):
        check_bundle_target(link)
    assert link.is_symlink() and not target.exists()
