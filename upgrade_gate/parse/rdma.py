"""Parsers for `ibv_devinfo -v`, `rdma link show` and `rdma dev` (`show_gids`, `ibstat`: see `rdma_tables`).

Design decisions:
- One frozen result type per tool; the snapshot builder maps them onto `model.Nic` / `model.NicPort`.
  Nothing here guesses: a port whose GID table was not printed (plain `ibv_devinfo` without `-v`) has
  `gid_count` None, not 0. An empty table printed by `-v` is a real 0 (the "empty GID table" fault).
- `ibv_devinfo` blocks are keyed by name, not by indentation: real output uses TABs, copies in notes
  and issue threads expand them to 8/16/24 spaces. Only "unindented line = `hca_id:`" is relied on.
  Capability-flag continuation lines (indented, no colon) are skipped.
- A block whose port count disagrees with `phys_port_cnt` is truncated output: ParseError.
- `show_gids` and `ibstat` live in `rdma_tables` (split 2026); `PARSERS` here still lists all five keys
  and their public names are re-exported, so the registry and callers need no change.

Tool quirks (dated notes):
- 2017 rdma-core devinfo.c: GID lines are `\\t\\t\\tGID[%3d]:\\t\\t<gid>` and, on Ethernet link layers,
  end in `, RoCE v1` / `, RoCE v2` (v2 GIDs printed through inet_ntop, compressed). InfiniBand ports
  print no type.
- ionic (Pensando Pollara, fw 1.117.x) reports transport `InfiniBand (0)` on an Ethernet link layer.
- 2024 iproute2 `rdma link show` / `rdma dev` print a trailing space on every line.
- `rdma link show` prints one line per DEV/PORT (one per port record of the kernel's RDMA netlink port dump);
  a DEV/PORT printed twice is garbled output, a ParseError naming the second line, never merged.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from upgrade_gate.errors import ParseError
from upgrade_gate.parse.common import KeyValueBlock, check_name, leading_int
from upgrade_gate.parse.rdma_tables import (
    Ibstat,
    IbstatCa,
    IbstatFailure,
    IbstatPort,
    ShowGids,
    ShowGidsEntry,
    parse_ibstat,
    parse_show_gids,
)

_WIDTH_FACTOR = {"1X": 1, "2X": 2, "4X": 4, "8X": 8, "12X": 12}
_SPEED_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?) Gbps$")
_KV_RE = re.compile(r"^\s+(?P<key>[A-Za-z][\w .\-/]*?)\s*:\s*(?P<val>.*?)\s*$")
_GID_RE = re.compile(r"^\s+GID\[\s*(?P<idx>\d+)\]:\s*(?P<gid>[0-9A-Fa-f:.]+)(?:,\s*(?P<type>.+?))?\s*$")
_CODE_RE = re.compile(r"^(?P<name>.*?)\s*\((?P<code>\d+)\)$")


# --------------------------------------------------------------------------- ibv_devinfo


@dataclass(frozen=True, slots=True, kw_only=True)
class GidEntry:
    """One non-empty GID table entry of a port."""

    index: int
    gid: str
    gid_type: str | None  # "RoCE v1" / "RoCE v2"; None where the tool prints no type (IB link layer)


@dataclass(frozen=True, slots=True, kw_only=True)
class IbvPort:
    """One port block of `ibv_devinfo`."""

    port: int
    state: str  # "PORT_ACTIVE", "PORT_DOWN"
    state_code: int | None
    link_layer: str
    phys_state: str | None = None  # "LINK_UP", "DISABLED"
    max_mtu: int | None = None
    active_mtu: int | None = None
    sm_lid: int | None = None
    port_lid: int | None = None
    active_width: str | None = None  # "4X"
    active_speed: str | None = None  # "50.0 Gbps", "invalid speed"
    rate_gbps: float | None = None  # lanes x lane speed; None when either is unknown
    gid_tbl_len: int | None = None
    gid_table_printed: bool = False  # only `-v` prints the GID table
    gids: tuple[GidEntry, ...] = ()

    @property
    def gid_count(self) -> int | None:
        """Non-empty GIDs, or None when the GID table was not printed."""
        return len(self.gids) if self.gid_table_printed else None

    @property
    def roce_v2(self) -> bool | None:
        """True when a RoCE v2 GID exists; None when the table or the GID types are unknown."""
        if not self.gid_table_printed:
            return None
        if any(g.gid_type == "RoCE v2" for g in self.gids):
            return True
        if self.link_layer == "InfiniBand" or all(g.gid_type is not None for g in self.gids):
            return False
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class IbvDevice:
    """One `hca_id:` block."""

    name: str
    fw_ver: str
    node_guid: str
    phys_port_cnt: int
    transport: str | None = None
    sys_image_guid: str | None = None
    vendor_id: str | None = None
    vendor_part_id: str | None = None
    hw_ver: str | None = None
    board_id: str | None = None
    ports: tuple[IbvPort, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class IbvDevinfo:
    """Every RDMA device `ibv_devinfo` listed (empty when it printed "No IB devices found")."""

    devices: tuple[IbvDevice, ...]


def _code(raw: str) -> tuple[str, int | None]:
    m = _CODE_RE.match(raw)
    return (m.group("name"), int(m.group("code"))) if m else (raw, None)


def _int(raw: str, tool: str, line_no: int) -> int:
    return leading_int(raw, tool, line_no)


def _opt_int(raw: str | None, tool: str, line_no: int) -> int | None:
    return None if raw is None else _int(raw, tool, line_no)


class _Block(KeyValueBlock):
    """Accumulator for one hca_id or port block while reading lines."""

    def __init__(self, name: str, line_no: int) -> None:
        super().__init__(name, line_no)
        self.gids: list[GidEntry] = []
        self.ports: list[_Block] = []


def _build_port(b: _Block, tool: str) -> IbvPort:
    state, code = _code(b.require("state", tool))
    width = b.get("active_width")
    speed = b.get("active_speed")
    width_txt = _code(width)[0] if width else None
    speed_txt = _code(speed)[0] if speed else None
    # libibverbs' devinfo prints these two from fixed tables (`width_str`, `speed_str`): a width from
    # 1X/2X/4X/8X/12X or "invalid width", a speed "<n> Gbps" or "invalid speed". Anything else ("N/A", a
    # rate in Mbps, a word) is not its output: refused, never read as "rate unknown" (2026-12-07).
    if width_txt is not None and width_txt not in _WIDTH_FACTOR and width_txt != "invalid width":
        raise ParseError(tool, b.line_of("active_width"), width or "", "active_width is not one ibv_devinfo prints")
    match = _SPEED_RE.match(speed_txt) if speed_txt is not None else None
    if speed_txt is not None and match is None and speed_txt != "invalid speed":
        raise ParseError(tool, b.line_of("active_speed"), speed or "", "active_speed is not one ibv_devinfo prints")
    rate = None
    if width_txt in _WIDTH_FACTOR and match is not None:
        rate = _WIDTH_FACTOR[width_txt] * float(match.group(1))
    return IbvPort(
        port=_int(b.name, tool, b.line_no),
        state=state,
        state_code=code,
        link_layer=b.require("link_layer", tool),
        phys_state=_code(b.get("phys_state") or "")[0] or None,
        max_mtu=_opt_int(b.get("max_mtu"), tool, b.line_of("max_mtu")),
        active_mtu=_opt_int(b.get("active_mtu"), tool, b.line_of("active_mtu")),
        sm_lid=_opt_int(b.get("sm_lid"), tool, b.line_of("sm_lid")),
        port_lid=_opt_int(b.get("port_lid"), tool, b.line_of("port_lid")),
        active_width=width_txt,
        active_speed=speed_txt,
        rate_gbps=rate,
        gid_tbl_len=_opt_int(b.get("gid_tbl_len"), tool, b.line_of("gid_tbl_len")),
        gid_table_printed="gid_tbl_len" in b.kv or bool(b.gids),
        gids=tuple(b.gids),
    )


def _build_device(b: _Block, tool: str) -> IbvDevice:
    port_cnt = b.port_count("phys_port_cnt", tool, found=len(b.ports), shown="phys_port_cnt {}")
    return IbvDevice(
        name=b.name,
        fw_ver=b.require("fw_ver", tool),
        node_guid=b.require("node_guid", tool),
        phys_port_cnt=port_cnt,
        transport=b.get("transport"),
        sys_image_guid=b.get("sys_image_guid"),
        vendor_id=b.get("vendor_id"),
        vendor_part_id=b.get("vendor_part_id"),
        hw_ver=b.get("hw_ver"),
        board_id=b.get("board_id"),
        ports=tuple(_build_port(p, tool) for p in b.ports),
    )


def parse_ibv_devinfo(text: str) -> IbvDevinfo:
    """Parse `ibv_devinfo`, `-v` or `-vv` (tabs or expanded spaces)."""
    tool = "ibv_devinfo"
    devices: list[_Block] = []
    port: _Block | None = None
    lines = text.splitlines()
    if any(line.strip() == "No IB devices found" for line in lines) and not any(
        line.startswith("hca_id:") for line in lines
    ):
        return IbvDevinfo(devices=())
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if not line[0].isspace():
            m = re.match(r"^hca_id:\s*(\S+)\s*$", line)
            if m is None:
                raise ParseError(tool, no, line, "unindented line is not 'hca_id:'")
            devices.append(_Block(check_name(m.group(1), tool=tool, line_no=no, excerpt=line), no))
            port = None
            continue
        if not devices:
            raise ParseError(tool, no, line, "attribute before the first 'hca_id:'")
        gid = _GID_RE.match(line)
        if gid is not None:
            if port is None:
                raise ParseError(tool, no, line, "GID line outside a port block")
            port.gids.append(GidEntry(index=int(gid.group("idx")), gid=gid.group("gid"), gid_type=gid.group("type")))
            continue
        kv = _KV_RE.match(line)
        if kv is None:
            continue  # capability-flag continuation line
        key, val = kv.group("key"), kv.group("val")
        if key == "port":
            port = _Block(val, no)
            devices[-1].ports.append(port)
        elif port is not None:
            port.kv.setdefault(key, (val, no))
        else:
            devices[-1].kv.setdefault(key, (val, no))
    if not devices:
        raise ParseError(tool, 0, text[:80], "no 'hca_id:' block")
    return IbvDevinfo(devices=tuple(_build_device(d, tool) for d in devices))


# --------------------------------------------------------------------------- rdma link / rdma dev


@dataclass(frozen=True, slots=True, kw_only=True)
class RdmaLink:
    """One `link DEV/PORT ...` line of `rdma link show`."""

    device: str
    port: int
    state: str  # "ACTIVE", "DOWN"
    physical_state: str | None = None  # "LINK_UP", "DISABLED"
    netdev: str | None = None
    attrs: dict[str, str] = field(default_factory=dict)  # every key/value pair as printed


@dataclass(frozen=True, slots=True, kw_only=True)
class RdmaLinks:
    """All links `rdma link show` printed."""

    links: tuple[RdmaLink, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RdmaDev:
    """One `N: name: node_type ... fw ... node_guid ...` line of `rdma dev`."""

    index: int
    name: str
    node_type: str | None = None
    fw: str | None = None
    node_guid: str | None = None
    sys_image_guid: str | None = None
    attrs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class RdmaDevs:
    """All devices `rdma dev` printed."""

    devices: tuple[RdmaDev, ...]


def _pairs(tokens: list[str], tool: str, no: int, line: str) -> dict[str, str]:
    if len(tokens) % 2:
        raise ParseError(tool, no, line, "odd number of key/value tokens")
    return dict(zip(tokens[::2], tokens[1::2], strict=True))


def parse_rdma_link(text: str) -> RdmaLinks:
    """Parse `rdma link show`."""
    tool = "rdma-link"
    links: list[RdmaLink] = []
    seen: dict[tuple[str, int], int] = {}
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = re.match(r"^link\s+(?P<dev>[^/\s]+)/(?P<port>\d+)\s*(?P<rest>.*)$", line)
        if m is None:
            raise ParseError(tool, no, line, "not a 'link DEV/PORT ...' line")
        attrs = _pairs(m.group("rest").split(), tool, no, line)
        if "state" not in attrs:
            raise ParseError(tool, no, line, "link without 'state'")
        check_name(m.group("dev"), tool=tool, line_no=no, excerpt=line)
        if "netdev" in attrs:
            check_name(attrs["netdev"], tool=tool, line_no=no, excerpt=line)
        key = (m.group("dev"), int(m.group("port")))
        if key in seen:
            # iproute2 prints each DEV/PORT once: a second line is not a second port, and which line's state
            # is the port's cannot be told.
            raise ParseError(tool, no, line, f"link {key[0]}/{key[1]} printed twice (first at line {seen[key]})")
        seen[key] = no
        links.append(
            RdmaLink(
                device=m.group("dev"),
                port=int(m.group("port")),
                state=attrs["state"],
                physical_state=attrs.get("physical_state"),
                netdev=attrs.get("netdev"),
                attrs=attrs,
            )
        )
    if not links:
        raise ParseError(tool, 0, text[:80], "no link lines")
    return RdmaLinks(links=tuple(links))


def parse_rdma_dev(text: str) -> RdmaDevs:
    """Parse `rdma dev` (`rdma dev show`)."""
    tool = "rdma-dev"
    devs: list[RdmaDev] = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = re.match(r"^(?P<idx>\d+):\s+(?P<name>\S+?):\s*(?P<rest>.*)$", line)
        if m is None:
            raise ParseError(tool, no, line, "not an 'N: name: ...' line")
        attrs = _pairs(m.group("rest").split(), tool, no, line)
        devs.append(
            RdmaDev(
                index=int(m.group("idx")),
                name=m.group("name"),
                node_type=attrs.get("node_type"),
                fw=attrs.get("fw"),
                node_guid=attrs.get("node_guid"),
                sys_image_guid=attrs.get("sys_image_guid"),
                attrs=attrs,
            )
        )
    if not devs:
        raise ParseError(tool, 0, text[:80], "no device lines")
    return RdmaDevs(devices=tuple(devs))


PARSERS: dict[str, Callable[[str], object]] = {
    "ibv_devinfo": parse_ibv_devinfo,
    "rdma-link": parse_rdma_link,
    "rdma-dev": parse_rdma_dev,
    "show_gids": parse_show_gids,
    "ibstat": parse_ibstat,
}

__all__ = [
    "PARSERS",
    "GidEntry",
    "Ibstat",
    "IbstatCa",
    "IbstatFailure",
    "IbstatPort",
    "IbvDevice",
    "IbvDevinfo",
    "IbvPort",
    "RdmaDev",
    "RdmaDevs",
    "RdmaLink",
    "RdmaLinks",
    "ShowGids",
    "ShowGidsEntry",
    "parse_ibstat",
    "parse_ibv_devinfo",
    "parse_rdma_dev",
    "parse_rdma_link",
    "parse_show_gids",
]
