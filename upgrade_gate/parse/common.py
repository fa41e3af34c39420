"""Small helpers shared by the parser modules: escape stripping, BDF normalisation, N/A detection, JSON
decoding with the line of an error, fixed-width table columns.

Design notes:
- Kept deliberately small (not a grab-bag): only what at least two tool formats need. Parser modules
  of different tools never import each other (import-linter's independence contract); what two of
  them share lives here.
- Fixed-width tables (amd-smi `topology`/`partition`/`xgmi`, rocm-smi's concise table): column
  positions come from the header row (`header_columns`), never from one sample's spacing; a value
  running into the next column is a `ParseError` (`slice_row`).
- `normalize_bdf` returns the canonical lower-case `dddd:bb:dd.f` through `parse.bdf.PciAddress`, whose
  docstring says which short forms a caller may allow; anything else is a `ParseError`, never a guess.
- 2024-xx rocm-smi 6.2.3 prints the colour codes of its header sub-row in caret notation when captured
  through some terminals (`^[3m`, corpus rocm-smi/mi300x-8gpu-concise-...-ansi-caret-hung.txt); rocminfo
  7.2.4 wraps its banner in real `ESC[37m ... ESC[0m`. `strip_ansi` removes both forms.
"""

from __future__ import annotations

import json
import re

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Bdf
from upgrade_gate.parse.bdf import PciAddress
from upgrade_gate.parse.sanity import name_problem

# Real CSI sequences (ESC [ params final-byte), two-byte ESC sequences, and their caret-notation
# remnants ("^[[3m", or "^[3m" where the copy lost the bracket).
_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]|\^\[\[?[0-9;]*[A-Za-z]")

NA_TOKENS = frozenset({"n/a"})


def digits(text: str) -> bool:
    """True when `text` is one or more ASCII digits. `str.isdigit` also takes "²" and other Unicode
    digits, which `int` then refuses (a ValueError, not a ParseError) or reads as a number no tool printed."""
    return text.isascii() and text.isdigit()


RCCL_FILE_RE = re.compile(r"^librccl\.so(?:\.[0-9]+)*$")
"""The file name librccl.so.1 may resolve to (librccl.so.1.0.60200): the probe and `software.rccl` share it."""

_PHYS_CODE = re.compile(r"\(.*?\)|^\s*[0-9]+:")


def phys_up(phys_state: str | None) -> bool:
    """True for a port's physical state LINK_UP (ibv_devinfo -v, rdma link), LinkUp (ibstat) or `5: LinkUp`
    (sysfs), with or without its `(5)` code; False for anything else, and for none at all (no evidence)."""
    if phys_state is None:
        return False
    return _PHYS_CODE.sub("", phys_state).strip().upper().replace("_", "") == "LINKUP"


def strip_ansi(text: str) -> str:
    """Remove ANSI escape sequences, raw or in caret notation (`^[[0m`), from text."""
    return _ANSI_RE.sub("", text)


def normalize_bdf(
    raw: str,
    *,
    tool: str,
    line_no: int,
    allow_missing_domain: bool = False,
    allow_missing_function: bool = False,
) -> Bdf:
    """Canonical lower-case `dddd:bb:dd.f` for a printed PCI address, or ParseError."""
    return PciAddress.parse(
        raw,
        tool=tool,
        line_no=line_no,
        allow_missing_domain=allow_missing_domain,
        allow_missing_function=allow_missing_function,
    ).bdf


def check_name(name: str, *, tool: str, line_no: int, excerpt: str) -> str:
    """`name` (a device or interface name) when it decoded cleanly; ParseError otherwise.

    A name holding U+FFFD (bytes that were not UTF-8) or control characters is evidence of a broken
    probe: taking it would turn `ionic_0` into an unknown new device and the real one into a vanished one.
    """
    problem = name_problem(name)
    if problem is not None:
        raise ParseError(tool, line_no, excerpt, problem)
    return name


def is_na(value: str | None) -> bool:
    """True when a tool printed "not available" (`N/A`, any case, surrounding blanks ignored)."""
    return value is not None and value.strip().lower() in NA_TOKENS


def leading_int(raw: str, tool: str, line_no: int) -> int:
    """The first word of `raw` as a decimal or 0x-hex integer (RDMA tools print both)."""
    head = raw.split()[0] if raw.split() else ""
    try:
        return int(head, 16) if head.lower().startswith("0x") else int(head, 10)
    except ValueError:
        raise ParseError(tool, line_no, raw, "expected an integer") from None


class KeyValueBlock:
    """Accumulator for one named block of `key: value` lines (an HCA, a CA, a port), with line numbers."""

    def __init__(self, name: str, line_no: int) -> None:
        self.name = name
        self.line_no = line_no
        self.kv: dict[str, tuple[str, int]] = {}

    def port_count(self, key: str, tool: str, *, found: int, shown: str) -> int:
        """The port count the block declares at `key`; ParseError unless it equals the `found` port blocks."""
        count = leading_int(self.require(key, tool), tool, self.line_of(key))
        if count != found:
            raise ParseError(tool, self.line_no, self.name, f"{shown.format(count)} but {found} port blocks")
        return count

    def get(self, key: str) -> str | None:
        """The value of `key`, None when the block has none."""
        item = self.kv.get(key)
        return item[0] if item else None

    def require(self, key: str, tool: str) -> str:
        """The value of `key`; ParseError naming the block when it is missing."""
        value = self.get(key)
        if value is None:
            raise ParseError(tool, self.line_no, self.name, f"block has no {key!r}")
        return value

    def line_of(self, key: str) -> int:
        """The line `key` was read from (the block's own line when absent)."""
        item = self.kv.get(key)
        return item[1] if item else self.line_no


def looks_like_json(text: str) -> bool:
    """True when the first non-blank character opens a JSON document."""
    stripped = text.lstrip()
    return stripped[:1] in ("{", "[")


def load_json(text: str, *, tool: str) -> object:
    """Decode JSON or raise ParseError naming the line of the syntax error."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        lines = text.splitlines()
        excerpt = lines[exc.lineno - 1] if 0 < exc.lineno <= len(lines) else text[:80]
        raise ParseError(tool, exc.lineno, excerpt, f"invalid JSON: {exc.msg}") from exc
    except (ValueError, RecursionError) as exc:
        raise ParseError(tool, 0, text[:80], f"invalid JSON: {exc}") from exc


def header_columns(line: str, *, min_gap: int = 1) -> list[tuple[int, str]]:
    """(start position, name) of each header cell; cells are separated by >= `min_gap` spaces."""
    pattern = r"\S+" if min_gap <= 1 else r"\S+(?:" + r"\s{1," + str(min_gap - 1) + r"}\S+)*"
    return [(m.start(), m.group()) for m in re.finditer(pattern, line)]


def slice_row(line: str, starts: list[int], *, tool: str, line_no: int) -> list[str]:
    """Cut a data row at the header's column starts; a value running into the next column fails."""
    cells: list[str] = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(line)
        if 0 < start < len(line) and not line[start - 1].isspace() and not line[start].isspace():
            raise ParseError(tool, line_no, line, f"cells run together at column {start + 1}")
        cells.append(line[start:end].strip())
    return cells
