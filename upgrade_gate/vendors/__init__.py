"""GPU vendors: the one place that names a vendor's probes, parsers, pins, fake shapes and phase commands.

See `vendors.base` for the design; `vendors.amd` and `vendors.nvidia` are the two vendors, gathered in
`vendors.registry`. Everything above (snapshot model, judge, store, reports, window) stays vendor-neutral.
"""

from upgrade_gate.vendors.amd import AMD
from upgrade_gate.vendors.base import CommandSpec, FileSpec, KubeFacts, OrderPin, ProbeSpec, UtilSampler, Vendor
from upgrade_gate.vendors.nvidia import NVIDIA
from upgrade_gate.vendors.registry import DEFAULT, VENDORS, vendor_named, vendor_of

__all__ = [
    "AMD",
    "DEFAULT",
    "NVIDIA",
    "VENDORS",
    "CommandSpec",
    "FileSpec",
    "KubeFacts",
    "OrderPin",
    "ProbeSpec",
    "UtilSampler",
    "Vendor",
    "vendor_named",
    "vendor_of",
]
