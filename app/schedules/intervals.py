"""Interval schedules: an ISO-8601 duration (``PT15M``, ``PT2S``, ``P1D``) ticking every that long (docs/jobs.md).

Ticks are counted from the Unix epoch (1970-01-01T00:00:00Z), so every replica and every caller lists the same ticks
without agreeing on a start: ``PT15M`` ticks at :00, :15, :30 and :45 of every hour, ``PT2S`` on every even second.
Time zones do not move them (an interval is elapsed time), so none is accepted with one but UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from app.errors import InvalidRequest
from app.locking.durations import DurationError, parse_duration

EPOCH = datetime(1970, 1, 1)
#: A tick a second at the finest; a day at the coarsest a whole number of times, and at most a year.
MIN_INTERVAL = timedelta(seconds=1)
MAX_INTERVAL = timedelta(days=366)


@dataclass(frozen=True, slots=True)
class IntervalSchedule:
    """Every ``step`` from EPOCH; times are naive UTC, the database's convention."""

    expression: str
    step: timedelta

    def latest(self, at: datetime, count: int) -> list[datetime]:
        """Up to ``count`` ticks at or before ``at``, oldest first."""
        k = (at - EPOCH) // self.step
        return [EPOCH + self.step * i for i in range(k - count + 1, k + 1)]

    def after(self, at: datetime) -> datetime:
        """The first tick strictly after ``at``."""
        return EPOCH + self.step * ((at - EPOCH) // self.step + 1)


def is_interval(expression: str) -> bool:
    """Whether ``expression`` is written as an interval (an ISO-8601 duration) rather than cron."""
    return expression.strip()[:1] in {"P", "p"}


def parse_interval(expression: str) -> IntervalSchedule:
    """The schedule, or InvalidRequest (field ``schedule``)."""
    text = expression.strip().upper()
    try:
        step = parse_duration(text)
    except DurationError as exc:
        raise InvalidRequest(f"schedule: {exc}", field="schedule") from None
    if step < MIN_INTERVAL or step > MAX_INTERVAL:
        raise InvalidRequest("schedule: an interval must be from PT1S to P366D", field="schedule")
    if step % timedelta(seconds=1):
        raise InvalidRequest("schedule: an interval must be whole seconds", field="schedule")
    return IntervalSchedule(text, step)
