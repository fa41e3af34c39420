"""The fake `amd-smi monitor -u`: each GPU's graphics utilisation (and clock) while phase 6's job runs.

Layout (no capture of exactly `-u` exists; the columns and widths are the corpus captures' own): `-u` is
"Monitor graphics utilization (%) and clock (MHz)" in amd-smi's `monitor` help, and the captures print
those two as `GFX_CLK` then `GFX%` (amd-smi/mi350x-8gpu-monitor-putm-rocm7.0.txt:
`...   MEM_T   GFX_CLK   GFX%   MEM%  MEM_CLOCK`, `"GFX_CLK".rjust(10)`, `"GFX%".rjust(7)`), values
"2105 MHz" and "100 %" as in monitor-watch-timestamp-mi300x-8gpu-under-stress.txt. A node in a
compute-partition mode gets the `XCP` column and N/A for every partition but the first of a device
(amd-smi/monitor-mi300x-cpx-nps4-doc-example.txt), as `render_thermal` does.

Over time: a real GPU's utilisation moves from sample to sample, so one fixed table would hide the
fault this answer exists for. The answer is a cycle of `TURNS` tables that the replay hands out in turn
(`_replay.main`, a response's `cycle`): a healthy GPU moves by a point around `BASE_PCT`
(98, 97, 99, 98: a standard deviation of 0.7 points), a jittery one (`WorkloadProfile.gfx_jitter`,
faults.jittery_gpu) drops by its swing every other sample (98, 98 - swing, ...: swing / 2 points).
Any two consecutive answers already show the difference, so a test needs no particular sample count.
"""

from __future__ import annotations

from typing import Any

from upgrade_gate.fakenode.spec import GpuSpec, NodeSpec

ARGV = ("monitor", "-u")
BASE_PCT = 98
HEALTHY = (0, -1, 1, 0)  # per turn, points around BASE_PCT
TURNS = len(HEALTHY)
CLOCK_MHZ = 2100  # the MI300X capture's GFX_CLK is 2099-2108 MHz


def _slot(spec: NodeSpec, gpu: GpuSpec) -> int:
    """The GPU's device slot in BDF order (render_thermal's numbering, which the faults use)."""
    devices = sorted({g.bdf.rsplit(".", 1)[0] for g in spec.gpus})
    return devices.index(gpu.bdf.rsplit(".", 1)[0])


def render_amdsmi_monitor_util(spec: NodeSpec, turn: int = 0) -> str:
    """`amd-smi monitor -u` for `spec` at sample `turn` (rows in amd-smi's enumeration order)."""
    jitter = dict(spec.workload.gfx_jitter)
    partitioned = any(g.partition is not None for g in spec.gpus)
    header = "GPU" + ("XCP".rjust(5) if partitioned else "") + "GFX_CLK".rjust(10) + "GFX%".rjust(7)
    lines = [header]
    for index, gpu in enumerate(spec.enumerated_gpus):
        row = str(index).rjust(3)
        if partitioned:
            row += str(gpu.partition or 0).rjust(5)
        if gpu.partition not in (None, 0):
            row += "N/A".rjust(10) + "N/A".rjust(7)
        else:
            slot = _slot(spec, gpu)
            swing = jitter.get(slot)
            value = BASE_PCT + HEALTHY[turn % TURNS] if swing is None else BASE_PCT - (swing if turn % 2 else 0.0)
            row += f"{CLOCK_MHZ} MHz".rjust(10) + f"{max(0, min(100, round(value)))} %".rjust(7)
        lines.append(row)
    return "\n".join(lines) + "\n"


def monitor_util_response(spec: NodeSpec) -> dict[str, Any]:
    """The replay's answer to `amd-smi monitor -u`: the cycle of tables, one per call in turn."""
    return {
        "match": "exact",
        "argv": list(ARGV),
        "cycle": [render_amdsmi_monitor_util(spec, turn) for turn in range(TURNS)],
    }
