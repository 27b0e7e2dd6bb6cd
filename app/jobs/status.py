"""A job's state and its ticks, as the API and the metrics report them: the jobs table and the runs read by
app.jobs.store, decided by app.jobs.ticks with the now of the statement that read the runs (docs/jobs.md).

Ticks are expected from the job's ``expected_since`` (registration, a changed schedule, a resume), and no further
back than the history keeps runs (SCHEDLOCK_HISTORY_RETENTION): a tick whose runs were pruned would look missed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from app.jobs.model import Job
from app.jobs.store import JobStore
from app.jobs.ticks import RECENT, Tick, decide, due_ticks, job_state

_FAR_PAST = datetime(1, 1, 1)


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A job as of ``db_time``: its state, its recent ticks (oldest first), the next tick, and when its last
    completed run ended."""

    job: Job
    state: str
    ticks: list[Tick]
    next_tick: datetime | None
    last_completed_at: datetime | None
    db_time: datetime


@dataclass(frozen=True, slots=True)
class TickPage:
    ticks: list[Tick]  # newest first
    has_more: bool
    db_time: datetime


class Jobs:
    """Jobs' states over ``store``; ``early``: the slot's early grace; ``retention``: the history's (0: all)."""

    def __init__(self, store: JobStore, early: timedelta, retention: timedelta) -> None:
        self.store = store
        self.early = early
        self.retention = retention

    def floor(self, job: Job, db_time: datetime) -> datetime:
        """The oldest time a tick of ``job`` is expected at."""
        kept = db_time - self.retention if self.retention else _FAR_PAST
        return max(job.expected_since, kept)

    async def statuses(self, jobs: list[Job], db_time: datetime) -> list[JobStatus]:
        """The state of each of ``jobs`` (read at ``db_time``), in one statement for all of their runs."""
        plans = []
        for job in jobs:
            schedule = job.expected()
            ticks = due_ticks(schedule, db_time, self.floor(job, db_time), job.grace, RECENT)
            following = schedule.after(db_time)
            lo = ticks[0] - self.early if ticks else following or db_time
            plans.append((job, ticks, following, (job.name, lo, following)))
        runs, last_completed, now = await self.store.runs([plan[3] for plan in plans])
        found = []
        for job, ticks, following, _ in plans:
            decided = decide(ticks, following, runs[job.name], now, job.grace, self.early)
            state = job_state(job, decided, now, self.early)
            found.append(JobStatus(job, state, decided, following, last_completed.get(job.name), now))
        return found

    async def status(self, name: str) -> JobStatus | None:
        job, db_time = await self.store.get(name)
        if job is None:
            return None
        (status,) = await self.statuses([job], db_time)
        return status

    async def ticks(
        self, job: Job, db_time: datetime, *, limit: int, since: datetime | None, before: datetime | None
    ) -> TickPage:
        """Due ticks of ``job`` newest first, in [since, before) (``before`` None: up to now)."""
        lower = max(self.floor(job, db_time), since or _FAR_PAST)
        at = db_time if before is None else min(db_time, before - timedelta(microseconds=1))
        schedule = job.expected()
        listed = [t for t in schedule.latest(at, limit + 1) if t >= lower] if at >= lower else []
        has_more = len(listed) > limit
        listed = listed[-limit:]
        if not listed:
            return TickPage([], False, db_time)
        following = schedule.after(listed[-1])
        runs, _, now = await self.store.runs([(job.name, listed[0] - self.early, following)])
        decided = decide(listed, following, runs[job.name], now, job.grace, self.early)
        return TickPage(decided[::-1], has_more, now)
