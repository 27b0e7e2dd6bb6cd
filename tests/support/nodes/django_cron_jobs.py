"""The django-cron job of django_cron_node.py (imported by ``runcrons`` once Django is set up)."""

from __future__ import annotations

import time

from django_cron import CronJobBase, Schedule

from schedlock import assert_locked
from tests.support.nodes import common


def tick() -> str:
    """The current NODE_EVERY seconds of the epoch, as a slot key."""
    start = int(time.time()) // common.EVERY * common.EVERY
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(start))


class RecordJob(CronJobBase):  # type: ignore[misc]
    code = common.LOCK_NAME
    schedule = Schedule(run_every_mins=0)  # due at every runcrons: the tick is schedlock's to decide
    SCHEDLOCK_LOCK_AT_MOST_FOR = common.LOCK_AT_MOST_FOR
    SCHEDLOCK_KEEP_ALIVE = common.KEEP_ALIVE

    @classmethod
    def schedlock_slot(cls) -> str:
        return tick()

    def do(self) -> str:
        if common.ON_UNAVAILABLE != "fail-open":
            assert_locked(common.LOCK_NAME)
        common.job(tick())
        return "recorded"
