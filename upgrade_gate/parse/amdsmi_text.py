"""Readers for amd-smi's human-readable output: the `KEY: value` tree and fixed-width tables.

amd-smi prints most commands (`list`, `static`, `firmware`, `bad-pages`, part of `partition`) as one
block per device: `GPU: 0` at column 0, then `KEY: value` lines indented four spaces per level. It is
its JSON dict with upper-cased keys (amdsmi_logger.py `custom_dump`). `read_blocks` turns that back
into nested mappings with lower-case keys (spaces -> `_`), so the JSON and text forms share one
builder. Table-shaped commands (`topology`, `partition`, `xgmi`) use `titled_sections` (split at
`TITLE:` lines), `table_body`, `header_columns` and `slice_row`: column positions come from the
header row, never from one sample's spacing.

Tool quirks (dated notes):
- 2024 (amd-smi 24.5.1, ROCm 6.1.2): a capture of `amd-smi version; amd-smi list` starts with the
  version banner line; `read_blocks` accepts it as the first line and parses it as a version.
- 2024 (doc examples of `amd-smi static`): elided with `...` lines; recorded as `truncated`.
- Repeated keys inside one block (SOC_PSTATE `POLICY_ID` / `POLICY_DESCRIPTION` pairs) become lists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from upgrade_gate.errors import ParseError
from upgrade_gate.parse.amdsmi_types import AmdSmiVersion
from upgrade_gate.parse.common import digits, header_columns, is_na, strip_ansi

_KEY_LINE_RE = re.compile(r"^(?P<indent> *)(?P<key>[^\s:][^:]*?)[ \t]*:(?:[ \t]+(?P<value>.*?))?[ \t]*$")
_TITLE_RE = re.compile(r"^(?P<name>[A-Z][A-Z_ /-]*?):\s*$")
_BLOCK_KINDS = frozenset({"GPU", "CPU", "CORE"})
_VERSION_KEYS = {
    "amdsmi tool": "tool_version",
    "amdsmi library version": "library_version",
    "rocm version": "rocm_version",
    "amdgpu version": "amdgpu_version",
    "amd_hsmp version": "hsmp_driver_version",
    "kernel version": "kernel_version",
}

Line = tuple[int, str]  # (1-based line number, text)


@dataclass(frozen=True, slots=True)
class TextBlock:
    """One `GPU: n` (or `CPU: n`) block as a nested mapping plus where each value was printed."""

    kind: str
    index: int
    line_no: int
    data: dict[str, object]
    where: dict[str, tuple[int, str]]


@dataclass(frozen=True, slots=True)
class TextDoc:
    """Every block of a text output, the optional version banner, and whether `...` elided parts."""

    blocks: tuple[TextBlock, ...]
    version: AmdSmiVersion | None
    truncated: bool


def numbered_lines(text: str) -> list[Line]:
    """The text's lines with their 1-based numbers, ANSI escapes removed."""
    return list(enumerate(strip_ansi(text).splitlines(), start=1))


def is_elision(line: str) -> bool:
    """True for the `...` lines doc examples use to cut output short."""
    return line.strip() == "..."


def _norm_key(key: str) -> str:
    return "_".join(key.strip().lower().split())


_BORDER_RE = re.compile(r"^\+[-=+]{10,}\+$")


def check_form(text: str, *, tool: str) -> None:
    """ParseError naming the form when the output is not one this parser reads (no "expected 'KEY: value'").

    - the bare `amd-smi` dashboard (a box table, corpus amd-smi/default-mi300x-vf-1gpu-guest-...):
      "unsupported form";
    - JSON that starts after lines of other text (a banner the preamble table does not know): "not JSON".
    """
    lines = [(n, line) for n, line in numbered_lines(text) if line.strip()]
    if not lines:
        return
    first_no, first = lines[0]
    if _BORDER_RE.match(first.strip()):
        raise ParseError(
            tool, first_no, first, "unsupported form: the bare `amd-smi` dashboard table, not a subcommand's output"
        )
    if first.lstrip().startswith(("{", "[")):
        return
    start = next(((n, line) for n, line in lines[1:] if line.startswith(("{", "["))), None)
    if start is not None:
        raise ParseError(
            tool,
            start[0],
            first,
            f"not JSON: the JSON starts at line {start[0]} after {start[0] - first_no} line(s) of other text "
            f"(first: {first.strip()[:80]!r})",
        )


def parse_version_line(line: str, *, tool: str, line_no: int) -> AmdSmiVersion:
    """`AMDSMI Tool: 24.7.1+8dc45db | AMDSMI Library version: 25.1.0.0 | ROCm version: 6.3.3`."""
    values: dict[str, Any] = {}
    na: list[str] = []
    for part in line.strip().split(" | "):
        key, sep, value = part.partition(": ")
        if not sep or not value.strip():
            raise ParseError(tool, line_no, line, "version field without 'key: value'")
        field = _VERSION_KEYS.get(key.strip().lower())
        if field is None:
            continue  # a field a newer release added
        if field in values:
            raise ParseError(tool, line_no, line, f"version field {key.strip()!r} printed twice")
        if is_na(value):
            na.append(field)
            values[field] = None
        else:
            values[field] = value.strip()
    if "tool_version" not in values:
        raise ParseError(tool, line_no, line, "not an 'AMDSMI Tool: ...' version line")
    return AmdSmiVersion(tool="AMDSMI Tool", na_fields=tuple(na), **values)


def _tokens(lines: list[Line], tool: str) -> tuple[list[tuple[int, int, str, str | None, str]], bool]:
    tokens: list[tuple[int, int, str, str | None, str]] = []
    truncated = False
    for line_no, line in lines:
        if not line.strip():
            continue
        if is_elision(line):
            truncated = True
            continue
        if "\t" in line[: len(line) - len(line.lstrip())]:
            raise ParseError(tool, line_no, line, "tab in indentation")
        match = _KEY_LINE_RE.match(line)
        if match is None:
            raise ParseError(tool, line_no, line, "expected 'KEY: value'")
        tokens.append((line_no, len(match.group("indent")), match.group("key"), match.group("value"), line))
    return tokens, truncated


def read_blocks(text: str, *, tool: str, lines: list[Line] | None = None) -> TextDoc:
    """Parse amd-smi's indented `KEY: value` output into one mapping per `GPU: n`/`CPU: n` block."""
    tokens, truncated = _tokens(lines if lines is not None else numbered_lines(text), tool)
    blocks: list[TextBlock] = []
    version: AmdSmiVersion | None = None
    # Stack of (indent of the key that opened the container, child indent or -1, container, path).
    stack: list[tuple[int, int, dict[str, object], str]] = []
    where: dict[str, tuple[int, str]] = {}
    for pos, (line_no, indent, key, value, raw) in enumerate(tokens):
        if indent == 0:
            kind = key.strip().upper()
            if kind == "AMDSMI TOOL" and not blocks and version is None:
                version = parse_version_line(raw, tool=tool, line_no=line_no)
                continue
            if kind not in _BLOCK_KINDS or value is None or not digits(value):
                raise ParseError(tool, line_no, raw, "expected a 'GPU: <n>' block")
            data: dict[str, object] = {}
            where = {}
            blocks.append(TextBlock(kind, int(value), line_no, data, where))
            stack = [(0, -1, data, "")]
            continue
        if not stack:
            raise ParseError(tool, line_no, raw, "indented line outside a device block")
        while stack[-1][0] >= indent:
            stack.pop()
        opener, child_indent, container, path = stack[-1]
        if child_indent == -1:
            stack[-1] = (opener, indent, container, path)
        elif indent != child_indent:
            raise ParseError(tool, line_no, raw, "inconsistent indentation")
        name = _norm_key(key)
        dotted = f"{path}.{name}" if path else name
        opens = value is None and pos + 1 < len(tokens) and tokens[pos + 1][1] > indent
        item: object
        if opens:
            item = {}
        elif value is None:
            item = ""
        else:
            item = value
        if name in container:
            previous = container[name]
            container[name] = [*previous, item] if isinstance(previous, list) else [previous, item]
        else:
            container[name] = item
            where.setdefault(dotted, (line_no, raw))
        if isinstance(item, dict):
            stack.append((indent, -1, item, dotted))
    return TextDoc(tuple(blocks), version, truncated)


def titled_sections(lines: list[Line], tool: str) -> tuple[list[tuple[str, int, list[Line]]], bool]:
    """Split at `TITLE:` lines at column 0 into (title, line_no, body); `...` ends the output."""
    sections: list[tuple[str, int, list[Line]]] = []
    truncated = False
    for line_no, line in lines:
        if is_elision(line):
            truncated = True
            break
        title = _TITLE_RE.match(line)
        if title:
            sections.append((title.group("name").strip(), line_no, []))
        elif sections:
            sections[-1][2].append((line_no, line))
        elif line.strip():
            raise ParseError(tool, line_no, line, "expected a 'TABLE:' title")
    return sections, truncated


def table_body(body: list[Line], tool: str, *, title_line: int) -> tuple[list[tuple[int, str]], list[Line]]:
    """Header columns and data rows of one titled section (blank lines dropped)."""
    rows = [(n, text) for n, text in body if text.strip()]
    if not rows:
        raise ParseError(tool, title_line, "", "table without a header row")
    return header_columns(rows[0][1]), rows[1:]
