"""Cron schedules: which ticks fall in a window of time (docs/slots.md).

A schedule is a 5-field cron expression (or an ``@daily``-style alias) in an IANA time zone. Ticks come from cronsim,
which follows Debian's cron, DST included: a job at a fixed time that falls in the hour skipped in spring runs at
the first minute after the jump; in the hour repeated in autumn it runs once, at the first occurrence; jobs whose
minute or hour field starts with ``*`` (``*/15 * * * *``) run on every real instant that matches the local time.

This module only lists ticks. Which of them is the slot is decided by the acquire statement itself, with the
database's now (``app.locking.statements``): no clock of this process enters the answer.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, available_timezones

from cronsim import CronSim, CronSimError

from app.errors import InvalidRequest

#: Debian cron's aliases (crontab(5)); @reboot has no tick and is refused.
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
SCHEDULE_MAX = 200
TIMEZONE_MAX = 64
DEFAULT_TIMEZONE = "UTC"
# What IANA names are made of; anything else is refused before the zone database is asked.
_ZONE_NAME = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")
# A link to the server's own zone on Debian: it would make the slot depend on which machine answers.
_NOT_ZONES = frozenset({"localtime"})


@dataclass(frozen=True, slots=True)
class Schedule:
    """A parsed schedule: ``expression`` has five fields (aliases expanded); ``zone`` is where it is read."""

    expression: str
    zone: tzinfo
    zone_name: str

    def ticks(self, lo: datetime, hi: datetime) -> list[datetime]:
        """The latest tick at or before ``lo`` and every tick after it up to ``hi``, in order, as naive UTC times
        (the database's convention). ``lo`` and ``hi`` are naive UTC too."""
        start = lo.replace(tzinfo=UTC).astimezone(self.zone)
        try:
            # Two ticks back, then forward from there: forward iteration is the one Debian's rule is written for,
            # so the ticks listed are the ones a cron daemon in this zone would fire, even around a DST change.
            back = CronSim(self.expression, start + timedelta(seconds=1), reverse=True)
            next(back)
            earlier = next(back).astimezone(UTC)
            forward = CronSim(self.expression, (earlier - timedelta(seconds=1)).astimezone(self.zone))
            found: list[datetime] = []
            while True:
                tick = next(forward).astimezone(UTC).replace(tzinfo=None)
                if tick > hi:
                    break
                found.append(tick)
        except StopIteration:
            raise InvalidRequest("schedule: has no tick within 50 years", field="schedule") from None
        ticks = sorted(set(found))
        before = [t for t in ticks if t <= lo]
        return before[-1:] + [t for t in ticks if t > lo]


def parse_schedule(expression: str, timezone: str | None) -> Schedule:
    """The schedule, or InvalidRequest naming the field (``schedule`` or ``timezone``) that is wrong."""
    text = ALIASES.get(expression.strip().lower(), expression.strip())
    if text.startswith("@"):
        raise InvalidRequest(f"schedule: unknown alias {expression!r}", field="schedule")
    if len(text.split()) != 5:
        raise InvalidRequest(
            "schedule: needs 5 fields (minute hour day-of-month month day-of-week) or an alias such as @daily",
            field="schedule",
        )
    zone_name = timezone if timezone is not None else DEFAULT_TIMEZONE
    zone = _zone(zone_name)
    try:
        # Parsing needs a start; a tick within 50 years of it shows the expression can fire at all.
        next(CronSim(text, datetime(2000, 1, 1, tzinfo=zone)))
    except CronSimError as exc:
        raise InvalidRequest(f"schedule: {exc} in {expression!r}", field="schedule") from None
    except (StopIteration, ValueError):
        raise InvalidRequest(f"schedule: {expression!r} never fires", field="schedule") from None
    return Schedule(" ".join(text.split()), zone, zone_name)


def _zone(name: str) -> tzinfo:
    if name == "UTC":
        return UTC
    if not _ZONE_NAME.fullmatch(name) or name in _NOT_ZONES or name not in _known_zones():
        raise InvalidRequest(
            f"timezone: unknown time zone {name!r} (an IANA name, e.g. Europe/Berlin)", field="timezone"
        )
    return ZoneInfo(name)


@functools.cache
def _known_zones() -> frozenset[str]:
    # Read once: it walks the zone database (the OS's, else the tzdata package).
    return frozenset(available_timezones())
