"""Phase 2's thermal sampling on NVIDIA nodes: `nvidia-smi --query-gpu=... --format=csv,noheader,nounits`.

`phases.thermal` samples around the mesh sweep with amd-smi (rocm-smi as fallback); an NVIDIA node has
neither, so its samples come from one nvidia-smi query (`parse.nvidia_smi_query.ARGV`: index, PCI bus id,
`temperature.gpu`, `temperature.memory`, `power.draw`; the documented CSV form, nvidia-smi(1) and
`nvidia-smi --help-query-gpu`). The BDF is on every line, so no listing maps a reading to the snapshot's
GPU (amd-smi needs `amd-smi list` for that); the same before / during / end schedule, budget and
measurements (`thermal/gpu<i>/...`) as on AMD nodes, with the sensors named as what they are:
`temperature.gpu` is the GPU core sensor ("gpu", not AMD's hotspot), `power.draw` the board's ("board power").

Design decisions:
- No fallback tool: when the first query fails (nvidia-smi missing, timed out, a failure message, a line
  the parser refuses), nothing is sampled further and the reason becomes a `thermal: ...` note; the GPUs
  then have no thermal measurement, which `thermal.outlier` treats as missing evidence (blocking by
  default), never as a pass.
- The judge's `thermal.outlier` reads these readings by their own sensors (`judge.rules.thermal.TOOLS`:
  `nvidia-smi` -> `gpu`, `board power`), never against amd-smi's hotspot.
"""

from __future__ import annotations

from upgrade_gate.parse.nvidia_smi_query import ARGV, parse_nvidia_smi_query_gpu
from upgrade_gate.validate.phase import TimedRunner
from upgrade_gate.validate.phases.thermal import INTERVAL_S, MAX_DURING, TIMEOUT_S, Reading, ThermalRecord, take_sample

SENSORS = ("gpu", "board power")
"""`temperature.gpu` and `power.draw`, as the measurements' `sensor` settings."""


def read_query(text: str) -> dict[str, Reading]:
    """Readings by BDF from one query's output (ParseError when the parser refuses it)."""
    result = parse_nvidia_smi_query_gpu(text)
    return {
        str(g.bdf): Reading(hotspot_c=g.temperature_c, memory_c=g.memory_temperature_c, power_w=g.power_w)
        for g in result.gpus
    }


def start_nvidia_smi(runner: TimedRunner, record: ThermalRecord, timeout_s: float) -> bool:
    """Point the record at nvidia-smi and take the first sample; False (and a note) when it failed."""
    record.tool = ARGV
    record.reader = read_query
    record.sensors = SENSORS
    before = take_sample(runner, record, "before", timeout_s)
    record.add(before)
    if before.error is None:
        return True
    record.problems.append(f"nvidia-smi failed ({before.error}); not sampled further")
    return False


def plan_line(*, interval_s: float = INTERVAL_S, max_during: int = MAX_DURING) -> str:
    """The dry-run description of the sampling on an NVIDIA node."""
    return (
        f"thermal: {' '.join(ARGV)} before, every {interval_s:g}s during (at most {max_during}) and after the "
        f"sweep, {TIMEOUT_S:g}s each; judged by thermal.outlier"
    )
