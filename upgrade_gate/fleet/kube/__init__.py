"""`KubeClient`: the fleet's view of the Kubernetes API, split by concern the way kopf's client is.

- `fleet.kube.api`: the request, retry, error-mapping and watch loop (`ApiBase`); the one module of
  upgrade-gate that imports `kubernetes`.
- `fleet.kube.shapes`: what they share (`RetryPolicy`, watch events, path quoting, list accessors).
- `fleet.kube.nodes`: nodes (labels, annotations, cordon, taints, conditions, the pods on a node).
- `fleet.kube.workloads`: Jobs and their pods and logs, MPIJobs, CronJobs, the CVF ConfigMap.
- `fleet.kube.waiting`: waiting on an object by list-then-watch (issue 14: no polling).
- Untrusted API JSON is typed at the edge by `fleet.objects` (frozen views; no `kubernetes` import),
  so nothing past these modules sees a dict of API JSON or a client model.
"""

from __future__ import annotations

from upgrade_gate.fleet.kube.nodes import NodeCalls
from upgrade_gate.fleet.kube.shapes import RetryPolicy
from upgrade_gate.fleet.kube.workloads import WorkloadCalls


class KubeClient(NodeCalls, WorkloadCalls):
    """The fleet's view of the Kubernetes API: nodes, Jobs, pods' logs, MPIJobs, CronJobs, ConfigMaps."""


__all__ = ["KubeClient", "RetryPolicy"]
