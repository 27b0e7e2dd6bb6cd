"""Implicit registration (docs/jobs.md): an acquire that carries a ``schedule`` registers its lock name as a job with
that schedule, and updates it when the schedule changes.

One statement per name and schedule per process, not one per acquire: what this process registered is remembered,
so the lock's hot path pays nothing after the first acquire of a name. A failure is logged and never fails the
acquire, which has already taken the lock by then.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from app.errors import SchedlockError
from app.jobs.model import DEFAULT_GRACE
from app.jobs.store import JobStore
from app.schedules.cron import DEFAULT_TIMEZONE, parse_schedule

logger = logging.getLogger("schedlock.jobs")
#: Names remembered at most; past it the memory starts again (at worst one more statement per name).
REMEMBERED = 10_000


class Registrar:
    """Registers the jobs acquires carry schedules for, over ``store``, new ones with ``grace``."""

    def __init__(self, store: JobStore, grace: timedelta = DEFAULT_GRACE) -> None:
        self.store = store
        self.grace = grace
        self._known: dict[str, tuple[str, str]] = {}

    async def saw(self, name: str, schedule: str, timezone: str | None) -> None:
        """An acquire of ``name`` with this (valid) schedule succeeded."""
        zone = timezone or DEFAULT_TIMEZONE
        expression = parse_schedule(schedule, zone).expression
        if self._known.get(name) == (expression, zone):
            return
        try:
            await self.store.register(name, expression, zone, self.grace)
        except SchedlockError as exc:
            logger.warning("job %r not registered from its acquire: %s", name, exc.message)
            return
        if len(self._known) >= REMEMBERED:
            self._known.clear()
        self._known[name] = (expression, zone)
