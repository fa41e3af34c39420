"""A fake node's launcher: torchrun's worker contract, with the ranks forked from one PyTorch import.

The real `torchrun --standalone` (torch.distributed.run) imports PyTorch, hosts the job's TCPStore in
its agent and starts each rank as a new `python -u script`, which imports PyTorch again: measured
2026-12 (torch 2.15, 2 cores), 3 imports of ~3.2 s of CPU each were three quarters of a short demo
run's 11.5 s of CPU, and the test suite ran 30 such runs. This launcher imports PyTorch once, forks
the ranks (before any thread exists here), then hosts the store, and gives each rank the environment
torchrun's agent gives (RANK, LOCAL_RANK, WORLD_SIZE ..., MASTER_ADDR/MASTER_PORT of the agent's
store and TORCHELASTIC_USE_AGENT_STORE=True), so the script's `env://` rendezvous is torchrun's. The
script runs unchanged, as `__main__`, with torchrun's argument parser reading the command line.

What differs from torchrun, on purpose: a rank's init time no longer includes its own PyTorch import
(the imagined GPU's init delay, UPGRADE_GATE_FAKE_INIT_DELAY_S, is unchanged); a failed rank stops the
others (SIGTERM, then SIGKILL) and the launcher exits 1 with one `exitcode` line per failed rank, where
torchrun prints its ChildFailedError table. What this launcher cannot serve (more than one node,
`--no-python`, `-m`, a rank count that is not a number) runs the real torchrun instead.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import signal
import sys
import time
import traceback
import uuid

STOP_GRACE_S = 5.0  # SIGTERM to SIGKILL for the other ranks, as torchrun's agent does on a failure


def _rank_env(rank: int, world: int, port: int, run_id: str) -> dict[str, str]:
    """torchrun's worker environment (torch 2.15, one node), the agent's store at localhost:port."""
    values = {
        "LOCAL_RANK": rank, "RANK": rank, "GROUP_RANK": 0, "ROLE_RANK": rank, "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": world, "WORLD_SIZE": world, "GROUP_WORLD_SIZE": 1, "ROLE_WORLD_SIZE": world,
        "MASTER_ADDR": "localhost", "MASTER_PORT": port, "TORCHELASTIC_RESTART_COUNT": 0,
        "TORCHELASTIC_MAX_RESTARTS": 0, "TORCHELASTIC_RUN_ID": run_id, "TORCHELASTIC_USE_AGENT_STORE": True,
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": 1, "PYTHONUNBUFFERED": 1,
    }  # fmt: skip
    return {k: str(v) for k, v in values.items()}


def _die_with_parent(parent: int) -> None:
    """A rank ends when its launcher does (SIGKILL), as torchrun's workers end with their agent."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def _run_rank(read_fd: int, rank: int, world: int, run_id: str, script: str, script_args: list[str]) -> None:
    """The forked rank: wait for the store's port, take torchrun's environment, run the script; never returns."""
    code = 1
    try:
        port = os.read(read_fd, 16).decode("ascii")
        os.close(read_fd)
        if not port.isdigit():
            print(f"forkrun: rank {rank}: the launcher's store did not start", file=sys.stderr)
            os._exit(1)
        os.environ.update(_rank_env(rank, world, int(port), run_id))
        sys.argv = [script, *script_args]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _stop(pids: dict[int, int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _ended(pids: dict[int, int], failed: list[tuple[int, int]], *, block: bool) -> bool:
    """Reap one ended rank (False: none had ended, `block` unset); a non-zero exit goes into `failed`."""
    pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
    if pid == 0:
        return False
    rank = pids.pop(pid, None)
    code = os.waitstatus_to_exitcode(status)
    if rank is not None and code != 0:
        failed.append((rank, code))
    return True


def _stop_all(pids: dict[int, int], failed: list[tuple[int, int]]) -> None:
    """SIGTERM to every rank left, SIGKILL to those still there after STOP_GRACE_S, all reaped."""
    _stop(pids, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while pids and time.monotonic() < deadline:
        if not _ended(pids, failed, block=False):
            time.sleep(0.05)
    _stop(pids, signal.SIGKILL)
    while pids:
        _ended(pids, failed, block=True)


def main(argv: list[str]) -> int:
    import torch.distributed.run as torchrun

    args = torchrun.parse_args(argv)  # type: ignore[no-untyped-call]
    nproc = str(args.nproc_per_node)
    if args.module or args.no_python or str(args.nnodes) not in ("1", "1:1") or not nproc.isdigit():
        os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", *argv])
    world, run_id, parent = int(nproc), str(uuid.uuid4()), os.getpid()
    pids: dict[int, int] = {}
    writes: list[int] = []
    for rank in range(world):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            for fd in [*writes, write_fd]:
                os.close(fd)
            _die_with_parent(parent)
            _run_rank(read_fd, rank, world, run_id, args.training_script, list(args.training_script_args))
        os.close(read_fd)
        pids[pid] = rank
        writes.append(write_fd)

    def on_signal(signum: int, _frame: object) -> None:
        _stop_all(pids, [])
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, on_signal)
    from torch._C._distributed_c10d import TCPStore

    store = TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    for fd in writes:
        os.write(fd, str(store.port).encode("ascii"))
        os.close(fd)
    failed: list[tuple[int, int]] = []
    while pids:
        _ended(pids, failed, block=True)
        if failed and pids:
            _stop_all(pids, failed)
    for rank, code in sorted(failed):
        print(f"forkrun: rank {rank} (local_rank: {rank}) failed: exitcode : {code}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv[1:]))
