"""Parser of a workload's JSON-lines contract and scanner of its log for collective timeouts and errors.

The contract (docs/workload.md) is what the `workload` and `perturbation` phases read from any
workload, the shipped `reference_train.py` or a site's own command: stdout is JSON lines, one object
per line, each with a `record` field:
- `start` (once, first): `contract` (1), `world_size`, and what the run was (`backend`, `device`,
  `precision`, `model`, `batch_size`, `steps`, `warmup`): the settings two runs must share to compare;
- `device_map` (once): `ranks`, one `{rank, bdf, uuid}` per rank as the runtime itself sees it, with
  the rank's enumeration `index` in the visible list where the workload prints it (the shipped script
  does; phase 7 reads it to see that its permutation reached the runtime);
- `step` (one per step, in order from 0): `step`, `loss` (a number, or "NaN"/"Infinity"/"-Infinity"
  for a non-finite loss), `step_time_s` (the slowest rank's), `samples_per_s` (global: world_size x
  batch_size / step_time_s, checked to within CONSISTENT where `batch_size` is given), `warmup` (true
  for the first `warmup` steps of the start record, exactly those);
- `init` (once): `init_s`, seconds from process start to the first completed step;
- `end` (once, last): `steps`. Output without it was cut short (a truncated run is no evidence).
Design decisions: strict, as every parser here: an unknown record, a missing or mistyped field, a
line that is not one JSON object (garbage, a truncated line, nested deeper than Python's parser
goes), a key named twice in one record (the later value would silently win: a NaN loss and a -58%
rate hid behind healthy repeats, break test 2026-12-07), a string holding a lone UTF-16 surrogate
(`\\ud800`: no text, and the snapshot could not be written), steps out of order, more than
MAX_STEPS steps (a snapshot holds at most 4,096 samples a measurement, and phase 6 pools up to three
runs), warm-up flags that are not the start record's first `warmup` steps, a `samples_per_s` that
disagrees with world_size x batch_size / step_time_s (a stalled rank's step time hidden behind summed
per-rank rates), a second `start`, or no records at all is a ParseError naming the line; nothing is
skipped or guessed. A non-finite loss
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
- timeout, ProcessGroupNCCL.cpp's own (checked in pytorch/pytorch's source, 2026-12): `Timeout at NCCL
  work: 6463, last enqueued NCCL work: ...` (the watchdog's desync report), `Heartbeat monitor timed
  out! Process will be terminated after dumping debug info.`, and the abort's reason `Original reason
  for aborting was: watchdog callback timed out`;
- error: `Some NCCL operations have failed or timed out.` and `NCCL error: remote process exited or
  there was a network error ... ncclRemoteError` (tatsu-lab/stanford_alpaca#207), `Exception (either an
  error or timeout) detected by watchdog`, `unhandled cuda error` (ROCm/rccl#1454); from
  ProcessGroupNCCL.cpp: `NCCL communicator was aborted on rank 2.`, `NCCL watchdog thread terminated
  with exception: ...`, `[1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via
  c10d key-value store by key '0', but store->get('0') got error: Socket Timeout` (older releases
  spell it "retreiving"); NCCL's result names as `ncclGetErrorString` prints them
  (`ncclUnhandledCudaError`, `ncclSystemError`, `ncclInternalError`, `ncclInvalidArgument`,
  `ncclInvalidUsage`, `ncclRemoteError`), whatever precedes them; and NCCL's InfiniBand transport
  `NCCL WARN NET/IB : Got completion from peer ... with status=12 ...` (net_ib.cc: printed only for a
  failed work completion, so an error although NCCL says WARN);
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
MAX_STEPS = 1024
"""Steps a run may print (UPGRADE_GATE_WORKLOAD_STEPS' maximum): three pooled runs stay in a snapshot's
4,096 samples a measurement (break test 2026-12-07: 5,000 steps lost the whole snapshot)."""
CONSISTENT = 0.02
"""How far `samples_per_s` may be from world_size x batch_size / step_time_s (relative), beyond the
rounding of the printed values: two clocks of one step."""
RECORDS = ("start", "device_map", "step", "init", "end")
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


@dataclass(frozen=True, slots=True, kw_only=True)
class RankDevice:
    """One rank's device as the workload's runtime saw it (None: the runtime named none)."""

    rank: int
    bdf: str | None
    uuid: str | None
    index: int | None = None  # the device's position in the visible list the runtime enumerated


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
    # the excerpt goes into the phase's reason and the snapshot: never a lone surrogate (no UTF-8 for it)
    text = line[:200].encode("utf-8", "backslashreplace").decode("utf-8")
    return ParseError(TOOL, line_no, text, message)


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
        index = item.get("index")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
            raise _fail(line_no, line, f"device_map: rank {rank}: index must be a count (0, 1, ...) or null")
        out.append(RankDevice(rank=int(rank), bdf=ids[0], uuid=ids[1], index=index))  # type: ignore[call-overload]
    if sorted(d.rank for d in out) != list(range(len(out))):
        raise _fail(line_no, line, "device_map: ranks are not 0..N-1, each once")
    return tuple(sorted(out, key=lambda d: d.rank))


class _Twice(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
    mapping = dict(pairs)
    if len(mapping) < len(pairs):
        seen: set[str] = set()
        raise _Twice(next(k for k, _ in pairs if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
    return mapping


def _object(line: str, line_no: int) -> dict[str, object]:
    try:
        obj = json.loads(line, parse_constant=lambda c: _reject(c, line_no, line), object_pairs_hook=_unique)
        json.dumps(obj, ensure_ascii=False).encode("utf-8")  # a lone surrogate (\ud800) is no text
    except json.JSONDecodeError as exc:
        raise _fail(line_no, line, f"not a JSON line ({exc.msg}; truncated or garbage)") from None
    except RecursionError:
        raise _fail(line_no, line, "not a JSON line (nested too deeply to read)") from None
    except _Twice as twice:
        shown = twice.key.encode("utf-8", "backslashreplace").decode("utf-8")
        raise _fail(line_no, line, f"key {shown!r} named twice in one record (the later value would win)") from None
    except UnicodeEncodeError:
        raise _fail(line_no, line, "a string holds a lone UTF-16 surrogate (\\ud800-\\udfff): not text") from None
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
    step_lines: list[tuple[int, str]] = []
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
            if index >= MAX_STEPS:
                raise _fail(no, line, f"more than {MAX_STEPS} steps (pooled runs must fit a snapshot's 4,096 samples)")
            step = Step(
                step=len(steps),
                loss=_loss(obj, no, line),
                step_time_s=_number(obj, "step_time_s", no, line),
                samples_per_s=_number(obj, "samples_per_s", no, line),
                warmup=bool(_field(obj, "warmup", bool, no, line)),
            )
            step_lines.append((no, line))
            if step.warmup and steps and not steps[-1].warmup:
                raise _fail(no, line, f"step {step.step} is flagged warm-up after a measured step")
            steps.append(step)
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
    warm, declared = sum(s.warmup for s in steps), start.get("warmup")
    if isinstance(declared, int) and not isinstance(declared, bool) and warm != min(declared, len(steps)):
        no, line = step_lines[min(warm, declared)]
        raise _fail(
            no,
            line,
            f"{warm} steps flagged warm-up, the start record's warmup is {declared} (the first "
            f"{declared} steps are warm-up, exactly those)",
        )
    for step, (no, line) in zip(steps, step_lines, strict=True):
        _check_rate(start, step, no, line)
    settings = {k: str(start[k]) for k in _SETTINGS if k in start}
    settings["world_size"] = str(world)
    return WorkloadRun(world_size=world, settings=settings, devices=devices, steps=tuple(steps), init_s=init_s)


def _check_rate(start: dict[str, object], step: Step, no: int, line: str) -> None:
    """A rate that is not world_size x batch_size / step_time_s (module docstring)."""
    batch = start.get("batch_size")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0:
        return  # no per-rank batch to check against
    world = float(start["world_size"])  # type: ignore[arg-type]
    expected = world * batch / step.step_time_s
    # the printed values' rounding: 6 decimals of step_time_s, 3 of samples_per_s
    slack = CONSISTENT + 1e-6 / step.step_time_s + 1e-3 / step.samples_per_s
    if abs(step.samples_per_s - expected) > slack * expected:
        raise _fail(
            no,
            line,
            f"step {step.step}: samples_per_s {step.samples_per_s:g}, but world_size {world:g} x batch_size {batch} / "
            f"step_time_s {step.step_time_s:g} is {expected:.1f} (samples_per_s is global, step_time_s the slowest "
            "rank's)",
        )


_TIMEOUT_RE = re.compile(
    r"Watchdog caught collective operation timeout|watchdog got stuck for \d+ seconds|NCCL timeout|ncclTimeout|"
    r"Timeout at NCCL work: \d+|Heartbeat monitor timed out|watchdog callback timed out"
)
_ERROR_RE = re.compile(
    r"Some NCCL operations have failed or timed out|NCCL error|"
    r"nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|RemoteError)\b|"
    r"Exception \(either an error or timeout\) detected by watchdog|unhandled cuda error|unhandled system error|"
    r"NCCL communicator was aborted on rank|NCCL watchdog thread terminated with exception|"
    r"is setting up NCCL communicator and retr(?:ie|ei)ving ncclUniqueId|"
    r"NET/IB ?: Got completion from peer .* with status=[1-9]"
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
