"""What asyncio does for :class:`AsyncLease`: keep-alive as a task, and a lost lock cancelling the body.

``_async.py`` uses only the names defined here for its concurrency; ``_threads.py`` defines the same ones with
threads, and ``scripts/unasync_client.py`` maps one module onto the other when it generates ``_sync.py``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from typing import Any

from schedlock._exceptions import LockLost
from schedlock._lease import logger


def check_job(func: Callable[..., object]) -> None:
    """Refuse a blocking job: decorated here, it would run without being awaited."""
    if not inspect.iscoroutinefunction(func):
        raise TypeError(f"{func.__qualname__} is not async: decorate it with LockClient.scheduler_lock")


class AsyncKeeper:
    """Runs a lease's keep-alive as a task, and cancels the task inside ``async with lease:`` when it is lost.

    As ``asyncio.timeout`` does with its own cancellation and ``TimeoutError``, only a cancellation the keeper caused
    becomes :class:`LockLost` when the block exits; any other one propagates.
    """

    def __init__(self) -> None:
        self._name = ""
        self._task: asyncio.Task[None] | None = None
        self._body: asyncio.Task[Any] | None = None
        self._exited_body: asyncio.Task[Any] | None = None
        self._body_cancelling = 0
        self._cancelled_body = False

    def start(self, keep_alive: Callable[[], Coroutine[Any, Any, None]], lock_name: str) -> None:
        self._name = lock_name
        self._task = asyncio.create_task(keep_alive(), name=f"schedlock-keepalive-{lock_name}")

    async def pause(self, seconds: float) -> bool:
        """Sleep until the next extension is due. Always True: :meth:`stop` cancels the sleeping task instead."""
        await asyncio.sleep(seconds)
        return True

    async def stop(self) -> None:
        """End keep-alive and wait until its task has finished (unless this is that task)."""
        task, self._task = self._task, None
        if task is None or task is asyncio.current_task():
            return
        task.cancel()
        # asyncio.wait, not "await task": a cancellation of *this* task must still propagate.
        await asyncio.wait({task})
        if not task.cancelled() and task.exception() is not None:
            logger.error("keep-alive of lock %r failed", self._name, exc_info=task.exception())

    def enter_body(self) -> None:
        """The current task runs the ``async with`` block: a loss from now on cancels it."""
        self._body = asyncio.current_task()
        self._body_cancelling = self._body.cancelling() if self._body is not None else 0

    def exit_body(self) -> None:
        """The block is over and about to release: a loss seen while releasing must not cancel the release."""
        self._exited_body, self._body = self._body, None

    def lost(self, error: LockLost) -> None:
        """The lease was just lost: cancel the body, unless it is the one that saw the refusal (it raises already)."""
        body = self._body
        if body is not None and not body.done() and body is not asyncio.current_task():
            self._cancelled_body = True
            body.cancel(msg=str(error))

    def raise_lost(self, exc_type: type[BaseException] | None, error: LockLost | None) -> None:
        """At the end of the block: turn the cancellation :meth:`lost` caused into the LockLost ``error``."""
        body, self._exited_body = self._exited_body, None
        if (
            self._cancelled_body
            and body is not None
            and body.uncancel() <= self._body_cancelling
            and exc_type is asyncio.CancelledError
        ):
            assert error is not None
            raise error
