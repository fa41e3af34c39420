"""How many CPUs this process may use: what sizes the judge's and the ABI reader's process pools."""

from __future__ import annotations

import os
from pathlib import Path

CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max <period>"


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask, capped by a cgroup v2 CPU quota
    (`/sys/fs/cgroup/cpu.max`) when one is set; `os.cpu_count()` counts the host's (a 2-CPU container on
    a 128-core host would fork 128 workers)."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    try:
        quota, period = CPU_MAX.read_text(encoding="ascii").split()[:2]
        if quota != "max" and int(period) > 0:
            count = min(count, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(1, count)
