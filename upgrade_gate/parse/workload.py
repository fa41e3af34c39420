"""Parser of a workload's JSON-lines contract and scanner of its log for collective timeouts and errors.

The contract (docs/workload.md) is what the `workload` and `perturbation` phases read from any
workload, the shipped `reference_train.py` or a site's own command: stdout is JSON lines, one object
per line, each with a `record` field:
- `start` (once, first): `contract` (1), `world_size`, and what the run was (`backend`, `device`,
  `precision`, `model`, `batch_size`, `steps`, `warmup`): the settings two runs must share to compare;
- `device_map` (once): `ranks`, one `{rank, bdf, uuid}` per rank as the runtime itself sees it;
- `step` (one per step, in order from 0): `step`, `loss` (a number, or "NaN"/"Infinity"/"-Infinity"
  for a non-finite loss), `step_time_s`, `samples_per_s`, `warmup` (true for the warm-up steps);
- `init` (once): `init_s`, seconds from process start to the first completed step;
- `end` (once, last): `steps`. Output without it was cut short (a truncated run is no evidence).
Design decisions: strict, as every parser here: an unknown record, a missing or mistyped field, a
line that is not one JSON object (garbage, a truncated line), steps out of order, a second `start`, or
no records at all is a ParseError naming the line; nothing is skipped or guessed. A non-finite loss
is a value (the phase turns it into a failure), not a parse error. Blank lines and lines before the
first `{` that a launcher prints (torchrun's banner goes to stderr, but a site's wrapper may not) are
not tolerated either: the contract says stdout carries records only.

The log scan (`scan_collective_log`) reads the job's stderr for what PyTorch's NCCL process group
(RCCL on ROCm, which keeps NCCL's names) and the NCCL/RCCL library print. Wordings as real logs show
them (2026-12, public issue threads):
- timeout: `[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE,
  ...) ran for 600013 milliseconds before timing out.` (ProcessGroupNCCL.cpp; NVIDIA/Megatron-LM#1207,
  hiyouga/LlamaFactory#7396, pytorch/pytorch#118369) and `ProcessGroupNCCL's watchdog got stuck for 300
  seconds without making progress` (NVIDIA/nccl#1684);
- error: `Some NCCL operations have failed or timed out.` and `NCCL error: remote process exited or
  there was a network error ... ncclRemoteError` (tatsu-lab/stanford_alpaca#207), `Exception (either an
  error or timeout) detected by watchdog`, `unhandled cuda error` (ROCm/rccl#1454);
- warning: `host:pid:tid [0] /path/init.cc:125 NCCL WARN Missing "iommu=pt" from kernel command line
  ...` (RCCL, ROCm/rccl#908): counted, not failures (RCCL warns about configuration it dislikes).
A timeout line also matches the error wordings; it is counted once, as a timeout.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from upgrade_gate.errors import ParseError

TOOL = "workload"
CONTRACT = 1
RECORDS = ("start", "device_map", "step", "init", "end")
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


@dataclass(frozen=True, slots=True, kw_only=True)
class RankDevice:
    """One rank's device as the workload's runtime saw it (None: the runtime named none)."""

    rank: int
    bdf: str | None
    uuid: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One training step."""

    step: int
    loss: float  # nan/inf when the run printed a non-finite loss
    step_time_s: float
    samples_per_s: float
    warmup: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadRun:
    """A complete run: its settings, device map, steps and initialisation time."""

    world_size: int
    settings: dict[str, str]
    devices: tuple[RankDevice, ...]
    steps: tuple[Step, ...]
    init_s: float

    @property
    def measured(self) -> tuple[Step, ...]:
        """The steps after warm-up."""
        return tuple(s for s in self.steps if not s.warmup)


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveLog:
    """Timeouts, errors and warnings of the collective library found in a job's log (lines as printed)."""

    timeouts: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


_SETTINGS = ("backend", "device", "precision", "model", "batch_size", "steps", "warmup")


def _fail(line_no: int, line: str, message: str) -> ParseError:
    return ParseError(TOOL, line_no, line, message)


def _field(obj: dict[str, object], name: str, kind: type | tuple[type, ...], line_no: int, line: str) -> object:
    if name not in obj:
        raise _fail(line_no, line, f"{obj.get('record')} record without {name!r}")
    value = obj[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float, (int, float))):
        raise _fail(line_no, line, f"{obj.get('record')} record: {name!r} is {type(value).__name__}")
    return value


def _number(obj: dict[str, object], name: str, line_no: int, line: str, *, positive: bool = True) -> float:
    value = float(_field(obj, name, (int, float), line_no, line))  # type: ignore[arg-type]
    if not math.isfinite(value) or (positive and value <= 0) or value < 0:
        raise _fail(line_no, line, f"{obj.get('record')} record: {name!r} is {value}, not a positive number")
    return value


def _loss(obj: dict[str, object], line_no: int, line: str) -> float:
    value = obj.get("loss")
    if isinstance(value, str) and value in NON_FINITE:
        return NON_FINITE[value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(line_no, line, "step record: 'loss' is not a number (nor NaN/Infinity as a string)")
    return float(value)


def _devices(obj: dict[str, object], line_no: int, line: str) -> tuple[RankDevice, ...]:
    ranks = _field(obj, "ranks", list, line_no, line)
    out = []
    for item in ranks:  # type: ignore[attr-defined]
        if not isinstance(item, dict):
            raise _fail(line_no, line, "device_map: a rank entry is not an object")
        rank = _field(item, "rank", int, line_no, line)
        ids = [item.get(k) for k in ("bdf", "uuid")]
        if any(v is not None and (not isinstance(v, str) or not v.strip()) for v in ids):
            raise _fail(line_no, line, f"device_map: rank {rank}: bdf and uuid must be text or null")
        out.append(RankDevice(rank=int(rank), bdf=ids[0], uuid=ids[1]))  # type: ignore[call-overload]
    if sorted(d.rank for d in out) != list(range(len(out))):
        raise _fail(line_no, line, "device_map: ranks are not 0..N-1, each once")
    return tuple(sorted(out, key=lambda d: d.rank))


def _object(line: str, line_no: int) -> dict[str, object]:
    try:
        obj = json.loads(line, parse_constant=lambda c: _reject(c, line_no, line))
    except json.JSONDecodeError as exc:
        raise _fail(line_no, line, f"not a JSON line ({exc.msg}; truncated or garbage)") from None
    if not isinstance(obj, dict) or obj.get("record") not in RECORDS:
        raise _fail(line_no, line, f"not a contract record (record: one of {', '.join(RECORDS)})")
    return obj


def _reject(constant: str, line_no: int, line: str) -> object:
    raise _fail(line_no, line, f"bare {constant} (the contract writes a non-finite loss as a string)")


def parse_workload(text: str) -> WorkloadRun:
    """Read a workload's stdout by the contract (module docstring); ParseError for anything else."""
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise ParseError(TOOL, 0, text, "the workload printed nothing on stdout")
    start: dict[str, object] | None = None
    devices: tuple[RankDevice, ...] | None = None
    steps: list[Step] = []
    init_s: float | None = None
    ended = False
    for no, line in enumerate(lines, 1):
        if ended:
            raise _fail(no, line, "output after the end record")
        obj = _object(line, no)
        kind = obj["record"]
        if kind != "start" and start is None:
            raise _fail(no, line, "a record before the start record")
        if kind == "start":
            if start is not None:
                raise _fail(no, line, "a second start record")
            if _field(obj, "contract", int, no, line) != CONTRACT:
                raise _fail(no, line, f"contract {obj['contract']}, this reader knows {CONTRACT}")
            _number(obj, "world_size", no, line)
            start = obj
        elif kind == "device_map":
            if devices is not None:
                raise _fail(no, line, "a second device_map record")
            devices = _devices(obj, no, line)
        elif kind == "step":
            index = _field(obj, "step", int, no, line)
            if index != len(steps):
                raise _fail(no, line, f"step {index} where step {len(steps)} was due")
            warmup = _field(obj, "warmup", bool, no, line)
            steps.append(
                Step(
                    step=len(steps),
                    loss=_loss(obj, no, line),
                    step_time_s=_number(obj, "step_time_s", no, line),
                    samples_per_s=_number(obj, "samples_per_s", no, line),
                    warmup=bool(warmup),
                )
            )
        elif kind == "init":
            if init_s is not None:
                raise _fail(no, line, "a second init record")
            init_s = _number(obj, "init_s", no, line)
        else:
            if _field(obj, "steps", int, no, line) != len(steps):
                raise _fail(no, line, f"end record says {obj['steps']} steps, {len(steps)} were printed")
            ended = True
    last = lines[-1]
    if not ended:
        raise _fail(len(lines), last, "no end record: the run was cut short")
    assert start is not None
    if devices is None:
        raise _fail(len(lines), last, "no device_map record")
    if init_s is None:
        raise _fail(len(lines), last, "no init record")
    world = int(start["world_size"])  # type: ignore[call-overload]
    if len(devices) != world:
        raise _fail(len(lines), last, f"device_map names {len(devices)} ranks, world_size is {world}")
    if not any(not s.warmup for s in steps):
        raise _fail(len(lines), last, "no step after warm-up: nothing measured")
    settings = {k: str(start[k]) for k in _SETTINGS if k in start}
    settings["world_size"] = str(world)
    return WorkloadRun(world_size=world, settings=settings, devices=devices, steps=tuple(steps), init_s=init_s)


_TIMEOUT_RE = re.compile(
    r"Watchdog caught collective operation timeout|watchdog got stuck for \d+ seconds|NCCL timeout|ncclTimeout"
)
_ERROR_RE = re.compile(
    r"Some NCCL operations have failed or timed out|NCCL error|nccl[A-Z][a-z]+Error\b|"
    r"Exception \(either an error or timeout\) detected by watchdog|unhandled cuda error|unhandled system error"
)
_WARN_RE = re.compile(r"\bNCCL WARN\b")


def scan_collective_log(text: str) -> CollectiveLog:
    """The collective library's timeouts, errors and warnings in `text` (module docstring), in order."""
    timeouts: list[str] = []
    errors: list[str] = []
    warnings: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if _TIMEOUT_RE.search(line):
            timeouts.append(line[:300])
        elif _ERROR_RE.search(line):
            errors.append(line[:300])
        elif _WARN_RE.search(line):
            warnings.append(line[:300])
    return CollectiveLog(timeouts=tuple(timeouts), errors=tuple(errors), warnings=tuple(warnings))
