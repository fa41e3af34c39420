"""Which GPU vendor a Kubernetes node is: the vendor whose probes capture it and whose phases run on it.

Design decisions:
- Order of evidence: an explicit `--vendor`, else the node's baseline (`vendors.vendor_of` its probes:
  the vendor it was when it last passed), else the one vendor whose device-plugin resource the node
  advertises (`Vendor.kube.gpu_resource`: `amd.com/gpu`, `nvidia.com/gpu`), else the default (AMD: the
  only vendor before issue 30; a wrong guess blocks on the probes the node lacks, never passes).
- Doubt is a reason, not a guess (fail closed): a node advertising two vendors' GPUs, or one whose
  `--vendor` or baseline names a vendor other than the one whose GPUs it advertises, is neither
  captured nor run; the caller records the reason as the node's error (`window validate` blocks).
"""

from __future__ import annotations

from upgrade_gate.fleet.objects import KubeNode
from upgrade_gate.model import Snapshot
from upgrade_gate.vendors import DEFAULT, VENDORS, Vendor, vendor_of


def node_vendor(node: KubeNode, *, baseline: Snapshot | None = None, explicit: Vendor | None = None) -> Vendor | str:
    """The GPU vendor of `node`: `explicit` (`--vendor`), else its baseline's (`vendor_of` the probes), else
    the one vendor whose device-plugin resource it advertises, else the default (AMD: a wrong guess blocks
    on the probes it lacks). A string says why there is none (fail closed): the node advertises two
    vendors' GPUs, or the vendor chosen is not the one whose GPUs the node advertises."""
    advertised = [v for v in VENDORS if node.gpu_count(v.kube.gpu_resource) > 0]
    if len(advertised) > 1:
        names = " and ".join(v.kube.gpu_resource for v in advertised)
        return f"node {node.name} advertises {names}: which vendor's probes and phases apply is unknown"
    if explicit is not None:
        chosen, source = explicit, f"--vendor {explicit.name}"
    elif baseline is not None:
        chosen = vendor_of(p.name for p in baseline.probes)
        source = f"its baseline ({chosen.name})"
    else:
        return advertised[0] if advertised else DEFAULT
    if advertised and advertised[0].name != chosen.name:
        return (
            f"node {node.name}: {source} says {chosen.title}, but the node advertises "
            f"{advertised[0].kube.gpu_resource} ({advertised[0].title})"
        )
    return chosen
