"""The adapters' packaging and their pure parts: ``import schedlock`` imports no scheduler, each adapter is an extra
of the client, and the tick a Celery beat stamps is the same whichever beat computes it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path

from celery import Celery
from celery.beat import ScheduleEntry
from celery.schedules import crontab, schedule

from schedlock.celery import due_tick, next_tick

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


def entry(plan: object, last_run_at: datetime) -> ScheduleEntry:
    app = Celery("ticks", set_as_current=False)
    app.conf.timezone = "UTC"
    return ScheduleEntry(name="job", task="job", schedule=plan, last_run_at=last_run_at, app=app)


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
