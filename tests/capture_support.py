"""One healthy fake MI300X node's capture, and one probe's output changed in it: how the evidence tests
(test_snapshot_evidence*.py, test_brk14_parsers.py) make a real failure out of real formats."""

from __future__ import annotations

import os
from pathlib import Path

from upgrade_gate.cli.collect_cmds import parser_check
from upgrade_gate.collect.bundle import Bundle
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.fakenode import Faults, build_fake_node, mi300x_node
from upgrade_gate.model import replace

NODE = "gpu-node-01"


def healthy_capture(root: Path) -> Bundle:
    """A capture of a healthy fake node built under `root` (the fake tools print the corpus's formats)."""
    node = build_fake_node(root / "node", mi300x_node(NODE, seed=1), Faults())
    return capture(
        LocalRunner(env=node.env(os.environ)), node=NODE, host_root=node.host_root, output_check=parser_check()
    )


def with_stdout(bundle: Bundle, name: str, stdout: str) -> Bundle:
    """`bundle` with probe `name`'s recorded output replaced by `stdout`."""
    records = tuple(
        replace(r, result=replace(r.result, stdout=stdout)) if r.name == name else r for r in bundle.records
    )
    return replace(bundle, records=records)


def stdout_of(bundle: Bundle, name: str) -> str:
    """Probe `name`'s recorded output."""
    record = bundle.record(name)
    assert record is not None
    return record.result.stdout
