"""The adapters' packaging and their pure parts: ``import schedlock`` imports no scheduler, each adapter is an extra
of the client, and the tick a Celery beat stamps is the same whichever beat computes it."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import tomllib
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from celery import Celery
from celery.beat import ScheduleEntry
from celery.contrib.testing.worker import start_worker
from celery.schedules import crontab, schedule
from celery.signals import before_task_publish

from schedlock.celery import SLOT_HEADER, MemorySlotScheduler, due_tick, expired_messages, next_tick

ROOT = Path(__file__).parent.parent.parent
SCHEDULERS = ("apscheduler", "celery", "django", "django_cron", "kombu")


def test_import_schedlock_imports_no_scheduler() -> None:
    probe = f"import sys, schedlock; print(sorted(m for m in sys.modules if m.split('.')[0] in {SCHEDULERS!r}))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_each_adapter_is_an_extra_of_the_client() -> None:
    project = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    assert set(project["optional-dependencies"]) == {"apscheduler", "celery", "django-cron"}
    for module in ("apscheduler", "celery", "django_cron"):
        assert (ROOT / "client" / "src" / "schedlock" / f"{module}.py").exists()


def entry(
    plan: object, last_run_at: datetime, name: str = "job", options: dict[str, Any] | None = None
) -> ScheduleEntry:
    app = Celery("ticks", set_as_current=False)
    app.conf.timezone = "UTC"
    return ScheduleEntry(
        name=name, task="expiry.job", schedule=plan, last_run_at=last_run_at, options=options or {}, app=app
    )


def test_an_interval_ticks_on_the_epoch_whatever_a_beats_last_run() -> None:
    now = datetime(2026, 12, 1, 20, 0, 7, 300000, tzinfo=UTC)
    for last_run in (now - timedelta(seconds=1.9), now - timedelta(seconds=4.2)):  # two beats, started apart
        assert due_tick(entry(schedule(timedelta(seconds=5)), last_run), now) == now.replace(second=5, microsecond=0)


def test_a_crontab_ticks_at_its_latest_tick_at_or_before_now() -> None:
    now = datetime(2026, 12, 1, 20, 17, 2, tzinfo=UTC)
    every_quarter = crontab(minute="*/15")
    for last_run in (datetime(2026, 12, 1, 20, 0, 0, 5000, tzinfo=UTC), now - timedelta(hours=5)):
        assert due_tick(entry(every_quarter, last_run), now) == datetime(2026, 12, 1, 20, 15, tzinfo=UTC)
    # Not yet due (a beat's last run is the latest tick): no tick since then to stamp.
    assert due_tick(entry(every_quarter, datetime(2026, 12, 1, 20, 15, tzinfo=UTC)), now) is None


def test_a_ticks_message_expires_at_the_next_tick() -> None:
    tick = datetime(2026, 12, 1, 20, 15, tzinfo=UTC)
    assert next_tick(entry(crontab(minute="*/15"), tick), tick) == tick + timedelta(minutes=15)
    assert next_tick(entry(schedule(timedelta(seconds=5)), tick), tick) == tick + timedelta(seconds=5)


def memory_app() -> Celery:
    """A Celery app on kombu's in-memory broker, with a queue of its own: that broker's queues are shared by the whole
    process, so a message one test left unconsumed must not reach the next test's worker."""
    app = Celery("expiry", broker="memory://", backend="cache+memory://", set_as_current=False)
    app.conf.timezone = "UTC"
    app.conf.task_default_queue = f"expiry-{uuid.uuid4().hex}"
    return app


def test_a_beats_message_expires_at_the_entrys_next_tick_and_the_entry_keeps_its_options() -> None:
    """Issue 43: the messages carried no expiry (11 of 11). Each carries its tick and expires at the next one; the
    schedule's stored entry keeps the options it was given (no tick's header or expiry stored with it), and an
    entry's own expires wins."""
    app = memory_app()

    @app.task(name="expiry.job")  # type: ignore[untyped-decorator]  # Celery ships no type hints
    def job() -> None: ...

    published: list[dict[str, Any]] = []

    def on_publish(headers: dict[str, Any] | None = None, **_: Any) -> None:
        published.append(dict(headers or {}))

    before_task_publish.connect(on_publish, weak=False)
    try:
        beat = MemorySlotScheduler(app=app, lazy=True)
        now = datetime.now(UTC)
        own = {"headers": {"team": "reports"}}
        for name, options in (("job", own), ("own-expiry", {"expires": 3600})):
            beat.schedule[name] = entry(schedule(timedelta(seconds=5)), now - timedelta(seconds=6), name, options)
            with app.producer_or_acquire() as producer:
                beat.apply_async(beat.schedule[name], producer=producer)
    finally:
        before_task_publish.disconnect(on_publish)
    stamped, own_expiry = published
    tick = datetime.fromisoformat(stamped[SLOT_HEADER].replace("Z", "+00:00"))
    assert datetime.fromisoformat(stamped["expires"]) == tick + timedelta(seconds=5)
    assert stamped["team"] == "reports"
    assert beat.schedule["job"].options == {"headers": {"team": "reports"}}  # advanced, unstamped
    assert beat.schedule["job"].last_run_at > now - timedelta(seconds=6)
    assert SLOT_HEADER in own_expiry
    assert datetime.fromisoformat(own_expiry["expires"]) > tick + timedelta(minutes=59)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def test_a_worker_drops_an_expired_ticks_message_counts_and_logs_it() -> None:
    """A message for a tick whose next tick is due when a worker takes it is dropped unrun (Celery revokes it), and
    schedlock.celery counts it and logs it at DEBUG; an expired message of no tick is not counted."""
    app = memory_app()
    ran: list[str] = []

    @app.task(name="expiry.record")  # type: ignore[untyped-decorator]  # Celery ships no type hints
    def job() -> None:
        ran.append("ran")

    before = expired_messages()
    expires = datetime.now(UTC) + timedelta(milliseconds=300)
    job.apply_async(headers={SLOT_HEADER: "2026-12-01T20:15:00.000Z"}, expires=expires)
    job.apply_async(expires=expires)  # not a tick's
    while datetime.now(UTC) <= expires:  # both messages wait in the queue until they expired
        time.sleep(0.05)
    # The worker takes the root logger over (as `celery worker` does): listen on the adapter's own logger, and give
    # the root logger its level back after (else every later test's WARNING records are dropped).
    root_level = logging.getLogger().level
    logger, lines = logging.getLogger("schedlock.celery"), Lines()
    level = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
            job.apply_async()  # a message after them, to know they were taken
            deadline = time.monotonic() + 30
            while not ran and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
        logging.getLogger().setLevel(root_level)
    assert ran == ["ran"]  # only the last message ran
    assert expired_messages() - before == 1
    assert len(lines.lines) == 1, lines.lines
    assert lines.lines[0].startswith("DEBUG dropped celery task expiry.record[")
    assert "its message for tick 2026-12-01T20:15:00.000Z expired at" in lines.lines[0]
