"""``GET /redoc``: ReDoc served from the app, making no request off the host.

fastapi_offline serves Swagger UI and ReDoc's bundles from the app, but ReDoc's bundle itself loads one thing from
the internet: the Redocly logo beside its "API docs by Redocly" link (``https://cdn.redoc.ly/redoc/logo-mini.svg``),
a broken image offline and a request to a third party online. This route serves the same bundle with that URL
replaced by an empty inline image; everything else is fastapi_offline's. tests/system/browser/test_docs_page.py opens
the page in a browser with the network cut off.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html
from starlette.responses import HTMLResponse, Response

#: Where fastapi_offline mounts its static files (its default) and the page that used to be its.
STATIC = "/static-offline-docs"
REDOC = "/redoc"
_BUNDLE = Path(fastapi_offline.__file__).parent / "static" / "redoc.standalone.js"
_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"
_EMPTY_IMAGE = b"data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='1' height='1'/%3E"

router = APIRouter(include_in_schema=False)


@cache
def redoc_bundle() -> bytes:
    """ReDoc's bundle as fastapi_offline ships it, minus its one request to a CDN (read once, on first use)."""
    bundle = _BUNDLE.read_bytes()
    assert _LOGO in bundle, (
        "ReDoc's bundle changed: check what it loads from outside (tests/system/browser/test_docs_page.py)"
    )
    return bundle.replace(_LOGO, _EMPTY_IMAGE)


@router.get(f"{REDOC}/redoc.standalone.js")
async def redoc_js() -> Response:
    return Response(redoc_bundle(), media_type="text/javascript", headers={"Cache-Control": "public, max-age=3600"})


@router.get(REDOC)
async def redoc(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_redoc_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}{REDOC}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{STATIC}/favicon.png",
        with_google_fonts=False,
    )
