"""Celery: a Task base class that runs each task under its lock (worker side), and beats that run active-active.

>>> @app.task(base=SchedlockTask)
... def nightly_report() -> None: ...
>>> app.conf.beat_scheduler = "schedlock.celery:SlotScheduler"

:class:`SchedlockTask` takes the task's lock when a worker starts executing it, with keep-alive, and raises
``celery.exceptions.Ignore`` when another worker holds it or its tick is done (logged at INFO), so the message is
acknowledged and neither retried nor failed. A message sent by :class:`SlotScheduler` carries the schedule tick
it was due for (the ``schedlock_slot`` header), and the worker takes that tick as the lock's slot (docs/slots.md):
run several beats with the same schedule and each tick runs once, whichever beat's message a worker takes first;
no beat leader election is needed. A task that raises (a retry too) releases with ``completed=false``: its tick
stays open, and its retry (which keeps the header) or another beat's message runs it. When schedlock is unreachable
the task does not run and an ERROR says why (fail-closed), unless ``schedlock_on_unavailable = "fail-open"``.
Install with ``pip install 'schedlock[celery]'``. docs/celery.md.
"""

from __future__ import annotations

import atexit
import copy
import logging
import math
import os
import threading
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from schedlock._adapters import require, slot_of, take
from schedlock._durations import DurationLike
from schedlock._policy import OnUnavailable, default_holder
from schedlock._sync import LockClient

require(__name__, "celery", "celery", major=5)

from celery import Task  # noqa: E402
from celery.beat import PersistentScheduler, ScheduleEntry, Scheduler  # noqa: E402
from celery.exceptions import Ignore  # noqa: E402
from celery.schedules import crontab, schedule  # noqa: E402
from celery.signals import task_revoked  # noqa: E402

__all__ = [
    "SLOT_HEADER",
    "MemorySlotScheduler",
    "SchedlockTask",
    "SlotScheduler",
    "SlotSchedulerMixin",
    "due_tick",
    "expired_messages",
    "next_tick",
]

#: The message header in which a beat says which tick a message is for; workers take it as the slot.
SLOT_HEADER = "schedlock_slot"
#: A crontab entry's ticks are walked from its last run to now; a beat down for longer than this many ticks
#: stamps the tick this many after its last run (and a log line says so).
MAX_TICKS_WALKED = 10_000

logger = logging.getLogger("schedlock.celery")
_clients: dict[tuple[int, str | None, str | None], LockClient] = {}
_clients_guard = threading.Lock()


@atexit.register
def _close_clients() -> None:
    with _clients_guard:
        for client in _clients.values():
            client.close()
        _clients.clear()


def _client_for(task: Task) -> LockClient:
    """One client per worker process (a prefork child makes its own), from ``schedlock_url``/``schedlock_token``
    in the app's configuration, else SCHEDLOCK_URL and SCHEDLOCK_TOKEN."""
    if task.schedlock_client is not None:
        return task.schedlock_client  # type: ignore[no-any-return]
    url, token = task.app.conf.get("schedlock_url"), task.app.conf.get("schedlock_token")
    key = (os.getpid(), url, token)
    with _clients_guard:
        if key not in _clients:
            _clients[key] = LockClient(url, token=token)
        return _clients[key]


class SchedlockTask(Task):  # type: ignore[misc]  # Celery ships no type hints
    """A Task that runs only under its schedlock lock: ``@app.task(base=SchedlockTask)``.

    Set these on the task (``@app.task(base=SchedlockTask, schedlock_lock_at_most_for="1h")``) or a subclass:
    ``schedlock_name`` (default: the task's name), ``schedlock_lock_at_most_for`` (default 10 minutes: how long
    a killed worker blocks the task), ``schedlock_keep_alive`` (default True: extended every lock_at_most_for / 2,
    which must then be >= 30s), ``schedlock_on_unavailable`` (default: the client's, fail-closed) and
    ``schedlock_client`` (default: one per process, see the module). The tick comes from the message's
    ``schedlock_slot`` header, which :class:`SlotScheduler` sets; without one the lock is a plain mutex.
    """

    schedlock_name: ClassVar[str | None] = None
    schedlock_lock_at_most_for: ClassVar[DurationLike] = timedelta(minutes=10)
    schedlock_keep_alive: ClassVar[bool] = True
    schedlock_on_unavailable: ClassVar[OnUnavailable | str | None] = None
    schedlock_client: ClassVar[LockClient | None] = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # A worker puts a message's custom headers on the request; apply() (eager runs) keeps them in .headers.
        slot = self.request.get(SLOT_HEADER) or (self.request.headers or {}).get(SLOT_HEADER)
        decision = take(
            _client_for(self),
            self.schedlock_name or self.name,
            self.schedlock_lock_at_most_for,
            job=f"celery task {self.name}[{self.request.id}]",
            slot=str(slot) if slot else None,
            keep_alive=self.schedlock_keep_alive,
            holder=default_holder(f"celery {self.name}"),
            on_unavailable=self.schedlock_on_unavailable,
        )
        if not decision.run:
            raise Ignore()  # acknowledged, not retried, not a failure: another worker runs it, or nobody may
        if decision.lease is None:  # fail-open
            return super().__call__(*args, **kwargs)
        with decision.lease:
            return super().__call__(*args, **kwargs)


def next_tick(entry: ScheduleEntry, tick: datetime) -> datetime | None:
    """The entry's tick after ``tick``: when a message sent for ``tick`` expires."""
    plan = entry.schedule
    if isinstance(plan, crontab):
        start, delta, _now = plan.remaining_delta(tick)
        return start + delta  # type: ignore[no-any-return]
    if isinstance(plan, schedule):
        return tick + plan.run_every  # type: ignore[no-any-return]
    return None


def due_tick(entry: ScheduleEntry, now: datetime | None = None) -> datetime | None:
    """The tick a due entry is sent for, the same on every beat: None for schedules that have no fixed ticks.

    A crontab's tick is its latest one at or before now (walked from the entry's last run with the crontab's own
    arithmetic). An interval (``schedule(timedelta(seconds=30))``, or a number of seconds) has no ticks of its own,
    since each beat counts it from its own start, so its ticks are aligned to the Unix epoch: every beat sending an
    entry within the same 30 seconds sends it for the same tick.
    """
    now = now or datetime.now(UTC)
    plan = entry.schedule
    if isinstance(plan, crontab):
        tick, at = None, entry.last_run_at
        for _ in range(MAX_TICKS_WALKED):
            start, delta, _now = plan.remaining_delta(at)
            following = start + delta
            if following > now:
                return tick
            tick = at = following
        logger.warning("%s: more than %d ticks since its last run; sending it for %s", entry.name, MAX_TICKS_WALKED, at)
        return tick
    if isinstance(plan, schedule) and plan.run_every.total_seconds() > 0:
        every = plan.run_every.total_seconds()
        return datetime.fromtimestamp(math.floor(now.timestamp() / every) * every, UTC)
    return None


class SlotSchedulerMixin:
    """Stamps each message a beat sends with the tick it is due for (``schedlock_slot``); mix it into any
    scheduler class (before it): ``class DatabaseSlotScheduler(SlotSchedulerMixin, DatabaseScheduler)``.

    Unless the entry sets ``expires``, the message expires when the entry's next tick is due: a worker that receives
    it later drops it (Celery revokes an expired message before it runs: state REVOKED, logged at INFO as
    "Discarding revoked task"; this module counts it, :func:`expired_messages`, and logs it at DEBUG). A late message
    that still reaches schedlock finds its tick done or stale (docs/slots.md); the expiry spares the round trip.
    """

    def apply_async(self, entry: ScheduleEntry, producer: Any = None, advance: bool = True, **kwargs: Any) -> Any:
        tick = due_tick(entry)  # before the entry's last run advances
        if tick is None:
            return super().apply_async(entry, producer, advance, **kwargs)  # type: ignore[misc]
        # The schedule keeps the entry that reserve() makes from the one it is given: advance the entry as it is,
        # and send a stamped copy, so that no tick's header or expiry is ever stored with the entry.
        if advance:
            entry = self.reserve(entry)  # type: ignore[attr-defined]
        stamped = copy.copy(entry)
        options = {**entry.options, "headers": {**entry.options.get("headers", {}), SLOT_HEADER: slot_of(tick)}}
        if options.get("expires") is None and (expires := next_tick(entry, tick)) is not None:
            options["expires"] = expires.astimezone(UTC)
        stamped.options = options
        return super().apply_async(stamped, producer, False, **kwargs)  # type: ignore[misc]


_expired = 0
_expired_guard = threading.Lock()


def expired_messages() -> int:
    """How many messages for a tick (a ``schedlock_slot`` header) this worker process dropped because they expired
    (the entry's next tick was due before a worker took them): late triggers, never run."""
    return _expired


@task_revoked.connect(weak=False)  # type: ignore[untyped-decorator]  # Celery ships no type hints
def _count_expired(request: Any = None, expired: bool = False, **_: Any) -> None:
    """Celery's ``task_revoked`` signal, sent by the worker that drops an expired message: count and log ours."""
    global _expired
    if not expired or request is None:
        return
    slot = request.get(SLOT_HEADER) or (request.get("headers") or {}).get(SLOT_HEADER)
    if not slot:
        return
    with _expired_guard:
        _expired += 1
        count = _expired
    logger.debug(
        "dropped celery task %s[%s]: its message for tick %s expired at %s, when the next tick was due "
        "(%d expired messages dropped by this process)",
        *(request.get("task"), request.get("id"), slot, request.get("expires"), count),
    )


class SlotScheduler(SlotSchedulerMixin, PersistentScheduler):  # type: ignore[misc]
    """Celery's default beat scheduler (its state in ``celerybeat-schedule``), stamping ticks:
    ``beat_scheduler = "schedlock.celery:SlotScheduler"``."""


class MemorySlotScheduler(SlotSchedulerMixin, Scheduler):  # type: ignore[misc]
    """A beat scheduler that keeps no state file, stamping ticks: each beat starts its schedule afresh, which
    active-active beats can afford, since the slots, not the beats, say which ticks ran."""
