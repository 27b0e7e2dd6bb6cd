"""Runs once per tick: the slotted acquire statement, and the ticks it chooses from (docs/slots.md).

A lease may carry a *slot*, the tick of a schedule it runs. Releasing it as completed records the slot as the name's
last completed slot; an acquire of that same slot then answers ``slot_done`` whatever ``lock_until`` says.

For ``schedule``, the slot is the latest tick at or before the database's now (plus ``early_grace``, for callers
whose clocks run a little ahead of the database). That now must be the acquire statement's own, not one read
before it: a tick may fall between two statements. So this process lists the ticks around its estimate of the
database's now, and the statement picks among them with its own ``CURRENT_TIMESTAMP``; if that now falls outside
the listed window (the estimate was off), the statement changes nothing and answers its now, and the acquire is
tried again with a window around it. This process's clocks only shape the window: they never pick the slot.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from app.errors import InvalidRequest
from app.locking.rows import NOW, ROW
from app.locking.schedules import Schedule, parse_schedule
from app.locking.timefmt import as_utc_naive, format_time

SLOT_MAX = 64
#: Refused in a slot key (1 to SLOT_MAX characters): C0 and C1 controls, and lone surrogates (no database can store
#: them). The API's models check it.
SLOT_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
#: The ticks listed reach this far on each side of the estimated database now.
WINDOW = timedelta(minutes=2)
#: Attempts before giving up on agreeing with the database's clock (each one after the first learned its now).
ATTEMPTS = 3
_EARLIEST, _LATEST = datetime(1, 1, 1), datetime(9999, 12, 31)


@dataclass(frozen=True, slots=True)
class Candidates:
    """The statement's choice: the last of ``keys`` whose time in ``ats`` is at or before the database's now plus
    ``grace``, provided that moment lies within [``lo``, ``hi``]."""

    ats: list[datetime]
    keys: list[str]
    lo: datetime
    hi: datetime
    grace: timedelta

    def args(self) -> tuple[object, ...]:
        return self.ats, self.keys, self.lo, self.hi, self.grace


def chooser(
    slot: str | None, schedule: str | None, timezone: str | None, grace: timedelta
) -> Callable[[datetime], Candidates] | None:
    """What an acquire request asks for: None (no slot), a fixed key, or a schedule's ticks around a given
    estimate of the database's now. InvalidRequest, naming the field, for a combination that makes no sense."""
    if slot is not None and schedule is not None:
        raise InvalidRequest("slot: give either slot or schedule, not both", field="slot")
    if timezone is not None and schedule is None:
        raise InvalidRequest("timezone: only goes with schedule", field="timezone")
    if slot is not None:
        candidates = fixed(slot)
        return lambda _db_now: candidates
    if schedule is not None:
        return functools.partial(around, parse_schedule(schedule, timezone), grace=grace)
    return None


def fixed(key: str) -> Candidates:
    """A caller-chosen slot: one candidate, whatever the time."""
    return Candidates([_EARLIEST], [key], _EARLIEST, _LATEST, timedelta(0))


def around(schedule: Schedule, db_now: datetime, grace: timedelta) -> Candidates:
    """The ticks of ``schedule`` around ``db_now`` (an estimate of the database's now, naive UTC)."""
    lo, hi = db_now - WINDOW, db_now + WINDOW
    ticks = schedule.ticks(lo, hi)
    return Candidates(ticks, [format_time(t) for t in ticks], lo, hi, grace)


class DbClock:
    """This process's estimate of the database's now: the last one a statement answered, moved on by the
    monotonic clock since. Before any answer, the wall clock stands in (a wrong one only costs a retry)."""

    def __init__(self) -> None:
        self._seen: datetime | None = None
        self._at = 0.0

    def learn(self, db_time: datetime) -> None:
        self._seen, self._at = as_utc_naive(db_time), time.monotonic()

    def now(self) -> datetime:
        if self._seen is None:
            return datetime.now(UTC).replace(tzinfo=None)
        return self._seen + timedelta(seconds=time.monotonic() - self._at)


def acquire_sql(table: str) -> str:
    """The slotted acquire. $1 name, $2 lock_at_most_for, $3 locked_by, $4 lease hash, $5 lock_at_least_for, then
    Candidates.args(): $6 tick times, $7 their keys, $8 lo, $9 hi, $10 grace.

    One statement: ``pick`` chooses the slot with the statement's own now (NULL: outside the window); ``taken``
    inserts or takes over the row unless it is held or its last completed slot is this one; ``current`` is the row
    as it stands when refused. ``current`` locks the row (FOR SHARE): in read committed mode that reads the version
    the refusal was decided on, not the older one the statement's snapshot holds, so held and slot_done are told
    apart exactly. A row inserted meanwhile by another statement is invisible to both: the last branch answers
    then, and the store reads the row again (as for the plain acquire)."""
    nulls = ", ".join("NULL" for _ in ROW.split(","))
    return f"""
        WITH pick AS (
          SELECT (SELECT c.key FROM unnest($6::timestamp[], $7::text[]) AS c(at, key)
                  WHERE c.at <= {NOW} + $10::interval ORDER BY c.at DESC LIMIT 1) AS key
          WHERE {NOW} + $10::interval BETWEEN $8::timestamp AND $9::timestamp),
        taken AS (
          INSERT INTO {table} AS l (name, lock_until, locked_at, locked_by, lease_token_hash, lock_at_least_for, slot)
          SELECT $1, {NOW} + $2::interval, {NOW}, $3, $4, $5::interval, pick.key FROM pick WHERE pick.key IS NOT NULL
          ON CONFLICT (name) DO UPDATE SET
            lock_until = EXCLUDED.lock_until, locked_at = EXCLUDED.locked_at,
            locked_by = EXCLUDED.locked_by, lease_token_hash = EXCLUDED.lease_token_hash,
            lock_at_least_for = EXCLUDED.lock_at_least_for, slot = EXCLUDED.slot
          WHERE l.lock_until <= {NOW} AND l.last_completed_slot IS DISTINCT FROM EXCLUDED.slot
          RETURNING {ROW}),
        current AS (
          SELECT {ROW} FROM {table} WHERE name = $1 AND NOT EXISTS (SELECT FROM taken) FOR SHARE)
        SELECT true AS ok, {ROW}, {NOW} AS db_time, (SELECT key FROM pick) AS picked FROM taken
        UNION ALL
        SELECT false, {ROW}, {NOW}, (SELECT key FROM pick) FROM current
        UNION ALL
        SELECT false, {nulls}, {NOW}, (SELECT key FROM pick)
        WHERE NOT EXISTS (SELECT FROM taken) AND NOT EXISTS (SELECT FROM current)"""
