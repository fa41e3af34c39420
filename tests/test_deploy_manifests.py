"""deploy/: every manifest validates against the Kubernetes OpenAPI schemas; RBAC is exactly what is used.

Built-in kinds: JSON Schemas generated from the official client's OpenAPI-generated models (strict:
unknown fields rejected). MPIJob: the mpi-operator's v2beta1 OpenAPI definitions vendored in
tests/fixtures/k8s-schemas/ (PROVENANCE.md there).
"""

from __future__ import annotations

import copy
import functools
import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from kubernetes import client as k8s

from tests.conftest import FIXTURES, REPO, check_golden
from tests.k8s.apiserver import Rule
from tests.k8s.cluster import FAST_RETRY, rbac_rules
from tests.k8s.realcluster import RealCluster
from upgrade_gate.fleet.cronjobs import soak_cronjob
from upgrade_gate.fleet.drain import drain_node
from upgrade_gate.fleet.errors import KubeForbiddenError
from upgrade_gate.fleet.executor import stop_leftovers
from upgrade_gate.fleet.jobs import run_on_nodes
from upgrade_gate.fleet.kube import KubeClient
from upgrade_gate.fleet.labels import CVF_CONFIGMAP
from upgrade_gate.fleet.manifests import CAPTURE_ACCESS, JobSettings, JobSpec, MpiJobSpec
from upgrade_gate.fleet.objects import Taint
from upgrade_gate.model import NodeName

pytest_plugins = ["tests.k8s.fixtures"]  # real_cluster

DEPLOY = REPO / "deploy"
EXAMPLES = REPO / "examples" / "kubernetes"  # out of deploy/: `kubectl apply -R -f deploy/` (issue 28)
MODELS: dict[str, Any] = {
    "Namespace": k8s.V1Namespace,
    "ServiceAccount": k8s.V1ServiceAccount,
    "ClusterRole": k8s.V1ClusterRole,
    "ClusterRoleBinding": k8s.V1ClusterRoleBinding,
    "Role": k8s.V1Role,
    "RoleBinding": k8s.V1RoleBinding,
    "Job": k8s.V1Job,
    "PersistentVolumeClaim": k8s.V1PersistentVolumeClaim,
    "DaemonSet": k8s.V1DaemonSet,  # deploy/agent.yaml: the node agent (issue 28)
}
API_VERSIONS = {
    "Namespace": "v1",
    "ServiceAccount": "v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1",
    "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "Job": "batch/v1",
    "PersistentVolumeClaim": "v1",
    "DaemonSet": "apps/v1",
    "MPIJob": "kubeflow.org/v2beta1",
}


def _docs(name: str) -> list[dict[str, Any]]:
    path = REPO / name if name.startswith("examples/") else DEPLOY / name
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def test_deploy_apply_creates_no_workload() -> None:
    """`kubectl apply -R -f deploy/` (recursive, as kubectl reads .yaml, .yml and .json) creates RBAC, the
    namespace and the store claim only; the example Job and MPIJob live in examples/kubernetes/ (issue 11,
    defect 7: it used to start a real capture Job; issue 28, item 8: `-R` still applied deploy/examples/)."""
    files = sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
    docs = [d for f in files for d in _docs(str(f.relative_to(DEPLOY)))]
    # the one workload: the node agent (issue 28), no GPU request; tests/test_fleet_agent_real.py pins the rest
    agents = [d["metadata"]["name"] for d in docs if d["kind"] == "DaemonSet"]
    assert agents == ["upgrade-gate-agent"], agents
    kinds = {d["kind"] for d in docs if d["kind"] != "DaemonSet"}
    assert kinds <= {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                     "PersistentVolumeClaim"}, kinds  # fmt: skip
    assert "PersistentVolumeClaim" in kinds  # the CronJobs' store ships with deploy/ (issue 28, item 2)
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == ["job-template.yaml", "mpijob-template.yaml"]


def test_deploy_namespace_allows_the_jobs_pod_security() -> None:
    """The Jobs need hostNetwork and hostPath: the namespace must say `privileged` (issue 11, defect 4)."""
    (ns,) = [d for d in _docs("rbac.yaml") if d["kind"] == "Namespace"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


@functools.cache
def _builtin_schema(kind: str) -> dict[str, Any]:
    return dict(MODELS[kind].model_json_schema(by_alias=True))


def _strict(defs: dict[str, Any]) -> None:
    for schema in defs.values():
        if isinstance(schema, dict) and "properties" in schema:
            schema.setdefault("additionalProperties", False)


@functools.cache
def _mpijob_schema() -> dict[str, Any]:
    swagger = json.loads((FIXTURES / "k8s-schemas" / "mpijob-v2beta1.swagger.json").read_text(encoding="utf-8"))
    text = json.dumps(swagger["definitions"]).replace('"#/definitions/', '"#/$defs/')
    defs: dict[str, Any] = json.loads(text)
    _strict(defs)
    for ref, model in (
        ("v1.ObjectMeta", k8s.V1ObjectMeta),
        ("v1.PodTemplateSpec", k8s.V1PodTemplateSpec),
        ("v1.LabelSelector", k8s.V1LabelSelector),
    ):
        generated = model.model_json_schema(by_alias=True, ref_template="#/$defs/{model}")
        defs.update(generated.pop("$defs", {}))
        defs[ref] = generated
    defs["v1.Time"] = {"type": "string", "format": "date-time"}
    defs["resource.Quantity"] = {"type": ["string", "number"]}
    return {"$defs": defs, "$ref": "#/$defs/v2beta1.MPIJob"}


def _validate(doc: dict[str, Any]) -> None:
    kind = doc.get("kind", "")
    assert doc.get("apiVersion") == API_VERSIONS[kind], f"{kind}: apiVersion {doc.get('apiVersion')}"
    schema = _mpijob_schema() if kind == "MPIJob" else _builtin_schema(kind)
    jsonschema.Draft202012Validator(schema).validate(doc)


ALL_DOCS = [
    (str(f.relative_to(REPO if f.is_relative_to(EXAMPLES) else DEPLOY)), i, d)
    for f in sorted([*DEPLOY.glob("*.yaml"), *EXAMPLES.glob("*.yaml")])
    for i, d in enumerate(_docs(str(f.relative_to(REPO if f.is_relative_to(EXAMPLES) else DEPLOY))))
]


@pytest.mark.parametrize(("file", "index", "doc"), ALL_DOCS, ids=[f"{f}#{i}-{d['kind']}" for f, i, d in ALL_DOCS])
def test_deploy_manifest_validates_against_openapi_schema(file: str, index: int, doc: dict[str, Any]) -> None:
    _validate(doc)


def test_deploy_schema_check_is_strict() -> None:
    (job,) = _docs("examples/kubernetes/job-template.yaml")
    typo = copy.deepcopy(job)
    typo["spec"]["template"]["spec"]["containers"][0]["imagePulPolicy"] = "Always"
    with pytest.raises(jsonschema.ValidationError, match="imagePulPolicy"):
        _validate(typo)
    (mpi,) = _docs("examples/kubernetes/mpijob-template.yaml")
    bad = copy.deepcopy(mpi)
    bad["spec"]["slotsPerWorkers"] = 8
    with pytest.raises(jsonschema.ValidationError, match="slotsPerWorkers"):
        _validate(bad)
    bad = copy.deepcopy(mpi)
    bad["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {"limit": {}}
    with pytest.raises(jsonschema.ValidationError, match="limit"):
        _validate(bad)


# --------------------------------------------------------------------------- templates = code


def _template_text(path: Path, manifest: dict[str, Any]) -> str:
    header = "".join(
        line for line in path.read_text(encoding="utf-8").splitlines(keepends=True) if line.startswith("#")
    )
    return header + yaml.safe_dump(manifest, sort_keys=False, width=120)


CAPTURE_EXAMPLE = JobSpec(
    node=NodeName("gpu-node-01"),
    purpose="capture",
    run_id="r7k2qx",
    argv=("upgrade-gate", "capture", "--node", "$(UPGRADE_GATE_NODE)", "--host-root", "/host", "--out", "-"),
    gpus=8,
    access=CAPTURE_ACCESS,
)
PHASE5_EXAMPLE = MpiJobSpec(
    run_id="r7k2qx",
    nodes=(NodeName("gpu-node-01"), NodeName("gpu-node-02")),
    launcher_argv=(
        "mpirun", "--allow-run-as-root", "-np", "16", "-x", "NCCL_DEBUG=WARN",
        "/opt/rccl-tests/build/all_reduce_perf", "-b", "1K", "-e", "2G", "-f", "2", "-g", "1",
    ),
    image="registry.example.com/rccl-tests:rocm6.2",
    gpus_per_node=8,
)  # fmt: skip


@pytest.mark.parametrize(
    ("name", "manifest"),
    [
        ("examples/kubernetes/job-template.yaml", CAPTURE_EXAMPLE.manifest()),
        ("examples/kubernetes/mpijob-template.yaml", PHASE5_EXAMPLE.manifest()),
    ],
)
def test_deploy_template_matches_what_the_code_creates(
    name: str, manifest: dict[str, Any], update_goldens: bool
) -> None:
    path = REPO / name
    check_golden(path, _template_text(path, manifest), update_goldens)
    assert "&id" not in path.read_text(encoding="utf-8")  # no YAML aliases: each mapping stands alone


@pytest.mark.parametrize(
    "spec",
    [
        JobSpec(node=NodeName("n1.rack.example.com"), purpose="phase2", run_id="abc", argv=("x",), gpus=4),
        JobSpec(node=NodeName("n1"), purpose="phase4", run_id="abc", argv=("x",), settings=JobSettings(pin="affinity")),
    ],
)
def test_deploy_generated_job_variants_validate(spec: JobSpec) -> None:
    _validate(spec.manifest())


# --------------------------------------------------------------------------- RBAC: sufficient and minimal


def _granted(rules: list[Rule]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb) for r in rules for group in r.api_groups for resource in r.resources for verb in r.verbs
    }


def test_deploy_rbac_is_sufficient_and_least_privilege(real_cluster: RealCluster, tmp_path: Path) -> None:
    """On the real API server (authorization Node,RBAC) as the upgrade-gate service account: every
    KubeClient operation succeeds (sufficient) and every rule of deploy/rbac.yaml is used (minimal),
    read from the API server's own audit log."""
    docs = _docs("rbac.yaml")
    rules = rbac_rules(docs, namespace="upgrade-gate", service_account="upgrade-gate")
    assert rbac_rules(docs, namespace="upgrade-gate", service_account="upgrade-gate-job") == []
    user = "system:serviceaccount:upgrade-gate:upgrade-gate"
    seen = len(real_cluster.cp.audit(user))  # the session's log: only this test's events count (deploy/agent.yaml
    # grants this account more, used by tests/test_fleet_agent_real.py, which may run first)
    for n in ("gpu-01", "gpu-02"):
        real_cluster.add_node(n)
    real_cluster.wait_nodes_settled(["gpu-01", "gpu-02"])
    real_cluster.set_configmap(CVF_CONFIGMAP, "upgrade-gate", {"PHASE2_BW_THRESHOLD": "100"})
    real_cluster.set_configmap("other", "upgrade-gate", {})
    real_cluster.cp.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    busy = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "training-0", "namespace": "team-a"},
            "spec": {"nodeName": "gpu-02", "containers": [{"name": "t", "image": "x", "command": ["sshd"],
                     "resources": {"limits": {"amd.com/gpu": "8"}}}]}}  # fmt: skip
    real_cluster.cp.apply(busy)
    client = KubeClient.from_kubeconfig(str(real_cluster.kubeconfig(tmp_path / "sa.kubeconfig")), retry=FAST_RETRY)
    settings = JobSettings(python=sys.executable)
    # every KubeClient operation the fleet path uses, as the service account
    client.list_nodes("feature.node.kubernetes.io/amd-gpu=true")
    client.patch_node_metadata("gpu-01", labels={"amd.com/gpu-mesh-validation": "passed"}, annotations={"a.b/c": "d"})
    client.add_taint("gpu-01", Taint(key="upgrade-gate/canary", value="c1", effect="NoSchedule"))
    client.remove_taint("gpu-01", "upgrade-gate/canary")
    client.cordon("gpu-01")
    client.uncordon("gpu-01")
    assert client.get_configmap(CVF_CONFIGMAP, "upgrade-gate")["PHASE2_BW_THRESHOLD"] == "100"
    sleep = (sys.executable, "-c", "import time; time.sleep(1.5)")
    specs = [JobSpec(node=NodeName(n), purpose="capture", run_id="r1", settings=settings, argv=sleep)
             for n in ("gpu-01", "gpu-02")]  # fmt: skip
    results = run_on_nodes(client, specs, timeout_s=60, poll_s=0.1, keep_finished=0)  # prune: delete jobs
    assert all(r.status.value == "succeeded" for r in results), [r.reason for r in results]
    assert client.job_create_failures(specs[0].name, "upgrade-gate") == ()
    real_cluster.wait_for("the busy pod to run", lambda: client.gpu_pods_on_node("gpu-02"))
    assert drain_node(client, "gpu-02", timeout_s=30, poll_s=0.1) == ("team-a/training-0",)
    mpi = MpiJobSpec(run_id="r1", nodes=(NodeName("gpu-01"), NodeName("gpu-02")), launcher_argv=("true",),
                     image="i", gpus_per_node=8, settings=settings)  # fmt: skip
    client.create_mpijob(mpi.manifest(), "upgrade-gate")
    client.wait_mpijob(mpi.name, "upgrade-gate", timeout_s=60, poll_s=0.1)
    client.mpijob_logs(mpi.name, "upgrade-gate")
    client.delete_mpijob(mpi.name, "upgrade-gate")
    assert client.claim_phase("upgrade-gate-store", "upgrade-gate") in ("Pending", "Bound")  # deploy/store.yaml
    assert stop_leftovers(client, "upgrade-gate", [NodeName("gpu-01")], poll_s=0.1, timeout_s=60) == ()
    stamp = "2026-12-01T00:00:00Z"
    client.set_node_condition("gpu-01", {"type": "UpgradeGateDrift", "status": "False", "reason": "NoDrift",
                                         "message": "no drift", "lastHeartbeatTime": stamp,
                                         "lastTransitionTime": stamp})  # fmt: skip
    cron = soak_cronjob("w1", 3600.0, settings, command=("upgrade-gate",))
    client.apply_cronjob(cron, "upgrade-gate")
    assert client.delete_cronjob(cron["metadata"]["name"], "upgrade-gate")
    with pytest.raises(KubeForbiddenError, match="refuses to get configmaps"):
        client.get_configmap("other", "upgrade-gate")  # resourceNames pin the CVF ConfigMap
    client.close()

    events = real_cluster.cp.audit(user)[seen:]
    denied = {(e["verb"], e["requestURI"]) for e in events if e["responseStatus"]["code"] == 403}
    assert denied == {("get", "/api/v1/namespaces/upgrade-gate/configmaps/other")}, denied  # sufficient
    used = set()
    for e in events:
        ref = e.get("objectRef") or {}
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        used.add((ref.get("apiGroup", ""), resource, e["verb"]))
    # `get cronjobs` reads a CronJob back only when its create was retried after a lost answer and then
    # met AlreadyExists (KubeClient._create): a real server does not lose answers on demand
    assert _granted(rules) == used | {("batch", "cronjobs", "get")}  # minimal: every grant is exercised


def test_deploy_job_service_account_has_no_token_and_no_rules() -> None:
    sas = {d["metadata"]["name"]: d for d in _docs("rbac.yaml") if d["kind"] == "ServiceAccount"}
    assert sas["upgrade-gate-job"]["automountServiceAccountToken"] is False
    assert JobSettings().service_account == "upgrade-gate-job"


# --------------------------------------------------------------------------- Dockerfile


def test_deploy_dockerfile_base_and_probe_tools() -> None:
    text = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    instructions = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert instructions[0] == "FROM python:3.11-slim"
    for package in ("pciutils", "ibverbs-utils", "iproute2", "util-linux"):  # lspci, ibv_devinfo, rdma, dmesg
        assert package in text
    assert "pip install --no-cache-dir ." in text
    # what `pip install .` needs: the package list (setup.py) and the top-level data folders (issue 17)
    copied = {part for i in instructions if i.startswith("COPY ") for part in i.split()[1:-1]}
    assert {"pyproject.toml", "setup.py", "README.md", "upgrade_gate", "schemas", "checklists"} <= copied
    assert "curl" not in text and "| sh" not in text
    assert "rocm" not in " ".join(i for i in instructions if i.startswith("RUN")).lower()  # ROCm comes from the node
