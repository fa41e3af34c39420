"""Kubernetes executor overhead per Job on the REAL control plane (issue 14): phases 1-3 as Jobs.

`python -m bench.bench_executor [--nodes 4] [--tool-s 5,15] [--baseline] [--trace] [--quick]`

Design decisions
- The cluster is the tests' real control plane (tests/k8s/realcluster.py: etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler built from k8s.io/kubernetes v1.33, the tests' node agent as
  the kubelets), in its own process (bench._realcluster_server) so that the node agent's threads do not
  share an interpreter with the client under measurement (client CPU is then the client's alone). So
  what is measured includes the real Job controller (its 1 s batching of pod updates) and real watch
  semantics, which the in-repo double has neither of. upgrade-gate runs as the
  `upgrade-gate` service account of deploy/rbac.yaml.
- What runs is `fleet.executor.run_phases` on phases 1-3 of N fake MI300X nodes, every node at once
  (concurrency = N): every tool call is a Job pinned to its node whose tool is a wrapper that sleeps
  `tool_s` and then execs the fake node's real-format tool. Phase 1 runs 4 recipes and phase 2 the
  pipeline's 5 sweeps, in order, with the thermal sampling around them (`amd-smi list` and one sample
  before the sweeps, one after, in sequence; one every 20 s during them, beside the sweep), phase 3
  reads the snapshot: 12 Jobs per node in sequence, 14 in all. The slowest node's own time is
  9 x `tool_s` plus what the same phases take on the node itself with sleep-free tools (the fake
  tools' own run time, thermal sampling included, measured with the local launcher, best of 3);
  ratio = wall of the run / that. Everything above 1 is orchestration: Job creation, the Job
  controller, pod start by the node agent, the result-frame wrapper's start-up, the pod's status
  reaching the API, noticing the end, reading the log, and the phase barrier (phase 2 starts when
  every node finished phase 1, as in CVF).
- `--trace` (bench/_executor_trace.py) splits each Job's time into stages on one clock and counts
  the client's requests per Job: which part is the executor's (create, notice, collect, the wrapper),
  which the control plane's (the Job controller) and which the kubelet's (pod start, status).
  `UG_TRACE_OUT=FILE` also writes the raw timestamps.
- The node agent stands in for the kubelets. It watches pods (it polled every 0.1 s before
  2026-12-01 evening, adding ~50 ms per pod start that a kubelet does not have) and starts a pod as a
  local process at once: no sandbox, no image, no container runtime. A real kubelet's pod start (sandbox
  and container creation, typically 0.5-2 s) and its noticing the container's end (PLEG) are slower, so
  on a cluster the per-Job overhead is larger than here, by the kubelet's share, not the executor's.
- No asserts: it measures and reports. Skips (says why) when the control-plane binaries are not built.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

if __package__ in (None, ""):  # `python bench/bench_executor.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._executor_trace import Trace
from bench.bench_fleet import JOBS_PER_NODE, TARGET_RATIO, slow_tools
from bench.common import PYTHON, REPO, Section, Target, print_section, table
from upgrade_gate.model import replace

if TYPE_CHECKING:
    from upgrade_gate.fakenode import FakeNode
    from upgrade_gate.model import Snapshot


def measure(
    workdir: Path, *, nodes: int, tool_s: tuple[float, ...], baseline: bool, trace: bool = False
) -> list[dict[str, float | str]]:
    """One real control plane; per (mode, tool_s) a run of phases 1-3 on `nodes` nodes."""
    from tests.k8s.cluster import FAST_RETRY
    from upgrade_gate.cli.collect_cmds import parser_check
    from upgrade_gate.collect.capture import capture
    from upgrade_gate.collect.runner import LocalRunner
    from upgrade_gate.fakenode import build_fake_node, mi300x_node
    from upgrade_gate.fleet.executor import ExecutorSettings, run_phases
    from upgrade_gate.fleet.kube import KubeClient
    from upgrade_gate.fleet.labels import RUN_ID
    from upgrade_gate.fleet.manifests import JobSettings
    from upgrade_gate.model import NodeInfo, NodeName, PhaseStatus
    from upgrade_gate.snapshot.build import build_snapshot
    from upgrade_gate.validate.config import default_config
    from upgrade_gate.validate.phases import select_phases

    fake = build_fake_node(workdir / "fake", mi300x_node("gpu-000", seed=1))
    bundle = capture(
        LocalRunner(env=fake.env(os.environ)), node="gpu-000", host_root=fake.host_root, output_check=parser_check()
    )
    snap = build_snapshot(bundle, node_class="mi300x-8gpu")
    local_s = _local_reference(workdir, fake, snap)
    print(f"# the node's own time outside the sleeps (local launcher): {local_s:.2f}s", file=sys.stderr, flush=True)
    out: list[dict[str, float | str]] = []
    for t in tool_s:
        slow = slow_tools(workdir / f"tools-{t:g}", fake.bin_dir, t)
        path = f"{slow}:{fake.bin_dir}"
        with _cluster(workdir / f"k8s-{t:g}", nodes, path, fake.host_root) as kubeconfig:
            for mode in ("watch", "poll") if baseline else ("watch",):
                client = KubeClient.from_kubeconfig(kubeconfig, retry=FAST_RETRY)
                if mode == "poll":
                    client.watch_refused.update(pods="bench baseline: poll every 2 s as before issue 14")
                settings = ExecutorSettings(
                    jobs=JobSettings(python=PYTHON), upgrade_gate_argv=(PYTHON, "-m", "upgrade_gate"),
                    concurrency=nodes,
                )  # fmt: skip
                kube_nodes = client.list_nodes()
                run_id = f"b{mode[0]}{int(t)}"
                snapshots = {
                    n.name: replace(snap, node=NodeInfo(name=NodeName(n.name), node_class="mi300x-8gpu"))
                    for n in kube_nodes
                }
                tracer = Trace() if trace else None
                load = os.getloadavg()[0]
                with tracer.installed(client, kubeconfig, settings.jobs.namespace) if tracer else nullcontext():
                    start, cpu = time.perf_counter(), time.process_time()
                    results = run_phases(
                        client, kube_nodes, phases=select_phases(frozenset({1, 2, 3})), config=default_config(),
                        settings=settings, run_id=run_id, snapshots=snapshots,
                    )  # fmt: skip
                    wall = time.perf_counter() - start
                    cpu = time.process_time() - cpu
                jobs = sum(
                    j.labels.get(RUN_ID, "").startswith(f"{run_id}-") for j in client.list_jobs(settings.jobs.namespace)
                )
                client.close()
                passed = sum(all(r.status is PhaseStatus.PASSED for r in rs) for rs in results.values())
                ideal = JOBS_PER_NODE * t + local_s
                out.append({"mode": mode, "tool_s": t, "nodes": float(nodes), "wall_s": wall, "ideal_s": ideal,
                            "ratio": wall / ideal, "overhead_s": wall - ideal, "jobs_per_node": jobs / nodes,
                            "client_cpu_s": cpu, "nodes_passed": float(passed),
                            "load": f"{load:.1f} / {os.getloadavg()[0]:.1f}"})  # fmt: skip
                print(f"# {mode} tool {t:g}s: wall {wall:.1f}s ratio {wall / ideal:.3f}", file=sys.stderr, flush=True)
                if tracer is not None:
                    out[-1]["trace"] = tracer.render(tool_s=t)
                    if os.environ.get("UG_TRACE_OUT"):  # the raw timestamps, for a closer look
                        Path(os.environ["UG_TRACE_OUT"]).write_text(
                            json.dumps({"start": start, "end": start + wall, "jobs": tracer.jobs}), encoding="utf-8"
                        )
                    print(out[-1]["trace"], file=sys.stderr, flush=True)
    return out


@contextmanager
def _cluster(workdir: Path, nodes: int, path: str, host_root: Path) -> Iterator[str]:
    """The real control plane with `nodes` fake nodes in its own process (bench._realcluster_server);
    yields the upgrade-gate service account's kubeconfig."""
    argv = [PYTHON, "-m", "bench._realcluster_server", str(workdir), str(nodes), path, str(host_root)]
    server = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdin is not None and server.stdout is not None
    try:
        line = server.stdout.readline()
        if not line.startswith("KUBECONFIG "):
            raise RuntimeError(f"the control plane did not start: {line!r}")
        yield line.split(maxsplit=1)[1].strip()
    finally:
        server.stdin.close()
        server.wait(timeout=120)


def _local_reference(workdir: Path, fake: FakeNode, snap: Snapshot) -> float:
    """Seconds the same phases take on the node itself with sleep-free tools (LocalLauncher, best of 3):
    the fake tools' own run time, which belongs to the node, not to the orchestration."""
    from upgrade_gate.model import NodeName
    from upgrade_gate.validate.config import default_config
    from upgrade_gate.validate.launcher import LocalLauncher
    from upgrade_gate.validate.phases import select_phases
    from upgrade_gate.validate.pipeline import run_pipeline

    slow = slow_tools(workdir / "tools-0", fake.bin_dir, 0.0)
    launcher = LocalLauncher({NodeName("gpu-000"): {**fake.env(os.environ), "PATH": f"{slow}:{fake.bin_dir}"}})
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        run_pipeline(["gpu-000"], phases=select_phases(frozenset({1, 2, 3})), config=default_config(),
                     launcher=launcher, snapshots={"gpu-000": snap})  # fmt: skip
        best = min(best, time.perf_counter() - start)
    return best


def run(*, quick: bool = False, workdir: Path | None = None, nodes: int = 4,
        tool_s: tuple[float, ...] = (5.0, 15.0), baseline: bool = False, trace: bool = False) -> Section:  # fmt: skip
    """Measure; return the section."""
    title = "Kubernetes executor on the real control plane (issue 14)"
    from tests.k8s.controlplane import missing_reason

    reason = missing_reason()
    if reason is not None:
        return Section(title=title, body=f"Not measured: {reason}.",
                       targets=(Target(name="executor overhead", goal="≤ 1.1x", measured="no control plane",
                                       met=None),))  # fmt: skip
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="ug-bench-executor-") as tmp:
            return run(quick=quick, workdir=Path(tmp), nodes=nodes, tool_s=tool_s, baseline=baseline, trace=trace)
    if quick:
        nodes, tool_s = min(nodes, 2), tool_s[:1]
    rows = measure(workdir / "executor", nodes=nodes, tool_s=tool_s, baseline=baseline, trace=trace)
    body = [
        f"Phases 1-3 through `fleet.executor.run_phases` on {nodes} fake MI300X nodes at once, on the real "
        "control plane (tests/k8s/realcluster.py), as the upgrade-gate service account; every tool call is a "
        f"Job whose tool sleeps `tool_s` before the fake tool answers; the slowest node's own time is "
        f"{JOBS_PER_NODE} x `tool_s` plus the fake tools' run time on the node itself (local launcher); "
        "a node runs 12 Jobs in sequence (4 recipes; amd-smi list and a sample; 5 sweeps; a sample) "
        "and a thermal sample every 20 s beside the sweeps. "
        "`watch`: as shipped; `poll`: the watch off, Job status read every 2 s "
        "(before issue 14). The machine has 2 cores shared with other work: the 1-minute load average at the "
        "start and end of each run says how busy it was; every pod's Python start-up (the result wrapper, the "
        "fake tool) slows with it.\n",
        table(
            (
                "mode",
                "tool call",
                "wall",
                "slowest node (own time)",
                "ratio",
                "overhead (wall - slowest)",
                "Jobs per node",
                "client CPU",
                "nodes passed",
                "load (start / end)",
            ),
            [
                (
                    r["mode"],
                    f"{r['tool_s']:g} s",
                    f"{r['wall_s']:.1f} s",
                    f"{r['ideal_s']:.1f} s",
                    f"**{r['ratio']:.3f}**",
                    f"{r['overhead_s']:.2f} s",
                    f"{r['jobs_per_node']:.1f}",
                    f"{r['client_cpu_s']:.1f} s",
                    f"{r['nodes_passed']:.0f}/{r['nodes']:.0f}",
                    r["load"],
                )
                for r in rows
            ],
        ),
    ]
    for r in rows:
        if "trace" in r:
            body.append(
                f"\nWhere the time went ({r['mode']}, {r['tool_s']:g} s tool calls; bench/_executor_trace.py):\n"
            )
            body.append(str(r["trace"]))
    five = [r for r in rows if r["mode"] == "watch" and r["tool_s"] == min(tool_s)]
    ratio = float(five[0]["ratio"]) if five else float("nan")
    target = Target(
        name=f"executor, phases 1-3, {nodes} nodes, {min(tool_s):g} s tool calls (real control plane)",
        goal=f"wall ≤ {TARGET_RATIO} x slowest node",
        measured=f"{ratio:.3f}x",
        met=ratio <= TARGET_RATIO,
    )
    return Section(title=title, body="\n".join(body), targets=(target,), numbers={"runs": rows})


def main() -> None:
    """Run alone."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--tool-s", default="5,15", help="comma-separated tool-call durations in seconds")
    parser.add_argument("--baseline", action="store_true", help="also run with polling (before issue 14)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trace", action="store_true", help="per-Job stages and requests (bench/_executor_trace.py)")
    args = parser.parse_args()
    tools = tuple(float(x) for x in args.tool_s.split(",") if x)
    print_section(run(quick=args.quick, nodes=args.nodes, tool_s=tools, baseline=args.baseline, trace=args.trace))


if __name__ == "__main__":
    main()
