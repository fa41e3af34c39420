"""`PciAddress`: a PCI bus/device/function address as a value (parse, format, short form, ordering).

Design notes:
- The model keeps `Bdf` (a `NewType` of `str`) as the canonical text `dddd:bb:dd.f` that snapshots
  store in JSON; this type is what code works with when it needs the parts of an address (the
  function that carries a partition number, the device without its function, the domain-less form
  rocminfo and plain lspci print). Nothing slices the text: `PciAddress.parse(bdf).function`.
  (The model's field type stays the string: msgspec decodes no `str` subclass, and the documents keep
  their format.)
- Ordering is numeric (domain, bus, device, function), which equals the order of the canonical text
  for four-digit domains and stays right for a VMD domain printed with more digits ("10000:...").
- `parse` refuses what the tool's format does not define: a short form is accepted only when the caller
  says so (`allow_missing_domain` for `lspci` without `-D` and rocminfo's `bus_dev_fn`,
  `allow_missing_function` for rccl-tests' `[0000:05:00]`), and a device number above 0x1f is refused.
  A refusal is a `ParseError`, never a guess.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Bdf

_BDF_RE = re.compile(
    r"^(?:(?P<domain>[0-9A-Fa-f]{4,8}):)?(?P<bus>[0-9A-Fa-f]{2}):(?P<dev>[0-9A-Fa-f]{2})"
    r"(?:\.(?P<fn>[0-7]))?$"
)

MAX_DOMAIN = 0xFFFFFFFF
MAX_BUS = 0xFF
MAX_DEVICE = 0x1F
MAX_FUNCTION = 0x7


@dataclass(frozen=True, slots=True, order=True)
class PciAddress:
    """One PCI function's address; `str()` is the canonical lower-case `dddd:bb:dd.f`."""

    domain: int
    bus: int
    device: int
    function: int

    def __post_init__(self) -> None:
        for name, value, top in (
            ("domain", self.domain, MAX_DOMAIN),
            ("bus", self.bus, MAX_BUS),
            ("device", self.device, MAX_DEVICE),
            ("function", self.function, MAX_FUNCTION),
        ):
            if not 0 <= value <= top:
                raise ValueError(f"PCI {name} {value:#x} outside 0..{top:#x}")

    @classmethod
    def parse(
        cls,
        raw: str,
        *,
        tool: str = "pci-address",
        line_no: int = 0,
        allow_missing_domain: bool = False,
        allow_missing_function: bool = False,
    ) -> PciAddress:
        """The address a tool printed (`dddd:bb:dd.f`, any case, blanks around ignored), or ParseError."""
        match = _BDF_RE.match(raw.strip())
        if match is None:
            raise ParseError(tool, line_no, raw, "not a PCI address (dddd:bb:dd.f)")
        domain, fn = match.group("domain"), match.group("fn")
        if domain is None and not allow_missing_domain:
            raise ParseError(tool, line_no, raw, "PCI address without a domain")
        if fn is None and not allow_missing_function:
            raise ParseError(tool, line_no, raw, "PCI address without a function number")
        dev = int(match.group("dev"), 16)
        if dev > MAX_DEVICE:
            raise ParseError(tool, line_no, raw, "PCI device number above 0x1f")
        return cls(
            domain=int(domain, 16) if domain is not None else 0,
            bus=int(match.group("bus"), 16),
            device=dev,
            function=int(fn or "0"),
        )

    @classmethod
    def from_bdf_id(cls, bdf_id: int, *, domain: int = 0) -> PciAddress:
        """From rocminfo's BDFID / KFD's location_id: bus << 8 | device << 3 | function."""
        return cls(domain=domain, bus=(bdf_id >> 8) & MAX_BUS, device=(bdf_id >> 3) & MAX_DEVICE, function=bdf_id & 7)

    def __str__(self) -> str:
        # Linux prints domains with %04x, so a VMD domain above 0xffff keeps its extra digits ("10000").
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}.{self.function}"

    @property
    def bdf(self) -> Bdf:
        """The canonical text the model stores."""
        return Bdf(str(self))

    @property
    def short(self) -> str:
        """`bb:dd.f` without the domain (rocminfo's and plain lspci's form)."""
        return f"{self.bus:02x}:{self.device:02x}.{self.function}"

    @property
    def display(self) -> str:
        """The short form when the domain is 0 (what people read in tables), else the full address."""
        return self.short if self.domain == 0 else str(self)

    @property
    def bdf_id(self) -> int:
        """rocminfo's BDFID: bus << 8 | device << 3 | function (the domain is not part of it)."""
        return self.bus << 8 | self.device << 3 | self.function

    @property
    def slot(self) -> tuple[int, int, int]:
        """(domain, bus, device): the physical device, whatever its function (or partition) number."""
        return (self.domain, self.bus, self.device)

    @property
    def slot_text(self) -> str:
        """`dddd:bb:dd`, the device without its function (rccl-tests prints `[0000:05:00]`)."""
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}"

    def with_function(self, function: int) -> PciAddress:
        """The same device at another function (a partition's number sits in the function)."""
        return PciAddress(domain=self.domain, bus=self.bus, device=self.device, function=function)


def address_of(bdf: Bdf | str | None) -> PciAddress | None:
    """The address of a stored canonical BDF; None when absent or not an address (an old document)."""
    if bdf is None:
        return None
    return _address_of(str(bdf))


@functools.lru_cache(maxsize=4096)
def _address_of(text: str) -> PciAddress | None:
    """`address_of`, once per text: a fleet's nodes carry the same few BDFs, and the judge asks ~16 times
    a node (the answer is an immutable value)."""
    try:
        return PciAddress.parse(text)
    except ParseError:
        return None
