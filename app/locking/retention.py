"""Retention of the run history: old runs and skip counts are deleted in small batches, by one replica at a time.

One replica at a time because each takes the service's own lock, ``RETENTION_LOCK``, on its own table first (the
replicas that find it held skip this round, as any ShedLock job would). Small batches, each its own statement and
so its own short transaction, keep the row locks, the WAL burst and the vacuum debt of each one small. The lock
table is never touched: only the history tables are pruned.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from datetime import timedelta

from app.errors import LockHeld, SchedlockError
from app.locking.history import History
from app.locking.leases import new_locked_by
from app.locking.rows import NOW
from app.locking.store import LockStore

logger = logging.getLogger("schedlock.history")

#: The service's own lock; reserved (docs/history.md, "Retention").
RETENTION_LOCK = "schedlock:history-retention"
#: How long the retention lock is taken for; a round stops deleting after half of it, and goes on next time.
LOCK_AT_MOST_FOR = timedelta(minutes=5)
#: A breath between batches, so a large backlog does not keep one connection busy back to back.
BATCH_PAUSE = 0.05


class Pruner:
    """Deletes runs whose ``lock_until`` is older than ``retention`` (and older skip counts), ``batch`` rows per
    statement, under RETENTION_LOCK."""

    def __init__(self, store: LockStore, history: History, retention: timedelta, batch: int) -> None:
        self._store = store
        self._retention = retention
        self._batch = batch
        cutoff = f"{NOW} - $1::interval"
        # A run ended at the latest at its lock_until, and acquired_at <= lock_until: the acquired_at index finds the
        # candidates, oldest first. The runs table has no key: rows are picked by their physical address.
        self._runs_sql = f"""
            WITH gone AS (
              DELETE FROM {history.runs_table} WHERE ctid = ANY(ARRAY(
                SELECT ctid FROM {history.runs_table}
                WHERE acquired_at < {cutoff} AND lock_until < {cutoff} ORDER BY acquired_at LIMIT $2))
              RETURNING 1)
            SELECT count(*) AS n FROM gone"""
        self._skips_sql = f"""
            WITH gone AS (
              DELETE FROM {history.skips_table} WHERE (name, fencing_token, hour) IN (
                SELECT name, fencing_token, hour FROM {history.skips_table}
                WHERE hour < date_trunc('hour', {cutoff}) LIMIT $2)
              RETURNING 1)
            SELECT count(*) AS n FROM gone"""
        self.holder = f"history retention on {socket.gethostname()[:60]} pid {os.getpid()}"

    async def prune_once(self) -> int | None:
        """One round: take the retention lock, delete what is old in batches, release. Returns the number of rows
        deleted, or None when another replica holds the lock."""
        try:
            lease = await self._store.acquire(
                RETENTION_LOCK, LOCK_AT_MOST_FOR, timedelta(0), new_locked_by(self.holder)
            )
        except LockHeld:
            return None
        deadline = time.monotonic() + LOCK_AT_MOST_FOR.total_seconds() / 2
        deleted = 0
        try:
            for sql in (self._runs_sql, self._skips_sql):
                while True:
                    rows = await self._store.fetch("prune", sql, self._retention, self._batch)
                    deleted += int(rows[0]["n"])
                    if rows[0]["n"] < self._batch or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(BATCH_PAUSE)
        finally:
            try:
                await self._store.release(RETENTION_LOCK, lease.token)
            except SchedlockError as exc:  # it frees itself at its lock_until
                logger.warning("history retention: could not release %r: %s", RETENTION_LOCK, exc.message)
        if deleted:
            logger.info("history retention: deleted %d rows older than %s", deleted, self._retention)
        return deleted
