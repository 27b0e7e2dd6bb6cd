"""schedlock.apscheduler: real APScheduler 3 schedulers, as separate processes, on one lock of a live server."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.background import BackgroundScheduler

from schedlock import LockClient
from schedlock.apscheduler import SchedlockExecutor
from tests.support.schedulers import by_tick, in_order, nodes
from tests.support.servers import LiveServer, free_port


def test_two_schedulers_run_each_tick_once(live_server: LiveServer, tmp_path: Path) -> None:
    with nodes("apscheduler", live_server.url, tmp_path) as group:
        a, b = group.start("a", run_for="30"), group.start("b", run_for="30")
        group.wait_ready(a, b)
        group.wait_until("4 ticks run", lambda: len(group.runs()) >= 4)
        group.stop_all()
    done = by_tick(group.runs())
    assert all(len(ran) == 1 for ran in done.values()), done  # each tick once, on one scheduler
    assert len(by_tick(group.runs("start"))) == len(done)  # and no run that did not finish
    skips = a.log.count("skipped job") + b.log.count("skipped job")
    # The other scheduler skips the ticks (those before it started excepted): held, or already done.
    assert skips >= 2, f"the other scheduler skips:\n{group.logs()}"


def test_a_failed_run_leaves_its_tick_open_for_another_scheduler(live_server: LiveServer, tmp_path: Path) -> None:
    tick = (datetime.now(UTC) + timedelta(seconds=1)).replace(microsecond=0)
    with nodes("apscheduler", live_server.url, tmp_path) as group:
        for name in ("a", "b", "c"):  # one after the other, each its own scheduler run for the same run time
            node = group.start(name, at=tick.isoformat(), mode="fail-first", run_for="20")
            assert node.process.wait(timeout=30) == 0, node.log
    events = [(r.node, r.event) for r in group.records() if r.tick != "-"]
    assert events == [("a", "start"), ("a", "fail"), ("b", "start"), ("b", "done")], group.logs()
    assert "was completed at" in group.started[2].log, group.logs()  # c finds the tick done and skips it
    with LockClient(live_server.url) as client:
        assert client.get(group.lock).last_completed_slot == tick.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def test_a_killed_holders_lock_expires_and_a_later_tick_runs(live_server: LiveServer, tmp_path: Path) -> None:
    with nodes("apscheduler", live_server.url, tmp_path) as group:
        a = group.start("a", mode="hang", at_most="3s", run_for="60")
        group.wait_until("a run that hangs", lambda: group.runs("start"))
        hung = group.runs("start")[0]
        b = group.start("b", at_most="3s", run_for="60")
        group.wait_ready(b)
        group.kill(a)
        group.wait_until("a run on b", lambda: group.runs())
        group.stop_all()
    first = group.runs()[0]
    assert first.node == "b" and first.at >= hung.at + timedelta(seconds=2), group.logs()  # not before the expiry
    assert hung.tick not in by_tick(group.runs())  # the killed run's tick never completed
    assert "is held by" in b.log, b.log  # b's triggers while the dead holder's lease lived were skipped


def test_schedlock_down_fail_closed_skips_loudly_and_fail_open_runs(live_server: LiveServer, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    tick = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    with nodes("apscheduler", live_server.url, tmp_path) as group:
        closed = group.start("closed", url=dead, at=tick, run_for="20")
        opened = group.start("open", url=dead, at=tick, run_for="20", on_unavailable="fail-open")
        assert closed.process.wait(timeout=30) == 0 and opened.process.wait(timeout=30) == 0, group.logs()
    assert [r.node for r in group.runs()] == ["open"], group.logs()
    assert "ERROR schedlock.client skipped job" in closed.log and "lock service unavailable" in closed.log
    assert "WARNING schedlock.client running job" in opened.log and "WITHOUT the lock" in opened.log


def test_a_late_trigger_of_an_old_tick_is_skipped_and_the_newer_tick_does_not_run_again(
    live_server: LiveServer, tmp_path: Path
) -> None:
    """Issue 43: on a slow node (its executor's one thread held 6 s by another job), the run for a 2 s tick starts
    after the newer tick ran elsewhere, with the run time it was due at; schedlock answers a stale slot_done, and it
    skips. No tick runs twice, none after a newer one."""
    with nodes("apscheduler", live_server.url, tmp_path) as group:
        a = group.start("a", every="2", run_for="60")
        group.wait_ready(a)
        slow = group.start("slow", every="2", run_for="60", max_workers="1", hog_s="6", misfire_grace="30")
        group.wait_until(
            "the slow node's late run decided", lambda: "is stale" in slow.log or not in_order(group.runs())
        )
        if "is stale" in slow.log:
            group.wait_until("a tick run after it", lambda: group.runs()[-1].tick > stale_tick(slow.log))
        group.stop_all()
    done = group.runs()
    assert in_order(done) and len(done) >= 3, (done, group.logs())
    # (The slow node may have run a tick before its executor was held, in its turn.)
    with LockClient(live_server.url) as client:
        assert client.get(group.lock).last_completed_slot == done[-1].tick


def stale_tick(log: str) -> str:
    """The first tick a node skipped as stale, from schedlock.client's INFO line."""
    line = next(line for line in log.splitlines() if "is stale" in line)
    return line.split(" slot ", 1)[1].split()[0]


def test_the_events_of_a_run_name_the_job_store_it_came_from(live_server: LiveServer, name: str) -> None:
    """APScheduler's events carry the alias of the job's store; the executor learns it from the scheduler's
    EVENT_JOB_SUBMITTED (public), not from a private attribute of the job."""
    seen: list[JobExecutionEvent] = []
    done = threading.Event()

    def executed(event: JobExecutionEvent) -> None:
        seen.append(event)
        done.set()

    with LockClient(live_server.url) as client:
        scheduler = BackgroundScheduler(
            executors={"default": SchedlockExecutor(client, "1m")},
            jobstores={"default": MemoryJobStore(), "second": MemoryJobStore()},
            timezone=UTC,
        )
        scheduler.add_listener(executed, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED)
        scheduler.start()
        try:
            scheduler.add_job(lambda: None, "date", run_date=datetime.now(UTC), id=name, jobstore="second")
            assert done.wait(timeout=60), "the job never ran"
        finally:
            scheduler.shutdown()
    assert [(e.code, e.job_id, e.jobstore) for e in seen] == [(EVENT_JOB_EXECUTED, name, "second")]
