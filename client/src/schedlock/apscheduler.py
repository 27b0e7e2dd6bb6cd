"""APScheduler 3.x: an executor that runs each job at most once per scheduled run time, across every scheduler.

>>> scheduler = BackgroundScheduler(executors={"default": SchedlockExecutor(LockClient(), lock_at_most_for="10m")})

Before a job runs, the executor acquires the lock named by the job's id with the run time APScheduler scheduled
(not the moment it fires) as the slot (docs/slots.md). Every scheduler computing the same trigger computes the same
run time, so whichever asks first runs the tick and the others skip it, logged at INFO: while it runs (lock held)
and after it finished (slot done), whatever the nodes' clocks. A job that raises releases with ``completed=false``:
the tick stays open, and another scheduler's trigger for it runs it. When schedlock is unreachable the job does not
run and an ERROR says why (fail-closed), unless ``on_unavailable="fail-open"``. APScheduler 4 (an alpha, with
another API) is not supported. Install with ``pip install 'schedlock[apscheduler]'``. docs/apscheduler.md.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any

from schedlock._adapters import require, slot_of, take
from schedlock._durations import DurationLike
from schedlock._policy import OnUnavailable, default_holder
from schedlock._sync import LockClient

require(__name__, "apscheduler", "apscheduler", major=3)

from apscheduler.events import (  # noqa: E402
    EVENT_JOB_EXECUTED,
    EVENT_JOB_SUBMITTED,
    JobExecutionEvent,
    JobSubmissionEvent,
)
from apscheduler.executors.base import run_job  # noqa: E402
from apscheduler.executors.pool import ThreadPoolExecutor  # noqa: E402
from apscheduler.job import Job  # noqa: E402
from apscheduler.schedulers.base import BaseScheduler  # noqa: E402

__all__ = ["SchedlockExecutor", "scheduled_run_time"]

_run_time: ContextVar[datetime | None] = ContextVar("schedlock_apscheduler_run_time", default=None)


def scheduled_run_time() -> datetime | None:
    """The run time APScheduler scheduled the running job for (its tick), inside a job SchedlockExecutor runs."""
    return _run_time.get()


class _NotCompleted(Exception):
    """Raised inside the lease when the run did not complete, so that the lease releases with completed=false."""


class SchedlockExecutor(ThreadPoolExecutor):  # type: ignore[misc]  # APScheduler 3 ships no type hints
    """APScheduler's thread pool executor, with every run time taken as a schedlock slot of the job's id first.

    ``lock_at_most_for`` bounds how long a crashed run blocks the job (its tick stays open; the next tick runs).
    ``name_prefix`` goes before the job id in the lock name (``"billing."``); a name may be at most 64
    characters, so give jobs ids (``add_job(..., id="nightly-report")``) rather than APScheduler's random ones, which
    differ between schedulers. ``keep_alive`` extends long runs (``lock_at_most_for`` >= 30s). ``on_unavailable``
    (default: the client's, fail-closed) says what a run does when schedlock cannot be reached.
    """

    def __init__(
        self,
        client: LockClient,
        lock_at_most_for: DurationLike = timedelta(minutes=10),
        *,
        name_prefix: str = "",
        keep_alive: bool = False,
        holder: str | None = None,
        on_unavailable: OnUnavailable | str | None = None,
        max_workers: int = 10,
        pool_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(max_workers, pool_kwargs)
        self.client = client
        self.lock_at_most_for = lock_at_most_for
        self.name_prefix = name_prefix
        self.keep_alive = keep_alive
        self.holder = holder
        self.on_unavailable = on_unavailable
        self._listened: BaseScheduler | None = None
        self._submissions: dict[str, deque[tuple[Job, list[datetime]]]] = {}
        self._submissions_lock = threading.Lock()

    # APScheduler hands an executor a job without the alias of the job store it came from, which the events of its
    # runs carry (``run_job`` takes it); the scheduler names it in the EVENT_JOB_SUBMITTED it dispatches, from the
    # same thread, once ``submit_job`` has returned. So a submitted run waits here until that event, and starts then.

    def start(self, scheduler: BaseScheduler, alias: str) -> None:
        super().start(scheduler, alias)
        self._listened = scheduler
        scheduler.add_listener(self._submitted, EVENT_JOB_SUBMITTED)

    def shutdown(self, wait: bool = True) -> None:
        if self._listened is not None:
            self._listened.remove_listener(self._submitted)
            self._listened = None
        super().shutdown(wait)

    def _do_submit_job(self, job: Job, run_times: list[datetime]) -> None:
        with self._submissions_lock:
            self._submissions.setdefault(job.id, deque()).append((job, run_times))

    def _submitted(self, event: JobSubmissionEvent) -> None:
        with self._submissions_lock:
            waiting = self._submissions.get(event.job_id)
            if not waiting or waiting[0][1] != event.scheduled_run_times:
                return  # a job of another executor
            job, run_times = waiting.popleft()
            if not waiting:
                del self._submissions[event.job_id]

        def callback(future: Future[list[JobExecutionEvent]]) -> None:
            error = future.exception()
            if error is not None:
                self._run_job_error(job.id, error, error.__traceback__)
            else:
                self._run_job_success(job.id, future.result())

        submitted = self._pool.submit(self._run_locked, job, event.jobstore, run_times, self._logger.name)
        submitted.add_done_callback(callback)

    def _run_locked(self, job: Job, store: str, run_times: list[datetime], logger_name: str) -> list[JobExecutionEvent]:
        """APScheduler's own ``run_job`` for each run time whose slot this scheduler took (or fail-open ran)."""
        events: list[JobExecutionEvent] = []
        for run_time in run_times:
            decision = take(
                self.client,
                self.name_prefix + job.id,
                self.lock_at_most_for,
                job=f"job {job.id!r}",
                slot=slot_of(run_time),
                keep_alive=self.keep_alive,
                holder=self.holder or default_holder(f"apscheduler job {job.id}"),
                on_unavailable=self.on_unavailable,
            )
            if not decision.run:
                continue
            context = _run_time.set(run_time)
            try:
                if decision.lease is None:  # fail-open
                    events += run_job(job, store, [run_time], logger_name)
                    continue
                with decision.lease:  # so assert_locked() holds in the job; the release says whether it completed
                    ran = run_job(job, store, [run_time], logger_name)
                    events += ran
                    if not all(event.code == EVENT_JOB_EXECUTED for event in ran):
                        raise _NotCompleted  # raised or missed: the tick stays open for another scheduler
            except _NotCompleted:
                pass
            finally:
                _run_time.reset(context)
        return events
