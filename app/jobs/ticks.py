"""Which ticks a job expects, and the state of each, decided from the runs acquired in its window (docs/jobs.md).

Pure computation over what app.jobs.store read, with the database's now it answered: no clock of this process
enters any state.

A tick's window runs from the tick to the next tick, both moved back by the *allowance*: the slot's early grace
(SCHEDLOCK_SLOT_EARLY_GRACE, 1 s), at most half the gap between ticks. A caller whose clock runs a little ahead of
the database acquires a moment before the tick it fired for, and its run counts for that tick, as its slot does.
The same allowance is how long a due tick may wait for its run before the job is ``late``.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.history.runs import Run
from app.jobs.model import Expected, Job

#: The most ticks one computation lists (a PT1S schedule with a 5-minute grace needs 300 to decide its state).
MAX_TICKS = 1000
#: The ticks a job's state is computed from at least (also the dashboard's strip).
RECENT = 12
_DECIDED = frozenset({"completed", "failed", "timed_out", "missed"})


@dataclass(frozen=True, slots=True)
class JobRun:
    """A run as the jobs read it: the history's run, and whether its release said ``completed: false``."""

    run: Run
    failed: bool

    @property
    def completed(self) -> bool:
        return self.run.outcome == "released" and not self.failed


@dataclass(frozen=True, slots=True)
class Tick:
    """One expected tick: its state, whether more than one run completed in its window, the run that decided it
    (None for pending and missed), how many runs were acquired in the window and the attempts they made skip."""

    at: datetime
    state: str
    duplicate: bool
    run: JobRun | None
    runs: int
    skipped: int


def allowance(early: timedelta, ticks: list[datetime], following: datetime | None) -> timedelta:
    """The early grace, at most half the shortest gap between the ticks listed (and the one following them)."""
    times = [*ticks, *([following] if following is not None else [])]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return min([early, *(gap / 2 for gap in gaps)])


def due_ticks(schedule: Expected, now: datetime, floor: datetime, grace: timedelta, at_least: int) -> list[datetime]:
    """The ticks at or before ``now`` and at or after ``floor``, oldest first: at least ``at_least`` of them (when
    there are), and back past ``now - grace``, so the newest tick already decided is among them."""
    count = at_least
    while True:
        ticks = [t for t in schedule.latest(now, count) if t >= floor]
        if len(ticks) < count or ticks[0] < now - grace or count >= MAX_TICKS:
            return ticks
        count = min(MAX_TICKS, count * 4)


def decide(
    ticks: list[datetime],
    following: datetime | None,
    runs: list[JobRun],
    now: datetime,
    grace: timedelta,
    early: timedelta,
) -> list[Tick]:
    """The state of each of ``ticks`` (due, oldest first; ``following``: the tick after the last), from ``runs``
    (any order; those outside every window are ignored)."""
    if not ticks:
        return []
    e = allowance(early, ticks, following)
    starts = [t - e for t in ticks]
    end = following - e if following is not None else None
    windows: list[list[JobRun]] = [[] for _ in ticks]
    for r in sorted(runs, key=lambda r: (r.run.acquired_at, r.run.fencing_token)):
        at = r.run.acquired_at
        i = bisect.bisect_right(starts, at) - 1
        if i >= 0 and (end is None or i < len(ticks) - 1 or at < end):
            windows[i].append(r)
    return [_tick(t, w, now, grace) for t, w in zip(ticks, windows, strict=True)]


def _tick(at: datetime, runs: list[JobRun], now: datetime, grace: timedelta) -> Tick:
    skipped = sum(r.run.skipped for r in runs)
    completed = [r for r in runs if r.completed]
    running = [r for r in runs if r.run.outcome == "running"]
    if completed:
        return Tick(at, "completed", len(completed) > 1, completed[-1], len(runs), skipped)
    if running:
        return Tick(at, "running", False, running[-1], len(runs), skipped)
    if runs:
        last = runs[-1]
        # A released run that said completed: false, or one an admin force-released, failed; one whose lease ran
        # out (expired) or was taken over while held timed out.
        state = "failed" if last.run.outcome in ("released", "force_released") else "timed_out"
        return Tick(at, state, False, last, len(runs), skipped)
    return Tick(at, "pending" if now < at + grace else "missed", False, None, 0, 0)


def job_state(job: Job, ticks: list[Tick], now: datetime, early: timedelta) -> str:
    """``paused``; ``new`` with no tick due; ``up`` when the current tick completed or runs; ``down`` when the
    newest decided tick missed, failed or timed out (none completed since); else the current tick waits for its
    run: ``up`` within the allowance of its time, ``late`` after it."""
    if job.paused:
        return "paused"
    if not ticks:
        return "new"
    current = ticks[-1]
    if current.state in ("completed", "running"):
        return "up"
    decided = [t for t in ticks if t.state in _DECIDED]
    if decided and decided[-1].state != "completed":
        return "down"
    e = allowance(early, [t.at for t in ticks], None)
    return "late" if now - current.at >= e else "up"
