"""The Kubernetes executor: the same probes and CVF phases, run as Jobs on the nodes.

`KubeLauncher` (`fleet.launcher`, re-exported here with `ExecutorSettings`) implements
`validate.launcher.Launcher`, so `validate.pipeline.run_pipeline` and every phase run unchanged on a
cluster:
- `runner_for(node).run(argv, timeout)` runs `argv` as one batch/v1 Job pinned to the node
  (`fleet.jobs.run_job`), its stdout brought back in a result frame (`fleet.resultframe`) and turned
  into the `CommandResult` a local run would give: exit code, stdout, the rest of the log as stderr,
  `timed_out` when the Job did not finish in time, `missing` when the wrapper could not exec the tool.
- `mpirun ...` (phase 5) is not a Job on one node: it becomes a Kubeflow MPIJob (kubeflow.org/v2beta1)
  with one worker per node of the `-H` list and the same rccl-tests command line in the launcher; the
  `-H` hosts are rewritten to the workers' DNS names (`<mpijob>-worker-<i>.<mpijob>.<ns>.svc`, the
  names the MPI operator writes into its hostfile), slots unchanged. The launcher log is the stdout.
- `start(node, argv)` (the phase-4 `ib_write_bw` server) creates the Job and waits until its pod runs;
  `stop()` waits for it, deletes it if it is still running, and returns its result.
- `address(node)` is the node's InternalIP: phase Jobs use `hostNetwork`, so a server pod listens there.
Phase 0 reads the Node objects' labels (NFD), which the caller passes to the pipeline as node_labels.

Capture (`capture_nodes`) runs `upgrade-gate capture --node $(UPGRADE_GATE_NODE) --host-root /host
--out -` as one Job per node with the node's GPUs requested (a container sees only the GPUs it was
given, and rocminfo/amd-smi must see all of them; or, with `capture_privileged`, privileged and
without GPUs allocated, so a canary still running a workload can be captured), and reads the
tarball back into a `Bundle` with the collect stage's safe reader.

Design decisions
- A node that disappears during a Job is not a tool failure: the runner raises `LauncherError`
  ("node vanished"), the launcher remembers the node and refuses further commands on it, and
  `run_phases` turns every result of that node that is not `not-run` into an `error` whose first reason
  names the vanished node. A vanished node is never a pass.
- Job names need a unique run id per command: `<run id>-<n>` with a per-launcher counter; purposes are
  derived from the tool (`phase1` rvs/agfhc, `phase2` all_reduce_perf, `phase4` ib_write_bw, else `cmd`)
  so `kubectl get jobs -l upgrade-gate/purpose=phase2` finds them and pruning keeps a few per purpose.
- Thresholds come from the `cluster-validation-config` ConfigMap in the executor's namespace
  (`load_cluster_config`); when it does not exist the CVF defaults apply and the source says so.
- CVF labels and annotations are written exactly as the phase results carry them, one merge patch per
  node, plus `amd.com/cluster-validation-candidate=true` for a node that passed phase 0.
"""

from __future__ import annotations

import contextlib
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from upgrade_gate.collect.bundle import Bundle, load_bundle
from upgrade_gate.errors import BundleError, InputError
from upgrade_gate.fleet.errors import KubeError, KubeNotFoundError, KubeWaitTimeoutError
from upgrade_gate.fleet.jobs import NodeRunResult, RunStatus, run_on_nodes
from upgrade_gate.fleet.labels import (
    CVF_CANDIDATE,
    CVF_CONFIGMAP,
    MANAGED_BY,
    MANAGER,
    NFD_AMD_NIC,
    NODE,
    NODE_PHASE_LABELS,
    NODES,
    PURPOSE,
    RUN_ID,
    node_label_value,
)
from upgrade_gate.fleet.launcher import VANISHED, ExecutorSettings, KubeLauncher
from upgrade_gate.fleet.launcher import refused as launcher_refused
from upgrade_gate.fleet.manifests import HOST_ROOT, JobSpec, capture_access
from upgrade_gate.fleet.node_vendor import node_vendor
from upgrade_gate.fleet.objects import JobPhase, KubeNode
from upgrade_gate.fleet.workload_jobs import WorkloadJobs, workload_image
from upgrade_gate.model import NodeName, PhaseResult, PhaseStatus, Snapshot, replace
from upgrade_gate.validate.config import CvfConfig, default_config, parse_cvf_config
from upgrade_gate.validate.cvf import MEASURED_BW_SUFFIX, failure_reason_key
from upgrade_gate.validate.phase import GroupPhase, NodePhase
from upgrade_gate.validate.pipeline import Progress, run_pipeline
from upgrade_gate.validate.remeasure import Resampling
from upgrade_gate.vendors import AMD, VENDORS, Vendor

if TYPE_CHECKING:
    from upgrade_gate.fleet.kube import KubeClient

__all__ = [  # the launcher and its settings are part of the executor's public face
    "VANISHED",
    "ExecutorSettings",
    "KubeLauncher",
    "bundle_from_payload",
    "capture_nodes",
    "capture_spec",
    "cvf_metadata",
    "load_cluster_config",
    "node_vendor",
    "run_phases",
    "run_vendor_phases",
    "stop_leftovers",
    "write_cvf_labels",
]


def load_cluster_config(client: KubeClient, namespace: str) -> CvfConfig:
    """Thresholds from the `cluster-validation-config` ConfigMap; CVF defaults when it does not exist."""
    try:
        data = client.get_configmap(CVF_CONFIGMAP, namespace)
    except KubeNotFoundError:
        return replace(default_config(), source=f"CVF defaults (no ConfigMap {namespace}/{CVF_CONFIGMAP})")
    return parse_cvf_config(data, source=f"ConfigMap {namespace}/{CVF_CONFIGMAP}")


def stop_leftovers(
    client: KubeClient, namespace: str, nodes: Sequence[NodeName], *, poll_s: float = 2.0, timeout_s: float = 120.0
) -> tuple[str, ...]:
    """Delete our still-active Jobs and phase 5 MPIJobs on `nodes` left by a run that died (an API
    outage, a killed operator) and wait until their pods are gone: they would hold the nodes' GPUs,
    and a repeated `window validate` must start from a quiet node. Returns the deleted names.

    Found only by what upgrade-gate itself stamps (issue 28, item 3): our labels on Jobs, MPIJobs and
    every pod template, `upgrade-gate/node` on a Job, `upgrade-gate/nodes` on an MPIJob. The operator's
    own labels are not relied on (mpi-operator v0.7.0 labels the launcher Job `app: <name>` only). An
    MPIJob of another window on other nodes is left alone. Pods still there after `timeout_s`: exit 4."""
    ours = f"{MANAGED_BY}={MANAGER}"
    wanted = {node_label_value(n) for n in nodes}
    names = set(nodes)
    doomed: list[tuple[str, str, tuple[str, str]]] = []  # (kind, name, (purpose, run id) stamped on its pods)
    for job in client.list_jobs(namespace, ours):
        if job.phase is JobPhase.ACTIVE and job.labels.get(NODE) in wanted:
            doomed.append(("job", job.name, (job.labels.get(PURPOSE, ""), job.labels.get(RUN_ID, ""))))
    for mpi in client.list_mpijobs(namespace, ours):
        if mpi.phase is JobPhase.ACTIVE and names & set(mpi.annotations.get(NODES, "").split(",")):
            doomed.append(("mpijob", mpi.name, (mpi.labels.get(PURPOSE, ""), mpi.labels.get(RUN_ID, ""))))
    for kind, name, _ in doomed:
        (client.delete_mpijob if kind == "mpijob" else client.delete_job)(name, namespace)
    stamps = {stamp for _, _, stamp in doomed}
    deadline = time.monotonic() + timeout_s
    while True:
        left = [
            p.name
            for p in client.pods(namespace, ours)
            if p.phase not in ("Succeeded", "Failed")
            and ((p.labels.get(PURPOSE, ""), p.labels.get(RUN_ID, "")) in stamps or p.labels.get(NODE) in wanted)
        ]
        if not left:
            return tuple(name for _, name, _ in doomed)
        if time.monotonic() >= deadline:
            raise KubeWaitTimeoutError(
                f"pods of an earlier run still on {', '.join(sorted(names))} after {timeout_s:g}s: "
                f"{', '.join(sorted(left)[:5])} (namespace {namespace}); they hold the nodes' GPUs",
                verb="list", resource="pods", namespace=namespace,
            )  # fmt: skip
        time.sleep(poll_s)


# --------------------------------------------------------------------------- capture


def capture_spec(node: KubeNode, settings: ExecutorSettings, run_id: str, vendor: Vendor = AMD) -> JobSpec:
    """The capture Job of one node (all its GPUs requested, host access the probes need, the vendor's probes)."""
    argv = (*settings.upgrade_gate_argv, "capture", "--node", "$(UPGRADE_GATE_NODE)", "--host-root", HOST_ROOT)
    privileged = settings.capture_privileged
    return JobSpec(
        node=node.name,
        purpose="capture",
        run_id=run_id,
        argv=(*argv, "--vendor", vendor.name, "--out", "-"),
        # --capture-privileged: read-only, no GPU allocated, so a busy (--no-drain) canary can be captured
        gpus=0 if privileged else node.gpu_count(vendor.kube.gpu_resource),
        access=capture_access(
            rdma=node.labels.get(NFD_AMD_NIC) == "true", devices=privileged, rocm=vendor.kube.mount_rocm
        ),
        env=vendor.kube.unallocated_env if privileged else (),
        settings=settings.jobs,
        gpu_resource=vendor.kube.gpu_resource,
    )


def bundle_from_payload(payload: bytes, *, node: str) -> Bundle:
    """A capture tarball (from a result frame) read with the collect stage's safe reader."""
    with tempfile.TemporaryDirectory(prefix="upgrade-gate-bundle-") as tmp:
        path = Path(tmp) / f"{node}.tar.gz"
        path.write_bytes(payload)
        try:
            return load_bundle(path)
        except (BundleError, tarfile.TarError, OSError, EOFError) as exc:
            raise BundleError(f"node {node}: the capture Job returned no readable bundle: {exc}") from exc


def capture_nodes(
    client: KubeClient,
    nodes: Sequence[KubeNode],
    settings: ExecutorSettings,
    *,
    run_id: str,
    on_result: Callable[[NodeRunResult], None] | None = None,
    refused: dict[NodeName, str] | None = None,
    vendors: Mapping[NodeName, Vendor] | None = None,
) -> dict[NodeName, Bundle | str]:
    """Capture every node with a Job; per node the Bundle, or why there is none (fail closed).

    `vendors`: each node's GPU vendor, whose probes the capture runs (a node not in it: AMD); None: each
    node's by the GPU resource it advertises (`node_vendor`), a node in doubt gets its reason, uncaptured.

    A capture the cluster refused (`RunStatus.REFUSED`: admission, a busy node's `OutOf*`, an image
    pull, scheduling) is no evidence about the node: it goes into `refused` when the caller passes a
    dict (the node is left out of the result), else the whole capture raises `KubeRefusedError` (exit 4)."""
    out: dict[NodeName, Bundle | str] = {}
    chosen: dict[NodeName, Vendor | str] = (
        {n.name: vendors.get(n.name, AMD) for n in nodes}
        if vendors is not None
        else {n.name: node_vendor(n) for n in nodes}
    )
    out.update({name: why for name, why in chosen.items() if isinstance(why, str)})
    specs = [capture_spec(n, settings, run_id, v) for n in nodes if not isinstance(v := chosen[n.name], str)]
    results = run_on_nodes(
        client,
        specs,
        concurrency=settings.concurrency,
        timeout_s=settings.capture_timeout_s,
        poll_s=settings.poll_s,
        keep_finished=settings.keep_finished,
        on_result=on_result,
    )
    denied = {r.node: f"capture Job {r.job}: {r.reason}" for r in results if r.status is RunStatus.REFUSED}
    if denied and refused is None:
        node, why = sorted(denied.items())[0]
        more = f" (and {len(denied) - 1} more node(s))" if len(denied) > 1 else ""
        raise launcher_refused(node, why + more)
    if refused is not None:
        refused.update(denied)
    for res in results:
        if res.status is RunStatus.REFUSED:
            continue
        if res.status is RunStatus.NODE_LOST:
            out[res.node] = f"{VANISHED}: {res.reason}"
        elif res.status is not RunStatus.SUCCEEDED or res.payload is None:
            out[res.node] = f"capture Job {res.job} {res.status}: {res.reason or 'no result'}"
        else:
            try:
                out[res.node] = bundle_from_payload(res.payload, node=res.node)
            except InputError as exc:
                out[res.node] = str(exc)
    return out


# --------------------------------------------------------------------------- phases


def run_phases(
    client: KubeClient,
    nodes: Sequence[KubeNode],
    *,
    phases: Sequence[NodePhase | GroupPhase],
    config: CvfConfig,
    settings: ExecutorSettings,
    run_id: str,
    snapshots: Mapping[NodeName, Snapshot] | None = None,
    samples: int | None = None,
    progress: Progress | None = None,
    resampling: Resampling | None = None,
    peers: Sequence[KubeNode] = (),
    vendor: Vendor = AMD,
) -> dict[NodeName, tuple[PhaseResult, ...]]:
    """The CVF pipeline on the nodes through a KubeLauncher; a vanished node's results are errors.

    `vendor`: every node's GPU vendor (the Jobs' GPU resource, the monitor Jobs' access, phase 5's and
    phases 6-7's images); `phases` should be its phases (`run_vendor_phases` does both per vendor).

    `peers`: partners for phases 4-5 that are not reported (a one-canary window's peer, `fleet.peer`).
    Phases 6-7's command runs as a Job of `fleet.workload_jobs` (every GPU, the workload image).

    `resampling`: re-measure an inconclusive metric (`validate.remeasure`; `window validate` builds it
    from the policy and the canaries' baselines, as `validate --policy --baseline` does on one node)."""
    launcher = KubeLauncher(client, [*nodes, *peers], settings, run_id=run_id, vendor=vendor)
    image = workload_image(settings.workload_image, config, vendor)
    launcher.workload = WorkloadJobs(
        config=config, image=image, env=settings.env, settings=settings.jobs, vendor=vendor
    )
    results = run_pipeline(
        [n.name for n in nodes],
        peers=[p.name for p in peers],
        phases=phases,
        config=config,
        launcher=launcher,
        snapshots={str(k): v for k, v in (snapshots or {}).items()},
        node_labels={n.name: n.labels for n in nodes},
        samples=samples,
        progress=progress,
        parallel=settings.concurrency,
        resampling=resampling,
    )
    with contextlib.suppress(KubeError):  # housekeeping: the phase Jobs the launcher ran, newest N per node and kind
        client.prune_finished(settings.jobs.namespace, f"{MANAGED_BY}={MANAGER}", keep=settings.keep_finished)
    for node, why in launcher.vanished.items():
        if node in results:  # a vanished peer costs the canaries their phases 4-5, which say so themselves
            results[node] = tuple(_vanished(r, why) for r in results[node])
    return results


def run_vendor_phases(
    client: KubeClient,
    nodes: Sequence[KubeNode],
    *,
    numbers: frozenset[int] | None,
    vendors: Mapping[NodeName, Vendor],
    run_id: str,
    **options: Any,
) -> dict[NodeName, tuple[PhaseResult, ...]]:
    """`run_phases` once per GPU vendor among `nodes`, each with its vendor's phases (`select_phases`).

    `numbers`: the phase numbers (None: CVF's 0-5); `vendors`: each node's (a node not in it: AMD). The
    groups run one after the other (run ids `<run_id>`, `<run_id>1`, ...), so phases 4-5 pair and gang
    nodes of one vendor only: an MPIJob cannot mix rccl-tests and nccl-tests ranks. `options`: the rest
    of `run_phases`' keywords (peers go to every group: a window's peer shares its canary's class)."""
    from upgrade_gate.validate.phases import default_phases, select_phases

    groups: dict[str, list[KubeNode]] = {}
    for node in nodes:
        groups.setdefault(vendors.get(node.name, AMD).name, []).append(node)
    by_name = {v.name: v for v in VENDORS}
    results: dict[NodeName, tuple[PhaseResult, ...]] = {}
    for i, (name, members) in enumerate(sorted(groups.items())):
        vendor = by_name[name]
        phases = default_phases(vendor) if numbers is None else select_phases(numbers, vendor)
        group_id = run_id if i == 0 else f"{run_id}{i}"
        results.update(run_phases(client, members, phases=phases, run_id=group_id, vendor=vendor, **options))
    return results


def _vanished(result: PhaseResult, why: str) -> PhaseResult:
    if result.status is PhaseStatus.NOT_RUN:
        return result
    reason = f"{VANISHED}: {why}"
    reasons = (reason, *(r for r in result.reasons if r != reason))
    labels = dict.fromkeys(result.labels, "failed")
    annotations = {k: v for k, v in result.annotations.items() if not k.endswith(MEASURED_BW_SUFFIX)}
    for key in result.labels:
        annotations[failure_reason_key(key)] = reason
    return replace(result, status=PhaseStatus.ERROR, reason=reason, reasons=reasons, labels=labels,
                   annotations=annotations)  # fmt: skip


def cvf_metadata(
    node: KubeNode | None, results: Sequence[PhaseResult]
) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """The merge patch (labels, annotations) that leaves on `node` exactly the CVF metadata of `results`.

    Every phase label (CVF's and the workload phases', `labels.NODE_PHASE_LABELS`), the candidate label
    and every `<phase label>-...` annotation the node has
    now is removed unless this run sets it again: a label of a phase that did not run this time, or a
    failure reason of an earlier run, must not outlive the run that wrote it (issue 11, defect 6).
    """
    labels: dict[str, str | None] = {}
    annotations: dict[str, str | None] = {}
    if node is not None:
        keys = tuple(NODE_PHASE_LABELS.values())
        labels.update({k: None for k in (*keys, CVF_CANDIDATE) if k in node.labels})
        annotations.update({k: None for k in node.annotations if k.startswith(tuple(f"{key}-" for key in keys))})
    for r in results:
        labels.update(r.labels)
        annotations.update(r.annotations)
        if r.phase == 0:
            labels[CVF_CANDIDATE] = "true" if r.status is PhaseStatus.PASSED else None
    return labels, annotations


def write_cvf_labels(
    client: KubeClient, results: Mapping[NodeName, Sequence[PhaseResult]], *, concurrency: int = 16
) -> dict[NodeName, str | None]:
    """Patch each node's CVF labels and annotations (one merge patch per node, stale ones removed);
    per node the error, if any. Nodes are written `concurrency` at a time (issue 14: a read and a
    patch per node, not in sequence); any other API error propagates (the caller exits 4)."""

    def write(node: NodeName) -> str | None:
        try:
            labels, annotations = cvf_metadata(client.get_node(node), results[node])
            client.patch_node_metadata(node, labels=labels, annotations=annotations)
        except KubeNotFoundError as exc:
            return f"{VANISHED}: {exc}"
        return None

    names = sorted(results)
    if len(names) <= 1 or concurrency <= 1:
        return {node: write(node) for node in names}
    with ThreadPoolExecutor(max_workers=min(concurrency, len(names)), thread_name_prefix="ug-labels") as pool:
        return dict(zip(names, pool.map(write, names), strict=True))
