"""How a node agent gets its node's baseline: published per node in a ConfigMap, verified by a digest on
the Node.

The baseline store is a git repository on one ReadWriteOnce claim (deploy/store.yaml); a DaemonSet on
hundreds of nodes cannot all mount it, and a ReadOnlyMany store needs a storage class most clusters do
not have. So `upgrade-gate fleet publish-baselines --store DIR` (run after `fleet snapshot`, `baseline
save` or `window promote`, wherever the store is) copies each node's baseline at the store's HEAD into
the API, which every node can reach:

- ConfigMap `upgrade-gate-baseline-<node>` in namespace `upgrade-gate-baselines` (deploy/agent.yaml):
  `binaryData["snapshot.json.gz"]` = the snapshot's canonical JSON, gzip'd (mtime 0: the same baseline
  gives the same bytes); `data`: `node`, `digest` (`sha256:<hex>` of the JSON), `commit` (the store's
  commit it came from).
- Node annotation `upgrade-gate/baseline-digest` = the same digest, written after the ConfigMap.

The agent (`fleet.agent`) accepts a baseline only when the ConfigMap names its node, the JSON's sha256
equals both the ConfigMap's `digest` and the Node's annotation, and the JSON is a schema-valid snapshot
of that node. Anything else (no annotation, no ConfigMap, a digest that differs: a publication half
done, a ConfigMap edited by hand or copied from another node) is `BaselineUnavailable`, and the node's
condition goes Unknown: missing evidence never reads as "no drift".

Design decisions
- Two objects must agree, written by one identity in a fixed order (ConfigMap, then annotation): a
  reader between the two writes sees a mismatch for one cycle (Unknown), never a mixed baseline.
- The namespace holds nothing else, so `create`/`update` on its ConfigMaps (the publisher's Role) reaches
  no other ConfigMap (not CVF's thresholds in `upgrade-gate`), and the agents' `get` reads baselines only.
- A ConfigMap holds at most 1 MiB; an 8-GPU, 8-NIC node's snapshot is ~29 KiB of JSON, 2.5 KiB gzip'd. A
  baseline whose gzip exceeds `MAX_PUBLISHED_BYTES` is refused by name (InputError, exit 3).
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from upgrade_gate.errors import InputError
from upgrade_gate.fleet.errors import KubeNotFoundError
from upgrade_gate.fleet.labels import MANAGED_BY, MANAGER, PREFIX, PURPOSE, validate_node_name
from upgrade_gate.model import NodeName, Snapshot

if TYPE_CHECKING:
    from upgrade_gate.fleet.agent_kube import AgentClient, AgentNode
    from upgrade_gate.store.gitstore import BaselineStore

BASELINES_NAMESPACE = "upgrade-gate-baselines"
DIGEST_ANNOTATION = PREFIX + "baseline-digest"
CONFIGMAP_PREFIX = "upgrade-gate-baseline-"
SNAPSHOT_KEY = "snapshot.json.gz"
MAX_PUBLISHED_BYTES = 900 * 1024  # under the API's 1 MiB per ConfigMap, with room for the metadata
_MAX_JSON_BYTES = 64 * 1024 * 1024  # a gzip bomb in a ConfigMap is refused, not inflated


class BaselineUnavailable(Exception):
    """The node's baseline cannot be had or trusted; `reason` is the condition's reason (CamelCase)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishedBaseline:
    """A verified baseline and where it came from."""

    snapshot: Snapshot
    digest: str
    commit: str


def configmap_name(node: str) -> str:
    """`upgrade-gate-baseline-<node>`; a node name too long for that is replaced by its sha256 prefix."""
    name = CONFIGMAP_PREFIX + node
    return name if len(name) <= 253 else CONFIGMAP_PREFIX + hashlib.sha256(node.encode()).hexdigest()[:40]


def digest_of(document: bytes) -> str:
    """`sha256:<hex>` of a baseline's JSON bytes."""
    return "sha256:" + hashlib.sha256(document).hexdigest()


def baseline_configmap(node: NodeName, document: bytes, commit: str, namespace: str) -> dict[str, Any]:
    """The ConfigMap that publishes one node's baseline (see the module docstring)."""
    import base64

    packed = gzip.compress(document, mtime=0)
    if len(packed) > MAX_PUBLISHED_BYTES:
        raise InputError(
            f"node {node}: its baseline is {len(packed)} bytes gzip'd, over the {MAX_PUBLISHED_BYTES} a ConfigMap "
            "can publish; the agent cannot watch this node (use the `fleet watch` CronJob for it)"
        )
    labels = {"app.kubernetes.io/name": "upgrade-gate", MANAGED_BY: MANAGER, PURPOSE: "agent-baseline"}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": configmap_name(node), "namespace": namespace, "labels": labels},
        "data": {"node": str(node), "digest": digest_of(document), "commit": commit},
        "binaryData": {SNAPSHOT_KEY: base64.b64encode(packed).decode("ascii")},
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class PublishResult:
    """One node's publication: `published`, `unchanged` or `no baseline`."""

    node: NodeName
    outcome: str
    digest: str = ""


def publish_baselines(
    client: AgentClient,
    store: BaselineStore,
    nodes: Sequence[NodeName],
    *,
    namespace: str = BASELINES_NAMESPACE,
    annotations: dict[NodeName, dict[str, str]] | None = None,
) -> tuple[PublishResult, ...]:
    """Publish the baseline at the store's HEAD of every node in `nodes` that has one.

    The ConfigMap is written every time (one deleted by hand comes back); a node whose annotation already
    names the digest is `unchanged` (its Node is not patched, so its agent reads nothing new).
    `annotations` are the nodes' current annotations (from the list that chose `nodes`)."""
    from upgrade_gate.snapshot.io import dumps_snapshot

    pinned = store.pin()
    stored = set(store.nodes(pinned))
    out: list[PublishResult] = []
    for node in nodes:
        if node not in stored:
            out.append(PublishResult(node=node, outcome="no baseline"))
            continue
        document = dumps_snapshot(store.load_trusted(node, pinned)).encode("utf-8")
        digest = digest_of(document)
        client.put_configmap(baseline_configmap(node, document, pinned, namespace), namespace)  # even if unchanged:
        if (annotations or {}).get(node, {}).get(DIGEST_ANNOTATION) == digest:  # a deleted one comes back
            out.append(PublishResult(node=node, outcome="unchanged", digest=digest))
            continue
        client.patch_node_annotations(node, {DIGEST_ANNOTATION: digest})
        out.append(PublishResult(node=node, outcome="published", digest=digest))
    return tuple(out)


def read_baseline(
    client: AgentClient, node: AgentNode, *, namespace: str = BASELINES_NAMESPACE, cached: PublishedBaseline | None
) -> PublishedBaseline:
    """The node's published baseline, verified (see the module docstring); `cached` is reused while the
    Node's digest still names it. BaselineUnavailable says why not; API failures propagate (KubeError)."""
    from upgrade_gate.snapshot.io import loads_snapshot

    name = validate_node_name(node.name)
    wanted = node.annotations.get(DIGEST_ANNOTATION)
    if not wanted:
        raise BaselineUnavailable(
            "NoBaseline", f"node {name}: no {DIGEST_ANNOTATION} annotation: no baseline published for this node "
            "(`upgrade-gate fleet publish-baselines --store DIR`)",
        )  # fmt: skip
    if cached is not None and cached.digest == wanted:
        return cached
    cm_name = configmap_name(name)
    where = f"configmap {namespace}/{cm_name}"
    try:
        cm = client.read_configmap(cm_name, namespace)
    except KubeNotFoundError:
        raise BaselineUnavailable("NoBaseline", f"node {name}: {where} does not exist (published digest "
                                  f"{wanted[:19]}...)") from None  # fmt: skip
    except InputError as exc:
        raise BaselineUnavailable("BaselineUnverified", f"node {name}: {exc}") from None
    if cm.data.get("node") != name:
        raise BaselineUnavailable("BaselineUnverified", f"node {name}: {where} names node {cm.data.get('node')!r}")
    packed = cm.binary.get(SNAPSHOT_KEY)
    if packed is None:
        raise BaselineUnavailable("BaselineUnverified", f"node {name}: {where} has no binaryData {SNAPSHOT_KEY!r}")
    try:
        with gzip.GzipFile(fileobj=_bytes_io(packed)) as fh:
            document = fh.read(_MAX_JSON_BYTES + 1)
    except (OSError, EOFError) as exc:
        raise BaselineUnavailable(
            "BaselineUnverified", f"node {name}: {where}: {SNAPSHOT_KEY} is not gzip: {exc}"
        ) from None
    if len(document) > _MAX_JSON_BYTES:
        raise BaselineUnavailable("BaselineUnverified", f"node {name}: {where}: over {_MAX_JSON_BYTES} bytes inflated")
    actual = digest_of(document)
    if actual != wanted or cm.data.get("digest") != wanted:
        raise BaselineUnavailable(
            "BaselineUnverified",
            f"node {name}: {where} holds {actual[:19]}... (its own digest field {cm.data.get('digest', '')[:19]}...), "
            f"the node's {DIGEST_ANNOTATION} names {wanted[:19]}...: publication incomplete or the ConfigMap edited",
        )
    try:
        snapshot = loads_snapshot(document, source=where)
    except InputError as exc:
        raise BaselineUnavailable("BaselineUnverified", f"node {name}: {exc}") from None
    if snapshot.node.name != name:
        raise BaselineUnavailable("BaselineUnverified", f"node {name}: {where} holds node {snapshot.node.name!r}")
    return PublishedBaseline(snapshot=snapshot, digest=actual, commit=cm.data.get("commit", ""))


def _bytes_io(data: bytes) -> Any:
    import io

    return io.BytesIO(data)
