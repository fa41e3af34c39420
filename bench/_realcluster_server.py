"""Run the real control plane (tests/k8s/realcluster.py) in its own process for bench_executor.

`python -m bench._realcluster_server WORKDIR NODES PATH HOST_ROOT` starts etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and the tests' node agent, registers NODES fake nodes
(gpu-000...) whose pods get this environment with PATH replaced and HOST_ROOT as their host
filesystem, writes a kubeconfig of the upgrade-gate service account, prints `KUBECONFIG <path>` on
stdout, and serves until stdin closes. A separate process keeps the node agent's threads (it lists
every pod ten times a second) off the interpreter of the client under measurement, as real kubelets are.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> None:
    """Serve until stdin closes."""
    from tests.k8s.realcluster import RealCluster

    workdir, nodes, path, host_root = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    cluster = RealCluster(workdir)
    try:
        cluster.start()
        names = [f"gpu-{i:03d}" for i in range(nodes)]
        env = {**os.environ, "PATH": path}
        for name in names:
            cluster.add_node(name, node_class="mi300x-8gpu", env=env, host_root=host_root)
        cluster.wait_nodes_settled(names)
        print(f"KUBECONFIG {cluster.kubeconfig(workdir / 'sa.kubeconfig')}", flush=True)
        sys.stdin.read()
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
