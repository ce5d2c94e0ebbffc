"""The teardown guard (tests/teardown_guard.py) fires: a task that ignores its cancellation and
an executor thread that never returns no longer hang a test loop's close. Each case runs a real
``asyncio.Runner`` (what pytest-asyncio closes after every test) with short bounds."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import teardown_guard


async def _stubborn(started: asyncio.Event) -> None:
    """Swallows every cancellation: the kind of cleanup that once hung a CI run."""
    started.set()
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue


def test_a_task_that_ignores_cancellation_fails_the_teardown_instead_of_hanging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(teardown_guard, "TASKS_S", 0.5)
    runner = asyncio.Runner()
    started = asyncio.Event()

    async def leave_one_behind() -> None:
        asyncio.get_running_loop().create_task(_stubborn(started), name="stubborn")
        await started.wait()

    runner.run(leave_one_behind())
    loop = runner.get_loop()
    began = time.monotonic()
    # What pytest-asyncio calls after each test: the installed guard raises, the loop closes.
    with pytest.raises(teardown_guard.TasksWouldNotEnd, match=r"(?s)1 task\(s\).*_stubborn"):
        runner.close()
    assert time.monotonic() - began < 30
    assert loop.is_closed()


def test_tasks_that_end_on_cancellation_pass_quietly() -> None:
    runner = asyncio.Runner()
    ended: list[str] = []

    async def polite() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append("polite")

    async def leave() -> None:
        asyncio.get_running_loop().create_task(polite())
        await asyncio.sleep(0)

    runner.run(leave())
    teardown_guard.cancel_all_tasks(runner.get_loop(), bound_s=5)
    assert ended == ["polite"]
    runner.close()


def test_a_blocked_executor_thread_is_left_behind_with_a_warning() -> None:
    release = threading.Event()
    loop = asyncio.new_event_loop()
    try:
        loop.run_in_executor(None, release.wait)
        began = time.monotonic()
        with pytest.warns(RuntimeWarning, match="still busy"):
            loop.run_until_complete(teardown_guard.shutdown_default_executor(loop, bound_s=0.5))
        assert time.monotonic() - began < 30
    finally:
        release.set()
        loop.close()


def test_the_guard_is_installed_for_this_run() -> None:
    assert asyncio.runners._cancel_all_tasks is teardown_guard.cancel_all_tasks  # type: ignore[attr-defined]
