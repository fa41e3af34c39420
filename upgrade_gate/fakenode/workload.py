"""The fake node's `torchrun`: the real training script and PyTorch on the CPUs, on imagined GPUs.

A fake node has no GPU, so its `torchrun` (written into `bin/` by `build_fake_node`) runs the real
script with the gloo backend on the CPUs, through `_replay/forkrun.py`: torchrun's argument parser and
worker contract (its environment, the agent's TCPStore), with the ranks forked from one PyTorch import
instead of each importing it again (measured 2026-12 on 2 cores: a demo run's CPU 11.5 s -> 5.1 s; the
script is unchanged, its init time no longer includes its own import). It hands the script the one
thing a CPU run cannot have: the node's GPU identities, in its enumeration order, through
UPGRADE_GATE_FAKE_GPUS (the documented seam of `reference_train.py`). The visible-device variables
the phase sets reach the script untouched, and the script applies them as the runtime would.

Dated note (2026-12, torch 2.15 CPU): a rank tearing down gloo while its peer still did sometimes
died at exit ("terminate called without an active exception", exit 250) whoever hosted the store;
`reference_train.leave` ends each rank without a teardown, so the launcher no longer matters there.

What `WorkloadProfile` changes (each a fault the judge must see):
- `ranks`: gloo processes, whatever `--nproc-per-node` asked (8 CPU processes would swamp a laptop);
- `step_delay_s` / `init_delay_s`: the script's fake-GPU delays (a slower GPU, a slower device init);
- `collective_timeouts`: after the run, that many PyTorch NCCL watchdog lines on stderr, in the
  wording of ProcessGroupNCCL.cpp as real logs print it (see `parse.workload`);
- `lr_scale`: the learning rate times this (a real divergence of the real loss);
- `index_pinned`: `--device-order index` (the site's script binds ranks by enumeration index);
- `output`: `nothing` (stdout dropped), `truncated` (cut in the middle of a record), `signal` (the
  launcher dies by SIGKILL after the run), `unknown-gpu` (the runtime sees a GPU the node's other
  tools do not list).
Tool-level faults (hang, non-zero, garbage, missing) apply as to every fake tool (`_replay`).
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

from upgrade_gate.fakenode.spec import NodeSpec

LR = 0.05  # reference_train.py's default learning rate

TIMEOUT_LINE = (
    "[rank{rank}]:[E1205 10:00:00.000000000 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
    "for 600013 milliseconds before timing out."
)


def workload_table(spec: NodeSpec) -> dict[str, Any]:
    """What the fake torchrun reads: the GPUs in enumeration order and the profile's knobs."""
    gpus = [{"bdf": g.bdf, "uuid": f"GPU-{g.unique_id_hex}"} for g in spec.enumerated_gpus]
    p = spec.workload
    if p.output == "unknown-gpu" and gpus:
        gpus[0] = {"bdf": "0000:aa:00.0", "uuid": "GPU-00000000deadbeef"}
    extra: list[str] = []
    if p.index_pinned:
        extra += ["--device-order", "index"]
    if p.lr_scale != 1.0:
        extra += ["--lr", repr(LR * p.lr_scale)]
    lines = [TIMEOUT_LINE.format(rank=i % max(p.ranks, 1), seq=100 + i) for i in range(p.collective_timeouts)]
    return {
        "gpus": gpus,
        "ranks": p.ranks,
        "env": {
            "UPGRADE_GATE_FAKE_STEP_DELAY_S": str(p.step_delay_s),
            "UPGRADE_GATE_FAKE_INIT_DELAY_S": str(p.init_delay_s),
        },
        "extra": extra,
        "stderr_after": lines,
        "output": p.output,
    }


STUB = """
import json, os, signal, subprocess, sys
sys.path.insert(0, {lib!r})
from _replay.main import _apply_fault
table = json.load(open({table!r}))
argv = sys.argv[1:]
fault = table.get("fault")
if fault is not None and argv[: len(fault["argv_prefix"])] == fault["argv_prefix"]:
    sys.exit(_apply_fault(fault))
for i, a in enumerate(argv[:-1]):
    if a == "--nproc-per-node":
        argv[i + 1] = str(table["ranks"])
script = next((i for i, a in enumerate(argv) if a.endswith(".py")), len(argv))
argv = argv[: script + 1] + table["extra"] + argv[script + 1 :]
env = dict(os.environ, UPGRADE_GATE_FAKE_GPUS=json.dumps(table["gpus"]), **table["env"])
env.setdefault("OMP_NUM_THREADS", "1")
child = subprocess.run([{python!r}, "-u", {launcher!r}, *argv], env=env, stdout=subprocess.PIPE)
out = child.stdout.decode("utf-8", "replace")
mode = table["output"]
if mode == "truncated":
    out = out[: len(out) // 2]
if mode != "nothing":
    sys.stdout.write(out)
    sys.stdout.flush()
for line in table["stderr_after"]:
    print(line, file=sys.stderr)
if mode == "signal":
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(child.returncode)
"""


def write_torchrun(path: Path, table: dict[str, Any], lib_dir: Path, data_dir: Path) -> None:
    """Write the fake `torchrun` (see the module docstring) and its table."""
    table_path = data_dir / "torchrun.json"
    table_path.write_text(json.dumps(table, indent=1), encoding="utf-8")
    launcher = str(lib_dir / "_replay" / "forkrun.py")
    body = STUB.format(lib=str(lib_dir), table=str(table_path), python=sys.executable, launcher=launcher)
    path.write_text(f"#!{sys.executable} -I\n{body.lstrip()}", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
