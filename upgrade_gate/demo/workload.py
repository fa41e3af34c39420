"""The demo's workload: the reference training run on the canaries, and the two workload stories.

The canaries run the shipped `reference_train.py` for real (PyTorch on the CPUs, gloo, two ranks: the
fake node's `torchrun`, `fakenode.workload`): phase 6 before the change (it goes into their baselines)
and phases 6 and 7 after it. The run is kept short (`CONFIG`: 8 steps, 2 of warm-up, a batch of 4) so
the demo stays quick, and the fake GPUs take `STEP_DELAY_S` per step, so the imagined GPU sets the pace
rather than the CPU load of the machine: with the CPU's compute setting the pace, two canaries training
at once on a two-core laptop differed by up to 40% between runs (measured 2026-12), which no
per-step statistics can tell from a regression (the CPU's own step-time noise is bench/bench_workload.py's).

Stories (`--scenario`):
- `workload-regression`: the change lands as planned and the configuration is unchanged, but on the
  first canary the reference run is slower (each step `SLOW_STEP_S` more), its log carries NCCL
  watchdog timeouts and its device initialisation takes `SLOW_INIT_S` more: BLOCK naming throughput,
  timeouts and init time;
- `index-pinned`: the site's workload binds ranks by enumeration index (`--device-order index`) on
  every canary; the perturbation (phase 7) moves its ranks to other GPUs: BLOCK naming the perturbation,
  with the UUID pin as the next step.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping

from upgrade_gate.fakenode import NodeSpec, faults
from upgrade_gate.model import NodeName
from upgrade_gate.validate.config import CvfConfig, parse_cvf_config

SCENARIOS = ("workload-regression", "index-pinned")
WORKLOAD = frozenset({6, 7})
CONFIG = {
    "UPGRADE_GATE_WORKLOAD_STEPS": "8", "UPGRADE_GATE_WORKLOAD_WARMUP": "2", "UPGRADE_GATE_WORKLOAD_BATCH": "4",
    "UPGRADE_GATE_WORKLOAD_UTIL_INTERVAL_S": "0.25",  # a few amd-smi samples inside the short run's 1.75 s of steps
}  # fmt: skip
STEP_DELAY_S = 0.25
SLOW_STEP_S = 0.15
SLOW_INIT_S = 20.0
TIMEOUTS = 4


def demo_config() -> CvfConfig:
    """The CVF defaults with the demo's short reference run."""
    return parse_cvf_config(CONFIG, source="demo")


def torch_missing() -> bool:
    """True when PyTorch is not installed (the workload phases then fail, closed: `pip install '.[workload]'`)."""
    return importlib.util.find_spec("torch") is None


def paced(spec: NodeSpec) -> NodeSpec:
    """The demo node's fake GPUs set the pace of a training step."""
    return faults.slow_workload(spec, step_delay_s=STEP_DELAY_S)


def apply_scenario(
    specs: Mapping[NodeName, NodeSpec], canaries: tuple[NodeName, ...], scenario: str | None, *, after: bool,
    say: Callable[[str], None] | None = None,
) -> dict[NodeName, NodeSpec]:  # fmt: skip
    """The canaries' specs before (`after` False) or after the change under `scenario`, narrated by `say`."""
    out = {n: paced(s) if n in canaries else s for n, s in specs.items()}
    if scenario == "index-pinned":
        for n in canaries:
            out[n] = faults.index_pinned(out[n])
        if after and say is not None:
            say("      The site's training script binds ranks by device index (torch.cuda.set_device(local_rank)).")
    elif scenario == "workload-regression" and after:
        first = canaries[0]
        slow = faults.slow_workload(out[first], step_delay_s=STEP_DELAY_S + SLOW_STEP_S)
        out[first] = faults.slow_init(faults.workload_timeouts(slow, TIMEOUTS), init_delay_s=SLOW_INIT_S)
        if say is not None:
            say(f"      Configuration unchanged everywhere; on {first} the reference run is slower, its log shows")
            say(f"      {TIMEOUTS} NCCL watchdog timeouts and device init takes {SLOW_INIT_S:g}s more.")
    return out
