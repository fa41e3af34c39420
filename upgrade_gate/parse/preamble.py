"""Recognised preambles: lines other programs print before a tool's real output.

A parser that meets `WARNING: ...` or an MPI log line where its format starts reports "invalid JSON:
Extra data" or "expected 'KEY: value'", and a person chases the wrong fault. So the known preambles
are recognised here, by their exact published texts, and either skipped with a note (the rest of the
output is intact) or named as the cause when the rest does not parse.

Recognised texts (sources in tests/fixtures/*/PROVENANCE.md):
- amd-smi (ROCm/amdsmi amdsmi_cli/amdsmi_helpers.py `check_required_groups`, printed on stdout when a
  non-root user lacks a group): `WARNING: User is missing the following required groups: render,
  video. Please add user to these groups.` Its cause: amd-smi ran without access to the render
  devices, so values it prints may be error texts.
- rocm-smi (ROCm/ROCm issue #5849; printed before the table and before `--json`):
  `WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status`.
- UCX log lines (`[<sec>.<usec>] [<host>:<pid>:<thread>] <file>:<line> UCX  WARN  <text>`, e.g.
  `parser.c:2033 UCX  WARN  unused environment variable: UCX_PREFIX`, prasad-nair-amd/alibaba
  README "Test 11"): mpirun ranks print them before rccl-tests' own output. The leading `[` made
  that output look like a JSON array.
- Open MPI help blocks (open-mpi/ompi opal/util/show_help.c: the message between two 74-dash lines,
  e.g. `WARNING: There was an error initializing an OpenFabrics device.`) and its aggregation lines
  (`[host:pid] N more processes have sent help message ...`, `[host:pid] Set MCA parameter
  "orte_base_help_aggregate" to 0 ...`).
Skipped lines are blanked, not removed, so line numbers in later errors still point at the output.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from upgrade_gate.errors import ParseError

T = TypeVar("T")

_AMDSMI_GROUPS_RE = re.compile(
    r"^WARNING: User is missing the following required groups: (?P<groups>[\w, -]+)\. "
    r"Please add user to these groups\.\s*$"
)
_LOW_POWER_RE = re.compile(r"^WARNING: AMD GPU device\(s\) is/are in a low-power state\..*$")
_UCX_RE = re.compile(r"^\[\d+\.\d+\]\s+\[[^\]]+\]\s+\S+:\d+\s+UCX\s+(?P<level>[A-Z]+)\s")
_MPI_DASHES = "-" * 74
_MPI_AGGREGATE_RE = re.compile(
    r"^\[[^\]]+\] (?:\d+ more process(?:es)? ha(?:s|ve) sent help message"
    r"|Set MCA parameter \"orte_base_help_aggregate\")"
)

AMDSMI_NO_RENDER = "amd-smi ran without access to the render devices (/dev/dri/renderD*)"


@dataclass(frozen=True, slots=True)
class Preamble:
    """One recognised run of preamble lines."""

    kind: str  # "amd-smi-groups", "rocm-smi-low-power", "ucx-log", "openmpi-help"
    lines: int
    first: str  # the first line, as printed
    cause: str | None = None  # set when the preamble explains why values may be missing

    @property
    def note(self) -> str:
        """One line for the probe's record: what was skipped."""
        what = {
            "amd-smi-groups": "amd-smi's missing-group warning",
            "rocm-smi-low-power": "rocm-smi's low-power-state warning",
            "ucx-log": "UCX log line(s) from the MPI launcher",
            "openmpi-help": "Open MPI help message line(s)",
        }[self.kind]
        text = f"skipped {self.lines} line(s) of {what} before the output: {self.first.strip()[:120]!r}"
        return f"{text}; {self.cause}" if self.cause else text


def _match(lines: list[str], pos: int) -> tuple[str, int, str | None] | None:
    """(kind, number of lines, cause) of a preamble starting at `lines[pos]`, or None."""
    line = lines[pos].rstrip("\r\n")
    groups = _AMDSMI_GROUPS_RE.match(line)
    if groups is not None:
        return "amd-smi-groups", 1, f"{AMDSMI_NO_RENDER}: the user lacks group(s) {groups.group('groups')}"
    if _LOW_POWER_RE.match(line):
        return "rocm-smi-low-power", 1, None
    if _UCX_RE.match(line):
        return "ucx-log", 1, None
    if _MPI_AGGREGATE_RE.match(line):
        return "openmpi-help", 1, None
    if line == _MPI_DASHES:
        end = next(
            (i for i in range(pos + 1, min(len(lines), pos + 60)) if lines[i].rstrip("\r\n") == _MPI_DASHES), None
        )
        if end is not None:
            return "openmpi-help", end - pos + 1, None
    return None


def split_preamble(text: str) -> tuple[tuple[Preamble, ...], str]:
    """The recognised preambles at the start of `text`, and the text with those lines blanked."""
    lines = text.splitlines(keepends=True)
    found: list[Preamble] = []
    pos = 0
    while pos < len(lines):
        if not lines[pos].strip():
            pos += 1
            continue
        hit = _match(lines, pos)
        if hit is None:
            break
        kind, count, cause = hit
        if found and found[-1].kind == kind and kind != "amd-smi-groups":
            last = found[-1]
            found[-1] = Preamble(kind, last.lines + count, last.first, last.cause)
        else:
            found.append(Preamble(kind, count, lines[pos], cause))
        for i in range(pos, pos + count):
            lines[i] = "\n" if lines[i].endswith("\n") else ""
        pos += count
    if not found:
        return (), text
    return tuple(found), "".join(lines)


def causes(found: tuple[Preamble, ...]) -> tuple[str, ...]:
    """The causes the preambles name (e.g. amd-smi without render access)."""
    return tuple(p.cause for p in found if p.cause)


def parse_after_preamble(text: str, parse: Callable[[str], T]) -> T:
    """`parse` the text without its preamble; a ParseError names the preamble's cause first."""
    found, body = split_preamble(text)
    if not found:
        return parse(text)
    try:
        return parse(body)
    except ParseError as exc:
        named = causes(found)
        if named:
            message = f"{'; '.join(named)}; then: {exc.message}"
        else:
            message = f"{exc.message} (after {sum(p.lines for p in found)} skipped preamble line(s): {found[0].note})"
        raise ParseError(exc.tool, exc.line_no, exc.excerpt, message) from exc


__all__ = ["AMDSMI_NO_RENDER", "Preamble", "causes", "parse_after_preamble", "split_preamble"]
