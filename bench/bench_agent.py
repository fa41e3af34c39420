"""The node agent's cost per node (issue 28): CPU seconds and RSS per cycle and per hour, measured.

`python3 -m bench.bench_agent [--cycles 12] [--interval 5]` starts the real control plane
(tests/k8s/realcluster.py) with one fake MI300X node (8 GPUs, 8 NICs, its real-format tools and sysfs),
applies deploy/agent.yaml's RBAC, saves the node's baseline (a full capture) in a git store and
publishes it, then runs `upgrade-gate fleet agent` as its own process, exactly as the DaemonSet's
container does (the agent's account, its probes under the host root, metrics on a port), and reads the
kernel's accounting of that process from /proc: utime + stime of the agent and of its finished
children (the probes: lspci, grep, rdma, dmesg, uname, readlink), VmRSS and VmHWM.

Design decisions
- The agent is measured from outside (/proc/<pid>/stat), not by its own metric, and the two are printed
  side by side: the metric `upgrade_gate_agent_cycle_cpu_seconds` is what an operator sees.
- Per cycle = (CPU at the end - CPU after the first cycle) / cycles in between, so start-up (imports,
  the first baseline read and decode) is reported apart; per hour = per cycle x 3600 / 30 s plus the
  idle CPU between cycles (measured: the loop sleeps on an Event, so it is ~0).
- The interval of the measurement (5 s) only shortens the run: a cycle costs the same at 30 s.
- API requests per cycle come from the API server's audit log (the agent's service account).
- Timings are printed, never asserted (house rule: speed lives in bench/).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> tuple[float, float]:
    """(own, children) CPU seconds of a live process: utime+stime, cutime+cstime."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime) / CLK_TCK, (cutime + cstime) / CLK_TCK


def proc_mem_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a live process, KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def metric(text: str, name: str) -> float | None:
    """The value of the first sample of `name` in Prometheus text."""
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the measurement and print the results as Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=12)
    parser.add_argument("--interval", type=float, default=5.0)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from tests.k8s.controlplane import ensure_built, write_kubeconfig
    from tests.k8s.realcluster import NS, RealCluster
    from tests.test_validate_support import snapshot_of, with_vfs
    from upgrade_gate.cli.main import run
    from upgrade_gate.fakenode import build_fake_node, mi300x_node
    from upgrade_gate.snapshot.io import dumps_snapshot
    from upgrade_gate.store.gitstore import BaselineStore

    reason = ensure_built()
    if reason is not None:
        print(f"skipped: {reason}")
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-agent-"))
    cluster = RealCluster(work / "cluster")
    cluster.start()
    proc: subprocess.Popen[bytes] | None = None
    try:
        for doc in yaml.safe_load_all((REPO / "deploy" / "agent.yaml").read_text(encoding="utf-8")):
            if doc and doc["kind"] != "DaemonSet":
                cluster.cp.apply(doc)
        node = "gpu-000"
        fake = build_fake_node(work / "nodes" / node, with_vfs(mi300x_node(node, seed=1), 4))
        cluster.add_node(node, node_class="mi300x-8gpu", env=fake.env(os.environ), host_root=fake.host_root)
        snap = snapshot_of(fake)
        doc_bytes = dumps_snapshot(snap).encode("utf-8")
        import gzip

        with BaselineStore(work / "store") as st:
            st.init()
            st.save([snap], message="baseline")
        publisher = cluster.kubeconfig(work / "publisher.kubeconfig")
        assert run(["fleet", "publish-baselines", "--store", str(work / "store"), "--kubeconfig", str(publisher)]) == 0
        agent_kc = write_kubeconfig(
            work / "agent.kubeconfig", cluster.url, cluster.ca, cluster.cp.token_for(NS, "upgrade-gate-agent")
        )
        prom = work / "agent.prom"
        argv = [sys.executable, "-m", "upgrade_gate", "fleet", "agent", "--node", node,
                "--interval", f"{args.interval:g}", "--jitter", "0", "--host-root", str(fake.host_root),
                "--metrics-port", "0", "--textfile", str(prom), "--kubeconfig", str(agent_kc)]  # fmt: skip
        env = {**fake.env(os.environ), "PYTHONPATH": str(REPO)}
        t_start = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def cycles() -> int:
            text = prom.read_text(encoding="utf-8") if prom.exists() else ""
            return int(metric(text, "upgrade_gate_agent_cycles_total") or 0)

        while cycles() < 1:
            time.sleep(0.05)
        first_s = time.monotonic() - t_start
        own0, kids0 = proc_cpu(proc.pid)
        mem0 = proc_mem_kib(proc.pid)
        audit0 = len(cluster.cp.audit(f"system:serviceaccount:{NS}:upgrade-gate-agent"))
        t0, c0 = time.monotonic(), cycles()
        while cycles() < c0 + args.cycles:
            time.sleep(0.05)
        own1, kids1 = proc_cpu(proc.pid)
        mem1 = proc_mem_kib(proc.pid)
        c1, t1 = cycles(), time.monotonic()
        events = cluster.cp.audit(f"system:serviceaccount:{NS}:upgrade-gate-agent")[audit0:]
        text = prom.read_text(encoding="utf-8")
        n = c1 - c0
        per_cycle = (own1 - own0 + kids1 - kids0) / n
        own_cycle, kids_cycle = (own1 - own0) / n, (kids1 - kids0) / n
        per_hour = per_cycle * 3600 / 30.0
        print("## Node agent: cost per node (one MI300X node, 8 GPUs, 8 NICs)\n")
        print(f"- machine: {os.cpu_count()} CPUs ({_cpu_model()}); measured over {n} cycles at {args.interval:g} s, "
              f"wall {t1 - t0:.1f} s")  # fmt: skip
        print(f"- start-up to the first finished cycle: {first_s:.2f} s wall, {own0 + kids0:.2f} CPU s "
              f"(agent {own0:.2f}, probes {kids0:.2f}); RSS after it {mem0['VmRSS'] / 1024:.1f} MiB")  # fmt: skip
        print(f"- per cycle: {per_cycle * 1000:.0f} ms CPU (agent {own_cycle * 1000:.0f} ms, probes "
              f"{kids_cycle * 1000:.0f} ms); the agent's own metric says "
              f"{(metric(text, 'upgrade_gate_agent_cycle_cpu_seconds') or 0) * 1000:.0f} ms, "
              f"wall {(metric(text, 'upgrade_gate_agent_cycle_seconds') or 0) * 1000:.0f} ms")  # fmt: skip
        print(
            f"- per hour at 30 s (120 cycles): {per_hour:.1f} CPU s = {per_hour / 3600 * 1000:.1f} millicores average"
        )
        print(f"- memory: RSS {mem0['VmRSS'] / 1024:.1f} MiB after the first cycle, {mem1['VmRSS'] / 1024:.1f} MiB "
              f"after {n} more; peak (VmHWM) {mem1['VmHWM'] / 1024:.1f} MiB")  # fmt: skip
        verbs: dict[str, int] = {}
        for e in events:
            ref = e.get("objectRef") or {}
            key = f"{e['verb']} {ref.get('resource', '')}{'/' + ref['subresource'] if ref.get('subresource') else ''}"
            verbs[key] = verbs.get(key, 0) + 1
        print(f"- API requests in those {n} cycles: " + ", ".join(f"{k}: {v}" for k, v in sorted(verbs.items())))
        print(f"- baseline published: {len(doc_bytes) / 1024:.1f} KiB JSON, "
              f"{len(gzip.compress(doc_bytes, mtime=0)) / 1024:.1f} KiB gzip'd in the ConfigMap")  # fmt: skip
        no_drift = metric(text, 'upgrade_gate_drift_condition{node="gpu-000",status="False"}')
        print(f"- the node's condition during the run: {'False (no drift)' if no_drift else 'not False'}")
        print()
        print(judge_cost(fake, snap))
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        cluster.stop()
    return 0


def judge_cost(fake: object, baseline: object, repeat: int = 5) -> str:
    """The agent's in-process part of a cycle (snapshot build + trimmed judge), with the fake node's
    kernel log and with a 1 MiB one (a full ring buffer of benign amdgpu lines): CPU ms per cycle."""
    from dataclasses import replace

    from upgrade_gate.collect.capture import capture
    from upgrade_gate.collect.runner import LocalRunner
    from upgrade_gate.fleet.agent_view import agent_policy, agent_probes, agent_views
    from upgrade_gate.judge.judge import judge
    from upgrade_gate.judge.policy import load_policy
    from upgrade_gate.snapshot.build import build_snapshot

    node = fake  # a FakeNode
    probes = agent_probes(node.host_root, timeout_s=10.0)  # type: ignore[attr-defined]
    bundle = capture(LocalRunner(env=node.env(os.environ)), node="gpu-000", host_root=node.host_root, probes=probes)  # type: ignore[attr-defined]
    policy = agent_policy(load_policy())
    dmesg = next(r for r in bundle.records if r.name == "dmesg")
    lines = dmesg.result.stdout.splitlines()
    big, i = [], 0
    while sum(len(x) + 1 for x in big) < 1024 * 1024:
        text = lines[i % len(lines)].split("] ", 1)[-1]
        big.append(f"[{100 + i * 0.001:12.6f}] {text}")
        i += 1
    heavy = replace(bundle, records=tuple(
        replace(r, result=replace(r.result, stdout="\n".join(big) + "\n")) if r.name == "dmesg" else r
        for r in bundle.records))  # fmt: skip
    rows = []
    for label, b in (("fake node's dmesg", bundle), ("1 MiB dmesg", heavy)):
        c0 = time.process_time()
        for _ in range(repeat):
            base, seen = agent_views(baseline, build_snapshot(b))  # type: ignore[arg-type]
            judge(baselines={seen.node.name: base}, candidates=(seen,), plan=None, policy=policy,
                  now="2026-12-05T00:00:00Z", workers=1, include_changes=False)  # fmt: skip
        per = (time.process_time() - c0) / repeat
        size = len(next(r for r in b.records if r.name == "dmesg").result.stdout)
        rows.append(f"| {label} ({size / 1024:.0f} KiB) | {per * 1000:.0f} ms |")
    return "\n".join(["| build + judge in the agent's process | CPU per cycle |", "|---|---|", *rows])


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
