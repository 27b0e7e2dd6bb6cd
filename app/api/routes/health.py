"""Liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api import openapi as doc
from app.api.deps import StoreDep
from app.api.models import Health
from app.db.revisions import HEAD, encoding_problem, is_ready_revision
from app.errors import DatabaseUnsuitable, StorageUnavailable

router = APIRouter(tags=["health"])
_ENCODING = "SELECT current_setting('server_encoding') AS encoding"


@router.get(
    "/healthz",
    operation_id="health",
    summary="Liveness: the process answers",
    description="Always 200 while the process serves requests; does not touch the database.",
    response_model=Health,
    responses=doc.ok({"status": "ok"}),
)
async def healthz() -> Response:
    return Response(content=b'{"status":"ok"}', media_type="application/json")


@router.get(
    "/readyz",
    operation_id="ready",
    summary="Readiness: the database answers and the schema is migrated",
    description="200 when the lock table is reachable and migrated to this release's schema revision (or a newer "
    "one, during a rolling upgrade); 503 otherwise.",
    response_model=Health,
    responses={**doc.ok({"status": "ready"}), **doc.DOWN},
)
async def readyz(request: Request, store: StoreDep) -> Response:
    # A database that cannot store every name (its encoding is not UTF8) is not ready, whatever its schema.
    encoding = (await store.fetch("schema_revision", _ENCODING))[0]["encoding"]
    problem = encoding_problem(encoding)
    if problem is not None:
        raise DatabaseUnsuitable(problem)
    current = await store.schema_revision(request.app.state.version_table)
    if not is_ready_revision(current):
        raise StorageUnavailable(
            f"schema is at revision {current or 'none'}, expected {HEAD}; run `schedlock-server migrate`"
        )
    return Response(content=b'{"status":"ready"}', media_type="application/json")
