"""The API calls of the node agent and of baseline publication, as a `KubeClient` with three verbs more.

`AgentClient` is `KubeClient` plus: read one node's annotations, labels and `UpgradeGateDrift`
condition in one GET; patch that condition from what that GET returned (no second read, which
`KubeClient.set_node_condition` makes); read a ConfigMap whole (`data` and `binaryData`); create or
replace one (`create`, then `update` on AlreadyExists). Every request goes through `ApiBase`'s retry
and error-mapping loop, so errors are the fleet's (`KubeForbiddenError` names verb and resource).

Design decisions
- Per cycle the agent sends one GET of its Node and, only when the condition changed or its heartbeat
  is due, one strategic-merge PATCH of `nodes/status` (node-problem-detector's write): at 30 s on a
  thousand nodes that is ~33 reads/s and a few writes/s, not 66 requests/s. The ConfigMap is read only
  when the node's published digest differs from the one the agent verified last.
- Answers are typed here (`AgentNode`), as `fleet.objects` does for the other calls: nothing past this
  module sees API JSON.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from upgrade_gate.fleet.errors import KubeAlreadyExistsError, KubeInvalidError
from upgrade_gate.fleet.kube import KubeClient
from upgrade_gate.fleet.kube.shapes import STRATEGIC_MERGE_PATCH, Json, q
from upgrade_gate.fleet.labels import validate_node_name
from upgrade_gate.report.prometheus import CONDITION_TYPE


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentNode:
    """What the agent reads of its Node each cycle."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    condition: dict[str, str] | None = None  # the current UpgradeGateDrift condition, as strings


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigMapData:
    """A ConfigMap's text and binary entries (binary ones base64-decoded)."""

    data: dict[str, str] = field(default_factory=dict)
    binary: dict[str, bytes] = field(default_factory=dict)


def _strings(raw: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in raw.items() if isinstance(v, str)} if isinstance(raw, dict) else {}


class AgentClient(KubeClient):
    """`KubeClient` with the agent's node read and condition write, and ConfigMap read/write."""

    def read_agent_node(self, name: str) -> AgentNode:
        """The node's labels, annotations and current `UpgradeGateDrift` condition (one GET)."""
        validate_node_name(name)
        obj = self._json_request("get", "nodes", "GET", f"/api/v1/nodes/{q(name)}", name=name)
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
        conditions = status.get("conditions") if isinstance(status, dict) else None
        current = next(
            (_strings(c) for c in conditions or () if isinstance(c, dict) and c.get("type") == CONDITION_TYPE), None
        )
        return AgentNode(
            name=name,
            labels=_strings(meta.get("labels") if isinstance(meta, dict) else None),
            annotations=_strings(meta.get("annotations") if isinstance(meta, dict) else None),
            condition=current,
        )

    def patch_drift_condition(self, name: str, condition: Mapping[str, Any]) -> None:
        """Set the condition by type (strategic merge patch of `nodes/status`; the caller keeps
        `lastTransitionTime` from the condition it read while the status does not change)."""
        validate_node_name(name)
        self._json_request(
            "patch", "nodes/status", "PATCH", f"/api/v1/nodes/{q(name)}/status", name=name,
            body={"status": {"conditions": [dict(condition)]}}, content_type=STRATEGIC_MERGE_PATCH,
        )  # fmt: skip

    def read_configmap(self, name: str, namespace: str) -> ConfigMapData:
        """A ConfigMap's `data` and `binaryData` (KubeNotFoundError when there is none; a binary entry
        that is not base64 is KubeInvalidError, exit 3)."""
        path = f"/api/v1/namespaces/{q(namespace)}/configmaps/{q(name)}"
        cm = self._json_request("get", "configmaps", "GET", path, name=name, namespace=namespace)
        binary: dict[str, bytes] = {}
        for key, value in _strings(cm.get("binaryData")).items():
            try:
                binary[key] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise KubeInvalidError(
                    f"configmap {namespace}/{name}: binaryData[{key!r}] is not base64",
                    verb="get", resource="configmaps", name=name, namespace=namespace,
                ) from exc  # fmt: skip
        return ConfigMapData(data=_strings(cm.get("data")), binary=binary)

    def put_configmap(self, manifest: Mapping[str, Any], namespace: str) -> None:
        """Create the ConfigMap, or replace the one of the same name (verbs `create` and `update`)."""
        name = str(manifest["metadata"]["name"])
        base = f"/api/v1/namespaces/{q(namespace)}/configmaps"
        body: Json = dict(manifest)
        try:
            self._create("configmaps", base, body, name=name, namespace=namespace)
        except KubeAlreadyExistsError:
            self._json_request("update", "configmaps", "PUT", f"{base}/{q(name)}", name=name, namespace=namespace,
                               body=body)  # fmt: skip
