"""Runs once per tick: which ticks a slotted acquire chooses from (docs/slots.md).

For ``schedule``, the slot is the latest tick at or before the database's now (plus ``early_grace``, for callers
whose clocks run a little ahead of the database). That now must be the acquire statement's own, not one read
before it: a tick may fall between two statements. So the ticks around this process's estimate of the database's
now are listed, and the statement picks among them; if its now falls outside the window, nothing changes and the
acquire is tried again around the now it answered. This process's clocks only shape the window: they never pick.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime, timedelta

from app.errors import InvalidRequest
from app.locking.slots import Candidates, fixed
from app.locking.timefmt import format_time
from app.schedules.cron import Schedule, parse_schedule

#: The ticks listed reach this far on each side of the estimated database now.
WINDOW = timedelta(minutes=2)


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


def around(schedule: Schedule, db_now: datetime, grace: timedelta) -> Candidates:
    """The ticks of ``schedule`` around ``db_now`` (an estimate of the database's now, naive UTC)."""
    lo, hi = db_now - WINDOW, db_now + WINDOW
    ticks = schedule.ticks(lo, hi)
    return Candidates(ticks, [format_time(t) for t in ticks], lo, hi, grace)
