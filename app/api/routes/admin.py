"""Force-release: an admin frees a lock whose holder is gone (docs/history.md, "Force-release").

Not a lean route: it is rare, and FastAPI's generic handling is fine for it.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.deps import HistoryDep, PrincipalDep, StoreDep
from app.api.models_history import ForceReleaseRequest, ForceReleaseResponse
from app.api.routes.locks import LockName
from app.api.routes.runs import READ_ERRORS, error_doc, json_response, run_view
from app.locking.timefmt import format_time

router = APIRouter(tags=["history"])
audit = logging.getLogger("schedlock.audit")

#: Who forced, in the run and the audit log, on a server without tokens.
ANONYMOUS = "anonymous"


@router.post(
    "/v1/locks/{name:lockpath}/force-release",
    operation_id="forceReleaseLock",
    summary="Free a held lock now (admin)",
    description=(
        "For an API token marked `admin` (within its prefixes), or anyone on a server without tokens. Sets "
        "`lock_until` to the database's now, ignoring the at-least window; ends the lease, so its holder's release "
        "and extend answer 409 `not_holder`; records the run as `force_released` with who and why; logs an audit "
        "line. A lock that is not held is left alone (`forced: false`). The row is never deleted."
    ),
    response_model=ForceReleaseResponse,
    responses={
        403: error_doc("`forbidden`: the token is not an admin token, or the name is outside its prefixes."),
        404: error_doc("`lock_not_found`: no lock of that name."),
        413: error_doc("`payload_too_large`: the body exceeds the server's limit (SCHEDLOCK_MAX_BODY_BYTES)."),
        **READ_ERRORS,
    },
)
async def force_release(
    name: LockName,
    body: ForceReleaseRequest,
    principal: PrincipalDep,
    store: StoreDep,
    history: HistoryDep,
    request: Request,
) -> Response:
    principal.require_admin(name)
    by = principal.name or ANONYMOUS
    forced, row = await store.force_release(name, by, body.reason)
    run = await history.run(row.fencing_token) if row.fencing_token else None
    if forced:
        client = request.client.host if request.client else None
        audit.info(
            "force-release of %r by %s: %s",
            name,
            by,
            body.reason,
            extra={
                "fields": {
                    "lock": name,
                    "by": by,
                    "reason": body.reason,
                    "fencing_token": row.fencing_token,
                    "locked_by": row.locked_by,
                    "locked_at": format_time(row.locked_at),
                    "client": client,
                }
            },
        )
    return json_response(
        ForceReleaseResponse(
            name=name,
            forced=forced,
            lock_until=row.lock_until,
            db_time=row.db_time,
            run=run_view(run, row.db_time) if run is not None else None,
        )
    )
