"""schedlock.celery: real Celery workers with embedded beats (``worker -B``), as separate processes, on kombu's
filesystem transport (no broker server) and one lock of a live server: two beats send every tick, workers take the
tick each message carries as the slot."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from schedlock import LockClient
from tests.support.schedulers import by_tick, in_order, nodes
from tests.support.servers import LiveServer, free_port


def test_two_beats_active_active_run_each_tick_once_and_retry_a_failed_run_on_its_tick(
    live_server: LiveServer, tmp_path: Path
) -> None:
    with nodes("celery", live_server.url, tmp_path) as group:
        # Ticks of 2 s: a retry comes well before the next tick, whose run would hold the lock (one tick at a time).
        a, b = group.start("a", mode="fail-first", every="2"), group.start("b", mode="fail-first", every="2")
        group.wait_ready(a, b)
        group.wait_until("3 ticks run", lambda: len(group.runs()) >= 3)
        group.stop_all()
    done = by_tick(group.runs())
    assert "unstamped" not in done, "every message a beat sent carries its tick"
    assert all(len(ran) == 1 for ran in done.values()), done  # each tick once, though both beats sent it
    failed = {r.tick for r in group.runs("fail")}
    # The retry (same headers, same tick) ran a failed tick again. The lock runs one tick at a time, so a retry that
    # a backlogged worker takes while another tick runs is skipped: not every failed tick need be among them.
    assert failed & set(done), group.logs()
    assert "Retry in 0s" in a.log + b.log
    assert "Sending due task" in a.log and "Sending due task" in b.log  # both beats send
    skipped = a.log.count("skipped celery task") + b.log.count("skipped celery task")
    ignored = a.log.count("] ignored") + b.log.count("] ignored")
    # The other beat's message for a tick: Ignore (or, when a worker takes it after the next tick, expired).
    assert skipped >= 1 and ignored == skipped, group.logs()


def test_keep_alive_holds_a_long_run_and_a_killed_workers_lock_expires(live_server: LiveServer, tmp_path: Path) -> None:
    with nodes("celery", live_server.url, tmp_path) as group, LockClient(live_server.url) as client:
        # lock_at_most_for 3 s, extended every 1.5 s while the run lives (the nodes lower keep-alive's 30 s floor)
        a = group.start("a", mode="hang", at_most="3s", keep_alive="1")
        b = group.start("b", at_most="3s", keep_alive="1")
        group.wait_until("a run that hangs", lambda: [r for r in group.runs("start") if r.node == "a"])
        hung = next(r for r in group.runs("start") if r.node == "a")
        time.sleep(4.5)  # 1.5 lock_at_most_for: without keep-alive, b would run a later tick meanwhile
        assert not [r for r in group.runs() if r.at > hung.at], group.logs()
        assert client.get(group.lock).held, "keep-alive extends the hanging run's lease"
        killed_at = datetime.now(UTC)
        group.kill(a)
        group.wait_until("a later run on b", lambda: [r for r in group.runs() if r.at > hung.at])
        group.stop_all()
    later = [r for r in group.runs() if r.at > hung.at]
    assert later[0].at >= killed_at - timedelta(seconds=1), group.logs()  # once the dead run's extensions stopped
    assert hung.tick not in by_tick(group.runs())
    assert "is held by" in b.log, b.log  # messages taken while the dead worker's lease lived were skipped


def test_schedlock_down_fail_closed_skips_loudly_and_fail_open_runs(live_server: LiveServer, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with nodes("celery", live_server.url, tmp_path) as group:
        closed = group.start("closed", url=dead, queue=str(tmp_path / "closed-queue"))
        opened = group.start("open", url=dead, queue=str(tmp_path / "open-queue"), on_unavailable="fail-open")
        group.wait_until("a fail-open run", lambda: group.runs())
        group.wait_until("a fail-closed skip", lambda: "lock service unavailable" in closed.log)
        group.stop_all()
    assert {r.node for r in group.runs("start")} == {"open"}, group.logs()
    assert "ERROR schedlock.client skipped celery task" in closed.log or "ERROR" in closed.log, closed.log
    assert "running celery task" in opened.log and "WITHOUT the lock" in opened.log, opened.log


@pytest.mark.parametrize("expiry", ["next-tick", "an-hour"])
def test_a_late_beats_message_for_an_old_tick_is_skipped_and_the_newer_tick_does_not_run_again(
    live_server: LiveServer, tmp_path: Path, expiry: str
) -> None:
    """Issue 43: a beat whose clock is 7 s behind sends each 2 s tick's message after the newer tick ran (7 s: more
    than three ticks, so the newer one has completed however late the worker takes its own beat's messages on a
    loaded machine; at 3 s a late message could come before the newer tick was done, and meet its own tick done
    rather than a newer one, which is a skip too, but not the stale one this test is about). By default
    the message has expired by then (at the entry's next tick), and the worker drops it unrun; with an expiry of the
    entry's own (an hour), it reaches schedlock, whose answer is a stale slot_done: skipped. Either way no tick runs
    twice and none runs after a newer one (before: 4 of 6 tries ran a tick twice)."""
    own = "3600" if expiry == "an-hour" else ""  # empty: the entry's default expiry
    with nodes("celery", live_server.url, tmp_path) as group:
        # Both beats' entries carry the variant's expiry: with the default one, a worker slow to take even its own
        # beat's message drops it too, at the next tick (as it should), and only the late beat's are counted below.
        a = group.start("a", every="2", expires=own)
        late = group.start("late", every="2", beat_only=True, clock_behind_s=7, expires=own)
        group.wait_ready(a, late)
        skipped = "expired at" if expiry == "next-tick" else "is stale, older than its last completed slot"
        group.wait_until(
            "3 late messages skipped, 3 ticks run", lambda: a.log.count(skipped) >= 3 and len(group.runs()) >= 3
        )
        group.stop_all()
    done = group.runs()
    assert in_order(done), (done, group.logs())
    assert len(done) >= 3
    assert late.log.count("Sending due task") >= 3  # the late beat sent every tick, each late
    if expiry == "next-tick":
        # Celery's own line for each message it dropped, and ours: as many
        assert a.log.count("Discarding revoked task") == a.log.count("expired at"), a.log
    else:
        assert "Discarding revoked task" not in a.log, a.log
    with LockClient(live_server.url) as client:
        assert client.get(group.lock).last_completed_slot == done[-1].tick
