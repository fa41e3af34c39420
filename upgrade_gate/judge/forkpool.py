"""Forked workers for judging a fleet: ordered results, and a worker that dies is an error, never a hang.

`multiprocessing.Pool` hung `gate` in three ways (a helper's review, session 6): a worker killed by
SIGKILL or the OOM killer loses its task and `imap` waits for it forever; after SIGTERM to the whole
process group, an idle worker dies holding the task queue's lock and `Pool.terminate` blocks on it; and
an exception that cannot be rebuilt from its pickle (`ParseError`) kills the pool's result thread.
This pool has no shared queue and no helper threads:

- Each worker is forked when `imap` starts (it inherits `fn` and the items, nothing is pickled on the way
  in) and talks to the parent over its own pipe: the parent sends an item's index, the worker answers
  with the index and the result, or with the error it raised.
- The parent waits on every busy worker's pipe and process sentinel at once
  (`multiprocessing.connection.wait`). A worker whose process ends with a task outstanding and nothing
  left in its pipe has died: `WorkerDied` (an `EnvironmentFailure`, exit 4) names its exit status and
  what it was judging. A signal to the parent interrupts the wait like any other.
- Results come out in the items' order; at most `4 x workers` items are handed out beyond the next one
  due, so a slow item cannot make the parent buffer the rest of the fleet.
- An error raised in a worker is re-raised in the parent when it survives a pickle round trip; otherwise
  as the nearest `GateError` class that can carry its message (so it keeps its exit code), or a
  `RuntimeError` naming its type (an internal error, exit 70).
- On leaving `forked_pool` normally every worker is told to stop and joined; on an error or a signal
  every worker is SIGKILLed and reaped. Either way no worker outlives the block.
"""

from __future__ import annotations

import contextlib
import pickle
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from multiprocessing import connection, get_context
from typing import Any, Generic, TypeVar

from upgrade_gate.errors import EnvironmentFailure, GateError

T = TypeVar("T")
R = TypeVar("R")

_STOP = -1
JOIN_TIMEOUT_S = 10.0  # a worker told to stop has finished its work: it leaves at once, or is killed


class WorkerDied(EnvironmentFailure):
    """A worker process ended without answering for the item it was given."""


def worker_signals() -> None:
    """A forked judge worker's signals: SIGTERM kills it, SIGINT is the parent's to handle."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Worker:
    def __init__(self, process: Any, conn: connection.Connection) -> None:
        self.process = process
        self.conn = conn
        self.task: int | None = None


class ForkPool(Generic[T]):
    """`workers` forked processes per `imap`/`map` call (see the module docstring)."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self._live: list[_Worker] = []

    def map(self, fn: Callable[[T], R], items: Sequence[T], *, describe: Callable[[T], str] = repr) -> list[R]:
        return list(self.imap(fn, items, describe=describe))

    def imap(self, fn: Callable[[T], R], items: Sequence[T], *, describe: Callable[[T], str] = repr) -> Iterator[R]:
        """`fn(item)` for every item, in order, computed in forked workers."""
        if not items:
            return
        self._start(fn, items, min(self.workers, len(items)))
        window = 4 * len(self._live)
        handed = 0  # items handed out so far (in order)
        due = 0  # the next item to yield
        done: dict[int, R] = {}
        idle = list(self._live)
        while due < len(items):
            while idle and handed < len(items) and handed < due + window:
                worker = idle.pop()
                worker.task = handed
                try:
                    worker.conn.send(handed)
                except OSError:  # its end of the pipe is gone, so is the process
                    raise self._died(worker, items, describe) from None
                handed += 1
            if due in done:
                yield done.pop(due)
                due += 1
                continue
            busy = [w for w in self._live if w.task is not None]
            ready = connection.wait([w.conn for w in busy] + [w.process.sentinel for w in busy])
            for worker in busy:
                if worker.conn in ready or (worker.process.sentinel in ready and worker.conn.poll()):
                    index, ok, payload = self._receive(worker, items, describe)
                    if not ok:
                        raise payload
                    done[index] = payload
                    worker.task = None
                    idle.append(worker)
                elif worker.process.sentinel in ready:
                    raise self._died(worker, items, describe)

    def _receive(self, worker: _Worker, items: Sequence[T], describe: Callable[[T], str]) -> tuple[int, bool, Any]:
        try:
            message: tuple[int, bool, Any] = worker.conn.recv()
        except (EOFError, OSError):
            worker.process.join(JOIN_TIMEOUT_S)
            raise self._died(worker, items, describe) from None
        return message

    def _died(self, worker: _Worker, items: Sequence[T], describe: Callable[[T], str]) -> WorkerDied:
        worker.process.join(JOIN_TIMEOUT_S)
        code = worker.process.exitcode
        how = f"killed by {_signal_name(-code)}" if code is not None and code < 0 else f"exit status {code}"
        what = describe(items[worker.task]) if worker.task is not None else "nothing"
        return WorkerDied(
            f"a judge worker (pid {worker.process.pid}) died ({how}) while judging {what}; no verdict "
            "(out of memory? the kernel log says whether the OOM killer ended it)"
        )

    def _start(self, fn: Callable[[T], R], items: Sequence[T], count: int) -> None:
        ctx: Any = get_context("fork")
        for stream in (sys.stdout, sys.stderr):  # nothing buffered is written twice by a child
            with contextlib.suppress(Exception):
                stream.flush()
        for _ in range(count):
            mine, theirs = ctx.Pipe(duplex=True)
            others = [w.conn for w in self._live] + [mine]  # the parent's ends (its own too): closed in the child
            process = ctx.Process(target=_serve, args=(theirs, fn, items, others), daemon=True)
            process.start()
            theirs.close()
            self._live.append(_Worker(process, mine))

    def stop(self) -> None:
        """Tell every worker to leave and join it (killed if it does not within JOIN_TIMEOUT_S)."""
        for worker in self._live:
            with contextlib.suppress(OSError, ValueError):
                worker.conn.send(_STOP)
        for worker in self._live:
            worker.process.join(JOIN_TIMEOUT_S)
        self.kill()

    def kill(self) -> None:
        """SIGKILL every worker still running and reap it."""
        for worker in self._live:
            if worker.process.is_alive():
                with contextlib.suppress(OSError):
                    worker.process.kill()
        for worker in self._live:
            worker.process.join()
            worker.conn.close()
        self._live.clear()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _serve(
    conn: connection.Connection,
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    others: Sequence[connection.Connection] = (),
) -> None:
    """A worker's loop: an index in, (index, True, result) or (index, False, error) out, until told to stop.
    `others` (the parent's ends of this worker's pipe and of those forked before it) are closed first, so
    that when the parent is gone every worker reads the end of its pipe at once."""
    for other in others:
        other.close()
    worker_signals()
    while True:
        try:
            index = conn.recv()
        except EOFError:  # the parent is gone
            return
        if index == _STOP:
            return
        try:
            reply: tuple[int, bool, Any] = (index, True, fn(items[index]))
        except BaseException as exc:  # every error goes to the parent, which raises it
            reply = (index, False, _portable(exc))
        try:
            conn.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as exc:  # a result that cannot travel
            conn.send((index, False, RuntimeError(f"a judge worker could not send its result: {exc}")))


def _portable(exc: BaseException) -> BaseException:
    """`exc` if it survives a pickle round trip; else the nearest GateError class carrying its message,
    else a RuntimeError naming its type."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # any failure to round-trip: send something simpler
        pass
    for cls in type(exc).__mro__:
        if isinstance(cls, type) and issubclass(cls, GateError):
            try:
                simpler = cls(str(exc))
                pickle.loads(pickle.dumps(simpler))
                return simpler
            except Exception:  # this class cannot carry it: try its base
                continue
    return RuntimeError(f"{type(exc).__name__} in a judge worker: {exc}")


@contextlib.contextmanager
def forked_pool(workers: int) -> Iterator[ForkPool[Any]]:
    """A `ForkPool`: on leaving normally its workers are stopped and joined; when the block raises (the
    parent failed or was interrupted), they are killed and reaped."""
    pool: ForkPool[Any] = ForkPool(workers)
    try:
        yield pool
    except BaseException:
        pool.kill()
        raise
    pool.stop()
