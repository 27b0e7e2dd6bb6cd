"""The tick computation on its own (app.jobs.ticks): every tick state and job state from runs and a now, the tick
windows with the early allowance, and the schedules' ticks (intervals from the epoch, cron across DST)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from app.errors import InvalidRequest
from app.history.runs import Run
from app.jobs.model import Job, expected, parse_grace
from app.jobs.ticks import JobRun, allowance, decide, due_ticks, job_state

T0 = datetime(2026, 12, 1, 3, 0, 0)
STEP = timedelta(minutes=1)
GRACE = timedelta(seconds=20)
EARLY = timedelta(seconds=1)
TICKS = [T0 + STEP * i for i in range(3)]
_tokens = iter(range(1, 10_000))


def run(at: datetime, outcome: str = "released", *, failed: bool = False, skipped: int = 0) -> JobRun:
    ended = None if outcome == "running" else at + timedelta(seconds=5)
    r = Run("job", next(_tokens), "host", None, at, at + timedelta(minutes=5), ended, outcome, skipped, None, None)
    return JobRun(r, failed)


def job(paused: bool = False) -> Job:
    return Job("job", "PT1M", "UTC", GRACE, None, paused, T0, T0, T0)


def states(runs: list[JobRun], now: datetime) -> list[str]:
    return [t.state for t in decide(TICKS, TICKS[-1] + STEP, runs, now, GRACE, EARLY)]


def test_each_tick_state() -> None:
    now = TICKS[-1] + timedelta(seconds=5)  # the last tick is due, within its grace
    assert states([], now) == ["missed", "missed", "pending"]
    assert states([run(T0)], now)[0] == "completed"
    assert states([run(T0, failed=True)], now)[0] == "failed"
    assert states([run(T0, "force_released")], now)[0] == "failed"
    assert states([run(T0, "expired")], now)[0] == "timed_out"
    assert states([run(T0, "taken_over")], now)[0] == "timed_out"
    assert states([run(T0, "running")], now)[0] == "running"
    # A late run still decides its tick (it started before the next tick), missed or not.
    assert states([run(T0 + timedelta(seconds=40))], now)[0] == "completed"


def test_a_failed_run_then_a_completed_one_completes_the_tick() -> None:
    (tick, *_) = decide(TICKS, None, [run(T0, failed=True), run(T0 + timedelta(seconds=2))], TICKS[-1], GRACE, EARLY)
    assert tick.state == "completed" and tick.runs == 2 and not tick.duplicate
    assert tick.run is not None and not tick.run.failed


def test_two_completed_runs_in_one_tick_are_a_duplicate() -> None:
    ticks = decide(TICKS, None, [run(T0, skipped=3), run(T0 + timedelta(seconds=9), skipped=1)], T0, GRACE, EARLY)
    assert ticks[0].state == "completed" and ticks[0].duplicate and ticks[0].runs == 2 and ticks[0].skipped == 4


def test_a_run_a_little_early_counts_for_the_tick_it_fired_for() -> None:
    early = run(TICKS[1] - timedelta(milliseconds=300))
    too_early = run(TICKS[1] - timedelta(seconds=2))
    assert [t.runs for t in decide(TICKS, None, [early], TICKS[-1], GRACE, EARLY)] == [0, 1, 0]
    assert [t.runs for t in decide(TICKS, None, [too_early], TICKS[-1], GRACE, EARLY)] == [1, 0, 0]
    # Past the last listed tick's window (the next tick's, less the allowance): not counted.
    following = TICKS[-1] + STEP
    late = run(following - timedelta(milliseconds=10))
    assert decide(TICKS, following, [late], following, GRACE, EARLY)[-1].runs == 0


def test_the_allowance_is_at_most_half_the_gap() -> None:
    seconds = [T0 + timedelta(seconds=i) for i in range(3)]
    assert allowance(EARLY, seconds, None) == timedelta(milliseconds=500)
    assert allowance(EARLY, TICKS, None) == EARLY


def test_each_job_state() -> None:
    def state(runs: list[JobRun], now: datetime, paused: bool = False) -> str:
        return job_state(job(paused), decide(TICKS, None, runs, now, GRACE, EARLY), now, EARLY)

    last = TICKS[-1]
    done = [run(t) for t in TICKS[:2]]
    assert state([*done, run(last)], last + timedelta(seconds=30)) == "up"
    assert state([*done, run(last, "running")], last + timedelta(seconds=30)) == "up"
    assert state(done, last + timedelta(milliseconds=500)) == "up"  # due, its run may still be on its way
    assert state(done, last + timedelta(seconds=5)) == "late"  # past due, no run, inside grace
    assert state(done, last + GRACE) == "down"  # missed
    assert state([*done, run(last, failed=True)], last + timedelta(seconds=1)) == "down"
    assert state([*done, run(last, "expired")], last + timedelta(seconds=1)) == "down"
    # Down stays down while the next tick waits for its run: no flapping to up at every tick.
    assert state([run(TICKS[0]), run(TICKS[1], failed=True)], last + timedelta(milliseconds=500)) == "down"
    assert state([], last, paused=True) == "paused"
    assert job_state(job(), [], last, EARLY) == "new"


def test_interval_ticks_count_from_the_epoch() -> None:
    schedule = expected("PT15M", None)
    at = datetime(2026, 12, 1, 3, 7, 30)
    assert schedule.latest(at, 2) == [datetime(2026, 12, 1, 2, 45), datetime(2026, 12, 1, 3, 0)]
    assert schedule.after(datetime(2026, 12, 1, 3, 0)) == datetime(2026, 12, 1, 3, 15)
    assert expected("pt2s", "UTC").latest(datetime(2026, 12, 1, 0, 0, 1), 1) == [datetime(2026, 12, 1)]


def test_cron_ticks_follow_the_zone_across_dst() -> None:
    # 02:30 Europe/Berlin does not exist on 2026-03-29: cron runs it at 03:00 CEST (01:00 UTC).
    schedule = expected("30 2 * * *", "Europe/Berlin")
    ticks = schedule.latest(datetime(2026, 3, 30, 12, 0), 3)
    assert ticks == [datetime(2026, 3, 28, 1, 30), datetime(2026, 3, 29, 1, 0), datetime(2026, 3, 30, 0, 30)]
    assert schedule.after(ticks[-1]) == datetime(2026, 3, 31, 0, 30)
    assert schedule.latest(ticks[-1], 1) == [ticks[-1]]  # a tick is at or before itself


def test_due_ticks_reach_back_past_the_grace() -> None:
    schedule = expected("PT1S", None)
    now = datetime(2026, 12, 1, 3, 0, 0)
    ticks = due_ticks(schedule, now, now - timedelta(hours=1), timedelta(seconds=100), 12)
    assert ticks[-1] == now and ticks[0] < now - timedelta(seconds=100)
    assert due_ticks(schedule, now, now - timedelta(seconds=3), timedelta(0), 12) == [
        now - timedelta(seconds=s) for s in (3, 2, 1, 0)
    ]


@pytest.mark.parametrize(
    ("schedule", "timezone", "field"),
    [
        ("* * *", None, "schedule"),
        ("@reboot", None, "schedule"),
        ("61 * * * *", None, "schedule"),
        ("PT0.5S", None, "schedule"),
        ("P400D", None, "schedule"),
        ("PT10 minutes", None, "schedule"),
        ("0 3 * * *", "Mars/Olympus", "timezone"),
        ("PT15M", "Europe/Berlin", "timezone"),
    ],
)
def test_bad_schedules_name_their_field(schedule: str, timezone: str | None, field: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        expected(schedule, timezone)
    assert caught.value.details["field"] == field


def test_graces() -> None:
    assert parse_grace("5m") == timedelta(minutes=5) and parse_grace("PT0S") == timedelta(0)
    for bad in ("-1s", "P32D", "soon"):
        with pytest.raises(InvalidRequest) as caught:
            parse_grace(bad)
        assert caught.value.details["field"] == "grace"
