"""Parser for `rocminfo` (plain, no options): HSA agents in enumeration order, with their memory pools.

Design notes and tool quirks (dated by the ROCm release that printed them):
- The GPU agents, in the order printed, are the order in which HIP enumerates devices; `gpu_agents`
  keeps that order and the snapshot's `Gpu.index` comes from it.
- rocminfo prints `BDFID` as one 16-bit integer, `bus << 8 | device << 3 | function`
  (`HSA_AMD_AGENT_INFO_BDFID`, a `uint16_t` in rocminfo.cc). It never prints the PCI domain, in any
  release checked (ROCm 3.x to 7.2.4), so this parser does not guess one: it keeps `bdf_id` and the
  domain-less `bus_dev_fn` ("1b:00.0"); the snapshot joins it with the full BDF another tool printed
  (amd-smi, lspci, KFD's `domain` property): `parse.bdf.PciAddress.from_bdf_id(bdf_id, domain=...)`.
- rocminfo prints no NUMA node for an agent in any release checked; the KFD topology (`parse_kfd_properties`)
  and amd-smi carry it instead, so `RocmAgent` has no NUMA field rather than an always-None one.
- `Uuid:` reads `CPU-XX` for CPUs and `GPU-XX` for GPUs without a unique id (consumer iGPUs, corpus
  rocminfo/mi100-plus-ryzen7900x-...); both become None. Under WSL the line is missing for GPUs (None).
- 2024 (ROCm 6.x/7.x) labels are padded to 25 columns and values to 35 with trailing blanks; a label that
  is longer than the column runs into its value (`Alloc Recommended Granule:4KB`,
  `WatchPts on Addr. Ranges:1`), and some labels end in `::` (`Packet Processor uCode::`). ROCm 5.x
  lacks `Runtime Ext Version`, `Memory Properties`, `Coherent Host Access` and the recommended granule.
- ROCm 5.7 and 7.2.4 wrap the banner in colour codes (`ESC[37m ... ESC[0m`); HSA errors are red.
- ROCm <= 4.x (2021, ROCm/ROCm#1366) prints `Able to open /dev/kfd read-write` after the banner on
  success (newer rocminfo.cc `CheckInitialState` is silent); accepted before the system attributes only.
  ROCm 4.0 also lacks `ASIC Revision`. ROCm 7.2 adds `XNACK enabled:` / `VMM Support:` attributes.
- Failure outputs are real broken systems and raise ParseError: "ROCk module is NOT loaded/live",
  "Unable to open /dev/kfd", "hsa api call failure", "Agent creation failed", and any output without
  the closing `*** Done ***` (truncated: a missing agent must never look like a smaller node).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from upgrade_gate.errors import ParseError
from upgrade_gate.parse.bdf import PciAddress
from upgrade_gate.parse.common import strip_ansi

TOOL = "rocminfo"

_FAILURES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"ROCk module is NOT (?:loaded|live)"), "amdgpu (ROCk) kernel module not loaded"),
    (re.compile(r"Unable to open /dev/kfd"), "cannot open /dev/kfd"),
    (re.compile(r"Agent creation failed"), "HSA agent creation failed"),
    (re.compile(r"hsa api call failure"), "HSA runtime call failed"),
    (re.compile(r"Call returned HSA_STATUS_ERROR"), "HSA runtime call failed"),
    (re.compile(r"is not member of .* group"), "user cannot access /dev/kfd (group membership)"),
)
_KV_RE = re.compile(r"^(?P<indent> *)(?P<label>[^:]+?):{1,2}[ \t]*(?P<value>.*)$")
_AGENT_RE = re.compile(r"^Agent (\d+)$")
_POOL_RE = re.compile(r"^Pool (\d+)$")
_ISA_RE = re.compile(r"^ISA (\d+)$")
_INT_HEX_RE = re.compile(r"^(\d+)(?:\(0x([0-9a-fA-F]+)\))?(?:\s*KB)?$")
_BANNER_RE = re.compile(r"^ROCk module(?: version (?P<ver>\S+))? is loaded$")
_PREFLIGHT_OK = "Able to open /dev/kfd read-write"  # ROCm <= 4.x, printed after the banner on success
_GFX_RE = re.compile(r"^gfx[0-9a-f]+$")
_STAR_LINE = "*******"


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryPool:
    """One HSA memory pool of an agent (`Pool N` block)."""

    number: int
    segment: str  # GLOBAL / GROUP / READONLY / PRIVATE
    flags: tuple[str, ...]  # e.g. ("COARSE GRAINED",); empty for non-GLOBAL pools
    size_kb: int
    allocatable: bool | None
    accessible_by_all: bool | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RocmAgent:
    """One HSA agent (CPU or GPU) as rocminfo printed it."""

    number: int  # the "Agent N" ordinal, 1-based over all agents
    name: str
    uuid: str | None  # "GPU-07386a321fa45d1e"; None for CPU-XX / GPU-XX / absent
    marketing_name: str | None
    vendor_name: str | None
    device_type: str  # CPU / GPU / DSP
    node: int
    internal_node_id: int | None
    chip_id: int | None
    asic_revision: int | None
    compute_units: int | None
    simds_per_cu: int | None
    wavefront_size: int | None
    max_clock_mhz: int | None
    bdf_id: int | None  # None for CPU agents (always printed as 0)
    bus_dev_fn: str | None  # "1b:00.0" decoded from bdf_id; rocminfo prints no PCI domain
    gfx_target: str | None  # "gfx942" for GPU agents
    isas: tuple[str, ...]
    pools: tuple[MemoryPool, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RocmInfo:
    """A complete rocminfo listing."""

    rock_version: str | None  # amdgpu module version from the banner; None when not printed
    runtime_version: str | None
    runtime_ext_version: str | None
    agents: tuple[RocmAgent, ...]

    @property
    def gpu_agents(self) -> tuple[RocmAgent, ...]:
        """GPU agents in enumeration order: the order HIP sees (index 0 first)."""
        return tuple(a for a in self.agents if a.device_type == "GPU")


def vram_kb(agent: RocmAgent) -> int | None:
    """Size of the agent's GLOBAL COARSE GRAINED pool (device memory for a GPU), None if absent."""
    for pool in agent.pools:
        if pool.segment == "GLOBAL" and "COARSE GRAINED" in pool.flags:
            return pool.size_kb
    return None


# --------------------------------------------------------------------------- helpers


def _int(value: str, line_no: int, raw: str) -> int:
    match = _INT_HEX_RE.match(value.strip())
    if match is None:
        raise ParseError(TOOL, line_no, raw, f"expected an integer, got {value.strip()!r}")
    dec = int(match.group(1))
    if match.group(2) is not None and int(match.group(2), 16) != dec:
        raise ParseError(TOOL, line_no, raw, "decimal and hex values disagree")
    return dec


def _bool(value: str, line_no: int, raw: str) -> bool:
    text = value.strip()
    if text not in ("TRUE", "FALSE"):
        raise ParseError(TOOL, line_no, raw, f"expected TRUE/FALSE, got {text!r}")
    return text == "TRUE"


def _opt(value: str) -> str | None:
    return value.strip() or None


class _AgentBuilder:
    """Collects one agent's fields while its block is read."""

    def __init__(self, number: int, line_no: int) -> None:
        self.number = number
        self.line_no = line_no
        self.fields: dict[str, tuple[str, int, str]] = {}
        self.pools: list[MemoryPool] = []
        self.pool: dict[str, tuple[str, int, str]] | None = None
        self.pool_number = 0
        self.isas: list[str] = []
        self.section = ""  # "", "cache", "pool", "isa", "dims"

    def finish_pool(self) -> None:
        if self.pool is None:
            return
        fields, self.pool = self.pool, None
        if "Segment" not in fields or "Size" not in fields:
            raise ParseError(TOOL, self.line_no, f"Pool {self.pool_number}", "pool without Segment/Size")
        seg_value, seg_line, seg_raw = fields["Segment"]
        segment, _, flag_text = seg_value.partition(";")
        flags: tuple[str, ...] = ()
        if flag_text:
            label, _, flag_list = flag_text.strip().partition(":")
            if label != "FLAGS":
                raise ParseError(TOOL, seg_line, seg_raw, "malformed pool segment")
            flags = tuple(f.strip() for f in flag_list.split(",") if f.strip())
        size_value, size_line, size_raw = fields["Size"]
        alloc = fields.get("Allocatable")
        access = fields.get("Accessible by all")
        self.pools.append(
            MemoryPool(
                number=self.pool_number,
                segment=segment.strip(),
                flags=flags,
                size_kb=_int(size_value, size_line, size_raw),
                allocatable=_bool(*alloc) if alloc else None,
                accessible_by_all=_bool(*access) if access else None,
            )
        )

    def build(self) -> RocmAgent:
        self.finish_pool()
        f = self.fields

        def need(key: str) -> tuple[str, int, str]:
            if key not in f:
                raise ParseError(TOOL, self.line_no, f"Agent {self.number}", f"agent without {key!r}")
            return f[key]

        def opt_int(key: str) -> int | None:
            return _int(*f[key]) if key in f else None

        name = _opt(need("Name")[0])
        if name is None:
            raise ParseError(TOOL, need("Name")[1], need("Name")[2], "agent with an empty name")
        device_type = need("Device Type")[0].strip()
        if device_type not in ("CPU", "GPU", "DSP"):
            raise ParseError(TOOL, f["Device Type"][1], f["Device Type"][2], "unknown device type")
        node = _int(*need("Node"))
        uuid = _opt(f["Uuid"][0]) if "Uuid" in f else None
        if uuid is not None and uuid.endswith("-XX"):
            uuid = None
        gfx_target: str | None = None
        bdf_id: int | None = None
        bus_dev_fn: str | None = None
        if device_type == "GPU":
            need("Compute Unit")
            gfx_target = name
            if not _GFX_RE.match(name):
                raise ParseError(TOOL, f["Name"][1], f["Name"][2], "GPU agent name is not a gfx target")
            if "BDFID" in f:
                bdf_id = _int(*f["BDFID"])
                if bdf_id > 0xFFFF:
                    raise ParseError(TOOL, f["BDFID"][1], f["BDFID"][2], "BDFID above 16 bits")
                bus_dev_fn = PciAddress.from_bdf_id(bdf_id).short
        return RocmAgent(
            number=self.number,
            name=name,
            uuid=uuid,
            marketing_name=_opt(f["Marketing Name"][0]) if "Marketing Name" in f else None,
            vendor_name=_opt(f["Vendor Name"][0]) if "Vendor Name" in f else None,
            device_type=device_type,
            node=node,
            internal_node_id=opt_int("Internal Node ID"),
            chip_id=opt_int("Chip ID"),
            asic_revision=opt_int("ASIC Revision"),
            compute_units=opt_int("Compute Unit"),
            simds_per_cu=opt_int("SIMDs per CU"),
            wavefront_size=opt_int("Wavefront Size"),
            max_clock_mhz=opt_int("Max Clock Freq. (MHz)"),
            bdf_id=bdf_id,
            bus_dev_fn=bus_dev_fn,
            gfx_target=gfx_target,
            isas=tuple(self.isas),
            pools=tuple(self.pools),
        )


# --------------------------------------------------------------------------- parser


def _check_failures(lines: list[str]) -> None:
    for no, line in enumerate(lines, 1):
        for pattern, message in _FAILURES:
            if pattern.search(line):
                raise ParseError(TOOL, no, line.strip(), message)


def parse_rocminfo(text: str) -> RocmInfo:
    """Parse plain `rocminfo` output into its agents; ParseError for failure or truncated output."""
    lines = [strip_ansi(line).rstrip() for line in text.splitlines()]
    _check_failures(lines)
    if not any(line.strip() for line in lines):
        raise ParseError(TOOL, 0, "", "empty output")
    try:
        agents_at = lines.index("HSA Agents")
    except ValueError:
        raise ParseError(TOOL, 0, lines[0] if lines else "", "no 'HSA Agents' section") from None
    done = [i for i, line in enumerate(lines) if line == "*** Done ***"]
    if not done:
        raise ParseError(TOOL, len(lines), lines[-1], "no '*** Done ***' end marker: output truncated")
    if len(done) > 1 or done[0] < agents_at:
        raise ParseError(TOOL, done[-1] + 1, lines[done[-1]], "misplaced '*** Done ***' marker")
    rock_version, runtime, runtime_ext = _parse_header(lines[:agents_at])
    agents = _parse_agents(lines, agents_at + 1, done[0])
    if not agents:
        raise ParseError(TOOL, agents_at + 1, "HSA Agents", "no agents listed")
    return RocmInfo(
        rock_version=rock_version,
        runtime_version=runtime,
        runtime_ext_version=runtime_ext,
        agents=tuple(agents),
    )


def _parse_header(lines: list[str]) -> tuple[str | None, str | None, str | None]:
    rock_version: str | None = None
    seen: dict[str, str] = {}
    for no, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped or set(stripped) == {"="} or stripped == "HSA System Attributes":
            continue
        banner = _BANNER_RE.match(stripped)
        if banner:
            rock_version = banner.group("ver")
            continue
        if stripped in ("WSL environment detected.", _PREFLIGHT_OK):
            continue
        match = _KV_RE.match(line)
        if match is None:
            raise ParseError(TOOL, no, line, "unexpected line in system attributes")
        label = match.group("label").strip()
        if label in seen:
            raise ParseError(TOOL, no, line, f"duplicate system attribute {label!r}")
        seen[label] = match.group("value").strip()
    if "Runtime Version" not in seen:
        raise ParseError(TOOL, 0, "", "no 'Runtime Version' in system attributes")
    return rock_version, seen.get("Runtime Version"), seen.get("Runtime Ext Version")


def _parse_agents(lines: list[str], start: int, end: int) -> list[RocmAgent]:
    agents: list[RocmAgent] = []
    current: _AgentBuilder | None = None
    i = start
    while i < end:
        raw = lines[i]
        no = i + 1
        stripped = raw.strip()
        i += 1
        if not stripped or (set(stripped) == {"="} and current is None):
            continue
        if stripped == _STAR_LINE:
            # "*******" / "Agent N" / "*******" opens the next agent.
            header = _AGENT_RE.match(lines[i].strip()) if i < end else None
            if header is None or i + 1 >= end or lines[i + 1].strip() != _STAR_LINE:
                raise ParseError(TOOL, no, raw, "malformed agent header")
            number = int(header.group(1))
            expected = current.number + 1 if current is not None else 1
            if number != expected:
                raise ParseError(TOOL, i + 1, lines[i], "agents out of sequence")
            if current is not None:
                agents.append(current.build())
            current = _AgentBuilder(number, i + 1)
            i += 2
            continue
        if current is None:
            raise ParseError(TOOL, no, raw, "text before the first agent")
        _agent_line(current, raw, no)
    if current is not None:
        agents.append(current.build())
    return agents


def _agent_line(agent: _AgentBuilder, raw: str, no: int) -> None:
    indent = len(raw) - len(raw.lstrip(" "))
    stripped = raw.strip()
    if indent <= 2:
        # agent level
        agent.finish_pool()
        match = _KV_RE.match(raw)
        if match is None or indent != 2:
            raise ParseError(TOOL, no, raw, "unexpected agent line")
        label, value = match.group("label").strip(), match.group("value")
        agent.section = {
            "Cache Info": "cache",
            "Pool Info": "pool",
            "ISA Info": "isa",
            "Workgroup Max Size per Dimension": "dims",
            "Grid Max Size per Dimension": "dims",
        }.get(label, "")
        if agent.section:
            return
        if label in agent.fields:
            raise ParseError(TOOL, no, raw, f"duplicate field {label!r} in agent {agent.number}")
        agent.fields[label] = (value, no, raw)
        return
    if agent.section in ("cache", "dims"):
        return  # cache sizes and per-dimension limits are not part of the result
    if agent.section == "pool":
        _pool_line(agent, raw, stripped, indent, no)
        return
    if agent.section == "isa":
        if indent == 4:
            if _ISA_RE.match(stripped) is None and stripped != "N/A":
                raise ParseError(TOOL, no, raw, "unexpected line in ISA info")
            return
        match = _KV_RE.match(raw)
        if indent == 6 and match is not None and match.group("label").strip() == "Name":
            agent.isas.append(match.group("value").strip())
        return
    raise ParseError(TOOL, no, raw, "unexpected indented line")


def _pool_line(agent: _AgentBuilder, raw: str, stripped: str, indent: int, no: int) -> None:
    if indent == 4:
        match = _POOL_RE.match(stripped)
        if match is None:
            raise ParseError(TOOL, no, raw, "unexpected line in pool info")
        agent.finish_pool()
        agent.pool_number = int(match.group(1))
        if agent.pool_number != len(agent.pools) + 1:
            raise ParseError(TOOL, no, raw, "pools out of sequence")
        agent.pool = {}
        return
    match = _KV_RE.match(raw)
    if agent.pool is None or match is None or indent != 6:
        raise ParseError(TOOL, no, raw, "unexpected line in pool info")
    label = match.group("label").strip()
    if label in agent.pool:
        raise ParseError(TOOL, no, raw, f"duplicate pool field {label!r}")
    agent.pool[label] = (match.group("value"), no, raw)


PARSERS: dict[str, Callable[[str], object]] = {"rocminfo": parse_rocminfo}
