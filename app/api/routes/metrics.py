"""``GET /metrics``: the app's Prometheus registry (``app.ops.metrics``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.openapi import METRICS
from app.ops.metrics import Metrics

router = APIRouter(tags=["observability"])


@router.get(
    "/metrics",
    operation_id="metrics",
    summary="Prometheus metrics",
    description=(
        "Metrics in Prometheus' text format (OpenMetrics when the Accept header asks for it): lock outcomes, "
        "request and database latency, pool usage, held locks. No lock names, no secrets. See docs/deploy.md."
    ),
    response_class=Response,
    responses={
        200: {
            "content": {"text/plain": {"schema": {"type": "string"}, "example": METRICS}},
            "description": "The metrics.",
        }
    },
)
async def metrics(request: Request) -> Response:
    m: Metrics = request.app.state.metrics
    await m.refresh_held_locks()
    await m.refresh_jobs()
    content, content_type = m.exposition(request.headers.get("accept", ""))
    return Response(content=content, headers={"Content-Type": content_type})
