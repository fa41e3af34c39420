"""A real Kubernetes control plane on loopback for the tests, as controller-runtime's envtest starts one.

etcd (Debian's `etcd-server`), and kube-apiserver, kube-controller-manager and kube-scheduler built from
the pinned `k8s.io/kubernetes` module by tests/controlplane/build.sh (cached by version outside the
repository). The API server serves HTTPS on 127.0.0.1 with a CA made here, authorization Node,RBAC,
its default admission plugins plus NodeRestriction, and service-account tokens signed with a key made
here. The controllers and the scheduler, and the tests' own admin calls, authenticate with a static
admin token; upgrade-gate itself runs as the `upgrade-gate` service account of deploy/rbac.yaml
(`ControlPlane.token_for`).

What a real cluster has and this one has not: kubelets (tests.k8s.nodeagent plays them) and the
Kubeflow MPI operator (tests.k8s.mpistandin stands in). Everything else is the real thing.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "tests" / "controlplane" / "build.sh"
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
ADMIN_TOKEN = "upgrade-gate-test-admin-token"


def k8s_version() -> str:
    """The pinned k8s.io/kubernetes release of tests/controlplane/go.mod."""
    for line in (REPO / "tests" / "controlplane" / "go.mod").read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if parts[:2] == ["require", "k8s.io/kubernetes"]:
            return parts[2]
    raise RuntimeError("tests/controlplane/go.mod: no k8s.io/kubernetes requirement")


def bin_dir() -> Path:
    """Where build.sh puts (or put) the binaries."""
    env = os.environ.get("UPGRADE_GATE_K8S_BIN")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "upgrade-gate" / f"k8s-{k8s_version()}" / "bin"


def missing_reason() -> str | None:
    """Why the real control plane cannot start here (None when it can)."""
    missing = [c for c in COMPONENTS if not (bin_dir() / c).is_file()]
    if missing:
        return (
            f"real control plane not built: {', '.join(missing)} missing in {bin_dir()} "
            "(run tests/controlplane/build.sh; .ci/run does)"
        )
    if shutil.which("etcd") is None:
        return "etcd not installed (apt-get install etcd-server; .ci/run does)"
    return None


def ensure_built() -> str | None:
    """Build the control plane on first use when Go is here (issue 28, item 10: the README's test command
    runs what CI runs), once per machine: a lock in the cache folder makes other pytest workers and
    sessions wait for the build instead of starting their own; its output goes to build.log beside it.
    `UPGRADE_GATE_BUILD_K8S=0` turns it off. Returns why the control plane still cannot start, or None."""
    reason = missing_reason()
    if reason is None or shutil.which("etcd") is None or shutil.which("go") is None:
        return reason
    if os.environ.get("UPGRADE_GATE_BUILD_K8S") == "0":
        return reason + " (UPGRADE_GATE_BUILD_K8S=0: not built on first use)"
    import fcntl

    cache = bin_dir().parent
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "build.lock", "w", encoding="utf-8") as lock, open(cache / "build.log", "a") as log:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker's build: wait for it, then find it done
        if missing_reason() is not None:
            done = subprocess.run(["bash", str(BUILD)], stdout=log, stderr=log, check=False)
            if done.returncode != 0:
                return f"{reason}; building it on first use failed (exit {done.returncode}, see {cache / 'build.log'})"
    return missing_reason()


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- certificates


def _write_pki(pki: Path) -> None:
    """CA, API server serving cert (127.0.0.0/8 names), service-account signing key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import NameOID

    pki.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def pem_key(key: Any) -> bytes:
        return bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "upgrade-gate-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.DNSName("kubernetes.default.svc")]
    names += [x509.IPAddress(ipaddress.ip_address(f"127.0.0.{i}")) for i in range(1, 40)]
    names.append(x509.IPAddress(ipaddress.ip_address("10.0.0.1")))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (pki / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (pki / "server.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (pki / "server.key").write_bytes(pem_key(key))
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (pki / "sa.key").write_bytes(pem_key(sa))
    (pki / "sa.pub").write_bytes(
        sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def write_kubeconfig(path: Path, url: str, ca: Path, token: str) -> Path:
    """A kubeconfig with a bearer token (what a service account's kubeconfig looks like)."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": url, "certificate-authority": str(ca)}}],
        "users": [{"name": "test", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
    }
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- processes


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, so a killed pytest leaves no etcd or API server."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class _Proc:
    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait()
        self.proc = None

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            tail = self.log.read_text(encoding="utf-8", errors="replace")[-3000:]
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler on loopback."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.pki = workdir / "pki"
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self._procs: dict[str, _Proc] = {}
        self.audit_policy = workdir / "audit-policy.yaml"
        self.audit_log = workdir / "logs" / "audit.log"

    # ----------------------------------------------------------------------- lifecycle

    def start(self, *, timeout: float = 180.0) -> None:
        """Start everything and wait until the API server is ready and the default namespace exists."""
        bins = bin_dir()
        self.workdir.mkdir(parents=True, exist_ok=True)
        _write_pki(self.pki)
        (self.pki / "tokens.csv").write_text(f"{ADMIN_TOKEN},admin,admin,system:masters\n", encoding="utf-8")
        admin = write_kubeconfig(self.workdir / "admin.kubeconfig", self.url, self.pki / "ca.crt", ADMIN_TOKEN)
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        self.audit_policy.write_text(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted]\n"
            "rules:\n- level: None\n  userGroups: [system:masters, system:nodes]\n- level: Metadata\n",
            encoding="utf-8",
        )
        etcd_port, peer_port = free_port(), free_port()
        shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else self.workdir
        data = Path(__import__("tempfile").mkdtemp(prefix="upgrade-gate-etcd-", dir=shm))  # RAM: etcd fsyncs a lot
        self._etcd_data = data
        self._procs["etcd"] = _Proc(
            "etcd",
            [
                "etcd",
                "--name",
                "test",
                "--data-dir",
                str(data),
                "--listen-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"test=http://127.0.0.1:{peer_port}",
                "--log-level",
                "warn",
            ],
            logs / "etcd.log",
        )
        p = self.pki
        self._procs["kube-apiserver"] = _Proc(
            "kube-apiserver",
            [
                str(bins / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--tls-cert-file={p / 'server.crt'}",
                f"--tls-private-key-file={p / 'server.key'}",
                f"--client-ca-file={p / 'ca.crt'}",
                f"--token-auth-file={p / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={p / 'sa.pub'}",
                f"--service-account-signing-key-file={p / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                # the node agent serves every node's kubelet endpoint on 127.0.0.1 (Hostname address)
                "--kubelet-preferred-address-types=Hostname",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                # every request, with its user, verb and resource: tests check RBAC is used exactly
                f"--audit-policy-file={self.audit_policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-maxsize=0",
                "--profiling=false",
                "--v=1",
            ],
            logs / "kube-apiserver.log",
        )
        self._procs["kube-controller-manager"] = _Proc(
            "kube-controller-manager",
            [
                str(bins / "kube-controller-manager"),
                f"--kubeconfig={admin}",
                f"--authentication-kubeconfig={admin}",
                f"--authorization-kubeconfig={admin}",
                "--leader-elect=false",
                "--secure-port=0",
                f"--root-ca-file={p / 'ca.crt'}",
                f"--service-account-private-key-file={p / 'sa.key'}",
                "--use-service-account-credentials=false",
                # no kubelet posts node status here between heartbeats: keep the lifecycle controller from
                # declaring the fake nodes unreachable in the middle of a test
                "--node-monitor-grace-period=3600s",
                "--concurrent-job-syncs=10",
                "--profiling=false",
                "--v=1",
            ],
            logs / "kube-controller-manager.log",
        )
        self._procs["kube-scheduler"] = _Proc(
            "kube-scheduler",
            [
                str(bins / "kube-scheduler"),
                f"--kubeconfig={admin}",
                f"--authentication-kubeconfig={admin}",
                f"--authorization-kubeconfig={admin}",
                "--leader-elect=false",
                "--secure-port=0",
                "--profiling=false",
                "--v=1",
            ],
            logs / "kube-scheduler.log",
        )
        self._procs["etcd"].start()
        self._procs["kube-apiserver"].start()
        self.wait_ready(timeout)
        self._procs["kube-controller-manager"].start()
        self._procs["kube-scheduler"].start()
        deadline = time.monotonic() + timeout
        while self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default", ok404=True) is None:
            self.check()
            if time.monotonic() > deadline:
                raise RuntimeError("kube-controller-manager did not create the default service account")
            time.sleep(0.3)

    def stop(self) -> None:
        """Stop every process (reverse order) and drop etcd's data."""
        for name in reversed(list(self._procs)):
            self._procs[name].stop()
        shutil.rmtree(getattr(self, "_etcd_data", self.workdir / "none"), ignore_errors=True)

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver (an outage); `start_apiserver` brings it back on the same port."""
        self._procs["kube-apiserver"].stop()

    def start_apiserver(self, timeout: float = 120.0) -> None:
        """Start kube-apiserver again and wait until it is ready."""
        self._procs["kube-apiserver"].start()
        self.wait_ready(timeout)

    def check(self) -> None:
        """Raise if a component died."""
        for proc in self._procs.values():
            proc.check()

    def wait_ready(self, timeout: float) -> None:
        """Wait for /readyz."""
        deadline = time.monotonic() + timeout
        while True:
            self.check()
            try:
                with self._open("GET", "/readyz", None, None) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"kube-apiserver not ready after {timeout:g}s")
            time.sleep(0.3)

    # ----------------------------------------------------------------------- admin REST calls

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """Verifies the API server against the test CA."""
        return ssl.create_default_context(cafile=str(self.pki / "ca.crt"))

    def _open(self, method: str, path: str, body: bytes | None, content_type: str | None) -> Any:
        req = urllib.request.Request(self.url + path, data=body, method=method)
        req.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
        req.add_header("Accept", "application/json")
        if content_type:
            req.add_header("Content-Type", content_type)
        return urllib.request.urlopen(req, context=self.ssl_context, timeout=30)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        ok404: bool = False,
        ok409: bool = False,
    ) -> Any:
        """One admin request; the decoded answer (None for an allowed 404/409)."""
        data = None if body is None else json.dumps(body).encode()
        try:
            with self._open(method, path, data, content_type if data is not None else None) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            if (exc.code == 404 and ok404) or (exc.code == 409 and ok409):
                return None
            detail = exc.read().decode("utf-8", "replace")[:2000]
            raise RuntimeError(f"{method} {path}: HTTP {exc.code}: {detail}") from exc
        return json.loads(raw) if raw else {}

    def apply(self, doc: dict[str, Any]) -> Any:
        """Create one object from a manifest (kinds the tests use); an existing one is left as it is."""
        kind, ns = doc["kind"], doc["metadata"].get("namespace")
        plural = {
            "Namespace": "namespaces",
            "ServiceAccount": "serviceaccounts",
            "ClusterRole": "clusterroles",
            "ClusterRoleBinding": "clusterrolebindings",
            "Role": "roles",
            "RoleBinding": "rolebindings",
            "ConfigMap": "configmaps",
            "PersistentVolumeClaim": "persistentvolumeclaims",
            "Pod": "pods",
            "PodDisruptionBudget": "poddisruptionbudgets",
            "CustomResourceDefinition": "customresourcedefinitions",
            "Job": "jobs",
        }[kind]
        group = doc["apiVersion"] if "/" in doc["apiVersion"] else ""
        base = f"/apis/{group}" if group else "/api/v1"
        path = f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}"
        created = self.request("POST", path, doc, ok409=True)
        if kind == "Namespace":  # pods are refused until the controller made the default service account
            sa = f"/api/v1/namespaces/{doc['metadata']['name']}/serviceaccounts/default"
            for _ in range(600):
                if self.request("GET", sa, ok404=True) is not None:
                    break
                time.sleep(0.1)
        return created

    def audit(self, user: str) -> list[dict[str, Any]]:
        """The audit events (stage ResponseComplete) of one user, oldest first."""
        out = []
        for line in self.audit_log.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event.get("user", {}).get("username") == user and event.get("stage") == "ResponseComplete":
                out.append(event)
        return out

    def token_for(self, namespace: str, service_account: str, *, seconds: int = 7200) -> str:
        """A bound token of a service account (TokenRequest API)."""
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token"
        answer = self.request(
            "POST",
            path,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}},
        )
        return str(answer["status"]["token"])
