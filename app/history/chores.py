"""The run history's background chores: skip counts written every few seconds, and retention."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from app.background import every
from app.db.runner import Fetcher
from app.errors import StorageUnavailable
from app.history.retention import Pruner
from app.history.skips import SkipCounter

logger = logging.getLogger("schedlock.history")


@contextlib.asynccontextmanager
async def history_chores(
    statements: Fetcher, skips: SkipCounter, pruner: Pruner | None, flush_interval: float, prune_interval: float
) -> AsyncIterator[None]:
    """While entered: write skip counts every ``flush_interval`` seconds, and (with a ``pruner``) prune the history
    every ``prune_interval``. On exit, write what is left, so a graceful shutdown loses no skip."""

    async def flush() -> None:
        await skips.flush(statements)

    async with contextlib.AsyncExitStack() as chores:
        await chores.enter_async_context(every(flush_interval, flush, "schedlock-skip-counts", logger))
        if pruner is not None:
            await chores.enter_async_context(
                every(prune_interval, pruner.prune_once, "schedlock-history-retention", logger)
            )
        yield
    try:
        await skips.flush(statements)
    except StorageUnavailable as exc:
        logger.warning("%d skipped attempts not written at shutdown: %s", skips.pending, exc.message)
