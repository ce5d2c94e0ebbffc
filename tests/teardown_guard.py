"""A test's event loop always closes: bounded waits where asyncio's own teardown has none.

pytest-asyncio closes each test's loop with ``asyncio.Runner.close``: it cancels every task
still pending and then waits for all of them with no limit, and (on Python 3.11) joins the
loop's default executor with no limit. A task that swallows its cancellation, or whose cleanup
awaits something that never comes (a WebRTC close whose other end is gone, a pipe a child
process of Chromium keeps open), or an executor thread blocked on a read, then hangs the whole
run after a failed test: pytest-timeout covers the test, not the loop's close. One CI run hung
so until its 90-minute limit.

``install()`` (conftest.py) bounds both waits. Tasks still pending after ``TASKS_S`` are named
with their stacks and the teardown fails with that list (the test errors; the run goes on); an
executor still busy after ``EXECUTOR_S`` is left to finish on its own with a warning. Both patch
private asyncio functions: the only place the waits are, and test-only."""

from __future__ import annotations

import asyncio
import asyncio.runners
import concurrent.futures
import contextlib
import io
import sys
import threading
import warnings
from typing import Any

TASKS_S = 120.0  # a peer's clean close (mesh, data channels, ICE) takes seconds, more when loaded
EXECUTOR_S = 120.0


class TasksWouldNotEnd(RuntimeError):
    """Tasks left by a test ignored their cancellation past the bound."""


def cancel_all_tasks(loop: asyncio.AbstractEventLoop, bound_s: float | None = None) -> None:
    """asyncio.runners._cancel_all_tasks with a bound: cancel every pending task, wait at most
    ``bound_s``, report each one's exception as asyncio does, and raise naming any still
    pending."""
    to_cancel = asyncio.all_tasks(loop)
    if not to_cancel:
        return
    bound_s = TASKS_S if bound_s is None else bound_s
    for task in to_cancel:
        task.cancel()
    _done, pending = loop.run_until_complete(asyncio.wait(to_cancel, timeout=bound_s))
    for task in to_cancel - pending:
        if not task.cancelled() and task.exception() is not None:
            loop.call_exception_handler({
                "message": "unhandled exception during asyncio.run() shutdown",
                "exception": task.exception(),
                "task": task,
            })  # fmt: skip
    if pending:
        stacks = io.StringIO()
        for task in pending:
            task.print_stack(limit=12, file=stacks)
        raise TasksWouldNotEnd(
            f"{len(pending)} task(s) left by the test did not end within {bound_s:g} s of "
            f"being cancelled (the loop is closed without them):\n{stacks.getvalue()}"
        )


async def shutdown_default_executor(self: Any, bound_s: float | None = None) -> None:
    """BaseEventLoop.shutdown_default_executor with a bound (Python 3.12's own has one)."""
    bound_s = EXECUTOR_S if bound_s is None else bound_s
    self._executor_shutdown_called = True
    executor: concurrent.futures.ThreadPoolExecutor | None = self._default_executor
    if executor is None:
        return
    loop = asyncio.get_running_loop()
    joined: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not joined.done():
            joined.set_result(None)

    def join() -> None:  # on its own thread: the join is what may block
        executor.shutdown(wait=True)
        with contextlib.suppress(RuntimeError):  # the loop was closed without waiting for us
            loop.call_soon_threadsafe(settle)

    threading.Thread(target=join, name="executor-shutdown", daemon=True).start()
    try:
        await asyncio.wait_for(asyncio.shield(joined), bound_s)
    except TimeoutError:
        warnings.warn(
            f"the loop's default executor was still busy {bound_s:g} s after the test; "
            "its threads are left to finish on their own",
            RuntimeWarning,
            stacklevel=1,
        )


def install() -> None:
    asyncio.runners._cancel_all_tasks = cancel_all_tasks  # type: ignore[attr-defined]
    if sys.version_info < (3, 12):
        asyncio.base_events.BaseEventLoop.shutdown_default_executor = (  # type: ignore[method-assign]
            shutdown_default_executor
        )
