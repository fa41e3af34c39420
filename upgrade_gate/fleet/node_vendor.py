"""Which GPU vendor a Kubernetes node is: the vendor whose probes capture it and whose phases run on it.

Design decisions:
- Order of evidence: an explicit `--vendor`, else the node's baseline (`vendors.vendor_of` its probes:
  the vendor it was when it last passed), else the one vendor whose device-plugin resource the node
  advertises (`Vendor.kube.gpu_resource`: `amd.com/gpu`, `nvidia.com/gpu`), else the default (AMD: the
  only vendor before issue 30; a wrong guess blocks on the probes the node lacks, never passes).
- Doubt is a reason, not a guess (fail closed): a node advertising two vendors' GPUs, or one whose
  `--vendor` or baseline names a vendor other than the one whose GPUs it advertises, is neither
  captured nor run; the caller records the reason as the node's error (`window validate` blocks).
- Which nodes are GPU nodes at all (`gpu_nodes`): by default every vendor's discovery label, so the
  fleet commands' default finds a mixed fleet's AMD and NVIDIA nodes alike (before, the default
  selector was AMD's label alone, and NVIDIA nodes needed `--selector`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from upgrade_gate.fleet.objects import KubeNode
from upgrade_gate.model import Snapshot
from upgrade_gate.vendors import DEFAULT, VENDORS, Vendor, vendor_of

if TYPE_CHECKING:
    from upgrade_gate.fleet.kube import KubeClient


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


def gpu_nodes(client: KubeClient, selector: str | None) -> tuple[KubeNode, ...]:
    """The nodes a fleet command works on, sorted by name: those matching the label `selector` ("" is
    every node); None (the commands' default) is every vendor's GPU nodes, each found by its vendor's
    discovery label (`Vendor.kube.node_label`), so a mixed fleet needs no `--selector`. One label
    selector cannot say "amd-gpu=true or gpu.present=true", hence one list per vendor, merged by name."""
    if selector is not None:
        return client.list_nodes(selector or None)
    found: dict[str, KubeNode] = {}
    for vendor in VENDORS:
        for node in client.list_nodes(vendor_selector(vendor)):
            found.setdefault(node.name, node)
    return tuple(found[name] for name in sorted(found))


def vendor_selector(vendor: Vendor) -> str:
    """The label selector of `vendor`'s GPU nodes (`feature.node.kubernetes.io/amd-gpu=true`, ...)."""
    key, value = vendor.kube.node_label
    return f"{key}={value}"


def describe_selector(selector: str | None) -> str:
    """`selector` as a reason reads it: quoted, "every node" for "", every vendor's label for None."""
    if selector is None:
        return " or ".join(vendor_selector(v) for v in VENDORS)
    return repr(selector) if selector else "every node"
