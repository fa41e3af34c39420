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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


SCENARIOS = (
    ("the fake node's dmesg (2 KiB)", None),
    ("1 MiB dmesg, unchanged (a quiet node with a full ring buffer)", "static"),
    ("1 MiB dmesg, one line more every cycle (a chatty kernel)", "grows"),
)


def big_dmesg(lines: list[str], kib: int = 1024) -> str:
    """`kib` KiB of the node's own benign kernel lines, timestamps increasing (a full ring buffer)."""
    out, size, i = [], 0, 0
    while size < kib * 1024:
        line = f"[{100 + i * 0.001:12.6f}] {lines[i % len(lines)].split('] ', 1)[-1]}"
        out.append(line)
        size, i = size + len(line) + 1, i + 1
    return "\n".join(out) + "\n"


def dmesg_override(folder: Path, text: str, *, grows: bool) -> Path:
    """A `dmesg` first on PATH that prints `text` (appending one benign line per call when `grows`)."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "kmsg.txt"
    log.write_text(text, encoding="utf-8")
    last = text.rstrip("\n").rsplit("\n", 1)[-1].split("] ", 1)[-1]
    append = f'/bin/echo "[$(/bin/date +%s).000000] {last}" >> {log}\n' if grows else ""
    tool = folder / "dmesg"
    tool.write_text(f"#!/bin/sh\n{append}exec /bin/cat {log}\n", encoding="utf-8")
    tool.chmod(0o755)
    return folder


@dataclass
class Measured:
    """One agent process: start-up, per-cycle CPU (own, probes), memory, requests, condition."""

    first_s: float
    start_cpu: float
    n: int
    own: float
    kids: float
    rss0: float
    rss1: float
    hwm: float
    verbs: dict[str, int]
    status: str
    metric_cpu: float


def measure(
    argv: list[str], env: dict[str, str], prom: Path, cycles_wanted: int, audit: Callable[[], list[Any]]
) -> Measured:
    """Run the agent process, let it finish one cycle, then measure `cycles_wanted` more from /proc."""
    t_start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:

        def cycles() -> int:
            text = prom.read_text(encoding="utf-8") if prom.exists() else ""
            return int(metric(text, "upgrade_gate_agent_cycles_total") or 0)

        while cycles() < 1:
            if proc.poll() is not None:
                raise RuntimeError(f"the agent exited {proc.returncode}")
            time.sleep(0.05)
        first_s = time.monotonic() - t_start
        own0, kids0 = proc_cpu(proc.pid)
        mem0 = proc_mem_kib(proc.pid)
        audit0 = len(audit())
        c0 = cycles()
        while cycles() < c0 + cycles_wanted:
            time.sleep(0.05)
        own1, kids1 = proc_cpu(proc.pid)
        mem1 = proc_mem_kib(proc.pid)
        n = cycles() - c0
        text = prom.read_text(encoding="utf-8")
        events = audit()[audit0:]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    verbs: dict[str, int] = {}
    for e in events:
        ref = e.get("objectRef") or {}
        key = f"{e['verb']} {ref.get('resource', '')}{'/' + ref['subresource'] if ref.get('subresource') else ''}"
        verbs[key] = verbs.get(key, 0) + 1
    series = 'upgrade_gate_drift_condition{node="gpu-000",status="%s"}'
    status = next((s for s in ("True", "False", "Unknown") if metric(text, series % s)), "?")
    return Measured(first_s=first_s, start_cpu=own0 + kids0, n=n, own=(own1 - own0) / n, kids=(kids1 - kids0) / n,
                    rss0=mem0["VmRSS"] / 1024, rss1=mem1["VmRSS"] / 1024, hwm=mem1["VmHWM"] / 1024, verbs=verbs,
                    status=status, metric_cpu=metric(text, "upgrade_gate_agent_cycle_cpu_seconds") or 0.0)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run the measurement and print the results as Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=12)
    parser.add_argument("--interval", type=float, default=5.0)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    import gzip

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
    try:
        for doc in yaml.safe_load_all((REPO / "deploy" / "agent.yaml").read_text(encoding="utf-8")):
            if doc and doc["kind"] != "DaemonSet":
                cluster.cp.apply(doc)
        node = "gpu-000"
        fake = build_fake_node(work / "nodes" / node, with_vfs(mi300x_node(node, seed=1), 4))
        cluster.add_node(node, node_class="mi300x-8gpu", env=fake.env(os.environ), host_root=fake.host_root)
        snap = snapshot_of(fake)
        doc_bytes = dumps_snapshot(snap).encode("utf-8")
        with BaselineStore(work / "store") as st:
            st.init()
            st.save([snap], message="baseline")
        publisher = cluster.kubeconfig(work / "publisher.kubeconfig")
        assert run(["fleet", "publish-baselines", "--store", str(work / "store"), "--kubeconfig", str(publisher)]) == 0
        token = cluster.cp.token_for(NS, "upgrade-gate-agent")
        agent_kc = write_kubeconfig(work / "agent.kubeconfig", cluster.url, cluster.ca, token)
        own_dmesg = subprocess.run(["dmesg"], env=fake.env(os.environ), capture_output=True, text=True, check=True)
        big = big_dmesg(own_dmesg.stdout.splitlines())

        def audit() -> list[dict[str, object]]:
            return cluster.cp.audit(f"system:serviceaccount:{NS}:upgrade-gate-agent")

        print("## Node agent: cost per node (one MI300X node, 8 GPUs, 8 NICs)\n")
        print(f"- machine: {os.cpu_count()} CPUs ({_cpu_model()}); each row: {args.cycles} cycles at "
              f"{args.interval:g} s after the first, the agent its own process, CPU and RSS from /proc\n")  # fmt: skip
        print("| kernel log | start-up CPU s (wall s) | CPU per cycle: agent + probes | CPU s per hour at 30 s "
              "| RSS after 1st cycle -> after the rest (peak) | condition |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        first: Measured | None = None
        for i, (label, mode) in enumerate(SCENARIOS):
            env = {**fake.env(os.environ), "PYTHONPATH": str(REPO)}
            if mode is not None:
                override = dmesg_override(work / f"dmesg-{i}", big, grows=mode == "grows")
                env["PATH"] = os.pathsep.join((str(override), env["PATH"]))
            prom = work / f"agent-{i}.prom"
            argv = [sys.executable, "-m", "upgrade_gate", "fleet", "agent", "--node", node,
                    "--interval", f"{args.interval:g}", "--jitter", "0", "--host-root", str(fake.host_root),
                    "--metrics-port", "0", "--textfile", str(prom), "--kubeconfig", str(agent_kc)]  # fmt: skip
            m = measure(argv, env, prom, args.cycles, audit)
            first = first or m
            per = m.own + m.kids
            print(f"| {label} | {m.start_cpu:.2f} ({m.first_s:.1f}) | {per * 1000:.0f} ms = {m.own * 1000:.0f} + "
                  f"{m.kids * 1000:.0f} ms | {per * 120:.1f} ({per * 120 / 3.6:.1f} millicores) | {m.rss0:.1f} -> "
                  f"{m.rss1:.1f} MiB ({m.hwm:.1f}) | {m.status} |")  # fmt: skip
        assert first is not None
        print(f"\n- API requests in {first.n} cycles (first row): "
              + ", ".join(f"{k}: {v}" for k, v in sorted(first.verbs.items())))  # fmt: skip
        print(f"- the agent's own metric `upgrade_gate_agent_cycle_cpu_seconds` (first row, last cycle): "
              f"{first.metric_cpu * 1000:.0f} ms")  # fmt: skip
        print(f"- baseline published: {len(doc_bytes) / 1024:.1f} KiB JSON, "
              f"{len(gzip.compress(doc_bytes, mtime=0)) / 1024:.1f} KiB gzip'd in the ConfigMap")  # fmt: skip
        print()
        print(judge_cost(fake, snap))
    finally:
        cluster.stop()
    return 0


def judge_cost(fake: Any, baseline: Any, repeat: int = 5) -> str:
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
    probes = agent_probes(node.host_root, timeout_s=10.0)
    runner = LocalRunner(env=node.env(os.environ))
    bundle = capture(runner, node="gpu-000", host_root=node.host_root, probes=probes)
    policy = agent_policy(load_policy())
    dmesg = next(r for r in bundle.records if r.name == "dmesg")
    big = big_dmesg(dmesg.result.stdout.splitlines())
    heavy = replace(bundle, records=tuple(
        replace(r, result=replace(r.result, stdout=big)) if r.name == "dmesg" else r for r in bundle.records
    ))  # fmt: skip
    rows = []
    for label, b in (("fake node's dmesg", bundle), ("1 MiB dmesg", heavy)):
        c0 = time.process_time()
        for _ in range(repeat):
            base, seen = agent_views(baseline, build_snapshot(b))
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
