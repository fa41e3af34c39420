"""Parser for `lspci -D -nn -vvv` (also the plain one-line listing and `-nnk` blocks).

Design notes and tool quirks:
- A device starts with an unindented header `[dddd:]bb:dd.f Class name [cccc]: Description [vvvv:dddd]
  (rev xx)`; its detail lines are indented (tabs from lspci itself, spaces in copies from web pages,
  corpus lspci/mi300x-sriov-host-...: 8 spaces). Without `-D`, lspci omits the domain only on machines
  that have nothing but domain 0 (lspci(8)), so a missing domain is read as 0000 - the format defines it.
- LnkCap / LnkSta follow pciutils ls-caps.c: `LnkCap: Port #N, Speed 32GT/s, Width x16, ASPM ...`;
  `LnkSta: Speed 16GT/s (downgraded), Width x8 (downgraded)`. The comparison note changed across
  releases: pciutils <= 3.7 printed `(ok)` / `(downgraded)` / `(strange)`; 2022-01 (3.8) prints nothing
  when equal, `(downgraded)`, or `(overdriven)`, and nothing at all for downstream ports. Speeds are
  2.5/5/8/16/32/64 GT/s or `unknown` (-> None). `downgraded` is true only when lspci itself said so;
  the numbers are kept so a caller can compare LnkSta with LnkCap on any release.
- `Kernel driver in use:` prints one driver name. The AMD GPU-operator documentation (corpus lspci/
  mi300x-sriov-host-...-ANNOTATED-doc.txt) appends `# comments` to that line; a trailing `# ...` is
  dropped, anything else after the name is a ParseError.
- Lines starting with `lspci:` or `pcilib:` are tool warnings that went to the same stream (the libkmod
  warning in corpus lspci/cx7-...); they are kept in `warnings`, never parsed as devices.
- Indented lines before any device header are a `grep` fragment (corpus lspci/mi300x-8gpu-lspci-vvv-
  grep-lnksta-...), not lspci output: which device a LnkSta belongs to is unknowable, so ParseError.
- Without root, lspci prints `Capabilities: <access denied>` and no link fields: `caps_access_denied`
  is set and the link fields stay None (a caller must not read that as "no link").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Bdf, PcieLink
from upgrade_gate.parse.common import digits, normalize_bdf, strip_ansi

TOOL = "lspci"

_HEADER_RE = re.compile(
    r"^(?P<bdf>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) "
    r"(?P<cls>[^:\[\]]+?)(?: \[(?P<clsid>[0-9a-fA-F]{4})\])?: (?P<desc>.*)$"
)
_IDS_RE = re.compile(r" \[(?P<ven>[0-9a-fA-F]{4}):(?P<dev>[0-9a-fA-F]{4})\]")
_REV_RE = re.compile(r" \(rev (?P<rev>[0-9a-fA-F]{2})\)")
_PROGIF_RE = re.compile(r" \(prog-if [^)]*\)")
_SPEED = r"(?P<{0}>[0-9]+(?:\.[0-9]+)?GT/s|unknown)"
# The width ends the value: LnkCap goes on with `, ASPM ...`; LnkSta ends there (pciutils >= 3.6 prints its
# flags on the next line) or goes on with `, TrErr- Train- ...` (pciutils <= 3.5, one line). Anything else
# after the width (a corrupt byte, `x16\ufffd`) is not read past as if the width were whole.
_LNKCAP_RE = re.compile(
    r"^Port #(?P<port>[0-9]+), Speed " + _SPEED.format("speed") + r", Width x(?P<width>[0-9]+)(?:,|$)"
)
_LNKSTA_RE = re.compile(
    r"^Speed " + _SPEED.format("speed") + r"(?: \((?P<sflag>ok|downgraded|strange|overdriven)\))?"
    r", Width x(?P<width>[0-9]+)(?: \((?P<wflag>ok|downgraded|strange|overdriven)\))?"
    r"(?:, [A-Za-z]+[+-](?: [A-Za-z]+[+-])*)?$"
)
_SRIOV_RE = re.compile(r"^Initial VFs: (?P<initial>\d+), Total VFs: (?P<total>\d+), Number of VFs: (?P<num>\d+)")
_VF_DEV_RE = re.compile(r"^VF offset: \d+, stride: \d+, Device ID: (?P<dev>[0-9a-fA-F]{4})$")
_EXPRESS_RE = re.compile(r"^\[[0-9a-f]+\] Express \(v\d+\) (?P<type>[^,]+)")
_WARNING_PREFIXES = ("lspci: ", "pcilib: ")


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkCap:
    """LnkCap: the most the link can do."""

    port: int
    speed_gts: float | None  # None when lspci printed "unknown"
    width: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkStatus:
    """LnkSta: what the link trained to, with lspci's own comparison notes."""

    speed_gts: float | None
    width: int
    speed_note: str | None  # ok / downgraded / strange / overdriven; None when not printed
    width_note: str | None

    @property
    def downgraded(self) -> bool:
        """True when lspci itself marked speed or width as downgraded."""
        return "downgraded" in (self.speed_note, self.width_note)


@dataclass(frozen=True, slots=True, kw_only=True)
class SriovCap:
    """The SR-IOV capability of a physical function."""

    initial_vfs: int
    total_vfs: int
    num_vfs: int
    vf_device_id: str | None  # "101e"


@dataclass(frozen=True, slots=True, kw_only=True)
class PciDevice:
    """One PCI function from lspci."""

    bdf: Bdf
    class_name: str
    class_id: str | None  # "1200" with -nn
    vendor_device: str | None  # "1002:74a1" with -nn
    name: str  # description without the ids and revision
    revision: str | None
    subsystem: str | None
    numa_node: int | None
    express_type: str | None  # "Endpoint", "Root Port", "Upstream Port", "Downstream Port", ...
    link_cap: LinkCap | None
    link_status: LinkStatus | None
    driver: str | None
    kernel_modules: tuple[str, ...]
    sriov: SriovCap | None
    caps_access_denied: bool
    line_no: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LspciResult:
    """Every device lspci listed, in its order, plus tool warnings from the same stream."""

    devices: tuple[PciDevice, ...]
    warnings: tuple[str, ...]


def _speed(text: str) -> float | None:
    return None if text == "unknown" else float(text.removesuffix("GT/s"))


class _DeviceBuilder:
    """Collects one device's detail lines."""

    def __init__(self, header: re.Match[str], line_no: int, raw: str) -> None:
        self.line_no = line_no
        self.bdf = normalize_bdf(header.group("bdf"), tool=TOOL, line_no=line_no, allow_missing_domain=True)
        desc = header.group("desc").strip()
        rev = _REV_RE.search(desc)
        self.revision = rev.group("rev").lower() if rev else None
        desc = _PROGIF_RE.sub("", _REV_RE.sub("", desc))
        ids = list(_IDS_RE.finditer(desc))
        self.vendor_device: str | None = None
        if ids:
            last = ids[-1]
            if last.end() != len(desc):
                raise ParseError(TOOL, line_no, raw, "vendor:device id not at the end of the description")
            self.vendor_device = f"{last.group('ven')}:{last.group('dev')}".lower()
            desc = desc[: last.start()]
        self.name = desc.strip()
        self.class_name = header.group("cls").strip()
        clsid = header.group("clsid")
        self.class_id = clsid.lower() if clsid else None
        self.fields: dict[str, str] = {}
        self.subsystem: str | None = None
        self.numa_node: int | None = None
        self.express_type: str | None = None
        self.link_cap: LinkCap | None = None
        self.link_status: LinkStatus | None = None
        self.driver: str | None = None
        self.modules: tuple[str, ...] = ()
        self.sriov: SriovCap | None = None
        self.in_sriov = False
        self.vf_device_id: str | None = None
        self.denied = False

    def line(self, raw: str, no: int) -> None:
        text = raw.strip()
        key, sep, value = text.partition(":")
        value = value.strip()
        if text.startswith("Capabilities:"):
            rest = text.removeprefix("Capabilities:").strip()
            self.in_sriov = "(SR-IOV)" in rest
            if rest == "<access denied>":
                self.denied = True
            express = _EXPRESS_RE.match(rest)
            if express:
                self._once("Express", no, raw)
                self.express_type = express.group("type").strip()
            return
        if key == "LnkCap" and sep:
            self._once(key, no, raw)
            m = _LNKCAP_RE.match(value)
            if m is None:
                raise ParseError(TOOL, no, raw, "malformed LnkCap")
            self.link_cap = LinkCap(port=int(m["port"]), speed_gts=_speed(m["speed"]), width=int(m["width"]))
        elif key == "LnkSta" and sep:
            self._once(key, no, raw)
            m = _LNKSTA_RE.match(value)
            if m is None:
                raise ParseError(TOOL, no, raw, "malformed LnkSta")
            self.link_status = LinkStatus(
                speed_gts=_speed(m["speed"]),
                width=int(m["width"]),
                speed_note=m["sflag"],
                width_note=m["wflag"],
            )
        elif key == "Kernel driver in use" and sep:
            self._once(key, no, raw)
            name, _, rest = value.partition(" ")
            if not name or (rest.strip() and not rest.strip().startswith("#")):
                raise ParseError(TOOL, no, raw, "malformed kernel driver name")
            self.driver = name
        elif key == "Kernel modules" and sep:
            self._once(key, no, raw)
            self.modules = tuple(m.strip() for m in value.split(",") if m.strip())
        elif key == "Subsystem" and sep:
            self._once(key, no, raw)
            self.subsystem = value
        elif key == "NUMA node" and sep:
            self._once(key, no, raw)
            if not digits(value.lstrip("-")):
                raise ParseError(TOOL, no, raw, "malformed NUMA node")
            self.numa_node = int(value)
        elif self.in_sriov and text.startswith("Initial VFs:"):
            self._once("SR-IOV", no, raw)
            m = _SRIOV_RE.match(text)
            if m is None:
                raise ParseError(TOOL, no, raw, "malformed SR-IOV VF counts")
            self.sriov = SriovCap(
                initial_vfs=int(m["initial"]), total_vfs=int(m["total"]), num_vfs=int(m["num"]), vf_device_id=None
            )
        elif self.in_sriov and text.startswith("VF offset:"):
            m = _VF_DEV_RE.match(text)
            if m is not None:
                self.vf_device_id = m["dev"].lower()

    def _once(self, key: str, no: int, raw: str) -> None:
        if key in self.fields:
            raise ParseError(TOOL, no, raw, f"duplicate {key} for {self.bdf}")
        self.fields[key] = raw

    def build(self) -> PciDevice:
        sriov = self.sriov
        if sriov is not None and self.vf_device_id is not None:
            sriov = SriovCap(
                initial_vfs=sriov.initial_vfs,
                total_vfs=sriov.total_vfs,
                num_vfs=sriov.num_vfs,
                vf_device_id=self.vf_device_id,
            )
        return PciDevice(
            bdf=self.bdf,
            class_name=self.class_name,
            class_id=self.class_id,
            vendor_device=self.vendor_device,
            name=self.name,
            revision=self.revision,
            subsystem=self.subsystem,
            numa_node=self.numa_node,
            express_type=self.express_type,
            link_cap=self.link_cap,
            link_status=self.link_status,
            driver=self.driver,
            kernel_modules=self.modules,
            sriov=sriov,
            caps_access_denied=self.denied,
            line_no=self.line_no,
        )


def parse_lspci(text: str) -> LspciResult:
    """Parse lspci output (`-D -nn -vvv`, `-nnk` or the plain listing) into its devices."""
    devices: list[PciDevice] = []
    warnings: list[str] = []
    seen: dict[str, int] = {}
    current: _DeviceBuilder | None = None
    for no, line in enumerate(strip_ansi(text).splitlines(), 1):
        raw = line.rstrip()
        if not raw.strip():
            continue
        if raw.startswith(_WARNING_PREFIXES):
            warnings.append(raw)
            continue
        if raw[0] in " \t":
            if current is None:
                raise ParseError(TOOL, no, raw, "detail line without a device header (a grep fragment?)")
            current.line(raw, no)
            continue
        header = _HEADER_RE.match(raw)
        if header is None:
            raise ParseError(TOOL, no, raw, "not an lspci device header")
        if current is not None:
            devices.append(current.build())
        current = _DeviceBuilder(header, no, raw)
        if current.bdf in seen:
            raise ParseError(TOOL, no, raw, f"device {current.bdf} listed twice")
        seen[current.bdf] = no
    if current is not None:
        devices.append(current.build())
    if not devices:
        raise ParseError(TOOL, 0, "", "no PCI devices listed")
    return LspciResult(devices=tuple(devices), warnings=tuple(warnings))


def pcie_links(result: LspciResult) -> tuple[PcieLink, ...]:
    """Snapshot `PcieLink`s for every device that reported LnkSta or LnkCap."""
    out: list[PcieLink] = []
    for dev in result.devices:
        if dev.link_status is None and dev.link_cap is None:
            continue
        sta, cap = dev.link_status, dev.link_cap
        out.append(
            PcieLink(
                bdf=dev.bdf,
                vendor_device=dev.vendor_device,
                speed_gts=sta.speed_gts if sta else None,
                width=sta.width if sta else None,
                max_speed_gts=cap.speed_gts if cap else None,
                max_width=cap.width if cap else None,
                downgraded=sta.downgraded if sta else False,
            )
        )
    return tuple(out)


PARSERS: dict[str, Callable[[str], object]] = {"lspci": parse_lspci}
