"""Worker processes for CPU work a request causes: the event loop hands a job over and awaits it.

Why processes and not threads: the jobs here (parquet decode and JSON bodies for ``/data``, QR
codes for ``/api/qr``) are Python that holds the interpreter lock for tens of milliseconds, and on
a thread of the server every ``select``, ``recv`` and ``send`` of the event loop (each releases
the lock) had to win it back from that thread: a ``/healthz`` probe waited 12-45 ms under a
``/data`` burst (docs/BENCHMARKS.md, ``data``). In a process of its own a job holds its own lock;
the workers run at a lower priority (``os.nice``), so the event loop wins a contended CPU.

A job is a plain function of picklable arguments, so a test can call it in its own process and
compare. A worker that dies (killed, out of memory) breaks the pool: the job in flight gets
``WorkerDied`` and the next job starts a fresh pool. A worker exits when the server does, even a
server killed outright.
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import ParamSpec, TypeVar

_P = ParamSpec("_P")
_T = TypeVar("_T")


class WorkerDied(Exception):
    """The worker process died while it held (or was about to take) this job."""


def _start_worker(nice: int, warm: tuple[str, ...]) -> None:
    """In each worker process: below the server's priority; Ctrl-C is the server's to handle
    (it closes the pool); gone as soon as the server is (killed, it cannot close the pool, and
    the worker would wait for a job forever); ``warm`` imported before the first job."""
    os.nice(nice)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    server = multiprocessing.parent_process()
    if server is not None:
        threading.Thread(target=_exit_with, args=(server,), daemon=True).start()
    for module in warm:
        importlib.import_module(module)


def _exit_with(server: multiprocessing.process.BaseProcess) -> None:
    server.join()  # returns when the server process has ended
    os._exit(0)


class WorkerPool:
    """``processes`` worker processes, started (``spawn``: no copy of the server's threads or
    sockets) on the first job and again after one died. ``what`` names the pool in errors."""

    def __init__(self, processes: int, nice: int, *, warm: tuple[str, ...], what: str) -> None:
        assert processes >= 1, f"bad worker count {processes}"
        self.processes, self.nice, self.warm, self.what = processes, nice, warm, what
        self._pool: ProcessPoolExecutor | None = None
        self.started = 0  # pools started so far (1 + restarts after a worker died)
        self.died = 0
        self._closed = False

    def _running(self) -> ProcessPoolExecutor:
        if self._closed:  # the server is shutting down: start nothing that would outlive it
            raise WorkerDied(f"the {self.what} worker is closed")
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.processes,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(self.nice, self.warm),
            )
            self.started += 1
        return self._pool

    async def run(self, job: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """``job(*args, **kwargs)`` in a worker process; ``WorkerDied`` if the process died."""
        pool = self._running()
        try:
            future = pool.submit(job, *args, **kwargs)
            return await asyncio.wrap_future(future)
        except BrokenProcessPool as exc:
            if pool is self._pool:  # the first to see it replaces the pool for the next job
                self.died += 1
                self._pool = None
                pool.shutdown(wait=False, cancel_futures=True)
            raise WorkerDied(str(exc) or f"a {self.what} worker process died") from None

    def status(self) -> dict[str, int]:
        return {"processes": self.processes, "started": self.started, "died": self.died}

    def close(self) -> None:
        """Stop the workers and wait for them to exit (no process outlives the server)."""
        pool, self._pool, self._closed = self._pool, None, True
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
