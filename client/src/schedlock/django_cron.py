"""django-cron: a lock backend on schedlock, so that ``runcrons`` on every node runs each job once.

In settings.py::

    DJANGO_CRON_LOCK_BACKEND = "schedlock.django_cron.SchedlockLock"
    SCHEDLOCK_URL = "http://schedlock:8000"  # else the SCHEDLOCK_URL environment variable

django-cron asks its lock backend before it looks at a job's schedule; the default backends lock in one cache or
one host's files. This one takes the lock named by the job's ``code`` in schedlock, so ``runcrons`` started by
cron on every node runs each job on one node at a time, and a job whose class sets ``SCHEDLOCK_ONCE_PER`` (a cron
schedule, in ``SCHEDLOCK_TIMEZONE``) or returns a tick from ``schedlock_slot()`` runs once per tick (docs/slots.md)
whatever the nodes' clocks or Django databases. A held lock or a done tick is django-cron's "lock found" (the job is
skipped; the message says who holds it). A job that raises releases with ``completed=false``: its tick stays open
for the next ``runcrons``. When schedlock is unreachable the job does not run and an ERROR says why
(fail-closed), unless ``SCHEDLOCK_ON_UNAVAILABLE = "fail-open"``. Install with
``pip install 'schedlock[django-cron]'``. docs/django-cron.md.
"""

from __future__ import annotations

import atexit
import os
import threading
from datetime import timedelta
from types import TracebackType
from typing import Any

from schedlock._adapters import Decision, require, take
from schedlock._durations import DurationLike
from schedlock._sync import LockClient

require(__name__, "django-cron", "django-cron")

from django.conf import settings  # noqa: E402
from django_cron.backends.lock.base import DjangoCronJobLock  # noqa: E402

__all__ = ["SchedlockLock"]

#: django-cron's own default for how long a lock lasts (its DJANGO_CRON_LOCK_TIME, in seconds).
DEFAULT_LOCK_TIME = 24 * 60 * 60

_clients: dict[tuple[int, str | None, str | None], LockClient] = {}
_guard = threading.Lock()


@atexit.register
def _close_clients() -> None:
    with _guard:
        for client in _clients.values():
            client.close()
        _clients.clear()


def _client() -> LockClient:
    url = getattr(settings, "SCHEDLOCK_URL", None)
    token = getattr(settings, "SCHEDLOCK_TOKEN", None)
    key = (os.getpid(), url, token)
    with _guard:
        if key not in _clients:
            _clients[key] = LockClient(url, token=token, timeout=getattr(settings, "SCHEDLOCK_TIMEOUT", None))
        return _clients[key]


class SchedlockLock(DjangoCronJobLock):  # type: ignore[misc]  # django-cron ships no type hints
    """``DJANGO_CRON_LOCK_BACKEND = "schedlock.django_cron.SchedlockLock"``.

    Settings (all optional): ``SCHEDLOCK_URL``, ``SCHEDLOCK_TOKEN``, ``SCHEDLOCK_TIMEOUT`` (seconds per request),
    ``SCHEDLOCK_NAME_PREFIX`` (before each job's code in the lock name), ``SCHEDLOCK_ON_UNAVAILABLE`` (default
    ``fail-closed``). On a job class: ``SCHEDLOCK_LOCK_AT_MOST_FOR`` (default: django-cron's
    ``DJANGO_CRON_LOCK_TIME``, 24 hours: how long a killed ``runcrons`` blocks the job), ``SCHEDLOCK_KEEP_ALIVE``
    (extend a long run every lock_at_most_for / 2), ``SCHEDLOCK_ONCE_PER`` and ``SCHEDLOCK_TIMEZONE`` (once per
    tick of that cron schedule, on the database's clock), or a ``schedlock_slot()`` classmethod returning a tick
    key of your own.
    """

    def __init__(self, cron_class: type[Any], silent: bool, *args: Any, **kwargs: Any) -> None:
        super().__init__(cron_class, silent, *args, **kwargs)
        self.cron_class = cron_class
        self.lock_name = getattr(settings, "SCHEDLOCK_NAME_PREFIX", "") + str(cron_class.code)
        at_most = getattr(cron_class, "SCHEDLOCK_LOCK_AT_MOST_FOR", None)
        if at_most is None:  # django-cron's own lock time, in seconds, of the class or the settings
            seconds: Any = getattr(cron_class, "DJANGO_CRON_LOCK_TIME", None)
            if seconds is None:
                seconds = getattr(settings, "DJANGO_CRON_LOCK_TIME", DEFAULT_LOCK_TIME)
            at_most = timedelta(seconds=float(seconds))
        self.lock_at_most_for: DurationLike = at_most
        self.decision: Decision | None = None

    def lock(self) -> bool:
        """Take the job's lock (for its tick): True to go on to django-cron's schedule check, False to skip."""
        slot = getattr(self.cron_class, "schedlock_slot", None)
        self.decision = take(
            _client(),
            self.lock_name,
            self.lock_at_most_for,
            job=f"django-cron job {self.job_code}",
            slot=str(slot()) if callable(slot) else None,
            once_per=getattr(self.cron_class, "SCHEDLOCK_ONCE_PER", None),
            once_per_timezone=getattr(self.cron_class, "SCHEDLOCK_TIMEZONE", None),
            keep_alive=bool(getattr(self.cron_class, "SCHEDLOCK_KEEP_ALIVE", False)),
            on_unavailable=getattr(settings, "SCHEDLOCK_ON_UNAVAILABLE", None),
        )
        return self.decision.run

    def release(self) -> None:
        self._release(None, None, None)

    def _release(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """End the lease as its context manager does: a job that raised releases with completed=false."""
        if self.decision is not None and self.decision.lease is not None:
            self.decision.lease.__exit__(exc_type, exc, tb)
        self.decision = None

    def __enter__(self) -> None:
        super().__enter__()
        if self.decision is not None and self.decision.lease is not None:
            self.decision.lease.__enter__()  # so that assert_locked() holds in the job

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self.parallel:
            self._release(exc_type, exc, tb)  # a job that raised leaves its tick open

    def lock_failed_message(self) -> str:
        return f"{self.job_name}: not run, see the schedlock log line above (lock {self.lock_name!r})"
