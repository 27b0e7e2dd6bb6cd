"""The dashboard: ``GET /ui`` (the locks), ``GET /ui/locks/{name}`` (one lock, its runs), ``GET /ui/jobs`` (the jobs,
each with a strip of its last ticks), ``GET /ui/jobs/{name}`` (one job, its ticks) and their assets.

The pages are rendered here with Jinja2, without any data: the data needs the caller's API token, which the browser
keeps in ``sessionStorage`` and sends as a bearer header from the page's script (app/ui/static/ui.js). There are no
cookies, so no other site can make a browser act with the token. ``GET /ui/session`` tells the page what its token
may do. None of this is part of the JSON API's contract (not in the OpenAPI document).
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, FastAPI, Path, Query, Request
from fastapi.templating import Jinja2Templates
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from app import __version__
from app.api.deps import PrincipalDep, settings_of
from app.auth.authenticator import Authenticator
from app.locking.names import NAME_MAX, NAME_PATTERN
from app.ui import STATIC, TEMPLATES

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=TEMPLATES)

#: The page may load and connect to nothing but this server; no inline script or style; no framing (a framed
#: force-release button could be clicked through an overlay).
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _page(request: Request, template: str, **context: Any) -> Response:
    authenticator: Authenticator = request.app.state.auth
    settings = settings_of(request)
    return templates.TemplateResponse(
        request,
        template,
        {
            "base": request.scope.get("root_path", "").rstrip("/"),
            "version": __version__,
            "auth": authenticator.enabled,
            # The list's page size is capped by the server (SCHEDLOCK_LIST_MAX_LIMIT): the page asks for no more.
            "list_max": settings.list_max_limit,
            **context,
        },
        headers=SECURITY_HEADERS,
    )


#: No C0 or C1 control characters (a "/" is fine).
_PRINTABLE = r"^[^\x00-\x1f\x7f-\x9f]+$"


@router.get("/ui")
async def locks_page(
    request: Request,
    prefix: Annotated[str, Query(max_length=NAME_MAX, pattern=r"^[^\x00-\x1f\x7f-\x9f]*$")] = "",
    held: bool = False,
) -> Response:
    return _page(request, "locks.html", page="locks", prefix=prefix, held=held)


@router.get("/ui/locks/{name:path}")
async def lock_page(
    request: Request, name: Annotated[str, Path(min_length=1, max_length=NAME_MAX, pattern=_PRINTABLE)]
) -> Response:
    # A row's name, as the API's reads take it, "/" included: the table lists a Java node's "billing/" and links
    # here. Only control characters are refused, on a page that shows the name.
    return _page(request, "lock.html", page="lock", name=name)


@router.get("/ui/jobs")
async def jobs_page(
    request: Request,
    prefix: Annotated[str, Query(max_length=NAME_MAX, pattern=r"^[^\x00-\x1f\x7f-\x9f]*$")] = "",
) -> Response:
    return _page(request, "jobs.html", page="jobs", prefix=prefix)


@router.get("/ui/jobs/{name}")
async def job_page(
    request: Request, name: Annotated[str, Path(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]
) -> Response:
    return _page(request, "job.html", page="job", name=name)


@router.get("/ui/session")
async def session(principal: PrincipalDep, request: Request) -> Response:
    """Who the page's token is and what it may do: the page shows it and offers only what is allowed."""
    authenticator: Authenticator = request.app.state.auth
    body = {
        "auth": authenticator.enabled,
        "token": principal.name,
        "prefixes": list(principal.prefixes) if principal.prefixes is not None else None,
        "access": "read-write" if principal.can_write else "read",
        "admin": principal.is_admin,
    }
    return Response(orjson.dumps(body), media_type="application/json", headers={"Cache-Control": "no-store"})


class _Assets(StaticFiles):
    """The page's assets, with the pages' security headers (a script or stylesheet is never framed or sniffed)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message.get("headers", ()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"cache-control", b"no-cache"),
                ]
            await send(message)

        await super().__call__(scope, receive, with_headers)


def install(app: FastAPI) -> None:
    """Serve the dashboard's pages and assets on ``app``."""
    app.include_router(router)
    app.mount("/ui/static", _Assets(directory=STATIC), name="ui-static")
