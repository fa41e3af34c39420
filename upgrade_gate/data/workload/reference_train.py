"""upgrade-gate's reference workload: a small ResNet-class CNN trained with PyTorch DDP on synthetic data.

Launched by the `workload` and `perturbation` phases as
    torchrun --standalone --nproc-per-node N reference_train.py [--steps S --batch-size B --warmup W ...]
one process per GPU (nccl backend on CUDA and on ROCm, where torch's "nccl" is RCCL), or on a machine
without GPUs with the gloo backend (2-4 processes on CPU: the tests and the demo).

The contract (docs/workload.md; `upgrade_gate.parse.workload` reads it strictly): rank 0 prints JSON
lines on stdout, nothing else; every record has `"record"`:
- `start`: contract version, world size, backend, device kind, precision, model, batch, steps, warm-up;
- `device_map`: every rank's device as the runtime itself sees it (PCIe BDF and UUID from
  torch.cuda.get_device_properties: pci_domain_id/pci_bus_id/pci_device_id and uuid);
- `step` (one per step): step, loss (global mean over ranks; a non-finite loss is the string "NaN",
  "Infinity" or "-Infinity"), step_time_s (the slowest rank's), samples_per_s (global), warmup;
- `init`: seconds from process start to the first completed step (the slowest rank's);
- `end`: the number of steps run (a run without it was cut short).

Device binding (`--device-order`): `bdf` (the default) gives rank r the r-th visible GPU in PCIe bus
order, so a permuted HIP/ROCR/CUDA_VISIBLE_DEVICES list leaves every rank on the same GPU (the
incident's lesson: bind by identity, not by enumeration index); `index` gives rank r the r-th GPU in
enumeration order, as most scripts do (`torch.cuda.set_device(local_rank)`): a permuted list moves ranks.

The one imitation (CPU runs only, when torch sees no GPU): the GPU identities come from the environment
variable UPGRADE_GATE_FAKE_GPUS, a JSON list of {"bdf": ..., "uuid": ...} in the node's enumeration
order, which the fake node sets; ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES are
applied to that list the way the runtime applies them (in that order, indices or UUIDs). The fake
node's slow GPUs are UPGRADE_GATE_FAKE_STEP_DELAY_S (extra seconds per step) and
UPGRADE_GATE_FAKE_INIT_DELAY_S (extra seconds before the first step). Nothing else is imitated: the
model, the data, the optimiser, the collectives and the timings are real.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from datetime import timedelta

STARTED = time.monotonic()  # before importing torch: its import and the runtime's init are init time

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

CONTRACT = 1
FAKE_GPUS = "UPGRADE_GATE_FAKE_GPUS"
VISIBLE = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


class Block(nn.Module):
    """A ResNet basic block (two 3x3 convolutions, batch norm, identity or 1x1 shortcut)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + self.short(x))


class SmallResNet(nn.Module):
    """A ResNet-class CNN: a stem, three stages of basic blocks, global pooling, a linear head."""

    def __init__(self, width: int, classes: int, blocks: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers: list[nn.Module] = []
        cin = width
        for stage, cout in enumerate((width, 2 * width, 4 * width)):
            for i in range(blocks):
                layers.append(Block(cin, cout, 2 if stage > 0 and i == 0 else 1))
                cin = cout
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(torch.flatten(F.adaptive_avg_pool2d(self.body(self.stem(x)), 1), 1))
        return out


def emit(record: dict[str, object]) -> None:
    """One contract record on stdout (rank 0 only), flushed at once."""
    print(json.dumps(record, sort_keys=True, allow_nan=False), flush=True)


def number(value: float) -> float | str:
    """A finite float as is; a non-finite one as the string JSON cannot carry as a number."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def visible(devices: list[dict[str, str]]) -> list[dict[str, str]]:
    """The fake node's GPUs after the *_VISIBLE_DEVICES lists, applied in the runtime's order."""
    for var in VISIBLE:
        text = os.environ.get(var)
        if text is None:
            continue
        chosen: list[dict[str, str]] = []
        for item in (t.strip() for t in text.split(",") if t.strip()):
            if item.isdigit() and int(item) < len(devices):
                chosen.append(devices[int(item)])
            elif not item.isdigit():
                chosen.extend(d for d in devices if d["uuid"] == item)
            else:
                break  # the runtime stops at the first invalid entry
        devices = chosen
    return devices


def bdf_of(props: object) -> str:
    """The PCIe address torch reports for a device (domain:bus:device; torch reports no function)."""
    domain, bus, device = (int(getattr(props, a)) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
    return f"{domain:04x}:{bus:02x}:{device:02x}.0"


def gpus() -> list[dict[str, str]]:
    """The visible GPUs in enumeration order (index, BDF, UUID) as the runtime sees them."""
    if torch.cuda.is_available():
        out = []
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            out.append({"index": str(i), "bdf": bdf_of(props), "uuid": str(props.uuid)})
        return out
    raw = os.environ.get(FAKE_GPUS)
    if raw is None:
        return []
    listed = [{"bdf": str(d["bdf"]), "uuid": str(d["uuid"])} for d in json.loads(raw)]
    return [{**d, "index": str(i)} for i, d in enumerate(visible(listed))]


def pick(devices: list[dict[str, str]], local_rank: int, order: str) -> dict[str, str] | None:
    """This rank's GPU: by PCIe order (`bdf`, stable under a permuted visible list) or by index."""
    ordered = sorted(devices, key=lambda d: d["bdf"]) if order == "bdf" else devices
    return ordered[local_rank] if local_rank < len(ordered) else None


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--blocks", type=int, default=1, help="basic blocks per stage")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--precision", choices=("auto", "bf16", "fp16", "fp32"), default="auto")
    p.add_argument("--device-order", choices=("bdf", "index"), default="bdf")
    p.add_argument("--timeout-s", type=float, default=300.0, help="collective timeout (the watchdog's)")
    args = p.parse_args(argv)
    if args.steps < 1 or not 0 <= args.warmup < args.steps or args.batch_size < 1:
        p.error("need steps >= 1, 0 <= warmup < steps, batch-size >= 1")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    devices = gpus()
    mine = pick(devices, local_rank, args.device_order)
    if cuda:
        if mine is None:
            print(f"rank {local_rank}: no visible GPU for it ({len(devices)} visible)", file=sys.stderr)
            return 2
        torch.cuda.set_device(int(mine["index"]))
        device = torch.device("cuda", int(mine["index"]))
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    precision = args.precision
    if precision == "auto":
        precision = "bf16" if not cuda or torch.cuda.is_bf16_supported() else "fp16"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[precision]
    if rank == 0:
        emit(
            {
                "record": "start",
                "contract": CONTRACT,
                "world_size": world,
                "backend": backend,
                "device": device.type,
                "precision": precision,
                "model": f"resnet-w{args.width}-b{args.blocks}",
                "batch_size": args.batch_size,
                "steps": args.steps,
                "warmup": args.warmup,
                "seed": args.seed,
                "device_order": args.device_order,
                "torch": torch.__version__,
            }
        )
    entry: dict[str, object] = {"rank": rank, "local_rank": local_rank, "bdf": None, "uuid": None, "index": None}
    if mine is not None:
        entry.update(bdf=mine["bdf"], uuid=mine["uuid"], index=int(mine["index"]))
    table: list[object] = [None] * world
    dist.all_gather_object(table, entry)
    if rank == 0:
        emit({"record": "device_map", "ranks": table})

    torch.manual_seed(args.seed)
    model = SmallResNet(args.width, args.classes, args.blocks).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    gen = torch.Generator().manual_seed(args.seed + rank)
    images = torch.randn(4, args.batch_size, 3, args.image_size, args.image_size, generator=gen)
    labels = torch.randint(0, args.classes, (4, args.batch_size), generator=gen)
    step_delay = float(os.environ.get("UPGRADE_GATE_FAKE_STEP_DELAY_S", "0")) if not cuda else 0.0
    init_delay = float(os.environ.get("UPGRADE_GATE_FAKE_INIT_DELAY_S", "0")) if not cuda else 0.0
    if init_delay > 0:
        time.sleep(init_delay)
    dist.barrier()
    for step in range(args.steps):
        begin = time.perf_counter()
        x = images[step % 4].to(device, non_blocking=True)
        y = labels[step % 4].to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=dtype, enabled=precision != "fp32"):
            loss = F.cross_entropy(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
        scaler.step(opt)
        scaler.update()
        if step_delay > 0:
            time.sleep(step_delay)
        stats = torch.tensor([loss.detach().float().item(), 0.0], dtype=torch.float64)
        if cuda:
            torch.cuda.synchronize()
        stats[1] = time.perf_counter() - begin
        mean = stats.clone()
        dist.all_reduce(mean, op=dist.ReduceOp.SUM)
        dist.all_reduce(stats, op=dist.ReduceOp.MAX)
        seconds = float(stats[1])
        if step == 0:
            first = torch.tensor([time.monotonic() - STARTED], dtype=torch.float64)
            dist.all_reduce(first, op=dist.ReduceOp.MAX)
        if rank == 0:
            emit(
                {
                    "record": "step",
                    "step": step,
                    "loss": number(float(mean[0]) / world),
                    "step_time_s": round(seconds, 6),
                    "samples_per_s": round(world * args.batch_size / seconds, 3),
                    "warmup": step < args.warmup,
                }
            )
            if step == 0:
                emit({"record": "init", "init_s": round(float(first[0]), 6)})
    if rank == 0:
        emit({"record": "end", "steps": args.steps})
    leave(rank, world, timedelta(seconds=args.timeout_s))
    return 0  # not reached: leave() ends the process


def leave(rank: int, world: int, timeout: timedelta) -> None:
    """End this rank's process once every rank is done with every collective, and nothing else.

    Measured (2026-12, torch 2.15 CPU, gloo, 4 runs at once on 2 loaded cores): a barrier followed by
    destroy_process_group() and a normal exit still killed a rank by SIGABRT ("terminate called without
    an active exception") after the run's `end` record, 1 run in 16: the C++ teardown of gloo's threads
    races the peer's. So no rank tears anything down: after the last collective each rank says so in the
    job's store; once all have said so (so no collective traffic is in flight anywhere), the ranks other
    than 0 say they are leaving and leave, and rank 0, which may host the store (launchers other than
    torchrun's), waits for that before it leaves. Leaving is os._exit after flushing the streams: no
    destructors, no finalisers; the kernel closes the sockets.
    """
    dist.barrier()
    store = dist.distributed_c10d._get_default_store()
    store.set(f"upgrade-gate/done/{rank}", "1")
    store.wait([f"upgrade-gate/done/{r}" for r in range(world)], timeout)
    if rank != 0:
        store.set(f"upgrade-gate/gone/{rank}", "1")
    else:
        store.wait([f"upgrade-gate/gone/{r}" for r in range(1, world)], timeout)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
