"""schedlock.django_cron: real ``runcrons`` loops (django-cron 0.6) as separate processes, each on a SQLite database of
its own, with SchedlockLock as the lock backend on one lock of a live server."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from schedlock import LockClient
from tests.support.schedulers import by_tick, in_order, nodes
from tests.support.servers import LiveServer, free_port


def test_two_nodes_run_each_tick_once_and_retry_a_failed_run_on_its_tick(
    live_server: LiveServer, tmp_path: Path
) -> None:
    with nodes("django_cron", live_server.url, tmp_path) as group:
        # Ticks of 2 s: the next runcrons, a fraction of a second later, still runs in the failed run's tick.
        a = group.start("a", mode="fail-first", every="2", run_for="60")
        b = group.start("b", mode="fail-first", every="2", run_for="60")
        group.wait_ready(a, b)
        group.wait_until("3 ticks run", lambda: len(group.runs()) >= 3)
        group.stop_all()
    done = by_tick(group.runs())
    assert all(len(ran) == 1 for ran in done.values()), done  # each tick once, though both nodes run runcrons
    failed = {r.tick for r in group.runs("fail")}
    # The next runcrons (on either node) ran a failed tick again; on a loaded machine one may come after its tick.
    assert failed & set(done), group.logs()
    assert "was completed at" in a.log + b.log  # the other node skipped a done tick
    assert "not run, see the schedlock log line above" in a.log + b.log  # in django-cron's own words


def test_a_killed_holders_lock_expires_and_a_later_tick_runs(live_server: LiveServer, tmp_path: Path) -> None:
    with nodes("django_cron", live_server.url, tmp_path) as group:
        a = group.start("a", mode="hang", at_most="3s", run_for="60")
        b = group.start("b", at_most="3s", run_for="60")
        group.wait_until("a run that hangs", lambda: [r for r in group.runs("start") if r.node == "a"])
        hung = next(r for r in group.runs("start") if r.node == "a")
        group.kill(a)
        group.wait_until("a later run on b", lambda: [r for r in group.runs() if r.at > hung.at])
        group.stop_all()
    later = [r for r in group.runs() if r.at > hung.at]
    assert later[0].at >= hung.at + timedelta(seconds=2), group.logs()  # not before the dead run's lease expired
    assert hung.tick not in by_tick(group.runs())
    assert "is held by" in b.log, b.log


def test_schedlock_down_fail_closed_skips_loudly_and_fail_open_runs(live_server: LiveServer, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with nodes("django_cron", live_server.url, tmp_path) as group:
        closed = group.start("closed", url=dead, run_for="1")
        opened = group.start("open", url=dead, run_for="1", on_unavailable="fail-open")
        assert closed.process.wait(timeout=60) == 0 and opened.process.wait(timeout=60) == 0, group.logs()
    assert {r.node for r in group.runs("start")} == {"open"}, group.logs()
    assert "ERROR schedlock.client skipped django-cron job" in closed.log and "unavailable" in closed.log
    assert "WARNING schedlock.client running django-cron job" in opened.log and "WITHOUT the lock" in opened.log


def test_a_late_trigger_of_an_old_tick_is_skipped_and_the_newer_tick_does_not_run_again(
    live_server: LiveServer, tmp_path: Path
) -> None:
    """Issue 43: a node whose clock is 3 s behind asks for each 2 s tick after the newer tick ran; schedlock answers
    a stale slot_done, and django-cron skips the job. No tick runs twice, none after a newer one."""
    with nodes("django_cron", live_server.url, tmp_path) as group:
        a = group.start("a", every="2", run_for="60")
        late = group.start("late", every="2", run_for="60", clock_behind_s=3)
        group.wait_ready(a, late)
        group.wait_until(
            "3 ticks run and 3 late ones skipped as stale",
            lambda: len(group.runs()) >= 3 and (len(set(stale_ticks(late.log))) >= 3 or not in_order(group.runs())),
        )
        group.stop_all()
    done = group.runs()
    assert in_order(done) and len(done) >= 3, (done, group.logs())
    assert len(set(stale_ticks(late.log))) >= 3
    assert "not run, see the schedlock log line above" in late.log
    with LockClient(live_server.url) as client:
        assert client.get(group.lock).last_completed_slot == done[-1].tick


def stale_ticks(log: str) -> list[str]:
    """The ticks a node skipped as stale, from schedlock.client's INFO lines."""
    return [line.split(" slot ", 1)[1].split()[0] for line in log.splitlines() if "is stale" in line]
