"""rccl-tests (`all_reduce_perf`, `all_gather_perf`) and `mpirun` of a fake node.

The table is recomputed for the sweep asked for (-b/-e/-f or -i, -g, -n, -w, -m, -c, -G, -d, -o) from
the time per message size of a real capture (params "profiles": the corpus 8x MI300X single-node
all_reduce, develop:a7809b3, and the corpus 2-node 16-rank RoCE all_reduce for mpirun across hosts):
time = recorded time / (factor x size factor) x (1 + seeded noise), algbw = size / time,
busbw = algbw x 2(n-1)/n for all_reduce and algbw x (n-1)/n for all_gather. all_gather takes half the
all_reduce time (it moves half the bytes per rank), so both report the same bus bandwidth. Sizes
between recorded ones interpolate log-log; beyond the largest the last bandwidth holds.

Layout (header, device lines, column heads, trailer) is the a7809b3 capture's: time "%7.2f" below
100 us, "%7.1f" below 10000 us, "%7.0f" above; "# Avg bus bandwidth" is the mean busbw of every
out-of-place and in-place row ("%g"). `-Z` (JSON output) is rejected like a version without it
("invalid option"), because no real `-Z json` capture exists to derive its format from.
"""

from __future__ import annotations

import itertools
import math
import os
import random

from .options import UsageError, option_value

TYPE_CHECKING = False  # typing costs start-up time; mypy still sees the import
if TYPE_CHECKING:
    from typing import Any

_TYPE_SIZES = {
    "int8": 1, "char": 1, "uint8": 1, "int32": 4, "int": 4, "uint32": 4, "int64": 8, "uint64": 8,
    "half": 2, "float16": 2, "bfloat16": 2, "float": 4, "float32": 4, "double": 8, "float64": 8,
    "fp8_e4m3": 1, "fp8_e5m2": 1,
}  # fmt: skip
_VALUE_OPTS = {
    "-b": "minbytes", "-e": "maxbytes", "-f": "stepfactor", "-i": "stepbytes", "-g": "ngpus",
    "-t": "nthreads", "-n": "iters", "-w": "warmup_iters", "-m": "agg_iters", "-c": "check",
    "-d": "datatype", "-o": "op", "-r": "root", "-z": "blocking", "-y": "memory_type", "-G": "cudagraph",
    "-a": "average", "-p": "parallel_init", "-C": "report_cputime", "-R": "local_register",
    "-T": "timeout", "-N": "run_cycles",
}  # fmt: skip
_LONG = {v: k for k, v in _VALUE_OPTS.items()}


def run_test(params: dict[str, Any], tool: str, argv: list[str], run: int) -> tuple[str, str, int]:
    """`all_reduce_perf` / `all_gather_perf ARGS` on this node, one process."""
    try:
        opts = _parse(tool, argv)
        ngpus = int(opts.get("ngpus", "1"))
        gpus = params["gpus"]
        if ngpus > len(gpus):
            raise UsageError(f"Invalid number of GPUs: {ngpus} requested but only {len(gpus)} available")
        ranks = [(params["hostname"], 1000 + (run * 7) % 60000, d) for d in range(ngpus)]
        return _render(params, params["profiles"]["mesh"], tool, opts, ranks, run), "", 0
    except (UsageError, ValueError) as exc:
        return "", f"{exc}\n", 1


def run_mpirun(params: dict[str, Any], argv: list[str], run: int) -> tuple[str, str, int]:
    """`mpirun [OPTIONS] all_reduce_perf|all_gather_perf ARGS`: ranks spread over the given hosts."""
    program_at = next((i for i, a in enumerate(argv) if os.path.basename(a) in params["programs"]), None)
    if program_at is None:
        return "", "mpirun (fake): no rccl-tests program in the command line\n", 1
    tool = os.path.basename(argv[program_at])
    np_, hosts = _mpirun_layout(argv[:program_at], params["hostname"])
    try:
        opts = _parse(tool, argv[program_at + 1 :])
        ngpus = int(opts.get("ngpus", "1"))
        per_host = max(1, -(-np_ // len(hosts)))
        ranks = [
            (hosts[min(rank // per_host, len(hosts) - 1)], 3_844_613 + rank + run * 97, (rank % per_host) * ngpus + g)
            for rank in range(np_)
            for g in range(ngpus)
        ]
        profile = params["profiles"]["cluster" if len(hosts) > 1 else "mesh"]
        return _render(params, profile, tool, opts, ranks, run), "", 0
    except (UsageError, ValueError) as exc:
        return "", f"{exc}\n", 1


def _mpirun_layout(opts: list[str], default_host: str) -> tuple[int, list[str]]:
    np_, hosts, i = 0, [default_host], 0
    while i < len(opts):
        arg = opts[i]
        if arg in ("-np", "-n", "--np") and i + 1 < len(opts):
            np_ = int(opts[i + 1])
        elif arg in ("-H", "--host", "-host") and i + 1 < len(opts):
            hosts = []
            for item in opts[i + 1].split(","):
                name, _, slots = item.partition(":")
                hosts.extend([name] * (int(slots) if slots else 1))
        i += 1
    unique = list(dict.fromkeys(hosts))
    return (np_ or len(hosts)), unique


def _parse(tool: str, argv: list[str]) -> dict[str, str]:
    opts: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name not in _LONG:
                raise UsageError(f"{tool}: unrecognized option '{arg}'")
            value, i = option_value(
                argv, i, value if eq else "", missing=f"{tool}: option '{arg}' requires an argument"
            )
            opts[name] = value
        elif arg.startswith("-") and len(arg) >= 2:
            key = arg[:2]
            if key not in _VALUE_OPTS:
                raise UsageError(f"{tool}: invalid option -- '{arg[1]}'\ninvalid usage")
            value, i = option_value(argv, i, arg[2:], missing=f"{tool}: option requires an argument -- '{arg[1]}'")
            opts[_VALUE_OPTS[key]] = value
        else:
            raise UsageError(f"{tool}: unexpected argument '{arg}'")
        i += 1
    return opts


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip().upper()
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def _render(
    params: dict[str, Any],
    profile: dict[str, Any],
    tool: str,
    opts: dict[str, str],
    ranks: list[tuple[str, int, int]],
    run: int,
) -> str:
    op = "all_gather" if tool.startswith("all_gather") else "all_reduce"
    n = len(ranks)
    min_b, max_b = _size(opts.get("minbytes", "32M")), _size(opts.get("maxbytes", "32M"))
    step_f, step_b = int(opts.get("stepfactor", "1")), _size(opts.get("stepbytes", "1M"))
    dtype = opts.get("datatype", "float")
    width = _TYPE_SIZES.get(dtype)
    if width is None:
        raise UsageError(f"invalid type {dtype}")
    step = f"{step_f}(factor)" if "stepfactor" in opts else f"{step_b}(bytes)"
    # params "nccl" (the fake NVIDIA node): nccl-tests' own header lines instead of rccl-tests' Version line
    nccl = params.get("nccl")
    lines = [line.replace("{{TOOL}}", tool) for line in nccl["before"]] if nccl else []
    lines += [
        f"# nThread {opts.get('nthreads', '1')} nGpus {opts.get('ngpus', '1')} minBytes {min_b} maxBytes {max_b} "
        f"step: {step} warmup iters: {opts.get('warmup_iters', '5')} iters: {opts.get('iters', '20')} "
        f"agg iters: {opts.get('agg_iters', '1')} validation: {opts.get('check', '1')} "
        f"graph: {opts.get('cudagraph', '0')}" + (nccl["header_tail"] if nccl else ""),
        "#",
        *([] if nccl else [f"rccl-tests: Version {params['version']}"]),
        "# Using devices",
    ]
    gpus = params["gpus"]
    for rank, (host, pid, device) in enumerate(ranks):
        gpu = gpus[device % len(gpus)]
        lines.append(
            f"#  Rank {rank:2d} Group  0 Pid {pid:6d} on {host:>10s} device {device:2d} "
            f"[{gpu['bdf_short']}] {gpu['name']}"
        )
    lines.extend(nccl["after_devices"] if nccl else ())
    lines.append("#")
    lines.extend(params["table_header"])
    rng = random.Random(f"{params['seed']}/{tool}/{run}")
    bus_factor = (2.0 if op == "all_reduce" else 1.0) * (n - 1) / n if n else 0.0
    redop = opts.get("op", "sum") if op == "all_reduce" else "none"
    busbws: list[float] = []
    size = min_b
    while size <= max_b:
        count = size // width // (n if op == "all_gather" else 1)
        cells = []
        for column in (1, 2):  # out-of-place, in-place
            t = _time_us(profile, size, column) * (0.5 if op == "all_gather" else 1.0)
            t = t / _factor(profile, size) * (1.0 + rng.gauss(0.0, profile["noise_pct"] / 100.0))
            algbw = size / (t * 1e3)
            busbws.append(algbw * bus_factor)
            cells.append(f"  {_time_text(t)}  {algbw:6.2f}  {algbw * bus_factor:6.2f}  {'0':>5s}")
        lines.append(f"{size:12d}  {count:12d}  {dtype:>8s}  {redop:>6s}  {-1:6d}" + "".join(cells))
        size = size * step_f if step_f > 1 else size + step_b
    avg = sum(busbws) / len(busbws) if busbws else 0.0
    lines.extend(t.replace("{{AVG}}", f"{avg:g}").replace("{{TOOL}}", tool) for t in params["trailer"])
    return "\n".join(lines) + "\n"


def _time_us(profile: dict[str, Any], size: int, column: int) -> float:
    rows: list[list[float]] = profile["times"]
    if size <= rows[0][0]:
        return float(rows[0][column])
    for lo, hi in itertools.pairwise(rows):
        if lo[0] <= size <= hi[0]:
            w = (math.log(size) - math.log(lo[0])) / (math.log(hi[0]) - math.log(lo[0]))
            return float(math.exp(math.log(lo[column]) + w * (math.log(hi[column]) - math.log(lo[column]))))
    last = rows[-1]
    return float(last[column]) * size / float(last[0])


def _factor(profile: dict[str, Any], size: int) -> float:
    factor = float(profile["factor"])
    for min_bytes, extra in profile["size_factors"]:
        if size >= min_bytes:
            factor *= extra
    return factor


def _time_text(us: float) -> str:
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"
