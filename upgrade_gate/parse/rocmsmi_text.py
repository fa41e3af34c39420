"""Reader for rocm-smi's sectioned text output (`-a`, `--show*`, `--showtopo`).

rocm-smi prints `==== <Title> ====` banners, then one line per value:
`GPU[<n>]<tabs or spaces>: <key>: <value>` (rocm_smi.py `printLog`: `'GPU[%s]\\t\\t: %s: %s'`; older
releases padded with spaces). `read_sections` returns those lines as `Entry`s plus the matrices of
`--showtopo`, the `WARNING` lines and the free lines inside sections (`Driver version: ...`).

Tool quirks (dated notes):
- ROCm 5.4 (corpus mixed 5-GPU `-a`): failed reads print `ERROR: GPU[0]   : <message>` in place of
  the value line (corrupt FRU serial, unreadable card series); upper-case BDFs; sections with the
  same title twice ("OverDrive Level"); empty sections ("Pages Info").
- ROCm 5.x/6.x: tabs vary (`GPU[0]\\t\\t: ASD firmware version: \\t0x21000091`), and some captures have
  the caret notation `^[3m` of a lost ESC; both raw and caret ANSI escapes are stripped first.
- ROCm 6.2.3 with amdgpu not loaded: `ERROR:root:Driver not initialized (amdgpu not found in
  modules)` and nothing else. Any `ERROR` line that is not `ERROR: GPU[n]` is a ParseError.
- ROCm 7.1.1 `--showtopo`: matrix cells padded to 13 characters with trailing spaces; NUMA lines
  use literal tabs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from upgrade_gate.errors import ParseError
from upgrade_gate.parse.common import strip_ansi

_TITLE_RE = re.compile(r"^=+ *(?P<title>[^=\s][^=]*?) *=+\s*$")
_RULE_RE = re.compile(r"^\s*(?:=+|-+)\s*$")
_GPU_RE = re.compile(r"^(?P<error>ERROR: +)?GPU\[(?P<index>\d+)\][ \t]*:[ \t]?(?P<content>.*?)\s*$")
_KV_RE = re.compile(r"^(?P<key>[^:]*?)\s*:(?:[ \t]+(?P<value>.*?))?\s*$")
_MATRIX_LABEL_RE = re.compile(r"^GPU(\d+)$")
_WARNING_RE = re.compile(r"^WARNING:?\s*(?P<message>.*?)\s*$")


@dataclass(frozen=True, slots=True)
class Entry:
    """One `GPU[n] : key: value` line (key None for free text, error True for `ERROR:` lines)."""

    index: int
    key: str | None
    value: str | None
    section: str
    line_no: int
    raw: str
    error: bool = False


@dataclass(frozen=True, slots=True)
class Matrix:
    """One `--showtopo` matrix: the section title, GPU labels and the cell rows."""

    title: str
    line_no: int
    labels: tuple[int, ...]
    rows: tuple[tuple[int, int, tuple[str, ...], str], ...]  # (line_no, row label, cells, raw)


@dataclass(slots=True)
class Sections:
    """Everything a sectioned rocm-smi output holds."""

    entries: list[Entry] = field(default_factory=list)
    free: list[tuple[str, int, str]] = field(default_factory=list)  # (section, line_no, line)
    matrices: list[Matrix] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _matrix_header(line: str) -> tuple[int, ...] | None:
    if not line[:1].isspace():
        return None
    labels = [_MATRIX_LABEL_RE.match(token) for token in line.split()]
    if not labels or not all(labels):
        return None
    return tuple(int(m.group(1)) for m in labels if m)


def read_sections(text: str, *, tool: str) -> Sections:
    """Split a rocm-smi text output into GPU entries, matrices, free lines and warnings."""
    out = Sections()
    section: str | None = None
    matrix: tuple[str, int, tuple[int, ...], list[tuple[int, int, tuple[str, ...], str]]] | None = None

    def close_matrix() -> None:
        nonlocal matrix
        if matrix is not None:
            out.matrices.append(Matrix(matrix[0], matrix[1], matrix[2], tuple(matrix[3])))
            matrix = None

    lines = strip_ansi(text).splitlines()
    for line_no, line in enumerate(lines, start=1):
        if line.startswith("ERROR") and not _GPU_RE.match(line):
            raise ParseError(tool, line_no, line, "rocm-smi reported an error")
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            close_matrix()
            continue
        title = _TITLE_RE.match(line)
        if title:
            close_matrix()
            section = title.group("title").strip()
            if section.lower() == "end of rocm smi log":
                section = None
            continue
        if _RULE_RE.match(line):
            close_matrix()
            continue
        warning = _WARNING_RE.match(line)
        if warning:
            out.warnings.append(warning.group("message"))
            continue
        gpu = _GPU_RE.match(line)
        if gpu:
            close_matrix()
            content = gpu.group("content")
            kv = _KV_RE.match(content)
            key = kv.group("key") if kv and kv.group("key") else None
            value = kv.group("value") if kv and key else None
            error = bool(gpu.group("error"))
            out.entries.append(
                Entry(
                    index=int(gpu.group("index")),
                    key=None if error else key,
                    value=content if error else value,
                    section=section or "",
                    line_no=line_no,
                    raw=line,
                    error=error,
                )
            )
            continue
        labels = _matrix_header(line)
        if labels is not None and section is not None:
            close_matrix()
            matrix = (section, line_no, labels, [])
            continue
        if matrix is not None:
            cells = line.split()
            label = _MATRIX_LABEL_RE.match(cells[0])
            if label is None or len(cells) != len(matrix[2]) + 1:
                raise ParseError(tool, line_no, line, "matrix row does not match its header")
            matrix[3].append((line_no, int(label.group(1)), tuple(cells[1:]), line))
            continue
        if section is None:
            raise ParseError(tool, line_no, line, "unexpected line outside a rocm-smi section")
        out.free.append((section, line_no, line))
    close_matrix()
    return out
