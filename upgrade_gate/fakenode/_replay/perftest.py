"""`ib_write_bw` (perftest) of a fake node: server without a peer argument, client with one.

The layout is the corpus Pollara/MI355X GPUDirect pair (server and client of one run, perftest from the
AINIC bundle): the node-specific template (params "client"/"server") keeps every line of the capture
and fills the device, QP count, GID index, ROCm buffer lines, addresses, unit header and rows. Rows use
that build's REPORT_FMT, " %-7lu    %-10lu       %-7.2lf            %-7.2lf\\t\\t     %-7.6lf" (five
spaces after the tabs, as both Pollara captures show). The bandwidth at each size is the capture's
client curve scaled so that 8 MiB gives the NIC's `write_bw_gbps`, with seeded noise; `-b` doubles it.
A server run with `-a` prints only the last row, like the captured server. A port that is down or an
unknown `-d` device fails with perftest-style messages (UNVERIFIED wording) and exit 1.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
import time

from .options import UsageError, option_value

TYPE_CHECKING = False  # typing costs start-up time; mypy still sees the import
if TYPE_CHECKING:
    from typing import Any

_VALUE_OPTS = {
    "-d": "ib-dev", "-s": "size", "-n": "iters", "-q": "qp", "-x": "gid-index", "-p": "port",
    "-i": "ib-port", "-D": "duration", "-t": "tx-depth", "-m": "mtu", "-c": "connection", "-I": "inline_size",
    "-u": "qp-timeout", "-S": "sl", "-Q": "cq-mod", "-r": "rx-depth", "-w": "limit_bw", "-y": "limit_msgrate",
}  # fmt: skip
_FLAGS = {
    "-a": "all", "-b": "bidirectional", "-F": "CPU-freq", "-R": "rdma_cm", "-e": "events", "-z": "comm_rdma_cm",
    "-h": "help", "-l": "post_list", "-V": "version", "-N": "noPeak", "-O": "dualport",
}  # fmt: skip
_LONG_VALUE = set(_VALUE_OPTS.values()) | {"use_rocm", "tclass", "report-per-port", "output", "source_ip"}
_LONG_FLAGS = set(_FLAGS.values()) | {"report_gbits", "run_infinitely", "odp", "perform_warm_up", "use_hugepages"}
_ROW = " %-7d    %-10d       %-7.2f            %-7.2f\t\t     %-7.6f\n"
_BUFFER = 0x7FE939600000


def run(params: dict[str, Any], argv: list[str], run_index: int) -> tuple[str, str, int]:
    """`ib_write_bw ARGS` on this node."""
    try:
        opts, peer = _parse(argv)
    except UsageError as exc:
        return "", f" {exc}\n Invalid Command or flag.\n", 1
    dev_name = opts.get("ib-dev", params["default_device"])
    dev = params["devices"].get(dev_name)
    if dev is None:
        return "", f"IB device {dev_name} not found\n Unable to find the Infiniband/RoCE device\n", 1
    if not dev["port_up"]:
        return "", " Failed to modify QP 2 to RTR\n Unable to Connect the HCA's through the link\n", 1
    rng = random.Random(f"{params['seed']}/ib_write_bw/{dev_name}/{run_index}")
    gbits = "report_gbits" in opts
    sizes = [1 << k for k in range(1, 24)] if "all" in opts else [int(opts.get("size", "65536"))]
    iters = int(opts.get("iters", "5000"))
    rows = [_row(params, dev, size, iters, gbits, "bidirectional" in opts, rng) for size in sizes]
    if peer is None and "all" in opts:
        rows = rows[-1:]
    qps = int(opts.get("qp", "1"))
    gid_index = int(opts.get("gid-index", "0"))
    now = time.ctime()
    rocm = opts.get("use_rocm")
    values = {
        "DATE": now,
        "DEV": dev_name,
        "QPS_PADDED": f"{qps:<13d}",
        "GID_INDEX": str(gid_index),
        "USE_ROCM": "ON" if rocm is not None else "OFF",
        "ROCM_LINES": _rocm_lines(params, rocm, max(sizes)),
        "ROCM_DEALLOC": f"deallocating GPU buffer 0x{_BUFFER:x}\n" if rocm is not None else "",
        "ADDRESSES": _addresses(dev, gid_index, qps, peer or "client", rng),
        "RESULT_HEADER": _result_header(gbits),
        "ROWS": "".join(rows),
        "RUNTIME": f"{0.4 + 0.22 * len(sizes):.3f}",
    }
    template = params["client" if peer is not None else "server"]
    return _fill(template, values), "", 0


def _parse(argv: list[str]) -> tuple[dict[str, str], str | None]:
    opts: dict[str, str] = {}
    peer = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name in _LONG_FLAGS and not eq:
                opts[name] = ""
            elif name in _LONG_VALUE:
                value, i = option_value(argv, i, value if eq else "", missing=f"option '{arg}' requires an argument")
                opts[name] = value
            else:
                raise UsageError(f"unrecognized option '{arg}'")
        elif arg.startswith("-") and len(arg) >= 2:
            key = arg[:2]
            if key in _FLAGS and len(arg) == 2:
                opts[_FLAGS[key]] = ""
            elif key in _VALUE_OPTS:
                value, i = option_value(argv, i, arg[2:], missing=f"option requires an argument -- '{arg[1]}'")
                opts[_VALUE_OPTS[key]] = value
            else:
                raise UsageError(f"invalid option -- '{arg[1:]}'")
        elif peer is None:
            peer = arg
        else:
            raise UsageError(f"unexpected argument '{arg}'")
        i += 1
    return opts, peer


def _row(
    params: dict[str, Any], dev: dict[str, Any], size: int, iters: int, gbits: bool, bidir: bool, rng: random.Random
) -> str:
    gbps = _curve(params["curve"], size) * float(dev["gbps"]) * (1.0 + rng.gauss(0.0, params["noise_pct"] / 100.0))
    gbps *= 2.0 if bidir else 1.0
    peak = gbps * (1.0 + 0.0004 + abs(rng.gauss(0.0, 0.002)))
    mpps = gbps * 1e9 / 8.0 / size / 1e6
    if gbits:
        return _ROW % (size, iters, peak, gbps, mpps)
    mib = 1e9 / 8.0 / 1048576.0
    return _ROW % (size, iters, peak * mib, gbps * mib, mpps)


def _curve(curve: list[list[float]], size: int) -> float:
    """Fraction of the 8 MiB bandwidth reached at `size` (log-log interpolation of the capture)."""
    top = curve[-1][1]
    if size <= curve[0][0]:
        return float(curve[0][1] / top * size / curve[0][0])
    for lo, hi in itertools.pairwise(curve):
        if lo[0] <= size <= hi[0]:
            w = (math.log(size) - math.log(lo[0])) / (math.log(hi[0]) - math.log(lo[0]))
            return math.exp(math.log(lo[1]) + w * (math.log(hi[1]) - math.log(lo[1]))) / top
    return 1.0


def _result_header(gbits: bool) -> str:
    unit = "Gb/sec" if gbits else "MiB/sec"
    return f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]"


def _rocm_lines(params: dict[str, Any], rocm: str | None, max_size: int) -> str:
    if rocm is None:
        return ""
    gpus = params["gpus"]
    index = int(rocm) if rocm.isdigit() else 0
    if index >= len(gpus):
        index = 0
    gpu = gpus[index]
    return (
        f"Using ROCm Device with ID: {index}, Name: {gpu['name']}, PCI Bus ID: 0x{gpu['bus']:x}, "
        f"GCN Arch: {gpu['gfx']}:sramecc+:xnack-\n"
        f"allocated {2 * max_size} bytes of GPU buffer at 0x{_BUFFER:x}\n"
    )


def _addresses(dev: dict[str, Any], gid_index: int, qps: int, peer: str, rng: random.Random) -> str:
    gids = dev["gids"]
    local = bytes.fromhex(gids[gid_index]) if gid_index < len(gids) else bytes(16)
    remote = bytes.fromhex("fe80000000000000") + hashlib.sha256(peer.encode()).digest()[:8]
    lines = []
    for label, gid in (("local", local), ("remote", remote)):
        for qp in range(qps):
            lines.append(
                f" {label} address: LID 0000 QPN 0x{2 + qp:04x} PSN 0x{rng.getrandbits(24):06x} "
                f"RKey 0x{rng.getrandbits(12) | 0x100:06x} VAddr 0x{_BUFFER + 0x800000 + qp * 0x1000:014x}\n"
            )
            lines.append(" GID: " + ":".join(f"{b:02d}" for b in gid) + "\n")
    return "".join(lines)


def _fill(template: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        template = template.replace("{{" + key + "}}", value)
    return template
