"""Skipped acquire attempts (409 ``lock_held``), counted in memory and written in one statement every few seconds.

Most acquires on a contended lock are refusals, so a statement (or worse, an update of the one hot counter row,
which every replica would queue on) per refusal would make the refusals cost what acquisitions cost. A refusal
here is a dictionary increment; ``flush`` writes all counts at once. A killed process loses what it counted since
its last flush; a failed flush keeps its counts for the next one (docs/history.md, "Skipped attempts").

Counts are keyed by lock, by the run that held it (the 409 carries the holder's fencing token) and by the hour of
the database clock, so the history can say both "skipped 4 times while host-3 ran" and "12 skips at 03:00".
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from app.db.runner import Fetcher
from app.locking.rows import LockRow
from app.locking.timefmt import as_utc_naive

logger = logging.getLogger("schedlock.history")

Key = tuple[str, int, datetime]
#: Distinct keys kept while the database cannot take them; beyond this, new keys are dropped (and logged once).
MAX_PENDING_KEYS = 100_000


class SkipCounter:
    """Counts refusals per (name, fencing token, hour) until ``flush`` writes them to ``skips_table``."""

    def __init__(self, skips_table: str) -> None:
        self._counts: dict[Key, int] = {}
        self._dropped = 0
        # The hour the last refusal fell in, so most refusals compare two datetimes instead of building a third.
        self._hour = self._next_hour = datetime.min
        # Sorted input makes every replica lock the rows it adds to in the same order: no deadlock between flushes.
        self._sql = f"""
            INSERT INTO {skips_table} AS s (name, fencing_token, hour, skipped)
            SELECT * FROM unnest($1::text[], $2::bigint[], $3::timestamp[], $4::bigint[]) ORDER BY 1, 2, 3
            ON CONFLICT (name, fencing_token, hour) DO UPDATE SET skipped = s.skipped + EXCLUDED.skipped"""

    def count(self, holder: LockRow) -> None:
        """One refusal because ``holder`` (the row the 409 reports) held the lock."""
        at = holder.db_time
        if not self._hour <= at < self._next_hour:
            self._hour = at.replace(minute=0, second=0, microsecond=0)
            self._next_hour = self._hour + timedelta(hours=1)
        key = (holder.name, holder.fencing_token, self._hour)
        counts = self._counts
        if key in counts:
            counts[key] += 1
        elif len(counts) < MAX_PENDING_KEYS:
            counts[key] = 1
        else:
            if not self._dropped:
                logger.warning("skip counts not written for a while; dropping new ones until the next flush")
            self._dropped += 1

    @property
    def pending(self) -> int:
        """Refusals counted and not yet written."""
        return sum(self._counts.values())

    async def flush(self, statements: Fetcher) -> int:
        """Write every count in one statement with ``statements``; returns how many refusals were
        written. On failure the counts stay, and StorageUnavailable propagates."""
        counts, self._counts = self._counts, {}
        if not counts:
            return 0
        keys = sorted(counts)
        try:
            await statements.fetch(
                "flush_skips",
                self._sql,
                [k[0] for k in keys],
                [k[1] for k in keys],
                [as_utc_naive(k[2]) for k in keys],
                [counts[k] for k in keys],
            )
        except BaseException:
            for key, n in counts.items():  # merge back with what was counted meanwhile
                self._counts[key] = self._counts.get(key, 0) + n
            raise
        if self._dropped:
            logger.warning("%d skipped attempts were not counted while skip counts could not be written", self._dropped)
            self._dropped = 0
        return sum(counts.values())
