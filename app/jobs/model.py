"""What a job is: a lock name with an expected schedule, a time zone, a grace and a description (docs/jobs.md).

A schedule is 5-field cron (app.schedules.cron, in an IANA zone) or an ISO-8601 interval (app.schedules.intervals,
counted from the epoch). Both answer the two questions the tick computation asks: the latest ``count`` ticks at or
before a time, and the first tick after one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from cronsim import CronSim

from app.errors import InvalidRequest
from app.locking.durations import DurationError, parse_duration
from app.schedules.cron import DEFAULT_TIMEZONE, SCHEDULE_MAX, Schedule, parse_schedule
from app.schedules.intervals import is_interval, parse_interval

DEFAULT_GRACE = timedelta(minutes=5)
MAX_GRACE = timedelta(days=31)
DESCRIPTION_MAX = 500

#: A tick's states (docs/jobs.md, "Ticks").
TICK_STATES = ("completed", "failed", "timed_out", "missed", "running", "pending")
#: A job's states (docs/jobs.md, "Job states").
JOB_STATES = ("up", "late", "down", "paused", "new")


class Expected(Protocol):
    """A schedule as the tick computation reads it; times are naive UTC."""

    @property
    def expression(self) -> str: ...

    def latest(self, at: datetime, count: int) -> list[datetime]: ...

    def after(self, at: datetime) -> datetime | None: ...


@dataclass(frozen=True, slots=True)
class CronExpected:
    """A cron schedule's ticks, as a cron daemon in its zone fires them (app.schedules.cron, DST included)."""

    schedule: Schedule

    @property
    def expression(self) -> str:
        return self.schedule.expression

    def latest(self, at: datetime, count: int) -> list[datetime]:
        return list(_cron_latest(self.schedule, at, count))

    def after(self, at: datetime) -> datetime | None:
        return _cron_after(self.schedule, at)


# A fleet's jobs share a few schedules, and a page of jobs is decided at one database now: the same ticks would be
# computed for every job of the page (cronsim's iteration, ~1-3 ms a job; docs/history.md, "A fleet's month").
# Pure functions of their arguments, so the answers are kept, a bounded number of them.
@functools.lru_cache(maxsize=512)
def _cron_latest(schedule: Schedule, at: datetime, count: int) -> tuple[datetime, ...]:
    # Back one more tick than asked with cronsim's reverse iteration, then forward from there with the schedule's
    # own rule (the one written for forward iteration, as around a DST change a daemon fires).
    back = CronSim(schedule.expression, at.replace(tzinfo=UTC).astimezone(schedule.zone), reverse=True)
    oldest = at
    try:
        for _ in range(count + 1):
            oldest = next(back).astimezone(UTC).replace(tzinfo=None)
    except StopIteration:
        pass
    return tuple([t for t in schedule.ticks(oldest, at) if t <= at][-count:])


@functools.lru_cache(maxsize=512)
def _cron_after(schedule: Schedule, at: datetime) -> datetime | None:
    start = at.replace(tzinfo=UTC).astimezone(schedule.zone)
    try:
        return next(CronSim(schedule.expression, start)).astimezone(UTC).replace(tzinfo=None)
    except StopIteration:
        return None


def expected(schedule: str, timezone: str | None) -> Expected:
    """The schedule, or InvalidRequest naming ``schedule`` or ``timezone``."""
    if len(schedule) > SCHEDULE_MAX:
        raise InvalidRequest(f"schedule: at most {SCHEDULE_MAX} characters", field="schedule")
    if is_interval(schedule):
        if timezone not in (None, DEFAULT_TIMEZONE):
            raise InvalidRequest("timezone: an interval schedule is elapsed time, in UTC only", field="timezone")
        return parse_interval(schedule)
    return CronExpected(parse_schedule(schedule, timezone))


def parse_grace(value: str | int | timedelta) -> timedelta:
    """A grace as the API takes it (a duration: ``5m``, ``PT5M``, milliseconds), or InvalidRequest (``grace``)."""
    try:
        grace = parse_duration(value)
    except DurationError as exc:
        raise InvalidRequest(f"grace: {exc}", field="grace") from None
    if grace > MAX_GRACE:
        raise InvalidRequest("grace: must be at most 31 days", field="grace")
    return grace


@dataclass(frozen=True, slots=True)
class Job:
    """A registered job as stored. ``expected_since``: ticks before it are not expected (registration, a changed
    schedule, a resume); ``created_at``, ``updated_at``: database UTC."""

    name: str
    schedule: str
    timezone: str
    grace: timedelta
    description: str | None
    paused: bool
    created_at: datetime
    updated_at: datetime
    expected_since: datetime
    #: Its badge is readable without a token.
    public: bool = False
    #: The state a replica's check last claimed (webhooks, app.jobs.webhooks); None before the first check.
    notified_state: str | None = None
    #: The principal whose request last registered, updated, paused or resumed it (None: unknown, or an open server).
    changed_by: str | None = None

    def expected(self) -> Expected:
        return expected(self.schedule, self.timezone)
