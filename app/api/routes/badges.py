"""``GET /v1/jobs/{name}/badge.svg``: a job's state as a status badge (docs/jobs.md), for a README or a wiki page.

Readable with a read token for the name, or without any token for a job marked ``public`` (a badge is embedded
where no token can go). Without a token, an unknown job and a job that is not public answer the same 404, so a
badge URL tells nothing about which jobs exist.
"""

from __future__ import annotations

from html import escape

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api import openapi_jobs as examples
from app.api.routes.jobs import JOBS, jobs_of
from app.api.routes.locks import LockName
from app.auth.authenticator import Authenticator
from app.errors import JobNotFound

router = APIRouter(prefix=JOBS, tags=["jobs"])

#: The badge's colour per job state (up / late / down, and the quiet ones).
COLOURS = {"up": "#2e8540", "late": "#b86e00", "down": "#c0392b", "paused": "#6c757d", "new": "#6c757d"}
_CHAR = 6.6  # a rough width per character of the badge's 11px font


def badge(label: str, value: str, colour: str) -> str:
    """A flat two-part badge: ``label`` on grey, ``value`` on ``colour``."""
    left, right = int(len(label) * _CHAR) + 12, int(len(value) * _CHAR) + 12
    width = left + right
    label, value = escape(label), escape(value)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="20" role="img" '
        f'aria-label="{label}: {value}"><title>{label}: {value}</title>'
        f'<rect width="{left}" height="20" fill="#555"/><rect x="{left}" width="{right}" height="20" fill="{colour}"/>'
        '<g fill="#fff" text-anchor="middle" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11">'
        f'<text x="{left / 2}" y="14">{label}</text><text x="{left + right / 2}" y="14">{value}</text></g></svg>'
    )


@router.get(
    "/{name:lockpath}/badge.svg",
    operation_id="getJobBadge",
    summary="A job's state as an SVG badge",
    description="up / late / down (or paused, new) as a status badge. With a read token for the name, or without "
    "a token for a job marked `public`; otherwise 404 (without a token, a job that is not public is not told apart "
    "from one that does not exist).",
    response_class=Response,
    responses={
        200: {
            "content": {
                "image/svg+xml": {
                    "schema": {"type": "string"},
                    "example": badge("nightly-billing", "up", COLOURS["up"]),
                }
            },
            "description": "The badge.",
        },
        **examples.READ_ONE,
    },
)
async def job_badge(name: LockName, request: Request) -> Response:
    authorization = request.headers.get("authorization")
    authenticator: Authenticator = request.app.state.auth
    if authorization or not authenticator.enabled:
        (await authenticator.authenticate(authorization)).require(name, write=False)
        public_only = False
    else:
        public_only = True
    status = await jobs_of(request).status(name)
    if status is None or (public_only and not status.job.public):
        raise JobNotFound(f"no job named {name!r}", name=name)
    svg = badge(name, status.state, COLOURS[status.state])
    return Response(svg, media_type="image/svg+xml", headers={"Cache-Control": "no-cache"})
