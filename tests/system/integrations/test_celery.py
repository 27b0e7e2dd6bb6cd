"""schedlock.celery: real Celery workers with embedded beats (``worker -B``), as separate processes, on kombu's
filesystem transport (no broker server) and one lock of a live server: two beats send every tick, workers take the
tick each message carries as the slot."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from schedlock import LockClient
from tests.support.schedulers import by_tick, nodes
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
