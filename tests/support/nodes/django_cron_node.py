"""django-cron's ``runcrons`` with SchedlockLock, every 0.2 s for NODE_RUN_FOR seconds, on a SQLite database of
this node's own (so that django-cron's own run log cannot coordinate the nodes: only the lock does). The job is
django_cron_jobs.RecordJob."""

from __future__ import annotations

import os
import time
from pathlib import Path

import django
from django.conf import settings
from django.core.management import call_command

from tests.support.nodes import common


def main() -> None:
    common.setup_logging()
    settings.configure(
        INSTALLED_APPS=["django_cron"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["NODE_DB"]}},
        USE_TZ=True,
        DJANGO_CRON_LOCK_BACKEND="schedlock.django_cron.SchedlockLock",
        CRON_CLASSES=["tests.support.nodes.django_cron_jobs.RecordJob"],
        SCHEDLOCK_ON_UNAVAILABLE=common.ON_UNAVAILABLE,
        SCHEDLOCK_TIMEOUT=3,
        LOGGING_CONFIG=None,
    )
    django.setup()
    call_command("migrate", verbosity=0)
    common.record("-", "ready")
    deadline = time.monotonic() + float(os.environ.get("NODE_RUN_FOR", "5"))
    while time.monotonic() < deadline:
        call_command("runcrons")
        time.sleep(0.2)
    Path(os.environ["NODE_DB"]).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
