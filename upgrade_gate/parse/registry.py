"""Every parser by tool name, for `upgrade-gate parse --tool TOOL FILE` and the corpus tests.

Each parser module exports `PARSERS: dict[str, Callable[[str], object]]` (tool name -> pure parse
function). This module only gathers them; it is the one place that knows the module list.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

PARSER_MODULES = (
    "upgrade_gate.parse.rocminfo",
    "upgrade_gate.parse.lspci",
    "upgrade_gate.parse.sysfs",
    "upgrade_gate.parse.dmesg",
    "upgrade_gate.parse.amdsmi",
    "upgrade_gate.parse.amdsmi_monitor",
    "upgrade_gate.parse.rocmsmi_thermal",
    "upgrade_gate.parse.rocmsmi",
    "upgrade_gate.parse.rdma",
    "upgrade_gate.parse.rccl_tests",
    "upgrade_gate.parse.perftest",
    "upgrade_gate.parse.rvs",
    "upgrade_gate.parse.host",
    "upgrade_gate.parse.nvidia_smi_xml",
    "upgrade_gate.parse.nvidia_smi_topo",
    "upgrade_gate.parse.nvidia_smi_nvlink",
    "upgrade_gate.parse.dcgmi",
    "upgrade_gate.parse.nvidia_dmesg",
    "upgrade_gate.parse.nvidia_smi_query",
)


def all_parsers() -> dict[str, Callable[[str], object]]:
    """Tool name -> parse function, over every parser module that exists."""
    out: dict[str, Callable[[str], object]] = {}
    for name in PARSER_MODULES:
        out.update(importlib.import_module(name).PARSERS)
    return out
