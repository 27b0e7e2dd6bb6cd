"""Background chores of a server process: coroutines run every few seconds while a context is entered (the run
history's skip counts and retention)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable

from app.errors import StorageUnavailable
from app.locking.retention import Pruner
from app.locking.skips import SkipCounter
from app.locking.store import LockStore

logger = logging.getLogger("schedlock.history")


@contextlib.asynccontextmanager
async def every(seconds: float, chore: Callable[[], Awaitable[object]], name: str) -> AsyncIterator[None]:
    """While entered, await ``chore()`` every ``seconds`` (the first time after a random part of the interval, so
    replicas started together spread out). A database outage is logged and the chore tried again next time."""

    async def loop() -> None:
        await asyncio.sleep(seconds * random.random())
        while True:
            try:
                await chore()
            except StorageUnavailable as exc:
                logger.warning("%s: %s; trying again in %gs", name, exc.message, seconds)
            except Exception:  # a bug in a chore must not end it for the life of the process
                logger.exception("%s failed; trying again in %gs", name, seconds)
            await asyncio.sleep(seconds)

    task = asyncio.create_task(loop(), name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def history_chores(
    store: LockStore, skips: SkipCounter, pruner: Pruner | None, flush_interval: float, prune_interval: float
) -> AsyncIterator[None]:
    """While entered: write skip counts every ``flush_interval`` seconds, and (with a ``pruner``) prune the history
    every ``prune_interval``. On exit, write what is left, so a graceful shutdown loses no skip."""

    async def flush() -> None:
        await skips.flush(store)

    async with contextlib.AsyncExitStack() as chores:
        await chores.enter_async_context(every(flush_interval, flush, "schedlock-skip-counts"))
        if pruner is not None:
            await chores.enter_async_context(every(prune_interval, pruner.prune_once, "schedlock-history-retention"))
        yield
    try:
        await skips.flush(store)
    except StorageUnavailable as exc:
        logger.warning("%d skipped attempts not written at shutdown: %s", skips.pending, exc.message)
