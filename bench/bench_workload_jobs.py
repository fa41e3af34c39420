"""Phase 6 as a Kubernetes Job against phase 6 on the node itself (issue 25, item 5): what the Job costs.

Usage, from the repository root (needs PyTorch and the real control plane built; a few minutes on 2 cores):
    python -m bench.bench_workload_jobs [--runs 3] [--steps 5]

What runs: one fake MI300X node (4 GPUs, two gloo ranks on the CPUs: the tests' fake node), the
shipped reference_train.py for real, `--steps` steps. Alternately, `--runs` times each:
- local: `validate.pipeline.run_pipeline` with the node's LocalLauncher (what `validate` does on a node);
- Job: `fleet.executor.run_phases` on the tests' real control plane (etcd, kube-apiserver, the Job
  controller; the node agent runs the pod as a local process), as the upgrade-gate service account:
  the Job with every GPU, the stager writing the script into the pod's emptyDir, the result frame.
Reported: the wall time of phase 6 each way (median, min, max), their difference (the Job's overhead:
create, the Job controller, the pod start, the wrapper and stager, the log read), and the size of the
Job object (the shipped script travels in it). The cluster runs in this process (unlike
bench_executor): its threads share the interpreter, so the overhead here is an upper bound for the
executor and a lower one for a real kubelet (no image pull, no sandbox). No asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    """Measure and print a Markdown table."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--runs", type=int, default=3)
    args.add_argument("--steps", type=int, default=5)
    opts = args.parse_args(argv)

    from tests.k8s.controlplane import ensure_built
    from tests.k8s.realcluster import RealCluster
    from tests.test_validate_support import snapshot_of
    from upgrade_gate.fakenode import Faults, build_fake_node, mi300x_node
    from upgrade_gate.fleet.executor import ExecutorSettings, run_phases
    from upgrade_gate.fleet.kube import KubeClient
    from upgrade_gate.fleet.manifests import JobSettings
    from upgrade_gate.fleet.workload_jobs import WorkloadJobs
    from upgrade_gate.model import NodeName, PhaseStatus
    from upgrade_gate.validate.config import parse_cvf_config
    from upgrade_gate.validate.launcher import LocalLauncher
    from upgrade_gate.validate.phases import select_phases
    from upgrade_gate.validate.phases.workload import workload_argv
    from upgrade_gate.validate.pipeline import run_pipeline

    reason = ensure_built()
    if reason is not None:
        print(f"skipped: {reason}")
        return 0
    root = Path(tempfile.mkdtemp(prefix="bench-workload-jobs-"))
    fake = build_fake_node(root / "gpu-01", mi300x_node("gpu-01", seed=1, gpu_count=4, nic_count=0), Faults())
    snap = snapshot_of(fake)
    config = parse_cvf_config({"UPGRADE_GATE_WORKLOAD_STEPS": str(opts.steps), "UPGRADE_GATE_WORKLOAD_WARMUP": "1",
                               "UPGRADE_GATE_WORKLOAD_BATCH": "8"}, source="bench")  # fmt: skip
    phases = select_phases(frozenset({6}))
    settings = ExecutorSettings(jobs=JobSettings(python=sys.executable), poll_s=0.1)
    cluster = RealCluster(root / "k8s")
    cluster.start()
    local: list[float] = []
    job: list[float] = []
    try:
        cluster.add_node("gpu-01", gpus=4, amd_nic=False, env=fake.env(os.environ), host_root=fake.host_root)
        cluster.wait_nodes_settled(["gpu-01"])
        client = KubeClient.from_kubeconfig(str(cluster.kubeconfig(root / "sa.kubeconfig")))
        node = client.get_node("gpu-01")
        for i in range(opts.runs):
            start = time.monotonic()
            res = run_pipeline(["gpu-01"], phases=phases, config=config, snapshots={"gpu-01": snap},
                               launcher=LocalLauncher({"gpu-01": fake.env(os.environ)}))  # fmt: skip
            local.append(time.monotonic() - start)
            assert res[NodeName("gpu-01")][0].status is PhaseStatus.PASSED
            start = time.monotonic()
            out = run_phases(client, [node], phases=phases, config=config, settings=settings, run_id=f"b{i}",
                             snapshots={NodeName("gpu-01"): snap})  # fmt: skip
            job.append(time.monotonic() - start)
            assert out[NodeName("gpu-01")][0].status is PhaseStatus.PASSED, out
        spec = WorkloadJobs(config=config, image="rocm/pytorch:latest").spec(
            node, workload_argv(config, 4), lambda: "x"
        )
        size = len(json.dumps(spec.manifest() if spec else {}))
        client.close()
    finally:
        cluster.stop()
    lm, jm = statistics.median(local), statistics.median(job)
    print(f"phase 6, {opts.steps} steps, 2 gloo ranks, {opts.runs} runs each (load {os.getloadavg()[0]:.1f}):")
    print("| path | median s | min s | max s |\n|---|---|---|---|")
    for label, runs in (("local (LocalLauncher)", local), ("Job (real control plane)", job)):
        print(f"| {label} | {statistics.median(runs):.1f} | {min(runs):.1f} | {max(runs):.1f} |")
    print(f"Job overhead (median difference): {jm - lm:+.1f} s; Job object {size / 1024:.1f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
