"""Hostile input and faults: peak RSS, wall time and exit code of one `upgrade-gate` command per attack.

Usage, from the repository root:
    python -m bench.bench_hostile                       # this checkout's code
    python -m bench.bench_hostile --code /work/main     # another checkout's code (read-only): "before"
    python -m bench.bench_hostile --only pax,yaml --timeout 30

Each attack is built in a temporary folder by this checkout (the bundle and document formats did not
change), then `python -m upgrade_gate ...` runs with PYTHONPATH set to `--code`, under a wrapper that
reads the child's peak RSS (`getrusage(RUSAGE_CHILDREN).ru_maxrss`). The child runs with an address-space
limit (`--mem-limit-gib`, default 4) and a wall-clock timeout so that measuring the old code cannot take
the shared machine down: a run that hits either is reported as such, which is itself the finding.

The goal (issue 12): every hostile bundle or YAML is refused with exit 3 in under 256 MiB and 10 s; the
1 GB dmesg is capped (capture exits 0 and records the probe failed); a crash never exits 0 or 1.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import PYTHON, REPO, Section, Target, table

MiB = 1024 * 1024

_WRAPPER = textwrap.dedent(
    """
    import resource, subprocess, sys, time
    limit, timeout = int(sys.argv[1]), float(sys.argv[2])
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    start = time.monotonic()
    try:
        proc = subprocess.run(sys.argv[3:], capture_output=True, timeout=timeout, preexec_fn=cap)
        code, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, err = "timeout", exc.stderr or b""
    wall = time.monotonic() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    sys.stdout.write("%s %d %.2f\\n" % (code, peak, wall))
    sys.stdout.buffer.write(err[-2000:])
    """
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """One attack's measurement."""

    attack: str
    code: str
    peak_mib: float
    wall_s: float
    message: str


# --------------------------------------------------------------------------- attack builders


def _fake_bin(work: Path, dmesg: str) -> Path:
    """A folder of trivial fake tools (and the real grep) with the given dmesg body."""
    bindir = work / "bin"
    bindir.mkdir(exist_ok=True)
    grep = shutil.which("grep") or "/bin/grep"
    if not (bindir / "grep").exists():
        (bindir / "grep").symlink_to(grep)
    tools = {"rocminfo": "echo ROCk", "amd-smi": "echo '[]'", "rocm-smi": "echo '{}'", "lspci": "echo"}
    tools |= {"uname": "echo 6.8.0", "ibv_devinfo": "echo", "rdma": "echo", "dmesg": dmesg}
    for name, body in tools.items():
        path = bindir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return bindir


def _tiny_bundle(work: Path) -> Path:
    from upgrade_gate.collect.bundle import write_bundle
    from upgrade_gate.collect.capture import capture
    from upgrade_gate.collect.probes import Probe
    from upgrade_gate.collect.runner import LocalRunner

    probes = [Probe(name="kernel", argv=("uname", "-r"), parser="uname-r")]
    return write_bundle(capture(LocalRunner(), node="n1", probes=probes), work / "good.tar.gz")


def _members(path: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(path) as tar:
        return [(m, (h.read() if (h := tar.extractfile(m)) is not None else b"")) for m in tar]


def pax(work: Path) -> list[str]:
    header = tarfile.TarInfo("././@PaxHeader")
    header.type = tarfile.XHDTYPE
    header.size = 1024 * MiB
    path = work / "pax.tar.gz"
    with gzip.open(path, "wb", compresslevel=9) as gz:
        gz.write(header.tobuf(tarfile.USTAR_FORMAT))
        for _ in range(1024):
            gz.write(b"\0" * MiB)
    return ["snapshot", str(path)]


def longname(work: Path) -> list[str]:
    header = tarfile.TarInfo("././@LongLink")
    header.type = tarfile.GNUTYPE_LONGNAME
    header.size = 2048 * MiB
    path = work / "longname.tar.gz"
    with gzip.open(path, "wb", compresslevel=9) as gz:
        gz.write(header.tobuf(tarfile.USTAR_FORMAT))
        for _ in range(2048):
            gz.write(b"a" * MiB)
    return ["snapshot", str(path)]


def unlisted(work: Path) -> list[str]:
    path = work / "unlisted.tar.gz"
    with gzip.open(path, "wb", compresslevel=9) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for info, data in _members(_tiny_bundle(work)):
            tar.addfile(info, io.BytesIO(data))
        for i in range(20):  # 600 MB of zeros in members the manifest does not name
            info = tarfile.TarInfo(f"probes/extra{i}.stdout")
            info.size = 30 * MiB
            tar.addfile(info, io.BytesIO(b"\0" * info.size))
    return ["snapshot", str(path)]


_SNAPSHOT_SCRIPT = (
    "from tests.judge_scenarios import mi300x_snapshot\n"
    "from upgrade_gate.snapshot.io import dumps_snapshot\n"
    "print(dumps_snapshot(mi300x_snapshot()), end='')\n"
)

_code_root: list[Path] = [REPO]  # the checkout under test: setup documents are made by its own code


def _setup_env() -> dict[str, str]:
    return dict(os.environ) | {"PYTHONPATH": str(_code_root[0])}


def _snapshot_file(work: Path, edit: Callable[[dict[str, object]], None] | None = None) -> Path:
    """The test suite's 8-GPU MI300X snapshot, as the checkout under test writes it (its own schema)."""
    text = subprocess.run(
        [PYTHON, "-c", _SNAPSHOT_SCRIPT],
        capture_output=True,
        text=True,
        env=_setup_env(),
        cwd=_code_root[0],
        check=True,
    ).stdout
    doc = json.loads(text)
    if edit is not None:
        edit(doc)
    path = work / ("big.json" if edit else "snap.json")
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _store_with(work: Path, name: str, snap: Path) -> Path:
    """A baseline store holding `snap`, saved by the checkout under test."""
    store = work / name
    subprocess.run(
        [PYTHON, "-m", "upgrade_gate", "baseline", "save", str(snap), "--store", str(store)],
        capture_output=True,
        env=_setup_env(),
        cwd=work,
        check=True,
    )
    return store


_BOMB = "".join(f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))


def yaml_bomb(work: Path) -> list[str]:
    policy = work / "bomb.yaml"
    policy.write_text('a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + _BOMB + "ignore_paths: *i\n")
    snap = _snapshot_file(work)
    return ["diff", str(snap), str(snap), "--policy", str(policy)]


def nan_policy(work: Path) -> list[str]:
    policy = work / "nan.yaml"
    policy.write_text("thresholds:\n  mesh_avg_busbw_min_gbs: .nan\n")
    snap = _snapshot_file(work)
    return ["diff", str(snap), str(snap), "--policy", str(policy)]


def gpus(work: Path) -> list[str]:
    big = _snapshot_file(work, lambda d: d.__setitem__("gpus", d["gpus"] * 1251))  # type: ignore[operator]
    store = _store_with(work, "store", _snapshot_file(work))
    return ["gate", "--store", str(store), "--candidate", str(big)]


def dmesg(work: Path) -> list[str]:
    yes = shutil.which("yes") or "/usr/bin/yes"
    head = shutil.which("head") or "/usr/bin/head"
    bindir = _fake_bin(work, f"{yes} '[    1.000000] amdgpu 0000:05:00.0: flood' | {head} -c 1073741824")
    root = work / "host"
    root.mkdir(exist_ok=True)
    out = str(work / "c.tar.gz")
    return ["ENV:PATH=" + str(bindir), "capture", "--node", "n1", "--out", out, "--host-root", str(root)]


def forged(work: Path) -> list[str]:
    from upgrade_gate.collect.bundle import write_bundle
    from upgrade_gate.collect.capture import capture
    from upgrade_gate.collect.probes import Probe
    from upgrade_gate.collect.runner import LocalRunner

    probes = [Probe(name="dmesg", argv=("uname", "-a"), parser="dmesg")]
    good = write_bundle(capture(LocalRunner(), node="n1", probes=probes), work / "d.tar.gz")
    path = work / "forged.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for info, data in _members(good):
            if info.name == "manifest.json":
                doc = json.loads(data)
                doc["probes"][0].update(skipped=True, note="no files matched")
                data = json.dumps(doc).encode()
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return ["snapshot", str(path)]


def report_unwritable(work: Path) -> list[str]:
    snap = _snapshot_file(work)
    store = _store_with(work, "store-r", snap)
    blocker = work / "a-file"
    blocker.write_text("")
    return ["gate", "--store", str(store), "--candidate", str(snap), "--report", f"html:{blocker}/r.html"]


ATTACKS: dict[str, tuple[str, Callable[[Path], list[str]]]] = {
    "pax": ("1 MB .tar.gz, pax header claiming 1 GiB", pax),
    "longname": ("GNU long name claiming 2 GiB", longname),
    "unlisted": ("600 MB of members the manifest does not name", unlisted),
    "yaml": ("YAML alias bomb (9^9) in a policy", yaml_bomb),
    "nan": ("policy threshold .nan", nan_policy),
    "gpus": ("snapshot with 10,008 GPUs (gate)", gpus),
    "dmesg": ("1 GB of dmesg at capture", dmesg),
    "forged": ("manifest marks dmesg skipped", forged),
    "report": ("--report html: unwritable", report_unwritable),
}


def measure(
    args: list[str], *, code_root: Path, timeout: float, mem_limit: int, cwd: Path
) -> tuple[str, float, float, str]:
    """Run one command under the wrapper; `cwd` must not hold another `upgrade_gate` (python -m puts it first)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(code_root)
    while args and args[0].startswith("ENV:"):
        key, _, value = args.pop(0)[4:].partition("=")
        env[key] = value
    cmd = [PYTHON, "-c", _WRAPPER, str(mem_limit), str(timeout), PYTHON, "-m", "upgrade_gate", *args]
    out = subprocess.run(cmd, capture_output=True, env=env, cwd=cwd, check=True, timeout=timeout + 60).stdout
    first, _, rest = out.partition(b"\n")
    code, peak, wall = first.decode().split()
    lines = [ln for ln in rest.decode("utf-8", "replace").splitlines() if ln.strip()]
    message = lines[-1][:140] if lines else ""
    return code, int(peak) / 1024, float(wall), message


def run_attacks(
    names: list[str], *, code_root: Path = REPO, timeout: float = 30.0, mem_limit_gib: float = 4.0
) -> list[Outcome]:
    """Build and run each named attack; returns what each cost."""
    outcomes = []
    _code_root[0] = code_root
    for name in names:
        _, build = ATTACKS[name]
        with tempfile.TemporaryDirectory(prefix=f"bench-hostile-{name}-") as tmp:
            args = build(Path(tmp))
            code, peak, wall, message = measure(
                args, code_root=code_root, timeout=timeout, mem_limit=int(mem_limit_gib * 1024**3), cwd=Path(tmp)
            )
        outcomes.append(Outcome(attack=name, code=code, peak_mib=peak, wall_s=wall, message=message))
    return outcomes


def render(outcomes: list[Outcome]) -> str:
    rows = [
        (o.attack, ATTACKS[o.attack][0], o.code, f"{o.peak_mib:.0f}", f"{o.wall_s:.2f}", o.message.replace("|", "/"))
        for o in outcomes
    ]
    return table(("attack", "what", "exit", "peak RSS MiB", "wall s", "last stderr line"), rows)


def run(quick: bool = False, workdir: Path | None = None) -> Section:
    """The run_all section: this checkout's code against every attack."""
    outcomes = run_attacks([n for n in ATTACKS if not (quick and n in ("dmesg", "longname"))])
    targets = tuple(
        Target(
            name=f"hostile: {o.attack}",
            goal="exit 3/4 (dmesg: capture 0, probe failed), < 256 MiB, < 10 s",
            measured=f"exit {o.code}, {o.peak_mib:.0f} MiB, {o.wall_s:.1f} s",
            met=o.peak_mib < 256 and o.wall_s < 10 and o.code not in ("1", "timeout") and not o.code.startswith("-"),
        )
        for o in outcomes
    )
    return Section(
        title="Hostile input (issue 12)",
        body=render(outcomes),
        targets=targets,
        numbers={o.attack: {"exit": o.code, "peak_mib": o.peak_mib, "wall_s": o.wall_s} for o in outcomes},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--code", type=lambda v: Path(v).resolve(), default=REPO, help="checkout whose upgrade_gate runs"
    )
    parser.add_argument("--only", default=",".join(ATTACKS), help="comma-separated attacks: " + ",".join(ATTACKS))
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per attack before it is killed")
    parser.add_argument("--mem-limit-gib", type=float, default=4.0, help="address-space limit of the command")
    opts = parser.parse_args(argv)
    names = [n.strip() for n in opts.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(ATTACKS))
    if unknown:
        parser.error(f"unknown attacks {unknown}")
    outcomes = run_attacks(names, code_root=opts.code, timeout=opts.timeout, mem_limit_gib=opts.mem_limit_gib)
    print(f"code: {opts.code}  (timeout {opts.timeout:g} s, address space {opts.mem_limit_gib:g} GiB)")
    print(render(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
