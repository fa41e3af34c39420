"""Every vendor by name, and which vendor a bundle or snapshot is (by the probes it carries)."""

from __future__ import annotations

from collections.abc import Iterable

from upgrade_gate.errors import UsageError
from upgrade_gate.vendors.amd import AMD
from upgrade_gate.vendors.base import Vendor
from upgrade_gate.vendors.nvidia import NVIDIA

VENDORS: tuple[Vendor, ...] = (AMD, NVIDIA)
"""Every vendor; the first is the default (bundles and snapshots from before the seam are AMD's)."""

DEFAULT = AMD


def vendor_named(name: str) -> Vendor:
    """The vendor called `name` ("amd", "nvidia"); a UsageError (exit 2) naming the choices otherwise."""
    for vendor in VENDORS:
        if vendor.name == name:
            return vendor
    raise UsageError(f"--vendor {name}: expected one of {', '.join(v.name for v in VENDORS)}")


def vendor_of(probe_names: Iterable[str]) -> Vendor:
    """The vendor whose marker probe is among `probe_names` (AMD when none is: older bundles)."""
    names = set(probe_names)
    for vendor in VENDORS[1:]:
        if vendor.marker_probe in names:
            return vendor
    return DEFAULT
