"""Request bodies are JSON, said and spelled: one reading for both ways into the lock routes.

A body must be declared JSON (``Content-Type: application/json`` or ``application/<something>+json``), else 415
``unsupported_media_type``. Why so strict: a browser sends ``text/plain``, form-encoded and multipart bodies to
any site without asking first (a CORS "simple" request), while a JSON body needs a preflight, which the origin
rule (app.api.middleware.origin) refuses for foreign pages. Accepting JSON under any label let any web page the
operator opened take or release locks on a loopback server without tokens.

The body is then read by orjson: UTF-8 only, no NaN, no lone surrogates (text Postgres could not store). FastAPI
on its own would use ``json.loads``, which takes all three (and UTF-16): ``JsonBodyRoute`` makes FastAPI's generic
path read bodies here first, so it and the lean path (app.api.middleware.lean) agree on every body. (FastAPI's own
``strict_content_type``, on by default, only keeps it from parsing a body without a Content-Type; such a body, like
a ``text/plain`` one, then fails validation as a 422 "not a dictionary", where the lean path used to parse it.)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from app.api.deps import bearer
from app.errors import UnsupportedMediaType

# RFC 9110 media type, parameters ignored (JSON has no charset: it is UTF-8). ASCII only, matched whole.
_JSON_TYPE = re.compile(r"application/(?:[!#$%&'*+.^_`|~0-9a-z-]*\+)?json", re.ASCII | re.IGNORECASE)


def read_json(content_type: str | None, raw: bytes) -> Any:
    """The JSON value of a non-empty body. Raises UnsupportedMediaType unless ``content_type`` says JSON, and
    RequestValidationError (``json_invalid``, located at the body, as FastAPI locates it) when it is not JSON."""
    media_type = None if content_type is None else content_type.split(";", 1)[0].strip(" \t")
    if media_type is None or not _JSON_TYPE.fullmatch(media_type):
        shown = "none" if media_type is None else repr(media_type[:100])
        raise UnsupportedMediaType(f"the body must be JSON, sent with 'Content-Type: application/json' (got {shown})")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body",), "msg": "JSON decode error"}]) from None


class JsonBodyRoute(APIRoute):
    """An APIRoute whose body, if it takes one, is read by ``read_json`` after authentication and before FastAPI's
    own handling: the generic path then answers as the lean path does (401, then 415, then malformed JSON)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def read_body_first(request: Request) -> Response:
            await bearer(request)  # the route's dependency authenticates again, from the same header: same answer
            raw = await request.body()
            if raw:
                # FastAPI parses a JSON body with request.json(), which returns what Starlette cached here.
                vars(request)["_json"] = read_json(request.headers.get("content-type"), raw)
            return await handler(request)

        return read_body_first
