"""Entry point of every fake tool: apply the tool's fault, else answer from its response table.

The table (`<data_dir>/<tool>.marshal`, written by `build_fake_node` beside a `<tool>.json` copy for
people to read) holds:
- `fault`: null or {kind: hang|nonzero|garbage, exit_code, stderr, argv_prefix};
- `responses`: precomputed answers, tried in order; `match` is "exact" (the argv after the program name
  equals `argv`) or "flags" (every entry of `flags` occurs in the argv); a response with a `cycle`
  (a list of stdouts) answers them in turn, one per call (a reading that moves over time);
- `dynamic`: null, or the generator for tools whose output depends on their arguments ("rccl" for
  all_reduce_perf / all_gather_perf, "mpirun", "ib_write_bw"), with its `params`.
An argv the table cannot answer exits 2 with a one-line "no recorded output" message on stderr, so a
test that calls a fake tool in an unexpected way fails loudly instead of reading an empty output.
"""

from __future__ import annotations

import marshal
import os
import sys
import time

TYPE_CHECKING = False  # typing costs start-up time; mypy still sees the import
if TYPE_CHECKING:
    from typing import Any

HANG_SECONDS = 3600.0
GARBAGE = (
    b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00>\x00\x01\x00\x00\x00\xc0\x8f\n"
    b"@@@ ~~\xff\xfe\x00 #!%&*( 0x0x0x -- -- ?? \x1b[31m\x1b[0m\n"
    b"Segment\xe9tion: \x00\x00 trunca"
)
"""What a GARBAGE fault prints: ELF bytes, invalid UTF-8, a NUL and a truncated last line."""


def main(tool: str, data_dir: str) -> int:
    """Run fake `tool` with `sys.argv[1:]`; returns its exit code."""
    argv = sys.argv[1:]
    with open(os.path.join(data_dir, f"{tool}.marshal"), "rb") as handle:
        table: dict[str, Any] = marshal.load(handle)
    fault = table.get("fault")
    if fault is not None and argv[: len(fault["argv_prefix"])] == fault["argv_prefix"]:
        return _apply_fault(fault)
    stdout, stderr, code = answer(tool, argv, table, data_dir)
    _emit(stdout.encode("utf-8"), stderr)
    return code


def answer(tool: str, argv: list[str], table: dict[str, Any], data_dir: str) -> tuple[str, str, int]:
    """(stdout, stderr, exit code) of `tool argv` according to its table."""
    for response in table.get("responses", []):
        if _matches(response, argv):
            if "cycle" in response:
                turn = _run_index(data_dir, f"{tool}.{'_'.join(argv)}") - 1
                return response["cycle"][turn % len(response["cycle"])], "", 0
            return response["stdout"], response.get("stderr", ""), int(response.get("exit_code", 0))
    dynamic = table.get("dynamic")
    if dynamic is not None:
        run = _run_index(data_dir, tool)
        if dynamic == "ib_write_bw":
            from . import perftest

            return perftest.run(table["params"], argv, run)
        from . import rccl

        if dynamic == "mpirun":
            return rccl.run_mpirun(table["params"], argv, run)
        return rccl.run_test(table["params"], tool, argv, run)
    shown = " ".join([tool, *argv])
    return "", f"fake {tool}: no recorded output for `{shown}`\n", 2


def _matches(response: dict[str, Any], argv: list[str]) -> bool:
    if response["match"] == "exact":
        return bool(argv == response["argv"])
    return all(flag in argv for flag in response["flags"])


def _apply_fault(fault: dict[str, Any]) -> int:
    kind = fault["kind"]
    if kind == "hang":
        sys.stdout.flush()
        while True:  # the runner kills the whole process group on timeout
            time.sleep(HANG_SECONDS)
    if kind == "garbage":
        _emit(GARBAGE, "")
        return 0
    _emit(b"", fault["stderr"] + ("\n" if fault["stderr"] and not fault["stderr"].endswith("\n") else ""))
    return int(fault["exit_code"])


def _emit(stdout: bytes, stderr: str) -> None:
    if stdout:
        sys.stdout.buffer.write(stdout)
        sys.stdout.buffer.flush()
    if stderr:
        sys.stderr.write(stderr)
        sys.stderr.flush()


def _run_index(data_dir: str, tool: str) -> int:
    """How many times this tool has run on this node (seeds the run-to-run noise)."""
    runs = os.path.join(data_dir, "runs")
    os.makedirs(runs, exist_ok=True)
    path = os.path.join(runs, tool)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, b".")
        return os.fstat(fd).st_size
    finally:
        os.close(fd)
