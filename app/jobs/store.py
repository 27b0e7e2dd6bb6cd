"""All jobs SQL: the jobs table (migration 0004) and the runs a job's ticks are decided from (docs/jobs.md).

Every statement answers the database's now beside its rows (the one-row relation the rows are joined to), so the
tick computation uses the clock of the statement that read the runs, as the history does.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from app.db.params import Params, name_filters
from app.db.runner import Fetcher
from app.db.schema import jobs_table, runs_table, skips_table
from app.history.runs import Run
from app.jobs.model import Job
from app.jobs.ticks import JobRun
from app.locking.rows import NOW

_JOB = (
    "name, schedule, timezone, grace, description, paused, created_at, updated_at, expected_since, public, "
    "notified_state, changed_by"
)
_LAPSED = f"(r.outcome = 'running' AND r.lock_until <= {NOW})"


class JobStore:
    """The jobs table beside a lock table, and its runs, read and written with ``statements``."""

    def __init__(self, statements: Fetcher, table: str, schema: str | None) -> None:
        self._statements = statements
        self.jobs_table = jobs_table(table, schema)
        self.runs_table = runs_table(table, schema)
        self.skips_table = skips_table(table, schema)

    async def put(
        self,
        name: str,
        schedule: str,
        timezone: str,
        grace: timedelta,
        description: str | None,
        paused: bool | None,
        public: bool | None = None,
        by: str | None = None,
    ) -> tuple[Job, datetime]:
        """Register ``name``, or update it; ``paused`` and ``public`` None keep them as they are (false when new).
        Ticks are expected from now on when the job is new or its schedule or time zone changed (``expected_since``).
        ``by``: the principal asking, recorded as ``changed_by``."""
        sql = f"""
            INSERT INTO {self.jobs_table} AS j ({_JOB})
            VALUES ($1, $2, $3, $4, $5, COALESCE($6, false), {NOW}, {NOW}, {NOW}, COALESCE($7, false), NULL, $8)
            ON CONFLICT (name) DO UPDATE SET changed_by = EXCLUDED.changed_by,
              schedule = EXCLUDED.schedule, timezone = EXCLUDED.timezone, grace = EXCLUDED.grace,
              description = EXCLUDED.description, paused = COALESCE($6, j.paused), public = COALESCE($7, j.public),
              updated_at = CASE WHEN (j.schedule, j.timezone, j.grace, j.description, j.paused)
                  IS DISTINCT FROM (EXCLUDED.schedule, EXCLUDED.timezone, EXCLUDED.grace, EXCLUDED.description,
                                    COALESCE($6, j.paused))
                THEN {NOW} ELSE j.updated_at END,
              expected_since = CASE
                WHEN (j.schedule, j.timezone) IS DISTINCT FROM (EXCLUDED.schedule, EXCLUDED.timezone)
                  OR (j.paused AND NOT COALESCE($6, j.paused))
                THEN {NOW} ELSE j.expected_since END
            RETURNING {_JOB}, {NOW} AS db_time"""
        args = (name, schedule, timezone, grace, description, paused, public, by)
        (row,) = await self._statements.fetch("job_write", sql, *args)
        return _job(row), row["db_time"]

    async def register(self, name: str, schedule: str, timezone: str, grace: timedelta) -> None:
        """Register ``name`` with this schedule as an acquire that carries one does: a new job gets ``grace``; a
        known one changes only its schedule and time zone, and only when they differ (then ticks are expected from
        now on). Its description, grace and pause stay as an operator set them."""
        sql = f"""
            INSERT INTO {self.jobs_table} AS j ({_JOB})
            VALUES ($1, $2, $3, $4, NULL, false, {NOW}, {NOW}, {NOW}, false, NULL, NULL)
            ON CONFLICT (name) DO UPDATE SET schedule = EXCLUDED.schedule, timezone = EXCLUDED.timezone,
              updated_at = {NOW}, expected_since = {NOW}
            WHERE (j.schedule, j.timezone) IS DISTINCT FROM (EXCLUDED.schedule, EXCLUDED.timezone)"""
        await self._statements.fetch("job_write", sql, name, schedule, timezone, grace)

    async def get(self, name: str) -> tuple[Job | None, datetime]:
        sql = f"""SELECT t.db_time, j.* FROM (SELECT {NOW} AS db_time) t
            LEFT JOIN {self.jobs_table} j ON j.name = $1"""
        (row,) = await self._statements.fetch("jobs", sql, name)
        return (_job(row) if row["name"] is not None else None), row["db_time"]

    async def delete(self, name: str) -> bool:
        """Unregister ``name``: its lock row and its runs stay. Whether it was registered."""
        sql = f"DELETE FROM {self.jobs_table} WHERE name = $1 RETURNING name"
        return bool(await self._statements.fetch("job_write", sql, name))

    async def set_paused(self, name: str, paused: bool, by: str | None = None) -> tuple[Job | None, datetime]:
        """Pause or resume; a resumed job expects ticks from now on (none missed while it was paused). ``by``: the
        principal asking, recorded as ``changed_by``."""
        sql = f"""
            WITH changed AS (
              UPDATE {self.jobs_table} SET paused = $2, changed_by = $3,
                updated_at = CASE WHEN paused IS DISTINCT FROM $2 THEN {NOW} ELSE updated_at END,
                expected_since = CASE WHEN paused AND NOT $2 THEN {NOW} ELSE expected_since END
              WHERE name = $1 RETURNING {_JOB})
            SELECT t.db_time, c.* FROM (SELECT {NOW} AS db_time) t LEFT JOIN changed c ON true"""
        (row,) = await self._statements.fetch("job_write", sql, name, paused, by)
        return (_job(row) if row["name"] is not None else None), row["db_time"]

    async def page(
        self, *, limit: int, after: str | None, prefix: str | None, scope: Sequence[str] | None
    ) -> tuple[list[Job], bool, datetime]:
        """Jobs by name after ``after``; ``prefix``: names starting with it; ``scope``: only names starting with one
        of these (a token's prefixes; None: all). One more than ``limit`` tells whether a next page exists."""
        arg = Params()
        where = name_filters("name", arg, prefix=prefix, scope=scope)
        if after is not None:
            where.append(f"name > {arg(after)}")
        jobs = f"SELECT {_JOB} FROM {self.jobs_table} WHERE {' AND '.join(where) or 'true'} ORDER BY name"
        sql = f"""SELECT t.db_time, j.* FROM (SELECT {NOW} AS db_time) t
            LEFT JOIN LATERAL ({jobs} LIMIT {arg(limit + 1)}) j ON true ORDER BY j.name"""
        rows = await self._statements.fetch("jobs", sql, *arg.values)
        found = [_job(r) for r in rows if r["name"] is not None]
        return found[:limit], len(found) > limit, rows[0]["db_time"]

    async def runs(
        self, windows: Sequence[tuple[str, datetime, datetime | None]]
    ) -> tuple[dict[str, list[JobRun]], dict[str, datetime], datetime]:
        """For each (name, lo, hi): the runs of ``name`` acquired in [lo, hi) (hi None: no end), with their
        outcome as judged now, and the end of its last completed run (anywhere in its history). And the now."""
        runs = f"""
            SELECT r.fencing_token, r.locked_by, r.token_name, r.acquired_at, r.lock_until,
              CASE WHEN {_LAPSED} THEN r.lock_until ELSE r.ended_at END AS ended_at,
              CASE WHEN {_LAPSED} THEN 'expired' ELSE r.outcome END AS outcome,
              (SELECT COALESCE(sum(s.skipped), 0) FROM {self.skips_table} s
                WHERE s.name = r.name AND s.fencing_token = r.fencing_token) AS skipped,
              r.forced_by, r.force_reason, r.failed
            FROM {self.runs_table} r
            WHERE r.name = w.name AND r.acquired_at >= w.lo AND r.acquired_at < COALESCE(w.hi, 'infinity')"""
        # The last completed run: the runs of a name by fencing token, newest first, up to the first released one
        # that did not fail (the (name, fencing_token) index, read backwards).
        completed = f"""
            SELECT x.ended_at FROM {self.runs_table} x
            WHERE x.name = w.name AND x.outcome = 'released' AND x.failed IS NOT TRUE
            ORDER BY x.fencing_token DESC LIMIT 1"""
        sql = f"""
            SELECT t.db_time, w.name, c.ended_at AS last_completed_at, p.*
            FROM (SELECT {NOW} AS db_time) t
            LEFT JOIN unnest($1::text[], $2::timestamp[], $3::timestamp[]) AS w(name, lo, hi) ON true
            LEFT JOIN LATERAL ({completed}) c ON true
            LEFT JOIN LATERAL ({runs}) p ON true"""
        names, los, his = (list(column) for column in zip(*windows, strict=True)) if windows else ([], [], [])
        rows = await self._statements.fetch("job_runs", sql, names, los, his)
        found: dict[str, list[JobRun]] = {name: [] for name in names}
        last_completed: dict[str, datetime] = {}
        for r in rows:
            if r["name"] is None:
                continue
            if r["last_completed_at"] is not None:
                last_completed[r["name"]] = r["last_completed_at"]
            if r["fencing_token"] is not None:
                found[r["name"]].append(JobRun(_run(r), bool(r["failed"])))
        return found, last_completed, rows[0]["db_time"]

    async def mark_failed(self, name: str, fencing_token: int, released_at: datetime) -> None:
        """Record that the release of run ``fencing_token`` said ``completed: false``. Only the release that ended
        the run (at ``released_at``, its statement's now) counts: a later one changes nothing, as for slots."""
        sql = f"""UPDATE {self.runs_table} SET failed = true
            WHERE name = $1 AND fencing_token = $2 AND outcome = 'released' AND ended_at = $3 AND failed IS NULL"""
        await self._statements.fetch("job_write", sql, name, fencing_token, released_at)


def _job(row: Any) -> Job:
    return Job(
        row["name"],
        row["schedule"],
        row["timezone"],
        row["grace"],
        row["description"],
        row["paused"],
        row["created_at"],
        row["updated_at"],
        row["expected_since"],
        row["public"],
        row["notified_state"],
        row["changed_by"],
    )


def _run(row: Any) -> Run:
    return Run(
        row["name"],
        row["fencing_token"],
        row["locked_by"],
        row["token_name"],
        row["acquired_at"],
        row["lock_until"],
        row["ended_at"],
        row["outcome"],
        int(row["skipped"]),
        row["forced_by"],
        row["force_reason"],
    )
