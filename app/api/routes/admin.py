"""Force-release: an admin frees a lock whose holder is gone (docs/history.md, "Force-release").

Its body is read and bound as the lock operations' are (app.api.bodies).
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api import openapi as doc
from app.api import openapi_history as examples
from app.api.bodies import JsonBodyRoute
from app.api.deps import PrincipalDep, ServicesDep
from app.api.models_history import ForceReleaseRequest, ForceReleaseResponse
from app.api.responses import json_response
from app.api.routes import LOCKS
from app.api.routes.locks import RowName
from app.api.routes.runs import run_view
from app.locking.names import refuse_reserved
from app.locking.timefmt import format_time

# JsonBodyRoute: the body is read as the lock routes read theirs (JSON only, else 415; see app.api.bodies).
router = APIRouter(prefix=LOCKS, tags=["history"], route_class=JsonBodyRoute)
audit = logging.getLogger("schedlock.audit")

#: Who forced, in the run and the audit log, on a server without tokens.
ANONYMOUS = "anonymous"


@router.post(
    "/{name:lockpath}/force-release",
    operation_id="forceReleaseLock",
    summary="Free a held lock now (admin)",
    description=(
        "For an API token marked `admin` (within its prefixes), or anyone on a server without tokens. Sets "
        "`lock_until` to the database's now, ignoring the at-least window; ends the lease, so its holder's release "
        "and extend answer 409 `not_holder`; records the run as `force_released` with who and why; logs an audit "
        "line. A lock that is not held is left alone (`forced: false`). The row is never deleted."
    ),
    response_model=ForceReleaseResponse,
    responses={**doc.ok(examples.FORCE_RESPONSE), **examples.FORCE},
    openapi_extra=doc.request_body(examples.FORCE_REQUEST),
)
async def force_release(
    name: RowName,
    body: ForceReleaseRequest,
    principal: PrincipalDep,
    services: ServicesDep,
    request: Request,
) -> Response:
    principal.require_admin(name)
    refuse_reserved(name)
    by = principal.name or ANONYMOUS
    forced, row = await services.store.force_release(name, by, body.reason)
    run = await services.history.run(name, row.fencing_token) if row.fencing_token else None
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
                    "issuer": principal.issuer,
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
