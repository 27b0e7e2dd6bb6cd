"""The jobs API (docs/jobs.md): register, read, pause and unregister jobs; list them with their state; a job's
ticks, newest first.

A token reads the jobs under its prefixes and writes those it may write locks of. A job's body is read and bound
as the lock operations' are (app.api.bodies). Pages of jobs are by name, pages of ticks by tick time; cursors are
opaque.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.responses import Response

from app.api import openapi as doc
from app.api import openapi_jobs as examples
from app.api import paging
from app.api.bodies import JsonBodyRoute
from app.api.deps import PrincipalDep, SettingsDep
from app.api.models_history import QueryTime
from app.api.models_jobs import JobList, JobRequest, JobState, JobView, TickBrief, TickList, TickView
from app.api.responses import json_response
from app.api.routes import V1
from app.api.routes.admin import ANONYMOUS
from app.api.routes.locks import LockName
from app.api.routes.runs import run_view
from app.auth.principal import Principal
from app.errors import JobNotFound
from app.jobs.model import DEFAULT_GRACE, expected, parse_grace
from app.jobs.status import Jobs, JobStatus
from app.jobs.ticks import RECENT, Tick
from app.locking.durations import format_duration
from app.schedules.cron import DEFAULT_TIMEZONE

JOBS = f"{V1}/jobs"
router = APIRouter(prefix=JOBS, tags=["jobs"], route_class=JsonBodyRoute)
audit = logging.getLogger("schedlock.audit")


def _audit(action: str, name: str, principal: Principal, request: Request, **fields: object) -> None:
    """One audit line for a change of a job, with who made it (as force-release logs its own)."""
    by = principal.name or ANONYMOUS
    client = request.client.host if request.client else None
    audit.info(
        "job %s of %r by %s",
        action,
        name,
        by,
        extra={
            "fields": {
                "action": f"job_{action}",
                "job": name,
                "by": by,
                "issuer": principal.issuer,
                "client": client,
                **fields,
            }
        },
    )


class _JobPath(PathConvertor):
    """A job's name, as the lock routes' ``lockread``: never swallows an action (``/ticks``, ``/pause``)."""

    regex = r"(?:(?!/(?:ticks|pause|resume|badge\.svg)$)[\s\S])*"


register_url_convertor("jobread", _JobPath())


def jobs_of(request: Request) -> Jobs:
    jobs: Jobs = request.app.state.jobs
    return jobs


def tick_view(tick: Tick, db_time: datetime) -> TickView:
    return TickView(
        tick=tick.at,
        state=tick.state,  # type: ignore[arg-type]  # one of TICK_STATES
        duplicate=tick.duplicate,
        run=run_view(tick.run.run, db_time) if tick.run is not None else None,
        runs=tick.runs,
        skipped=tick.skipped,
    )


def job_view(status: JobStatus) -> JobView:
    job = status.job
    return JobView(
        name=job.name,
        schedule=job.schedule,
        timezone=job.timezone,
        grace=format_duration(job.grace),
        description=job.description,
        paused=job.paused,
        public=job.public,
        state=status.state,  # type: ignore[arg-type]  # one of JOB_STATES
        last_tick=tick_view(status.ticks[-1], status.db_time) if status.ticks else None,
        recent=[TickBrief(tick=t.at, state=t.state) for t in status.ticks[-RECENT:]],  # type: ignore[arg-type]
        next_tick=status.next_tick,
        last_completed_at=status.last_completed_at,
        expected_since=job.expected_since,
        changed_by=job.changed_by,
        created_at=job.created_at,
        updated_at=job.updated_at,
        db_time=status.db_time,
    )


async def _status(request: Request, name: str) -> JobStatus:
    status = await jobs_of(request).status(name)
    if status is None:
        raise JobNotFound(f"no job named {name!r}", name=name)
    return status


_JOB_CURSOR = re.compile(r"job:([\s\S]+)")
_TICK_CURSOR = re.compile(r"tick:(-?[0-9]{1,18})")


def _tick_cursor(tick: datetime) -> str:
    return paging.encode(f"tick:{paging.micros(tick)}")


@router.get(
    "",
    operation_id="listJobs",
    summary="Jobs with their state",
    description="The jobs the caller may read, by name, each with its state, latest tick and next tick. With "
    "`state`, only jobs in that state: a page may then hold fewer than `limit` items; follow `next_cursor`.",
    response_model=JobList,
    responses={**doc.ok(examples.JOB_LIST), **examples.READ},
)
async def list_jobs(
    request: Request,
    principal: PrincipalDep,
    settings: SettingsDep,
    prefix: paging.Prefix = None,
    state: Annotated[JobState | None, Query(description="Only jobs in this state.")] = None,
    limit: paging.Limit = 100,
    cursor: paging.Cursor = None,
) -> Response:
    paging.check_limit(settings, limit)
    jobs = jobs_of(request)
    after = paging.read(cursor, _JOB_CURSOR).group(1) if cursor is not None else None
    found, has_more, db_time = await jobs.store.page(limit=limit, after=after, prefix=prefix, scope=principal.prefixes)
    statuses = await jobs.statuses(found, db_time) if found else []
    items = [job_view(s) for s in statuses if state is None or s.state == state]
    next_cursor = paging.encode(f"job:{found[-1].name}") if has_more else None
    db_time = statuses[0].db_time if statuses else db_time
    return json_response(JobList(items=items, next_cursor=next_cursor, db_time=db_time))


@router.put(
    "/{name:jobread}",
    operation_id="putJob",
    summary="Register or update a job",
    description="Idempotent: the job as given (200 with it). Ticks are expected from now on when the job is new or "
    "its schedule or time zone changed. The lock of the same name needs nothing of this: registering only adds "
    "expectations (docs/jobs.md).",
    response_model=JobView,
    responses={**doc.ok(examples.JOB), **examples.WRITE},
    openapi_extra=doc.request_body(examples.JOB_REQUEST),
)
async def put_job(name: LockName, body: JobRequest, principal: PrincipalDep, request: Request) -> Response:
    principal.require(name, write=True)
    timezone = body.timezone if body.timezone is not None else DEFAULT_TIMEZONE
    schedule = expected(body.schedule, timezone)  # 422 naming schedule or timezone
    grace = parse_grace(body.grace) if body.grace is not None else DEFAULT_GRACE
    jobs = jobs_of(request)
    job, db_time = await jobs.store.put(
        name, schedule.expression, timezone, grace, body.description, body.paused, body.public, principal.name
    )
    _audit("put", name, principal, request, schedule=job.schedule, timezone=job.timezone, paused=job.paused)
    (status,) = await jobs.statuses([job], db_time)
    return json_response(job_view(status))


@router.get(
    "/{name:jobread}",
    operation_id="getJob",
    summary="A job and its state",
    description="The job as registered, its state (up, late, down, paused, new), its latest due tick with the run "
    "that decided it, its recent ticks, the next tick and when its last run completed (docs/jobs.md).",
    response_model=JobView,
    responses={**doc.ok(examples.JOB), **examples.READ_ONE},
)
async def get_job(name: LockName, principal: PrincipalDep, request: Request) -> Response:
    principal.require(name, write=False)
    return json_response(job_view(await _status(request, name)))


@router.delete(
    "/{name:jobread}",
    operation_id="deleteJob",
    summary="Unregister a job",
    description="The job's expectations go; its lock row and its runs stay (rows are never deleted).",
    status_code=204,
    responses={
        204: {"description": "Unregistered."},
        **doc.AUTH,
        **examples.NOT_FOUND,
        **examples.BAD_INPUT,
        **doc.DOWN,
    },
)
async def delete_job(name: LockName, principal: PrincipalDep, request: Request) -> Response:
    principal.require(name, write=True)
    if not await jobs_of(request).store.delete(name):
        raise JobNotFound(f"no job named {name!r}", name=name)
    _audit("delete", name, principal, request)
    return Response(status_code=204)


async def _pause(request: Request, name: str, paused: bool, principal: Principal) -> Response:
    jobs = jobs_of(request)
    job, db_time = await jobs.store.set_paused(name, paused, principal.name)
    if job is None:
        raise JobNotFound(f"no job named {name!r}", name=name)
    _audit("pause" if paused else "resume", name, principal, request)
    (status,) = await jobs.statuses([job], db_time)
    return json_response(job_view(status))


@router.post(
    "/{name:lockpath}/pause",
    operation_id="pauseJob",
    summary="Pause a job: it raises nothing",
    description="A paused job's state is `paused`: no tick makes it late or down. Pausing twice is harmless.",
    response_model=JobView,
    responses={**doc.ok({**examples.JOB, "paused": True, "state": "paused"}), **examples.WRITE},
)
async def pause_job(name: LockName, principal: PrincipalDep, request: Request) -> Response:
    principal.require(name, write=True)
    return await _pause(request, name, True, principal)


@router.post(
    "/{name:lockpath}/resume",
    operation_id="resumeJob",
    summary="Resume a paused job",
    description="Ticks are expected again from now on: none missed while the job was paused counts.",
    response_model=JobView,
    responses={**doc.ok(examples.JOB), **examples.WRITE},
)
async def resume_job(name: LockName, principal: PrincipalDep, request: Request) -> Response:
    principal.require(name, write=True)
    return await _pause(request, name, False, principal)


@router.get(
    "/{name:lockpath}/ticks",
    operation_id="listJobTicks",
    summary="A job's ticks, newest first",
    description="Each due tick since the job expects ticks (and within the history's retention) with its state, "
    "the run that decided it, how many runs its window saw and the attempts they made skip. `since` and "
    "`until`: ticks in [since, until).",
    response_model=TickList,
    responses={**doc.ok(examples.TICKS), **examples.READ_ONE},
)
async def list_ticks(
    name: LockName,
    principal: PrincipalDep,
    settings: SettingsDep,
    request: Request,
    since: Annotated[QueryTime | None, Query(description="Only ticks at or after this (ISO-8601).")] = None,
    until: Annotated[QueryTime | None, Query(description="Only ticks before this (ISO-8601).")] = None,
    limit: paging.Limit = 50,
    cursor: paging.Cursor = None,
) -> Response:
    principal.require(name, write=False)
    paging.check_limit(settings, limit)
    jobs = jobs_of(request)
    job, db_time = await jobs.store.get(name)
    if job is None:
        raise JobNotFound(f"no job named {name!r}", name=name)
    before = paging.time_of(paging.read(cursor, _TICK_CURSOR).group(1)) if cursor is not None else until
    if cursor is not None and until is not None:
        before = min(before, until)  # type: ignore[type-var]
    page = await jobs.ticks(job, db_time, limit=limit, since=since, before=before)
    items = [tick_view(t, page.db_time) for t in page.ticks]
    next_cursor = _tick_cursor(page.ticks[-1].at) if page.has_more else None
    return json_response(TickList(name=name, items=items, next_cursor=next_cursor, db_time=page.db_time))
