"""Work that runs beside a server process's requests: a coroutine as a task while a context is entered, or a chore
every few seconds (the run history's skip counts and retention, the token file's reload)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

from app.errors import StorageUnavailable

logger = logging.getLogger("schedlock.background")


@contextlib.asynccontextmanager
async def in_background(work: Coroutine[Any, Any, None], name: str) -> AsyncIterator[None]:
    """While entered, ``work`` runs as a task; on exit it is cancelled, and waited for."""
    task = asyncio.create_task(work, name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def every(
    seconds: float, chore: Callable[[], Awaitable[object]], name: str, log: logging.Logger = logger
) -> AsyncIterator[None]:
    """While entered, await ``chore()`` every ``seconds`` (the first time after a random part of the interval, so
    replicas started together spread out). A database outage is logged and the chore tried again next time."""

    async def loop() -> None:
        await asyncio.sleep(seconds * random.random())
        while True:
            try:
                await chore()
            except StorageUnavailable as exc:
                log.warning("%s: %s; trying again in %gs", name, exc.message, seconds)
            except Exception:  # a bug in a chore must not end it for the life of the process
                log.exception("%s failed; trying again in %gs", name, seconds)
            await asyncio.sleep(seconds)

    async with in_background(loop(), name):
        yield
