"""Run the Kubernetes API server double (tests/k8s/) in its own process for bench_fleet.

`python -m bench._cluster_server WORKDIR NODES [PATH [HOST_ROOT]]` starts the double with NODES
simulated nodes (named gpu-000...; their containers get this environment with PATH replaced, and
HOST_ROOT as their host filesystem), prints `URL <url>` on stdout, and serves until stdin closes.
A separate process keeps the double's own CPU use (its reconcile loop, the HTTP server) from
competing with the client under measurement for one interpreter lock, as a real API server would not.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> None:
    """Serve until stdin closes."""
    from tests.k8s.cluster import ClusterDouble

    workdir, nodes = Path(sys.argv[1]), int(sys.argv[2])
    path = sys.argv[3] if len(sys.argv) > 3 else "/usr/bin:/bin"
    host_root = Path(sys.argv[4]) if len(sys.argv) > 4 else None
    env = {**os.environ, "PATH": path}
    cluster = ClusterDouble(workdir)
    cluster.start()
    try:
        for i in range(nodes):
            cluster.add_node(f"gpu-{i:03d}", node_class="mi300x-8gpu", env=env, host_root=host_root)
        print(f"URL {cluster.url}", flush=True)
        sys.stdin.read()
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
