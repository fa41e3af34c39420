"""Parsers for the MLNX_OFED / infiniband-diags tables: `show_gids` and `ibstat`.

Split out of `rdma` (2026) to keep modules small; `rdma.PARSERS` still lists both keys and `rdma`
re-exports the public names, so the registry and callers are unchanged. This module imports nothing
from `rdma` (which imports it); both build on `common.KeyValueBlock`.

Design decisions and tool quirks (dated notes):
- MLNX_OFED `show_gids`: the trailing DEV (netdev) column is empty for a port without a netdev, and the
  IPv4 column is empty for link-local GIDs; the `n_gids_found=N` footer must match the rows.
- `ibstat` ending in `ibpanic: ... stat of IB device 'X' failed` (the device vanished between listing and
  reading, gpud testdata, exit 255): the parser does NOT raise, because the devices read before the
  panic are real evidence; instead the result carries `failures` and `vanished` ("mlx5_8"), and
  `complete` is False. A consumer must treat an incomplete `Ibstat` as a failed probe for that device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from upgrade_gate.errors import ParseError
from upgrade_gate.parse.common import KeyValueBlock, check_name, digits, leading_int


def _int(raw: str, tool: str, line_no: int) -> int:
    return leading_int(raw, tool, line_no)


class _CaBlock(KeyValueBlock):
    """Accumulator for one `CA 'name'` or `Port N:` block while reading ibstat lines."""

    def __init__(self, name: str, line_no: int) -> None:
        super().__init__(name, line_no)
        self.ports: list[_CaBlock] = []


# --------------------------------------------------------------------------- show_gids


@dataclass(frozen=True, slots=True, kw_only=True)
class ShowGidsEntry:
    """One row of the MLNX_OFED `show_gids` table."""

    device: str
    port: int
    index: int
    gid: str
    ipv4: str | None
    version: str  # "v1" / "v2"
    netdev: str | None  # None where the DEV column is empty (no netdev)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShowGids:
    """The `show_gids` table and its `n_gids_found` footer."""

    entries: tuple[ShowGidsEntry, ...]
    n_gids_found: int

    def gid_count(self, device: str, port: int) -> int:
        """GIDs listed for one device port."""
        return sum(1 for e in self.entries if e.device == device and e.port == port)

    def roce_v2(self, device: str, port: int) -> bool:
        """True when the device port has a v2 (RoCE v2) GID."""
        return any(e.version == "v2" for e in self.entries if e.device == device and e.port == port)


def parse_show_gids(text: str) -> ShowGids:
    """Parse `show_gids` output, checking rows against the `n_gids_found` footer."""
    tool = "show_gids"
    entries: list[ShowGidsEntry] = []
    footer: int | None = None
    header_seen = False
    for no, line in enumerate(text.splitlines(), 1):
        tokens = line.split()
        if not tokens or set(line.strip()) <= {"-", " "}:
            continue
        if tokens[0] == "DEV":
            header_seen = True
            continue
        m = re.match(r"^n_gids_found=(\d+)$", line.strip())
        if m is not None:
            footer = int(m.group(1))
            continue
        if not header_seen or footer is not None or len(tokens) < 5:
            raise ParseError(tool, no, line, "not a show_gids row")
        dev, port, index, gid, *rest = tokens
        ipv4 = rest.pop(0) if rest and re.fullmatch(r"\d+\.\d+\.\d+\.\d+", rest[0]) else None
        if not rest or not re.fullmatch(r"v[12]", rest[0]) or len(rest) > 2:
            raise ParseError(tool, no, line, "expected VER (v1/v2) then an optional DEV column")
        if not (digits(port) and digits(index)) or ":" not in gid:
            raise ParseError(tool, no, line, "bad PORT/INDEX/GID column")
        netdev = rest[1] if len(rest) == 2 else None
        entries.append(
            ShowGidsEntry(
                device=dev, port=int(port), index=int(index), gid=gid, ipv4=ipv4, version=rest[0], netdev=netdev
            )
        )
    if footer is None:
        raise ParseError(tool, 0, text[-80:], "no n_gids_found footer (truncated output)")
    if footer != len(entries):
        raise ParseError(tool, 0, f"n_gids_found={footer}", f"footer says {footer}, table has {len(entries)}")
    return ShowGids(entries=tuple(entries), n_gids_found=footer)


# --------------------------------------------------------------------------- ibstat


@dataclass(frozen=True, slots=True, kw_only=True)
class IbstatPort:
    """One `Port N:` block of `ibstat`."""

    port: int
    state: str  # "Active", "Down"
    physical_state: str | None = None  # "LinkUp", "Disabled"
    rate: int | None = None  # Gb/s as printed
    base_lid: int | None = None
    lmc: int | None = None
    sm_lid: int | None = None
    capability_mask: str | None = None
    port_guid: str | None = None
    link_layer: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class IbstatCa:
    """One `CA 'name'` block of `ibstat`."""

    name: str
    ca_type: str | None
    num_ports: int
    fw_ver: str | None
    hw_ver: str | None
    node_guid: str | None
    sys_image_guid: str | None
    ports: tuple[IbstatPort, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class IbstatFailure:
    """An `ibpanic:` line: ibstat gave up, typically because a device vanished while it read."""

    line_no: int
    device: str | None
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Ibstat:
    """Every CA ibstat printed, plus the failures that cut it short."""

    cas: tuple[IbstatCa, ...]
    failures: tuple[IbstatFailure, ...] = ()

    @property
    def complete(self) -> bool:
        """False when ibstat panicked; the output then does not cover every device."""
        return not self.failures

    @property
    def vanished(self) -> tuple[str, ...]:
        """Devices ibstat named in a failure (listed, then unreadable)."""
        return tuple(f.device for f in self.failures if f.device is not None)


_IBSTAT_CA_KEYS = frozenset(
    {"CA type", "Number of ports", "Firmware version", "Hardware version", "Node GUID", "System image GUID"}
)


def _ibstat_port(b: _CaBlock, tool: str) -> IbstatPort:
    def opt_int(key: str) -> int | None:
        raw = b.get(key)
        return None if raw is None else _int(raw, tool, b.line_of(key))

    return IbstatPort(
        port=_int(b.name, tool, b.line_no),
        state=b.require("State", tool),
        physical_state=b.get("Physical state"),
        rate=opt_int("Rate"),
        base_lid=opt_int("Base lid"),
        lmc=opt_int("LMC"),
        sm_lid=opt_int("SM lid"),
        capability_mask=b.get("Capability mask"),
        port_guid=b.get("Port GUID"),
        link_layer=b.get("Link layer"),
    )


def _ibstat_ca(b: _CaBlock, tool: str) -> IbstatCa:
    num = b.port_count("Number of ports", tool, found=len(b.ports), shown="'Number of ports: {}'")
    return IbstatCa(
        name=b.name,
        ca_type=b.get("CA type"),
        num_ports=num,
        fw_ver=b.get("Firmware version"),
        hw_ver=b.get("Hardware version"),
        node_guid=b.get("Node GUID"),
        sys_image_guid=b.get("System image GUID"),
        ports=tuple(_ibstat_port(p, tool) for p in b.ports),
    )


def parse_ibstat(text: str) -> Ibstat:
    """Parse `ibstat`, recording an `ibpanic:` ending instead of dropping the vanished device."""
    tool = "ibstat"
    cas: list[_CaBlock] = []
    failures: list[IbstatFailure] = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("ibpanic:"):
            dev = re.search(r"device '([^']+)'", line)
            failures.append(IbstatFailure(line_no=no, device=dev.group(1) if dev else None, message=line))
            continue
        ca = re.match(r"^CA '([^']+)'\s*$", line)
        if ca is not None:
            cas.append(_CaBlock(check_name(ca.group(1), tool=tool, line_no=no, excerpt=line), no))
            continue
        if not cas or not line[0].isspace():
            raise ParseError(tool, no, line, "expected \"CA 'name'\" or an indented attribute")
        port = re.match(r"^\s+Port (\d+):\s*$", line)
        kv = re.match(r"^\s+([A-Za-z][A-Za-z ]*?):\s*(.*?)\s*$", line)
        if port is not None:
            cas[-1].ports.append(_CaBlock(port.group(1), no))
        elif kv is None:
            raise ParseError(tool, no, line, "not a 'Key: value' line")
        elif cas[-1].ports:
            cas[-1].ports[-1].kv.setdefault(kv.group(1), (kv.group(2), no))
        elif kv.group(1) in _IBSTAT_CA_KEYS:
            cas[-1].kv.setdefault(kv.group(1), (kv.group(2), no))
    if not cas and not failures:
        raise ParseError(tool, 0, text[:80], "no \"CA 'name'\" block")
    return Ibstat(cas=tuple(_ibstat_ca(b, tool) for b in cas), failures=tuple(failures))
