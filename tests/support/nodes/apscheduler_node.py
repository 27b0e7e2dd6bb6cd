"""An APScheduler 3 BackgroundScheduler with SchedlockExecutor, for NODE_RUN_FOR seconds: the job every NODE_EVERY
seconds (a cron trigger, so that every node computes the same run times), or once at NODE_AT (a date trigger).
NODE_MAX_WORKERS (the executor's threads), NODE_HOG_S (a job that holds a thread that long, once) and
NODE_MISFIRE_GRACE make a slow node, whose runs start late."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.background import BackgroundScheduler

from schedlock import LockClient, assert_locked
from schedlock.apscheduler import SchedlockExecutor, scheduled_run_time
from tests.support.nodes import common


def job() -> None:
    if common.ON_UNAVAILABLE != "fail-open":
        assert_locked(common.LOCK_NAME)  # the executor runs the job under the tick's lease
    run_time = scheduled_run_time()
    assert run_time is not None
    common.job(run_time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"))


def main() -> None:
    common.setup_logging()
    executor = SchedlockExecutor(
        LockClient(timeout=3),
        common.LOCK_AT_MOST_FOR,
        keep_alive=common.KEEP_ALIVE,
        on_unavailable=common.ON_UNAVAILABLE,
        max_workers=int(os.environ.get("NODE_MAX_WORKERS", "10")),
    )
    scheduler = BackgroundScheduler(executors={"default": executor}, timezone="UTC")
    if "NODE_HOG_S" in os.environ:
        # A slow node: a job of its own holds the executor's only thread for NODE_HOG_S seconds from half a second
        # before a tick, so the job's run for that tick starts that much late, with the run time it was due at.
        start = datetime.now(UTC).replace(microsecond=0)
        hog_at = start + timedelta(seconds=common.EVERY + common.EVERY - start.second % common.EVERY, milliseconds=-500)
        seconds = float(os.environ["NODE_HOG_S"])
        scheduler.add_job(time.sleep, "date", run_date=hog_at, args=[seconds], id=f"{common.LOCK_NAME}-hog")
    if "NODE_AT" in os.environ:
        at = datetime.fromisoformat(os.environ["NODE_AT"])
        scheduler.add_job(job, "date", run_date=at, id=common.LOCK_NAME, misfire_grace_time=60)
    else:
        grace = int(os.environ.get("NODE_MISFIRE_GRACE", "5"))
        scheduler.add_job(job, "cron", second=f"*/{common.EVERY}", id=common.LOCK_NAME, misfire_grace_time=grace)
    scheduler.start()
    common.record("-", "ready")
    deadline = time.monotonic() + float(os.environ.get("NODE_RUN_FOR", "5"))
    while time.monotonic() < deadline and scheduler.get_jobs():  # a date trigger's job goes once it was submitted
        time.sleep(0.05)
    scheduler.shutdown(wait="NODE_AT" in os.environ)  # and its run ends before the node does


if __name__ == "__main__":
    main()
