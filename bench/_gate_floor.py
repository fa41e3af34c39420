"""`upgrade-gate gate` with every rule removed: the floor of issue 14's end-to-end targets.

`python -m bench._gate_floor <gate arguments>` runs the real `gate` command (list file, forked workers,
each candidate read and decoded strictly, each baseline read from the store's decoded cache, spool, JSON
report) with one change: the judge returns an empty PASS report for each (candidate, baseline) pair it
is given, and no causes are grouped. What it costs is what the two documents of a node cost to read,
decode, release and report, before any rule runs. Bench-only: nothing in `upgrade_gate` knows of it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any


def _empty(nodes: Sequence[tuple[Any, Any]], **_: object) -> list[tuple[Any, frozenset[Any]]]:
    from upgrade_gate.model import NodeReport, Verdict

    return [(NodeReport(node=cand.node.name, verdict=Verdict.PASS), frozenset()) for cand, _base in nodes]


def _no_causes(*_: object) -> tuple[()]:
    return ()


def main(argv: Sequence[str]) -> int:
    """Run `gate` with the judge's rules removed (see the module docstring)."""
    import upgrade_gate.judge.causes as causes
    import upgrade_gate.judge.judge as judge
    from upgrade_gate.cli.main import run

    real = judge.judge_nodes, causes.node_causes
    judge.judge_nodes = _empty  # type: ignore[assignment]  # gate_stream imports it when a worker judges
    causes.node_causes = _no_causes  # type: ignore[assignment]
    try:
        return run(list(argv))
    finally:
        judge.judge_nodes, causes.node_causes = real


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
