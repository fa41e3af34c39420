"""The cause a failing GPU tool printed, found wherever the tool printed it.

A failed probe's reason used to be the last line of stderr. Real tools put the cause elsewhere, and
their stderr carries noise from libraries they load, so the reason named the noise:

- rocminfo 5.2.3 (Debian bookworm) on a host without the amdgpu driver exits 1, prints the cause on
  *stdout* in red (`ESC[31mROCk module is NOT loaded, possibly no GPU devicesESC[0m`) and two lines of
  libkmod noise on stderr (`libkmod: ERROR ... could not open /proc/modules`, `Error: could not get list
  of modules: ...`). ROCm 6.2.3 prints the same cause (corpus rocminfo/error-rock-module-NOT-loaded-...).
- rocm-smi 5.2.3 (Debian) and 6.2.3 (corpus rocm-smi/error-driver-not-initialized-...) exit **0** with
  empty stdout; stderr holds a helper's `cat: /sys/module/amdgpu/initstate: No such file or directory`
  and then Python logging's `ERROR:root:Driver not initialized (amdgpu not found in modules)`.
- rocminfo on a node whose driver is loaded but unusable prints `Unable to open /dev/kfd read-write: ...`
  or `Call returned HSA_STATUS_ERROR_...` (corpus rocminfo/error-rocm3.x-..., error-rx7600xt-...,
  error-rx9070xt-...).

`known_cause(stdout, stderr)` returns the first line, in the order of `_CAUSES`, that states one of
these causes, as printed less its colour codes; None when the tool printed none of them.
The table is short on purpose: a cause is added here only from a real output.
"""

from __future__ import annotations

import re

from upgrade_gate.parse.common import strip_ansi

_CAUSES: tuple[re.Pattern[str], ...] = (
    re.compile(r"ROCk module is NOT (?:loaded|live)\b"),
    re.compile(r"Driver not initialized \(amdgpu not found in modules\)"),
    re.compile(r"Unable to open /dev/kfd\b"),
    re.compile(r"\bis not member of \S+ group"),
    re.compile(r"Agent creation failed\b"),
    re.compile(r"Call returned HSA_STATUS_ERROR_\w+"),
)


def known_cause(stdout: str, stderr: str) -> str | None:
    """The cause line a GPU tool printed (see the module docstring), or None."""
    lines = [strip_ansi(line).strip() for line in (*stdout.splitlines(), *stderr.splitlines())]
    for pattern in _CAUSES:
        for line in lines:
            if pattern.search(line) is not None:
                return line[:200]
    return None
