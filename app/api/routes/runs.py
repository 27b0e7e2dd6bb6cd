"""The run history API (docs/history.md): a lock's runs, every run with filters, a lock's skips per hour.

Reading the history needs read access to the names concerned, as the lock list does. Pages are keyset-paginated
on the fencing token, newest first; the cursor is opaque, and anything but a cursor this API returned is a 422.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from starlette.responses import Response

from app.api import openapi as doc
from app.api import openapi_history as examples
from app.api import paging
from app.api.deps import HistoryDep, PrincipalDep, SettingsDep
from app.api.models import DIGITS_ONLY
from app.api.models_history import QueryTime, RunList, RunView, SkipHourView, SkipList
from app.api.responses import json_response
from app.api.routes import LOCKS, V1
from app.api.routes.locks import RowName
from app.history.runs import Run, RunPage
from app.locking.leases import is_schedlock_holder
from app.locking.timefmt import as_utc_naive

router = APIRouter(tags=["history"])

#: 31 days: what GET .../skips may span.
MAX_SKIP_HOURS = 744


def _milliseconds(value: datetime) -> int:
    """A time as the API shows it (truncated to the millisecond), counted in milliseconds: durations are the
    difference of the times shown, so ``ended_at - acquired_at == duration_ms`` holds for every run."""
    naive = as_utc_naive(value)
    return (naive.toordinal() * 86_400 + naive.hour * 3600 + naive.minute * 60 + naive.second) * 1000 + (
        naive.microsecond // 1000
    )


def run_view(run: Run, db_time: datetime) -> RunView:
    """A run as the API shows it; a running run's duration is the time so far, by the database's clock."""
    end = run.ended_at if run.ended_at is not None else db_time
    return RunView(
        name=run.name,
        fencing_token=run.fencing_token,
        locked_by=run.locked_by,
        token_name=run.token_name,
        source="api" if is_schedlock_holder(run.locked_by) else "table",
        acquired_at=run.acquired_at,
        lock_until=run.lock_until,
        ended_at=run.ended_at,
        outcome=run.outcome,  # type: ignore[arg-type]  # one of OUTCOMES, from the table's CHECK
        duration_ms=max(0, _milliseconds(end) - _milliseconds(run.acquired_at)),
        skipped=run.skipped,
        forced_by=run.forced_by,
        force_reason=run.force_reason,
    )


#: A lock's pages continue after a fencing token; the pages of every lock after (acquired_at in µs, fencing token).
_LOCK_CURSOR = re.compile(r"runs:([1-9][0-9]{0,18})")
_ALL_CURSOR = re.compile(r"at:(-?[0-9]{1,18}):([1-9][0-9]{0,18})")


def _token(field: str) -> int:
    token = int(field)
    if token >= 2**63:  # a bigint's range
        raise paging.not_a_cursor()
    return token


def lock_cursor(run: Run) -> str:
    return paging.encode(f"runs:{run.fencing_token}")


def decode_lock_cursor(cursor: str) -> int:
    return _token(paging.read(cursor, _LOCK_CURSOR).group(1))


def all_cursor(run: Run) -> str:
    return paging.encode(f"at:{paging.micros(as_utc_naive(run.acquired_at))}:{run.fencing_token}")


def decode_all_cursor(cursor: str) -> tuple[datetime, int]:
    match = paging.read(cursor, _ALL_CURSOR)
    return paging.time_of(match.group(1)), _token(match.group(2))


def _list(page: RunPage, cursor: Callable[[Run], str]) -> Response:
    next_cursor = cursor(page.runs[-1]) if page.has_more else None
    items = [run_view(run, page.db_time) for run in page.runs]
    return json_response(RunList(items=items, next_cursor=next_cursor, db_time=page.db_time))


@router.get(
    f"{LOCKS}/{{name:lockpath}}/runs",
    operation_id="listLockRuns",
    summary="A lock's runs, newest first",
    description="Every acquisition of the lock (through schedlock or by a Java node) with how it ended, newest "
    "first (by fencing token). A name never acquired has no runs (an empty page).",
    response_model=RunList,
    responses={**doc.ok(examples.LOCK_RUNS), **examples.READ_ONE},
)
async def lock_runs(
    name: RowName,
    principal: PrincipalDep,
    history: HistoryDep,
    settings: SettingsDep,
    limit: paging.Limit = 100,
    cursor: paging.Cursor = None,
) -> Response:
    principal.require(name, write=False)
    paging.check_limit(settings, limit)
    before = decode_lock_cursor(cursor) if cursor is not None else None
    return _list(await history.lock_page(name, limit=limit, before=before), lock_cursor)


@router.get(
    f"{V1}/runs",
    operation_id="listRuns",
    summary="Runs of every lock, newest first",
    description="Runs of the locks the caller may read, newest first by acquisition time, filtered by name prefix, "
    "by when they were acquired ([since, until)) and by whether they have ended.",
    response_model=RunList,
    responses={**doc.ok(examples.ALL_RUNS), **examples.READ},
)
async def list_runs(
    principal: PrincipalDep,
    history: HistoryDep,
    settings: SettingsDep,
    prefix: paging.Prefix = None,
    since: Annotated[QueryTime | None, Query(description="Only runs acquired at or after this (ISO-8601).")] = None,
    until: Annotated[QueryTime | None, Query(description="Only runs acquired before this (ISO-8601).")] = None,
    ended: Annotated[
        bool | None,
        Query(description="true: only runs that have ended (any outcome but running); false: only running."),
    ] = None,
    limit: paging.Limit = 100,
    cursor: paging.Cursor = None,
) -> Response:
    paging.check_limit(settings, limit)
    before = decode_all_cursor(cursor) if cursor is not None else None
    page = await history.page(
        limit=limit, before=before, prefix=prefix, scope=principal.prefixes, since=since, until=until, ended=ended
    )
    return _list(page, all_cursor)


@router.get(
    f"{LOCKS}/{{name:lockpath}}/skips",
    operation_id="getLockSkips",
    summary="A lock's skipped attempts per hour",
    description="Acquire attempts answered 409 `lock_held`, per hour of the database clock, over the last `hours` "
    "hours (the current one included), newest first; hours without skips are left out. Counts reach the database "
    "every few seconds (SCHEDLOCK_HISTORY_FLUSH_INTERVAL).",
    response_model=SkipList,
    responses={**doc.ok(examples.SKIPS), **examples.READ_ONE},
)
async def lock_skips(
    name: RowName,
    principal: PrincipalDep,
    history: HistoryDep,
    hours: Annotated[
        int, Query(ge=1, le=MAX_SKIP_HOURS, description="How many hours back (default 24)."), DIGITS_ONLY
    ] = 24,
) -> Response:
    principal.require(name, write=False)
    found, db_time = await history.skips(name, hours)
    items = [SkipHourView(hour=h.hour, skipped=h.skipped) for h in found]
    total = sum(h.skipped for h in found)
    return json_response(SkipList(name=name, hours=hours, items=items, total=total, db_time=db_time))
