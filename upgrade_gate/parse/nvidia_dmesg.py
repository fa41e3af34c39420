"""Kernel-log scan of NVIDIA nodes: `NVRM: Xid`, "fallen off the bus", GSP timeouts, by data file.

Design notes and tool quirks:
- One engine, one table per vendor: the messages and their severities live in
  `upgrade_gate/data/dmesg_patterns_nvidia.yaml`, read by `parse.dmesg.load_patterns` and matched by
  `parse.dmesg.parse_dmesg` (timestamps, continuation lines, refusals of garbage and of `dmesg:` errors
  are the AMD scan's own). The AMD table stays as it is: an AMD gate does not judge Xids, an NVIDIA gate
  does not judge amdgpu RAS lines. The host's own devices (PCIe, the NICs) are the AMD table's entries of
  other drivers, appended by `load_nvidia_patterns`: one copy of them for both vendors.
- The per-family fatal map: a pattern names the architectures it applies to (nvidia-smi -q -x
  `<product_architecture>`, lower-cased, blanks as '-': "Ada Lovelace" -> "ada-lovelace"); `family_of`
  turns the printed name into that key. GSP Xids (119/120) need GSP firmware (Turing and later); the
  contained/uncontained ECC Xids (94/95) exist from A100 on.
- The driver names a GPU as `PCI:dddd:bb:dd` in Xid lines (no function: an NVIDIA GPU is function 0)
  and as `dddd:bb:dd.f` in the "fallen off the bus" text. The shared engine takes only the full form;
  an event it left without a device gets the Xid form's address with function 0.
- 2025-02 (corpus dmesg/nvidia-xid119-...): a GSP timeout is followed by RPC history tables and a kernel
  stack on their own lines; they are not events. Driver 570's "fallen off the bus" is three lines, the
  continuation lines indented with no timestamp (corpus dmesg/nvidia-fallen-off-bus-...).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from importlib import resources

from upgrade_gate.errors import ConfigError, ParseError
from upgrade_gate.model import replace
from upgrade_gate.parse.common import normalize_bdf
from upgrade_gate.parse.dmesg import DmesgResult, PatternTable, load_default_patterns, load_patterns, parse_dmesg

TOOL = "dmesg-nvidia"
DATA_FILE = "dmesg_patterns_nvidia.yaml"

_XID_PCI_RE = re.compile(r"\bPCI:(?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\)")


@functools.cache
def load_nvidia_patterns() -> PatternTable:
    """The NVIDIA pattern table shipped in `upgrade_gate/data/dmesg_patterns_nvidia.yaml`, followed by the host's
    own devices' patterns of the shipped table (`dmesg_patterns.yaml`, every driver but amdgpu: PCIe, the NICs).
    Those never match an `NVRM:` line, so their place after the catch-all Xid changes no first match."""
    ref = resources.files("upgrade_gate") / "data" / DATA_FILE
    own = load_patterns(ref.read_text(encoding="utf-8"), source=DATA_FILE)
    host = tuple(p for p in load_default_patterns().patterns if p.driver != "amdgpu")
    clash = {p.id for p in own.patterns} & {p.id for p in host}
    if clash:
        raise ConfigError(f"{DATA_FILE}: {sorted(clash)[0]!r} is a host pattern of dmesg_patterns.yaml: not again here")
    return PatternTable(version=own.version, patterns=own.patterns + host)


def family_of(architecture: str | None) -> str | None:
    """The pattern table's family key of an nvidia-smi architecture ("Ada Lovelace" -> "ada-lovelace")."""
    if architecture is None or not architecture.strip():
        return None
    return "-".join(architecture.strip().lower().split())


def parse_nvidia_dmesg(text: str, patterns: PatternTable | None = None, *, family: str | None = None) -> DmesgResult:
    """Classify dmesg output of an NVIDIA node with `patterns` (default: the shipped NVIDIA table)."""
    result = parse_dmesg(text, patterns if patterns is not None else load_nvidia_patterns(), family=family)
    events = []
    for event in result.events:
        match = _XID_PCI_RE.search(event.text) if event.bdf is None else None
        if match is not None:
            try:
                bdf = normalize_bdf(match.group("bdf"), tool=TOOL, line_no=event.line_no, allow_missing_function=True)
            except ParseError:
                bdf = None  # an address-like text the kernel did not print as one (device number above 0x1f)
            event = replace(event, bdf=bdf)
        events.append(event)
    return replace(result, events=tuple(events))


def _parse_default(text: str) -> DmesgResult:
    return parse_nvidia_dmesg(text)


PARSERS: dict[str, Callable[[str], object]] = {TOOL: _parse_default}
