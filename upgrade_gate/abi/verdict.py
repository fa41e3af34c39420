"""`upgrade-gate abi` as one function: read both trees and the consumers, judge, return a GateReport.

The answer is a `GateReport` (one `NodeReport` for the library comparison, subject `libraries`, and
one per consumer, subject its path) so the console, JSON, JUnit, Markdown and HTML reporters render
it unchanged, and the exit code follows the same verdict. `rules_evaluated` lists every `abi.*`
rule, so JUnit shows a passing case for each check that found nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from upgrade_gate import __version__
from upgrade_gate.abi.check import LIBRARIES, RULES, Consumer, check_consumers, compare_trees
from upgrade_gate.abi.elf import ElfAbi
from upgrade_gate.abi.tree import ScanStats, consumer_files, read_library_tree, scan
from upgrade_gate.model import Finding, GateReport, NodeName, NodeReport, RuleId, Severity, Verdict


@dataclass(frozen=True, slots=True, kw_only=True)
class AbiResult:
    """The report plus what was read (for the CLI's summary line and the bench)."""

    report: GateReport
    running: ScanStats
    candidate: ScanStats
    libraries: int  # sonames in the running tree
    consumers: int


def check_abi(
    running: Path,
    candidate: Path,
    consumers: Sequence[str] = (),
    *,
    expected: Mapping[str, str] | None = None,
    plan_id: str | None = None,
    cache_dir: Path | None = None,
    workers: int | None = None,
    now: str,
) -> AbiResult:
    """Compare `running` with `candidate` and check `consumers`; InputError (exit 3) on bad input."""
    moves = dict(expected or {})
    memo: dict[tuple[int, ...], ElfAbi] = {}  # files both trees (or a consumer) share are read once
    before = read_library_tree(running, cache_dir=cache_dir, workers=workers, memo=memo)
    after = read_library_tree(candidate, cache_dir=cache_dir, workers=workers, memo=memo)
    paths = consumer_files(consumers)
    abis, _hits = scan(paths, cache_dir=cache_dir, workers=workers, memo=memo)
    checked = [
        Consumer(path=str(p), abi=abis[p])
        for p in paths
        if abis[p].kind in ("ET_DYN", "ET_EXEC") and abis[p].machine != "EM_AMDGPU"
    ]
    nodes = [_node(LIBRARIES, compare_trees(before, after, moves))]
    findings = check_consumers(checked, before, after, moves)
    for consumer in checked:
        nodes.append(_node(NodeName(consumer.path), [f for f in findings if f.node == consumer.path]))
    blocked = any(n.verdict is Verdict.BLOCK for n in nodes)
    report = GateReport(
        verdict=Verdict.BLOCK if blocked else Verdict.PASS,
        generated_at=now,
        tool_version=__version__,
        plan_id=plan_id,
        nodes=tuple(nodes),
        rules_evaluated=tuple(RuleId(r) for r in RULES),
    )
    return AbiResult(
        report=report,
        running=before.stats,
        candidate=after.stats,
        libraries=len(before.libraries),
        consumers=len(checked),
    )


def _node(subject: NodeName, findings: list[Finding]) -> NodeReport:
    order = {Severity.BLOCK: 0, Severity.WARN: 1, Severity.INFO: 2}
    ranked = tuple(sorted(findings, key=lambda f: (order[f.severity], f.rule, f.device or "", f.path or "")))
    blocked = any(f.severity is Severity.BLOCK for f in ranked)
    return NodeReport(node=subject, verdict=Verdict.BLOCK if blocked else Verdict.PASS, findings=ranked)
