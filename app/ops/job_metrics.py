"""The jobs' metrics (docs/jobs.md): their families, from the jobs' states, and the ticks counted at scrapes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from app.jobs.model import JOB_STATES
from app.jobs.status import JobStatus

#: The tick states schedlock_job_ticks_total counts: those a tick keeps once decided.
DECIDED_STATES = ("completed", "failed", "timed_out", "missed")

#: Ticks counted, per (job, state).
Ticks = dict[tuple[str, str], int]

#: When this process started (its monotonic clock; the module is imported as the server starts).
STARTED = time.monotonic()


def count_ticks(
    statuses: list[JobStatus], job_ticks: Ticks, ticks_counted: dict[str, Any], started: float | None = None
) -> None:
    """Count, into ``job_ticks``, the ticks decided since the newest one counted per job (``ticks_counted``, which
    moves on). A job read for the first time counts its ticks decided since the process started (``started``, on the
    monotonic clock; STARTED if None), whenever that first reading comes: the start is placed on the database's
    clock (the ticks') as the reading's ``db_time`` less the time this process has run, so no clock of this process
    is compared with the database's. A tick decided between a job's registration and a replica's first scrape
    counts; one of a time before the start does not."""
    running_for = timedelta(seconds=time.monotonic() - (STARTED if started is None else started))
    for status in statuses:
        name = status.job.name
        decided = [t for t in status.ticks if t.state not in ("pending", "running")]
        counted = ticks_counted.get(name)
        for state in DECIDED_STATES:
            job_ticks.setdefault((name, state), 0)
        if status.state == "paused":  # raises nothing: its ticks are not counted, now or once resumed
            ticks_counted[name] = max([t.at for t in status.ticks] or [counted or datetime.min])
            continue
        if counted is None:  # the first reading: from the process's start on
            counted = status.db_time - running_for
        for tick in decided:
            if tick.at > counted:
                job_ticks[name, tick.state] += 1
        ticks_counted[name] = max(decided[-1].at, counted) if decided else counted
    gone = {name for name, _ in job_ticks} - {s.job.name for s in statuses}
    for name, state in [key for key in job_ticks if key[0] in gone]:
        del job_ticks[name, state]
    for name in gone:
        ticks_counted.pop(name, None)


def job_families(statuses: list[JobStatus], ticks: Ticks) -> Iterator[Metric]:
    up = GaugeMetricFamily(
        "schedlock_job_up", "1 unless the job is down (docs/jobs.md); paused jobs are 1.", labels=["job_name"]
    )
    state = GaugeMetricFamily(
        "schedlock_job_state",
        "1 for the job's state (up, late, down, paused, new), 0 for the others.",
        labels=["job_name", "state"],
    )
    completed = GaugeMetricFamily(
        "schedlock_job_last_completed_timestamp_seconds",
        "When the job's last completed run ended (Unix time, database clock); absent before its first.",
        labels=["job_name"],
    )
    counted = CounterMetricFamily(
        "schedlock_job_ticks",
        "Ticks the server saw decided, by state (completed, failed, timed_out, missed), since it started. The same "
        "on every replica: aggregate with max(), not sum().",
        labels=["job_name", "state"],
    )
    for status in statuses:
        name = status.job.name
        up.add_metric([name], 0 if status.state == "down" else 1)
        for s in JOB_STATES:
            state.add_metric([name, s], 1 if s == status.state else 0)
        if status.last_completed_at is not None:
            completed.add_metric([name], status.last_completed_at.replace(tzinfo=UTC).timestamp())
    for (name, s), n in sorted(ticks.items()):
        counted.add_metric([name, s], n)
    yield from (up, state, completed, counted)
