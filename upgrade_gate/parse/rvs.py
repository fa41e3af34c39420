"""Parsers for GPU hardware-acceptance tools: RVS (ROCm Validation Suite) text logs and AGFHC output.

Design decisions:
- A run passes only when it ran at least one test/action and every one of them has an explicit
  passing verdict. An action with no verdict line (an excerpt, a crash, a module that printed nothing)
  is `passed=None` and makes the run fail closed; the first such or failing name is `first_failure`.
- RVS text: `[RESULT] [timestamp] Action name :X` opens an action, `Module name :Y` names its module;
  per-GPU verdicts are `... met: TRUE|FALSE` (gst/iet targets) or `... pass: TRUE|FALSE`. Any
  `[ERROR]` line inside an action fails it. `rvs -g` (GPU list) output parses into `gpus` with no
  actions, so it can never count as a passed run.
- RVS JSON logs (`rvs -j`) are NOT supported: the corpus has no real capture and the format varies by
  module (INDEX.md gaps); such input is a ParseError naming that gap rather than a guess.
- AGFHC: per-test lines `PASS: name-i-j [elapsed/budget]` (any other status word fails the test), the
  `Summary:` totals and the final `Program exiting with return code AGFHC_<NAME> [N]`. The run passes
  only with return code 0, >= 1 test, every test PASS and no test of the recipe left out (`Skipped` 0
  and `Executed` == `Total`): a skipped acceptance test is no acceptance. A missing return-code line
  (killed or truncated run) gives `return_code=None`, which does not pass. The header's `GPUs: N` (how
  many GPUs AGFHC saw and tested) is read into `gpus`; phase 1 holds it against the node.

- RVS >= 1.3 (ROCm 7.0, 2025) ends a run with a `ROCm Validation Suite (RVS) Summary` box (rvs exec.cpp
  `do_yaml`): `| <action> | <MODULE> | PASS|FAIL |` per action, `PASS` iff the module's run() returned
  0, in colour (`ESC[32m`/`ESC[31m`), and in `-q` mode each row prefixed by `\r`. When present it is the
  complete action list: every logged action must appear in it, and an action passes only when the
  summary says PASS and its own log has no FALSE verdict or error. A box without its closing border
  (a killed run) is a ParseError.
- Log lines carry the action in brackets (`[RESULT] [ts] [action_5] [GPU:: 48932] pass: FALSE`); a
  verdict is attributed by that bracket when it names a known action, else to the last `Action name`.
- `RVS-ERROR [module] [action] msg` (logger::Err) fails the named action; `RVS-ERROR [CLI] action 'X'
  could not ...` fails X; any other RVS-ERROR is a run-level error in `errors` and the run fails.
- The summary's System Overview lists the GPUs RVS ran on (rvsexec_do_yaml.cpp `systemOverview`, since
  0592d756 "RVS test summary and system overview", 2025): `| GPUs | N |` (or `No GPUs detected !`), then
  per GPU a cell `<name> - <gpu_id>` over a cell `<position> - <KFD node id> - <BDF>`, two GPUs a row
  pair; an optional `GPU Name - GPU ID` / `ID - Node ID - BDF` label pair comes first and carries the
  first GPU when N is odd (`N/A` when there is none). They are read into `gpus` (`device_id` None: the
  summary does not print it). A count that differs from the list, positions out of order, a name row
  without its id row or a cell out of format is a ParseError: the list is what says which GPUs have a
  result, so a guess would hide a GPU that has none.

Tool quirks (dated notes):
- RVS 1.3.0 with ROCm 7.2.0 on 2x MI210 (ROCm/ROCm#6031, 2026): IET and GST FAIL in the summary and
  the pasted log shows `[action_5] ... pass: FALSE` then `RVS-ERROR [iet] [action_5] Action failed ...`.
- RVS 1.1.0 (2024) pads timestamps inconsistently: `[  2456.47741 ]` (trailing space inside brackets).
- RVS 1.1.0 `-g`: `GPU[ 7 -   705]` right-aligns the GPU id; the device id is decimal (`Device 29857`).
- RVS 1.3.0 (2025) prints the `GPU Name - GPU ID` label pair; the RVS user guide's RVS 1.6.75 examples
  (docs/ug1main.md @21584e14, 2026) show the list without it. Names over 24 characters are cut to 20
  and `...` by RVS (rvsexec_do_yaml.cpp `maxGPUNameLength`).
- AGFHC 1.23.2 (2025): `Tests: 5 Total, 5 Executed, 0 Skipped | All Tests Passed`; `--recipe-info`
  prints `Tests: 0 Total` with AGFHC_SUCCESS [0] - zero tests is not a pass. Header line
  `Product: MI350X | GPUs: 8 | Mode: BM SPX NPS1 | Checks: ...`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Bdf
from upgrade_gate.parse.common import digits, normalize_bdf, strip_ansi

_RVS_LINE_RE = re.compile(r"^\[(?P<level>[A-Z]+)\s*\]\s*\[\s*(?P<ts>[\d.]+)\s*\]\s*(?P<msg>.*?)\s*$")
_VERDICT_RE = re.compile(r"\b(?:met|pass)\s*:\s*(?P<v>TRUE|FALSE)\b", re.IGNORECASE)
_RVS_ERROR_RE = re.compile(r"^RVS-ERROR\s+\[(?P<module>[^\]]*)\](?:\s*\[(?P<action>[^\]]*)\])?\s*(?P<msg>.*?)\s*$")
_BRACKET_RE = re.compile(r"^\[(?P<name>[^\]]+)\]")
_SUMMARY_TITLE = "ROCm Validation Suite (RVS) Summary"
_GPU_LIST_RE = re.compile(
    r"^(?P<bdf>\S+)\s+-\s+GPU\[\s*(?P<idx>\d+)\s*-\s*(?P<id>\d+)\s*\]\s+(?P<name>.*?)\s+\(Device\s+(?P<dev>\d+)\)\s*$"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RvsGpu:
    """One GPU of `rvs -g`."""

    bdf: Bdf
    index: int  # RVS GPU number (KFD node)
    gpu_id: int
    name: str
    device_id: int | None  # PCI device id, printed in decimal by `rvs -g`; None: the summary box does not print it


@dataclass(frozen=True, slots=True, kw_only=True)
class TestVerdict:
    """One RVS action or AGFHC test and its outcome."""

    name: str
    module: str | None  # RVS module ("gst"); AGFHC test title
    passed: bool | None  # None: no verdict was printed
    status: str  # "PASS", "FAIL", "NO-VERDICT", or the tool's status word
    details: tuple[str, ...] = ()  # verdict lines / elapsed time as printed


@dataclass(frozen=True, slots=True, kw_only=True)
class RvsResult:
    """An RVS run (or `rvs -g` listing)."""

    version: str | None
    gpus: tuple[RvsGpu, ...]
    actions: tuple[TestVerdict, ...]
    errors: tuple[str, ...] = ()  # RVS-ERROR lines that name no action: the run itself failed
    summary: bool = False  # True when the RVS >= 1.3 summary box listed the actions

    @property
    def passed(self) -> bool:
        """True only with >= 1 action, every action explicitly passing and no run-level error."""
        return bool(self.actions) and not self.errors and all(a.passed is True for a in self.actions)

    @property
    def first_failure(self) -> str | None:
        """Name of the first action that failed or printed no verdict, else the first run-level error."""
        failed = next((a.name for a in self.actions if a.passed is not True), None)
        return failed if failed is not None or not self.errors else self.errors[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class AgfhcResult:
    """An AGFHC recipe run."""

    product: str | None
    gpus: int | None  # the header's `GPUs: N`, the GPUs AGFHC tested; None: not printed
    mode: str | None
    log_directory: str | None
    tests: tuple[TestVerdict, ...]
    total: int | None
    executed: int | None
    skipped: int | None
    summary: str | None  # "All Tests Passed"
    return_name: str | None  # "AGFHC_SUCCESS"
    return_code: int | None

    @property
    def not_run(self) -> str | None:
        """Why some test of the recipe did not run (`4 of 5 tests skipped, 1 executed`); None if all ran."""
        if self.skipped:
            executed = "" if self.executed is None else f", {self.executed} executed"
            return f"{self.skipped} of {self.total} tests skipped{executed}"
        if self.total is not None and self.executed is not None and self.executed < self.total:
            return f"{self.total - self.executed} of {self.total} tests not executed"
        return None

    @property
    def passed(self) -> bool:
        """True only with return code 0, >= 1 test, every test PASS and none skipped or left out."""
        return (
            self.return_code == 0
            and bool(self.tests)
            and all(t.passed is True for t in self.tests)
            and self.not_run is None
        )

    @property
    def first_failure(self) -> str | None:
        """First failing test, or a reason when the run itself did not succeed or left tests out."""
        failed = next((t.name for t in self.tests if t.passed is not True), None)
        if failed is not None:
            return failed
        if self.return_code is None:
            return "no AGFHC return code (run killed or truncated)"
        if self.return_code != 0:
            return f"{self.return_name} [{self.return_code}]"
        if not self.tests:
            return "no tests executed"
        return self.not_run


def _parse_gpu_list(lines: list[str], tool: str) -> tuple[RvsGpu, ...]:
    gpus: list[RvsGpu] = []
    for no, line in enumerate(lines, 1):
        m = _GPU_LIST_RE.match(line.strip())
        if m is None:
            continue
        gpus.append(
            RvsGpu(
                bdf=normalize_bdf(m.group("bdf"), tool=tool, line_no=no),
                index=int(m.group("idx")),
                gpu_id=int(m.group("id")),
                name=m.group("name"),
                device_id=int(m.group("dev")),
            )
        )
    return tuple(gpus)


class _Action:
    """Accumulator for one RVS action while reading lines."""

    def __init__(self, name: str, module: str | None = None) -> None:
        self.name = name
        self.module = module
        self.verdicts: list[tuple[bool, str]] = []
        self.errors: list[str] = []
        self.summary: bool | None = None  # the summary box's PASS/FAIL, None without a box

    def verdict(self) -> TestVerdict:
        passed: bool | None = None
        if self.errors or any(not ok for ok, _ in self.verdicts) or self.summary is False:
            passed = False
        elif self.verdicts or self.summary is True:
            passed = True
        summary = () if self.summary is None else (f"summary: {'PASS' if self.summary else 'FAIL'}",)
        return TestVerdict(
            name=self.name,
            module=self.module,
            passed=passed,
            status={True: "PASS", False: "FAIL", None: "NO-VERDICT"}[passed],
            details=tuple(self.errors) + tuple(msg for _, msg in self.verdicts) + summary,
        )


_Row = tuple[list[str], int, str]  # a box row's cells, its line number, the line


@dataclass(frozen=True, slots=True, kw_only=True)
class _Summary:
    """What the RVS >= 1.3 summary box says."""

    version: str | None
    gpus: tuple[RvsGpu, ...]
    rows: list[tuple[str, str, bool, int]]  # (action, MODULE, passed, line_no)


def _summary_gpu(name_cell: str, id_cell: str, position: int, no: int, line: str, tool: str) -> RvsGpu:
    """One GPU of the System Overview: `<name> - <gpu_id>` over `<position> - <node id> - <BDF>`."""
    name, _, gpu_id = name_cell.rpartition(" - ")
    ids = id_cell.split(" - ")
    if not name or not digits(gpu_id) or len(ids) != 3 or not digits(ids[0]) or not digits(ids[1]):
        raise ParseError(tool, no, line, f"GPU cell {name_cell!r} / {id_cell!r} is not 'name - id' / 'n - node - BDF'")
    if int(ids[0]) != position:
        raise ParseError(tool, no, line, f"GPU {ids[0]} listed where GPU {position} belongs")
    return RvsGpu(
        bdf=normalize_bdf(ids[2], tool=tool, line_no=no),
        index=int(ids[1]),
        gpu_id=int(gpu_id),
        name=name,
        device_id=None,
    )


def _summary_gpus(count: tuple[int, int, str], listed: list[_Row], tool: str) -> tuple[RvsGpu, ...]:
    """The System Overview's GPU list, checked against its `GPUs` row (`count`: value, line number, line)."""
    if len(listed) % 2:
        _, no, line = listed[-1]
        raise ParseError(tool, no, line, "GPU row without its 'ID - Node ID - BDF' row")
    gpus: list[RvsGpu] = []
    for at in range(0, len(listed), 2):
        (names, _, _), (ids, no, line) = listed[at], listed[at + 1]
        labels = (names[0], ids[0]) == ("GPU Name - GPU ID", "ID - Node ID - BDF")
        if labels != (names[0] == "GPU Name - GPU ID") or (labels and at > 0):
            raise ParseError(tool, no, line, "GPU list label rows out of place")
        if labels:
            if ids[1] == "" and names[1] in ("", "N/A"):
                continue  # no GPU beside the labels (an even count, or none)
            pairs = [(names[1], ids[1])]
        else:
            pairs = list(zip(names, ids, strict=True))
        for name_cell, id_cell in pairs:
            gpus.append(_summary_gpu(name_cell, id_cell, len(gpus), no, line, tool))
    if len(gpus) != count[0]:
        raise ParseError(tool, count[1], count[2], f"'GPUs' says {count[0]} but the GPU list names {len(gpus)}")
    return tuple(gpus)


def _parse_summary(lines: list[str], tool: str) -> _Summary | None:
    """The RVS >= 1.3 summary box, None if absent."""
    start = next((i for i, line in enumerate(lines) if _SUMMARY_TITLE in line), None)
    if start is None:
        return None
    version: str | None = None
    count: tuple[int, int, str] | None = None
    listed: list[_Row] = []
    gpus: tuple[RvsGpu, ...] = ()
    rows: list[tuple[str, str, bool, int]] = []
    in_actions = False
    for no, line in enumerate(lines[start + 1 :], start + 2):
        text = line.strip()
        cells = [c.strip() for c in text.strip("|").split("|")] if text.startswith("|") else []
        if not in_actions:
            if cells == ["Action Name", "Module", "Result"]:
                if count is None:
                    raise ParseError(tool, no, line, "RVS summary without its 'GPUs' row (the GPUs tested are unknown)")
                gpus = _summary_gpus(count, listed, tool)
                in_actions = True
            elif count is not None:
                if len(cells) == 2:
                    listed.append((cells, no, line))
                elif text and not re.fullmatch(r"\+[=-]+\+", text):
                    raise ParseError(tool, no, line, "not a '| GPU | GPU |' row of the summary's GPU list")
            elif len(cells) == 2 and cells[0] == "RVS version":
                version = cells[1] or None
            elif len(cells) == 2 and cells[0] == "GPUs":
                if not digits(cells[1]) and cells[1] != "No GPUs detected !":
                    raise ParseError(tool, no, line, "'GPUs' row is neither a count nor 'No GPUs detected !'")
                count = (int(cells[1]) if digits(cells[1]) else 0, no, line)
            continue
        if not text:
            continue
        if re.fullmatch(r"\+[=-]+\+", text):
            if rows or text.startswith("+-"):
                return _Summary(version=version, gpus=gpus, rows=rows)
            continue  # the double rule under the column header
        if len(cells) != 3 or not cells[0] or cells[2] not in ("PASS", "FAIL"):
            raise ParseError(tool, no, line, "not a '| action | MODULE | PASS/FAIL |' summary row")
        rows.append((cells[0], cells[1], cells[2] == "PASS", no))
    raise ParseError(tool, len(lines), lines[-1] if lines else "", "RVS summary box not closed (run cut short)")


def _merge_summary(logged: list[_Action], rows: list[tuple[str, str, bool, int]], tool: str) -> list[_Action]:
    """One action per summary row, each joined with the next logged action of that name."""
    pending = list(logged)
    merged: list[_Action] = []
    for name, module, ok, _ in rows:
        match = next((a for a in pending if a.name == name), None)
        if match is None:
            match = _Action(name, module)
        else:
            pending.remove(match)
        match.module = match.module or module
        match.summary = ok
        merged.append(match)
    if pending:
        raise ParseError(tool, 0, pending[0].name, f"action {pending[0].name!r} was logged but is not in the summary")
    return merged


def parse_rvs(text: str) -> RvsResult:
    """Parse RVS text output: action logs (`[RESULT] ...`), the RVS >= 1.3 summary box, `rvs -g`."""
    tool = "rvs"
    if re.match(r"^\s*(?:\{|\[\s*(?:[{\]]|$))", text):
        raise ParseError(tool, 0, text[:80], "RVS JSON logs (-j) are not supported (no real capture known)")
    # A terminal shows what follows a line's last carriage return (`-q` rows start with "\r").
    lines = [strip_ansi(line.removesuffix("\r").rsplit("\r", 1)[-1]) for line in text.split("\n")]
    version_m = re.search(r"ROCm Validation Suite \(version ([^)]+)\)", text)
    gpus = _parse_gpu_list(lines, tool)
    summary = _parse_summary(lines, tool)
    if summary is not None:
        if gpus and {g.bdf for g in gpus} != {g.bdf for g in summary.gpus}:
            raise ParseError(tool, 0, text[:80], "the 'rvs -g' list and the summary's GPU list name different GPUs")
        gpus = gpus or summary.gpus
    known = {row[0] for row in summary.rows} if summary else set()
    actions: list[_Action] = []
    orphans: list[_Action] = []  # verdicts naming a summary action that has no `Action name` line
    run_errors: list[str] = []
    rvs_errors: list[tuple[str, str | None]] = []

    def target(msg: str) -> _Action | None:
        bracket = _BRACKET_RE.match(msg)
        name = bracket.group("name") if bracket else None
        for pool in (actions, orphans):
            named = [a for a in pool if a.name == name]
            if named:
                return named[-1]
        if name is not None and name in known:
            orphans.append(_Action(name))
            return orphans[-1]
        return actions[-1] if actions else None

    for no, line in enumerate(lines, 1):
        if err := _RVS_ERROR_RE.match(line.strip()):
            named = err.group("action") or (re.search(r"\baction '([^']+)'", err.group("msg")) or [None, None])[1]
            rvs_errors.append((line.strip(), named))
            continue
        m = _RVS_LINE_RE.match(line.strip())
        if m is None:
            continue
        msg = m.group("msg")
        name = re.match(r"^Action name\s*:\s*(\S+)", msg)
        if name is not None:
            actions.append(_Action(name.group(1)))
        elif module := re.match(r"^Module name\s*:\s*(\S+)", msg):
            if actions:
                actions[-1].module = module.group(1)
        elif m.group("level") == "ERROR":
            owner = target(msg)
            if owner is None:
                raise ParseError(tool, no, line, "RVS error before any action")
            owner.errors.append(msg)
        elif (v := _VERDICT_RE.search(msg)) is not None and (owner := target(msg)) is not None:
            owner.verdicts.append((v.group("v").upper() == "TRUE", msg))
    if summary is not None:
        actions = _merge_summary(actions + orphans, summary.rows, tool)
    for raw, named in rvs_errors:
        owner = next((a for a in reversed(actions) if a.name == named), None)
        if owner is not None:
            owner.errors.append(raw)
        else:
            run_errors.append(raw)
    if not actions and not gpus:
        raise ParseError(tool, 0, text[:80], "neither RVS actions nor an 'rvs -g' GPU list")
    version = version_m.group(1) if version_m else (summary.version if summary else None)
    return RvsResult(
        version=version,
        gpus=gpus,
        actions=tuple(a.verdict() for a in actions),
        errors=tuple(run_errors),
        summary=summary is not None,
    )


def parse_agfhc(text: str) -> AgfhcResult:
    """Parse AGFHC recipe output (per-test status lines, summary, return-code line)."""
    tool = "agfhc"
    tests: list[TestVerdict] = []
    title: str | None = None
    executing = False
    info: dict[str, str] = {}
    ret: tuple[str, int] | None = None
    totals: tuple[int, int, int] | None = None
    summary: str | None = None
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        if m := re.match(r"^Program exiting with return code (\w+) \[(-?\d+)\]$", s):
            ret = (m.group(1), int(m.group(2)))
        elif m := re.match(r"^Log Directory:\s*(.*)$", s):
            info.setdefault("log", m.group(1))
        elif s.startswith("Product:"):
            fields = dict(p.split(":", 1) for p in s.split("|") if ":" in p)
            info.update({k.strip(): v.strip() for k, v in fields.items()})
        elif s == "Executing tests:":
            executing = True
        elif s == "Summary:":
            executing = False
        elif m := re.match(r"^Tests:\s*(\d+) Total,\s*(\d+) Executed,\s*(\d+) Skipped(?:\s*\|\s*(.*))?$", s):
            totals = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            summary = m.group(4)
        elif executing:
            t = re.match(r"^(?P<status>[A-Z][A-Z_]*):\s*(?P<name>\S+)\s*(?P<rest>.*)$", s)
            if t is None:
                title = s  # a test title line ("GFX bf16 rand int")
                continue
            status = t.group("status")
            tests.append(
                TestVerdict(
                    name=t.group("name"),
                    module=title,
                    passed=status == "PASS",
                    status=status,
                    details=(t.group("rest"),) if t.group("rest") else (),
                )
            )
    if ret is None and not tests and totals is None:
        raise ParseError(tool, 0, text[:80], "no AGFHC test lines, summary or return code")
    if totals is not None and totals[1] != len(tests):
        raise ParseError(tool, 0, summary or "", f"summary says {totals[1]} executed, {len(tests)} test lines")
    gpus = info.get("GPUs")
    return AgfhcResult(
        product=info.get("Product"),
        gpus=int(gpus) if gpus is not None and digits(gpus) else None,
        mode=info.get("Mode"),
        log_directory=info.get("log"),
        tests=tuple(tests),
        total=totals[0] if totals else None,
        executed=totals[1] if totals else None,
        skipped=totals[2] if totals else None,
        summary=summary,
        return_name=ret[0] if ret else None,
        return_code=ret[1] if ret else None,
    )


PARSERS: dict[str, Callable[[str], object]] = {"rvs": parse_rvs, "agfhc": parse_agfhc}
