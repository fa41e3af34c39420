"""Parser for `dcgmi diag -r 1|2|3` (NVIDIA DCGM diagnostics): the text table and the JSON of `-j`.

Design notes and tool quirks:
- Text (DCGM 3.x and 4.x): a box table, `| Diagnostic | Result |`, cut into sections by rows such as
  `|-----  Deployment  --------+----|` or `+-----  Hardware  ----+----+`; column positions come from the
  first border line. In a section, a row names a test (`| PCIe | Pass - All |`) and rows with an empty
  left cell continue it: another result (`| | Fail - GPU: 0 |`, DCGM 3.3.1, NVIDIA/go-dcgm #52; DCGM 4.x
  prints `| | GPU0: Pass |` under `software`, NVIDIA/DCGM #253) or the next piece of a message.
- `Warning`, `Info` and `Error` rows carry a message for the test above them (a section-level `Error`
  when no test precedes it, corpus dcgmi/fragment-deployment-error-...). DCGM wraps a message at a fixed
  width (45 characters in the 78-column table: the result column less three), cutting words ("R" /
  "estart"), so the pieces are joined as cut, not with spaces.
- The Metadata section (DCGM 3.3+) gives the DCGM version, the driver and the PCI device ids. A name
  printed twice (two drivers: which one ran?) and a device id that is not a hex PCI device id (an empty
  piece between commas would miscount the GPUs) are ParseErrors. A table without the section parses (older
  DCGM printed none); the phase (`validate.phases.dcgm`) refuses it as evidence.
- A result cell is `Pass`, `Fail`, `Warn` or `Skip`, optionally `- All` or `- GPU: 0, 1`; anything else
  in a test row (a wrapped cell, an error text) is a ParseError. So is a table without its closing border
  or with a partial last border (corpus dcgmi/v100-pcie-...-truncated-last-line): a cut capture may have
  lost a failing row, so it is never read as a pass.
- Sanity cap: more than 10,000 table rows is refused (16 MiB of rows peaked at 649 MB before).
- Before the table only `Successfully ran diagnostic for group.` is expected; dcgmi's own errors
  (`Error: ...`, `Unable to connect to host engine ...`) and any other text (a prompt, kubectl's
  `Defaulted container ...` banner) are refused.
- JSON (`-j`, DCGM 3.x): `{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
  "results": [{"gpu_ids"|"gpu_id", "status", "warnings", "info"}]}]}], "version"}}` as NVIDIA's
  nvvs JsonOutput.cpp documents it; the corpus holds no complete JSON run (NVIDIA/DCGM #139 pastes an
  elided one: status "Skip", key "gpu_id"). DCGM 4.x renamed the root to "DCGM Diagnostic" and moved
  statuses into per-test summaries; with no real 4.x JSON to test on, that root is refused by name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from upgrade_gate.errors import ParseError
from upgrade_gate.parse.common import digits, load_json, looks_like_json, strip_ansi

TOOL = "dcgmi-diag"
STATUSES = ("Pass", "Fail", "Warn", "Skip")
MESSAGE_ROWS = {"Warning": "warnings", "Info": "info", "Error": "errors"}

_BORDER_RE = re.compile(r"^\+[-=]+\+[-=]+\+$")
_SECTION_RE = re.compile(r"^[|+]-{5}  (?P<name>[A-Za-z][A-Za-z ]*?)  -+\+-+[|+]$")
_RESULT_RE = re.compile(r"^(?P<status>Pass|Fail|Warn|Skip)(?: - (?:All|GPUs?: (?P<gpus>\d{1,4}(?:, ?\d{1,4})*)))?$")
_GPU_RESULT_RE = re.compile(r"^GPU(?P<gpu>\d{1,4}): (?P<status>Pass|Fail|Warn|Skip)$")
_ERROR_RE = re.compile(r"^(?:Error:|Unable to|Failed to|Could not)", re.IGNORECASE)
MAX_ROWS = 10_000  # sanity cap: a level-4 run on 8 GPUs prints a few hundred rows
_BANNER = "Successfully ran diagnostic for group."
_DEVICE_ID_RE = re.compile(r"^[0-9A-Fa-f]{1,4}$")
_DEVICE_IDS = "GPU Device IDs Detected"


@dataclass(frozen=True, slots=True, kw_only=True)
class DcgmResult:
    """One result of a test: its status and the GPUs it covers (None: all of the run's GPUs)."""

    status: str  # "Pass" / "Fail" / "Warn" / "Skip"
    gpus: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DcgmTest:
    """One test (or a section's own message rows, `name` ""): results and messages, in printed order."""

    category: str  # "Deployment", "Integration", "Hardware", "Stress"
    name: str
    results: tuple[DcgmResult, ...] = ()
    warnings: tuple[str, ...] = ()
    info: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DcgmDiag:
    """`dcgmi diag`: metadata and every test, in printed order."""

    form: str  # "text" or "json"
    tests: tuple[DcgmTest, ...]
    dcgm_version: str | None = None
    driver_version: str | None = None
    device_ids: tuple[str, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> tuple[DcgmTest, ...]:
        """Tests with a Fail result or an error message (section-level errors included)."""
        return tuple(t for t in self.tests if t.errors or any(r.status == "Fail" for r in t.results))


def _device_ids(raw: str, line: str, no: int) -> tuple[str, ...]:
    """`20b2,20b2` (3.x) or `26b9, 26b9` (4.x): one PCI device id per GPU the diagnostic detected."""
    ids = tuple(i.strip() for i in raw.split(","))
    bad = next((i for i in ids if not _DEVICE_ID_RE.match(i)), None)
    if bad is not None:
        raise ParseError(TOOL, no, line, f"GPU device id {bad!r} is not a PCI device id (hex)")
    return ids


def _gpu_list(raw: str | None) -> tuple[int, ...] | None:
    return None if raw is None else tuple(int(g) for g in raw.replace(" ", "").split(","))


class _Test:
    def __init__(self, category: str, name: str) -> None:
        self.category, self.name = category, name
        self.results: list[DcgmResult] = []
        self.messages: dict[str, list[list[str]]] = {"warnings": [], "info": [], "errors": []}

    def freeze(self) -> DcgmTest:
        return DcgmTest(
            category=self.category,
            name=self.name,
            results=tuple(self.results),
            warnings=tuple("".join(m).strip() for m in self.messages["warnings"]),
            info=tuple("".join(m).strip() for m in self.messages["info"]),
            errors=tuple("".join(m).strip() for m in self.messages["errors"]),
        )


class _TextTable:
    """Reads the box table row by row (see the module docstring)."""

    def __init__(self, border: str) -> None:
        self.width = len(border)
        self.split = border.index("+", 1)
        self.wrap = self.width - self.split - 5  # message characters per row (45 in the 78-column table)
        self.section = ""
        self.metadata: dict[str, str] = {}
        self.device_ids: tuple[str, ...] = ()
        self.tests: list[_Test] = []
        self.message: list[str] | None = None  # the pieces of the message the next continuation row extends
        self.rows = 0

    def cells(self, line: str, no: int) -> tuple[str, str]:
        if len(line) != self.width or line[0] != "|" or line[-1] != "|" or line[self.split] != "|":
            raise ParseError(TOOL, no, line, "row does not fit the table's columns (wrapped or cut)")
        return line[1 : self.split].strip(), line[self.split + 1 : -1]

    def row(self, line: str, no: int) -> None:
        self.rows += 1
        if self.rows > MAX_ROWS:
            raise ParseError(TOOL, no, line, f"more than {MAX_ROWS} table rows")
        left, right = self.cells(line, no)
        piece, value = right[1 : 1 + self.wrap], right.strip()
        if not self.section:
            if (left, value) != ("Diagnostic", "Result"):
                raise ParseError(TOOL, no, line, "row before the first section")
            return
        if self.section == "Metadata":
            if not left or not value:
                raise ParseError(TOOL, no, line, "metadata row without a name or value")
            if left in self.metadata:
                raise ParseError(TOOL, no, line, f"metadata {left!r} printed twice: which one is the run's?")
            self.metadata[left] = value
            if left == _DEVICE_IDS:
                self.device_ids = _device_ids(value, line, no)
            return
        if left in MESSAGE_ROWS:
            if not self.tests or self.tests[-1].category != self.section:
                self.tests.append(_Test(self.section, ""))
            self.message = [piece]
            self.tests[-1].messages[MESSAGE_ROWS[left]].append(self.message)
            return
        if left:
            self.tests.append(_Test(self.section, left))
            self.message = None
            self._result(value, line, no)
            return
        if not self.tests or self.tests[-1].category != self.section:
            raise ParseError(TOOL, no, line, "continuation row with nothing above it in its section")
        if self.message is not None:
            self.message.append(piece)
        else:
            self._result(value, line, no)

    def _result(self, value: str, line: str, no: int) -> None:
        match = _RESULT_RE.match(value)
        gpu = _GPU_RESULT_RE.match(value)
        if match is not None:
            result = DcgmResult(status=match.group("status"), gpus=_gpu_list(match.group("gpus")))
        elif gpu is not None:
            result = DcgmResult(status=gpu.group("status"), gpus=(int(gpu.group("gpu")),))
        else:
            raise ParseError(TOOL, no, line, f"{value!r} is not a diagnostic result")
        self.tests[-1].results.append(result)


def _parse_text(text: str) -> DcgmDiag:
    lines = strip_ansi(text).splitlines()
    table: _TextTable | None = None
    closed = False
    last = 0
    for no, raw in enumerate(lines, 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        last = no
        if closed:
            raise ParseError(TOOL, no, line, "text after the table's closing border")
        if table is None:
            if line == _BANNER:
                continue
            if _BORDER_RE.match(line):
                table = _TextTable(line)
                continue
            what = (
                "dcgmi reported an error" if _ERROR_RE.match(line) else "text before the table (a prompt or a message)"
            )
            raise ParseError(TOOL, no, line, what)
        section = _SECTION_RE.match(line)
        if section is not None and len(line) == table.width:
            table.section, table.message = section.group("name"), None
        elif _BORDER_RE.match(line) and len(line) == table.width:
            closed = table.section != "" and "=" not in line
        elif line[:1] == "+" and set(line) <= {"+", "-", "="}:
            raise ParseError(TOOL, no, line, "partial border line: output cut")
        else:
            table.row(line, no)
    if table is None:
        raise ParseError(TOOL, 0, "", "no diagnostic table: empty output")
    if not closed:
        raise ParseError(TOOL, last, lines[last - 1] if last else "", "table without its closing border: output cut")
    meta = table.metadata
    return DcgmDiag(
        form="text",
        tests=tuple(t.freeze() for t in table.tests),
        dcgm_version=meta.get("DCGM Version"),
        driver_version=meta.get("Driver Version Detected"),
        device_ids=table.device_ids,
        metadata=meta,
    )


# --------------------------------------------------------------------------- JSON (-j)


def _json_error(where: str, message: str) -> ParseError:
    return ParseError(TOOL, 0, where, message)


def _strings(items: Any, key: str, where: str) -> tuple[str, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise _json_error(where, f"{key!r} is not a list")
    out: list[str] = []
    for item in items:
        text = item.get("warning") if isinstance(item, Mapping) else item
        if not isinstance(text, str):
            raise _json_error(where, f"{key!r} entry is not a message")
        out.append(text)
    return tuple(out)


def _json_test(category: str, test: Any, where: str) -> DcgmTest:
    if not isinstance(test, Mapping) or not isinstance(test.get("name"), str):
        raise _json_error(where, "test without a name")
    results: list[DcgmResult] = []
    warnings: list[str] = []
    info: list[str] = []
    for k, entry in enumerate(test.get("results") or []):
        at = f"{where}.results[{k}]"
        if not isinstance(entry, Mapping) or entry.get("status") not in STATUSES:
            raise _json_error(at, f"status is not one of {STATUSES}")
        ids = entry.get("gpu_ids", entry.get("gpu_id"))
        ids_text = str(ids).replace(" ", "") if isinstance(ids, str | int) and not isinstance(ids, bool) else ""
        if not ids_text or not all(digits(p) and len(p) < 5 for p in ids_text.split(",")):
            raise _json_error(at, f"gpu_ids {ids!r} is not a GPU id list")
        results.append(DcgmResult(status=entry["status"], gpus=_gpu_list(ids_text)))
        warnings.extend(_strings(entry.get("warnings"), "warnings", at))
        info.extend(_strings(entry.get("info"), "info", at))
    return DcgmTest(
        category=category, name=test["name"], results=tuple(results), warnings=tuple(warnings), info=tuple(info)
    )


def _parse_json(text: str) -> DcgmDiag:
    data = load_json(text, tool=TOOL)
    if isinstance(data, Mapping) and "DCGM Diagnostic" in data:
        raise _json_error("DCGM Diagnostic", "DCGM 4.x JSON (root 'DCGM Diagnostic'): not supported yet")
    root = data.get("DCGM GPU Diagnostic") if isinstance(data, Mapping) else None
    if not isinstance(root, Mapping) or not isinstance(root.get("test_categories"), list):
        raise _json_error(text[:80], "not dcgmi diag JSON (no 'DCGM GPU Diagnostic'.test_categories)")
    tests: list[DcgmTest] = []
    for i, category in enumerate(root["test_categories"]):
        where = f"test_categories[{i}]"
        if not isinstance(category, Mapping) or not isinstance(category.get("category"), str):
            raise _json_error(where, "category without a name")
        if not isinstance(category.get("tests"), list):
            raise _json_error(where, "category without a tests list")
        for j, test in enumerate(category["tests"]):
            tests.append(_json_test(category["category"], test, f"{where}.tests[{j}]"))
    version = root.get("version")
    return DcgmDiag(form="json", tests=tuple(tests), dcgm_version=version if isinstance(version, str) else None)


def parse_dcgmi_diag(text: str) -> DcgmDiag:
    """Parse `dcgmi diag` text or `-j` JSON into a `DcgmDiag`; ParseError naming the line or key at fault."""
    return _parse_json(text) if looks_like_json(text) else _parse_text(text)


PARSERS: dict[str, Callable[[str], object]] = {TOOL: parse_dcgmi_diag}
