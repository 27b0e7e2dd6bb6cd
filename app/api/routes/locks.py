"""The lock API (v1). Thin: validate, call the store, shape the answer. Errors are raised, never returned."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Path, Query
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.responses import Response

from app.api import openapi as doc
from app.api import paging
from app.api.bodies import JsonBodyRoute
from app.api.deps import PrincipalDep, ServicesDep, SettingsDep, StoreDep
from app.api.models import (
    AcquireRequest,
    AcquireResponse,
    ExtendRequest,
    ExtendResponse,
    LockList,
    LockResponse,
    LockView,
    ReleaseRequest,
    ReleaseResponse,
)
from app.api.responses import json_response
from app.api.routes import LOCKS
from app.errors import InvalidRequest
from app.locking.durations import format_duration
from app.locking.leases import new_locked_by
from app.locking.names import NAME_MAX, NAME_PATTERN, refuse_reserved
from app.locking.rows import LockRow
from app.schedules.ticks import chooser
from app.settings import Settings

# JsonBodyRoute: the lock operations' bodies are read, validated and bound in one place (app.api.bodies).
router = APIRouter(prefix=LOCKS, tags=["locks"], route_class=JsonBodyRoute)


class _NamePath(PathConvertor):
    """Like ``path`` (so a name with '/' gets a clear 422, not a 404), but a newline matches too: a name with one
    is a bad name (422), not an unknown route."""

    regex = r"[\s\S]*"


class _ReadPath(PathConvertor):
    """As _NamePath, except that it never swallows an action: ``GET /v1/locks/x/acquire`` is the acquire route
    with the wrong method (405 with ``Allow: POST``), not a read of a lock named "x/acquire"; and ``/runs``,
    ``/skips`` are the history's routes (app.api.routes.runs)."""

    regex = r"(?:(?!/(?:acquire|release|extend|force-release|runs|skips)$)[\s\S])*"


register_url_convertor("lockpath", _NamePath())
register_url_convertor("lockread", _ReadPath())

#: The same rule as app.locking.names.LOCK_NAME.
LockName = Annotated[
    str,
    Path(
        min_length=1,
        max_length=NAME_MAX,
        pattern=NAME_PATTERN,
        description="Lock name: 1-64 characters, no control characters, no '/'.",
        examples=["nightly-billing"],
    ),
]
#: A name that must be a row's already (reads, history, force-release): any 1-64 characters, for the rows a Java
#: node's ShedLock made with names the API does not make ("billing/"). '/' and '.' go percent-encoded in the URL.
RowName = Annotated[
    str,
    Path(
        min_length=1,
        max_length=NAME_MAX,
        description="Lock name as stored: 1-64 characters, any (a Java node may have made names with '/' or other "
        "characters the write operations refuse); percent-encode '/' as %2F and '.' as %2E.",
        examples=["nightly-billing"],
    ),
]


def _check_window(settings: Settings, at_most: timedelta, at_least: timedelta | None) -> None:
    if at_most <= timedelta(0):
        raise InvalidRequest("lock_at_most_for: must be greater than zero", field="lock_at_most_for")
    if at_most > settings.max_lock_duration:
        raise InvalidRequest(
            f"lock_at_most_for: must not exceed the server's maximum {format_duration(settings.max_lock_duration)}",
            field="lock_at_most_for",
        )
    if at_least is not None and at_least > at_most:
        raise InvalidRequest("lock_at_least_for: must not exceed lock_at_most_for", field="lock_at_least_for")


def _view(row: LockRow) -> LockView:
    return LockView(
        name=row.name,
        locked_by=row.locked_by,
        locked_at=row.locked_at,
        lock_until=row.lock_until,
        held=row.held,
        fencing_token=row.fencing_token,
        last_completed_slot=row.last_completed_slot,
        last_completed_at=row.last_completed_at,
    )


@router.post(
    "/{name:lockpath}/acquire",
    operation_id="acquireLock",
    summary="Acquire a lock, or learn it is held (never waits)",
    description=(
        "Takes the lock if nobody holds it or the holder's `lock_until` has passed, using the database's clock. "
        "A held lock answers 409 at once, with the holder: the caller should skip this run, not wait. The "
        "`token` is needed to release or extend, and is shown only here. With `slot` or `schedule`, a tick "
        "already completed answers 409 `slot_done` instead, whether or not the lock is held (docs/slots.md)."
    ),
    response_model=AcquireResponse,
    responses={
        **doc.ok(doc.ACQUIRE_RESPONSE),
        **doc.HELD,
        **doc.AUTH,
        **doc.TOO_LARGE,
        **doc.NOT_JSON,
        **doc.BAD_INPUT,
        **doc.DOWN,
    },
    openapi_extra=doc.request_body(doc.ACQUIRE_REQUEST),
)
async def acquire(name: LockName, body: AcquireRequest, principal: PrincipalDep, services: ServicesDep) -> Response:
    principal.require(name, write=True)
    refuse_reserved(name)
    settings = services.settings
    _check_window(settings, body.lock_at_most_for, body.lock_at_least_for)
    choose = chooser(body.slot, body.schedule, body.timezone, settings.slot_early_grace)
    locked_by = new_locked_by(body.holder, principal.name)
    store, at_most, at_least = services.store, body.lock_at_most_for, body.lock_at_least_for
    if choose is None:
        lease = await store.acquire(name, at_most, at_least, locked_by)
    else:
        lease = await store.acquire_slot(name, at_most, at_least, locked_by, choose)
        if body.schedule is not None:  # the acquire names its job's schedule: register it (docs/jobs.md)
            await services.registrar.saw(name, body.schedule, body.timezone)
    row = lease.row
    return json_response(
        AcquireResponse(
            name=row.name,
            token=lease.token,
            fencing_token=row.fencing_token,
            locked_at=row.locked_at,
            lock_until=row.lock_until,
            locked_by=row.locked_by,
            db_time=row.db_time,
            slot=row.slot,
        )
    )


@router.post(
    "/{name:lockpath}/release",
    operation_id="releaseLock",
    summary="Release a lease",
    description=(
        "Ends the lease: `lock_until` becomes max(now, locked_at + lock_at_least_for), so the at-least window "
        "given at acquisition still holds. Works while the row still carries this lease, even after it "
        "expired; releasing twice is harmless. For a lease with a slot, `completed` (default true) says whether "
        "the job finished: only then is the slot done (docs/slots.md). With or without a slot, `completed: false` "
        "makes the run a failed tick of its job (docs/jobs.md)."
    ),
    response_model=ReleaseResponse,
    responses={
        **doc.ok(doc.RELEASE_RESPONSE),
        **doc.NOT_FOUND,
        **doc.not_holder(
            "release", "`not_holder`: the token does not hold this lock (wrong, or someone took it over)."
        ),
        **doc.AUTH,
        **doc.TOO_LARGE,
        **doc.NOT_JSON,
        **doc.BAD_INPUT,
        **doc.DOWN,
    },
    openapi_extra=doc.request_body(doc.RELEASE_REQUEST),
)
async def release(name: LockName, body: ReleaseRequest, principal: PrincipalDep, services: ServicesDep) -> Response:
    principal.require(name, write=True)
    refuse_reserved(name)
    row = await services.store.release(name, body.token, body.completed)
    done = None if row.slot is None else row.last_completed_slot == row.slot
    if not body.completed:
        # The job failed: its run is the tick's failure (docs/jobs.md). Rare, so a statement of its own.
        await services.jobs.store.mark_failed(name, row.fencing_token, row.db_time)
    answer = ReleaseResponse(
        name=row.name, lock_until=row.lock_until, db_time=row.db_time, slot=row.slot, completed=done
    )
    return json_response(answer)


@router.post(
    "/{name:lockpath}/extend",
    operation_id="extendLock",
    summary="Extend a live lease",
    description=(
        "Moves `lock_until` to the database's now + `lock_at_most_for`, only while the lease is live: once it "
        "has expired it cannot be extended, even if nobody took it (as ShedLock). `locked_at` does not move."
    ),
    response_model=ExtendResponse,
    responses={
        **doc.ok(doc.EXTEND_RESPONSE),
        **doc.NOT_FOUND,
        **doc.not_holder(
            "extend", "`not_holder`: the lease expired, was released or taken over, or the token is wrong."
        ),
        **doc.AUTH,
        **doc.TOO_LARGE,
        **doc.NOT_JSON,
        **doc.BAD_INPUT,
        **doc.DOWN,
    },
    openapi_extra=doc.request_body(doc.EXTEND_REQUEST),
)
async def extend(name: LockName, body: ExtendRequest, principal: PrincipalDep, services: ServicesDep) -> Response:
    principal.require(name, write=True)
    refuse_reserved(name)
    _check_window(services.settings, body.lock_at_most_for, body.lock_at_least_for)
    row = await services.store.extend(name, body.token, body.lock_at_most_for, body.lock_at_least_for)
    return json_response(
        ExtendResponse(
            name=row.name,
            fencing_token=row.fencing_token,
            locked_at=row.locked_at,
            lock_until=row.lock_until,
            db_time=row.db_time,
        )
    )


@router.get(
    "/{name:lockread}",
    operation_id="getLock",
    summary="Read one lock",
    description="The lock's row as the database has it now, with `held` judged by the database's clock.",
    response_model=LockResponse,
    responses={**doc.ok(doc.LOCK_RESPONSE), **doc.NOT_FOUND, **doc.AUTH, **doc.BAD_INPUT, **doc.DOWN},
)
async def get_lock(name: RowName, principal: PrincipalDep, services: ServicesDep) -> Response:
    principal.require(name, write=False)
    row = await services.store.get(name)
    return json_response(LockResponse(**_view(row).model_dump(), db_time=row.db_time))


@router.get(
    "",
    operation_id="listLocks",
    summary="List locks, by name",
    description=(
        "Pages through the lock table in name order (code point order), optionally only names starting with "
        "`prefix` and only held (or only free) locks. Pass `next_cursor` back as `cursor` for the next page. "
        "With a token, only names within its prefixes are listed: a `prefix` outside them gives an empty page."
    ),
    response_model=LockList,
    responses={**doc.ok(doc.LOCK_LIST), 401: doc.AUTH[401], 429: doc.AUTH[429], **doc.BAD_INPUT, **doc.DOWN},
)
async def list_locks(
    store: StoreDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    prefix: paging.Prefix = None,
    held: Annotated[bool | None, Query(description="true: only held locks; false: only free ones.")] = None,
    limit: paging.Limit = 100,
    cursor: paging.Cursor = None,
) -> Response:
    paging.check_limit(settings, limit)
    after = None
    if cursor is not None and (after := paging.decode(cursor)) is None:
        raise paging.not_a_cursor()
    page = await store.page(prefix=prefix, held=held, after=after, limit=limit, scope=principal.prefixes)
    next_cursor = paging.encode(page.rows[-1].name) if page.has_more else None
    return json_response(LockList(items=[_view(r) for r in page.rows], next_cursor=next_cursor, db_time=page.db_time))
