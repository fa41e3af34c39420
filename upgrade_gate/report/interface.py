"""The reporter plug-in seam: an exhaustive format enum and the context every renderer gets.

A renderer is a pure function `render(ctx) -> str`; the CLI writes the files. `RENDERERS` in
`upgrade_gate.report.registry` maps every `ReportFormat` to its renderer, and a test checks that the
mapping is exhaustive.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from upgrade_gate.model import GateReport, NodeName, Snapshot


class ConsoleDetail(StrEnum):
    """How much the console report shows."""

    SUMMARY = "summary"  # the verdict and one line per node, for CI logs
    CAUSES = "causes"  # the verdict, one line per cause, a pointer to the full report (the default)
    VERBOSE = "verbose"  # every finding under its cause, and the checklist table


class ReportFormat(StrEnum):
    """Every output format the gate can write."""

    CONSOLE = "console"
    JSON = "json"
    JUNIT = "junit"
    MARKDOWN = "markdown"
    HTML = "html"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportContext:
    """What a renderer may use: the judge's report plus the snapshots it compared."""

    report: GateReport
    baselines: Mapping[NodeName, Snapshot] = field(default_factory=dict)
    candidates: Mapping[NodeName, Snapshot] = field(default_factory=dict)
    color: bool = False  # console only; the CLI sets it from the terminal and NO_COLOR
    detail: ConsoleDetail = ConsoleDetail.CAUSES  # console only
    width: int = 120  # console only: the terminal's width (the CLI reads it; COLUMNS overrides)
