"""The jobs' state changes as an outbox (migration 0004): claimed once across replicas, delivered by any.

A replica's check computes every job's state; for a job whose state differs from its ``notified_state``, one
statement moves ``notified_state`` on, compare-and-set on the value it read, and writes an event per webhook URL in
the same statement. Two replicas that see the same change race on that UPDATE: one row changes, so one replica
writes the events, whichever it is. Delivery claims due events, in order per job and URL, for a while
(``claimed_until``, FOR UPDATE SKIP LOCKED), so a replica that dies mid-delivery leaves them to the next claim rather
than losing them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from app.db.runner import Fetcher
from app.db.schema import job_events_table, jobs_table
from app.locking.rows import NOW

#: How long a delivery may take before another replica may try the event again.
CLAIM_SECONDS = 30
#: Backoff between attempts: 2, 4, 8 ... seconds, at most this.
MAX_BACKOFF_SECONDS = 300


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    name: str
    url: str
    state: str
    previous: str
    at: datetime
    attempts: int


class Events:
    """The events table beside a lock table, read and written with ``statements``."""

    def __init__(self, statements: Fetcher, table: str, schema: str | None) -> None:
        self._statements = statements
        self.jobs_table = jobs_table(table, schema)
        self.events_table = job_events_table(table, schema)

    async def claim(self, name: str, previous: str | None, state: str, urls: list[str]) -> bool:
        """Move ``name``'s notified state from ``previous`` to ``state``, with an event per URL in ``urls`` (none:
        only recorded). Whether this call made the change (False: another replica did, or the job changed)."""
        sql = f"""
            WITH claimed AS (
              UPDATE {self.jobs_table} SET notified_state = $2
              WHERE name = $1 AND notified_state IS NOT DISTINCT FROM $3 RETURNING name),
            written AS (
              INSERT INTO {self.events_table} (name, url, state, previous, at, next_attempt_at)
              SELECT c.name, u.url, $2, $3, {NOW}, {NOW} FROM claimed c CROSS JOIN unnest($4::text[]) AS u(url))
            SELECT count(*) AS n FROM claimed"""
        rows = await self._statements.fetch("job_write", sql, name, state, previous, urls)
        return bool(rows[0]["n"])

    async def due(self, attempts: int, limit: int = 20) -> list[Event]:
        """Claim up to ``limit`` events due for delivery (fewer than ``attempts`` tries so far), oldest first.

        In order per job and URL: an event waits while an earlier one for the same job and URL is still to be
        delivered (in its backoff, or being posted), so a receiver never hears ``down`` before the ``up`` it
        follows; an earlier event that ran out of attempts no longer holds the later ones back."""
        sql = f"""
            UPDATE {self.events_table} e SET claimed_until = {NOW} + interval '{CLAIM_SECONDS} seconds',
              attempts = e.attempts + 1
            WHERE e.id IN (
              SELECT d.id FROM {self.events_table} d
              WHERE d.delivered_at IS NULL AND d.next_attempt_at <= {NOW} AND d.attempts < $1
                AND (d.claimed_until IS NULL OR d.claimed_until <= {NOW})
                AND NOT EXISTS (
                  SELECT 1 FROM {self.events_table} p
                  WHERE p.name = d.name AND p.url = d.url AND p.id < d.id
                    AND p.delivered_at IS NULL AND p.attempts < $1)
              ORDER BY d.id LIMIT $2 FOR UPDATE SKIP LOCKED)
            RETURNING e.id, e.name, e.url, e.state, e.previous, e.at, e.attempts"""
        rows = await self._statements.fetch("job_write", sql, attempts, limit)
        return sorted(
            (Event(r["id"], r["name"], r["url"], r["state"], r["previous"], r["at"], r["attempts"]) for r in rows),
            key=lambda e: e.id,
        )

    async def delivered(self, event: Event) -> None:
        sql = f"""UPDATE {self.events_table} SET delivered_at = {NOW}, claimed_until = NULL, last_error = NULL
            WHERE id = $1"""
        await self._statements.fetch("job_write", sql, event.id)

    async def failed(self, event: Event, error: str) -> None:
        """Try again after a backoff that doubles with each attempt."""
        backoff = min(2**event.attempts, MAX_BACKOFF_SECONDS)
        sql = f"""UPDATE {self.events_table} SET claimed_until = NULL, last_error = $2,
              next_attempt_at = {NOW} + make_interval(secs => $3) WHERE id = $1"""
        await self._statements.fetch("job_write", sql, event.id, error[:500], float(backoff))
