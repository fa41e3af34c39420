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
  only with return code 0, >= 1 test, and every test PASS. A missing return-code line (killed or
  truncated run) gives `return_code=None`, which does not pass.

Tool quirks (dated notes):
- RVS 1.1.0 (2024) pads timestamps inconsistently: `[  2456.47741 ]` (trailing space inside brackets).
- RVS 1.1.0 `-g`: `GPU[ 7 -   705]` right-aligns the GPU id; the device id is decimal (`Device 29857`).
- AGFHC 1.23.2 (2025): `Tests: 5 Total, 5 Executed, 0 Skipped | All Tests Passed`; `--recipe-info`
  prints `Tests: 0 Total` with AGFHC_SUCCESS [0] - zero tests is not a pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Bdf
from upgrade_gate.parse.common import normalize_bdf

_RVS_LINE_RE = re.compile(r"^\[(?P<level>[A-Z]+)\s*\]\s*\[\s*(?P<ts>[\d.]+)\s*\]\s*(?P<msg>.*?)\s*$")
_VERDICT_RE = re.compile(r"\b(?:met|pass)\s*:\s*(?P<v>TRUE|FALSE)\b", re.IGNORECASE)
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
    device_id: int  # PCI device id, printed in decimal


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

    @property
    def passed(self) -> bool:
        """True only with >= 1 action and every action explicitly passing."""
        return bool(self.actions) and all(a.passed is True for a in self.actions)

    @property
    def first_failure(self) -> str | None:
        """Name of the first action that failed or printed no verdict."""
        return next((a.name for a in self.actions if a.passed is not True), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgfhcResult:
    """An AGFHC recipe run."""

    product: str | None
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
    def passed(self) -> bool:
        """True only with return code 0, >= 1 test and every test PASS."""
        return self.return_code == 0 and bool(self.tests) and all(t.passed is True for t in self.tests)

    @property
    def first_failure(self) -> str | None:
        """First failing test, or a reason when the run itself did not succeed."""
        failed = next((t.name for t in self.tests if t.passed is not True), None)
        if failed is not None:
            return failed
        if self.return_code is None:
            return "no AGFHC return code (run killed or truncated)"
        if self.return_code != 0:
            return f"{self.return_name} [{self.return_code}]"
        return None if self.tests else "no tests executed"


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

    def __init__(self, name: str) -> None:
        self.name = name
        self.module: str | None = None
        self.verdicts: list[tuple[bool, str]] = []
        self.errors: list[str] = []

    def verdict(self) -> TestVerdict:
        passed: bool | None = None
        if self.errors or any(not ok for ok, _ in self.verdicts):
            passed = False
        elif self.verdicts:
            passed = True
        return TestVerdict(
            name=self.name,
            module=self.module,
            passed=passed,
            status={True: "PASS", False: "FAIL", None: "NO-VERDICT"}[passed],
            details=tuple(self.errors) + tuple(msg for _, msg in self.verdicts),
        )


def parse_rvs(text: str) -> RvsResult:
    """Parse RVS text output: action logs (`[RESULT] ...`) and/or the `rvs -g` GPU list."""
    tool = "rvs"
    if re.match(r"^\s*(?:\{|\[\s*(?:[{\]]|$))", text):
        raise ParseError(tool, 0, text[:80], "RVS JSON logs (-j) are not supported (no real capture known)")
    lines = text.splitlines()
    version_m = re.search(r"ROCm Validation Suite \(version ([^)]+)\)", text)
    gpus = _parse_gpu_list(lines, tool)
    actions: list[_Action] = []
    for no, line in enumerate(lines, 1):
        m = _RVS_LINE_RE.match(line.strip())
        if m is None:
            continue
        msg = m.group("msg")
        name = re.match(r"^Action name\s*:\s*(\S+)", msg)
        if name is not None:
            actions.append(_Action(name.group(1)))
        elif not actions:
            if m.group("level") == "ERROR":
                raise ParseError(tool, no, line, "RVS error before any action")
        elif module := re.match(r"^Module name\s*:\s*(\S+)", msg):
            actions[-1].module = module.group(1)
        elif m.group("level") == "ERROR":
            actions[-1].errors.append(msg)
        elif (v := _VERDICT_RE.search(msg)) is not None:
            actions[-1].verdicts.append((v.group("v").upper() == "TRUE", msg))
    if not actions and not gpus:
        raise ParseError(tool, 0, text[:80], "neither RVS actions nor an 'rvs -g' GPU list")
    return RvsResult(
        version=version_m.group(1) if version_m else None,
        gpus=gpus,
        actions=tuple(a.verdict() for a in actions),
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
    return AgfhcResult(
        product=info.get("Product"),
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
