"""The one place where errors become HTTP responses.

Domain errors (``app.errors``) carry their code and status; this module renders them as
``{"error": {"code": ..., "message": ..., <details>}}`` with their headers, describes request validation failures as
``invalid_request`` naming the field, and answers Starlette's own 404/405/400 and any unexpected exception (500) in
the same shape. A client that disconnects before its body is complete gets 499 (nginx's "client closed request"),
which it never receives: the status is for the access log and the metrics, and it is not a server error.
"""

from __future__ import annotations

import logging
import re

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Scope

from app.api.responses import JsonBytes
from app.errors import InternalError, InvalidRequest, MethodNotAllowed, RouteNotFound, SchedlockError
from app.ops.logs import REQUEST_ID_SCOPE_KEY, request_id

logger = logging.getLogger("schedlock.errors")

CLIENT_CLOSED_REQUEST = 499
#: The scope key under which the code of a known error is noted, for the observer (a 409 may be lock_held or
#: slot_done: app.api.edge counts them apart).
ERROR_CODE_KEY = "schedlock.error_code"


def client_closed_response() -> Response:
    """The answer to a client that went away mid-request; it never arrives, the access log and metrics see it."""
    return Response(status_code=CLIENT_CLOSED_REQUEST)


def error_response(exc: SchedlockError) -> Response:
    return JsonBytes(exc.rendered(), exc.status, dict(exc.headers))


def _describe_validation(exc: RequestValidationError) -> InvalidRequest:
    problems = []
    for err in exc.errors():
        location = [str(part) for part in err.get("loc", ()) if part not in ("body", "path", "query")]
        field = ".".join(location) or "body"
        message = str(err.get("msg", "invalid value"))
        if err.get("type") == "json_invalid":
            field, message = "body", "not valid JSON"
        message = message.removeprefix("Value error, ")
        problems.append({"field": field, "message": message})
    first = problems[0] if problems else {"field": "body", "message": "invalid request"}
    return InvalidRequest(f"{first['field']}: {first['message']}", field=first["field"], problems=problems)


def known_error_response(exc: Exception, scope: Scope | None = None) -> Response | None:
    """The response for a domain error, a validation error or a client gone mid-body; None for anything else (a bug:
    500). A domain error's code is noted in ``scope`` (ERROR_CODE_KEY), when given."""
    if isinstance(exc, SchedlockError):
        if scope is not None:
            scope[ERROR_CODE_KEY] = exc.code
        return error_response(exc)
    if isinstance(exc, RequestValidationError):
        return error_response(_describe_validation(exc))
    if isinstance(exc, ClientDisconnect):
        return client_closed_response()
    return None


async def _handle_known_error(request: Request, exc: Exception) -> Response:
    response = known_error_response(exc, request.scope)
    assert response is not None
    return response


async def _handle_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        return error_response(RouteNotFound(f"no route for {request.method} {request.url.path}"))
    if exc.status_code == 405:
        response = error_response(MethodNotAllowed(f"{request.method} is not allowed on {request.url.path}"))
        response.headers.update(exc.headers or {})  # Allow: the methods the route has (RFC 9110 requires it)
        allowed = _allowed_methods(request)
        if allowed:  # Starlette names the first route's only; one path may have several (GET, PUT, DELETE a job)
            response.headers["Allow"] = ", ".join(allowed)
        return response
    if exc.status_code == 400:  # e.g. a body that is not JSON at all
        return error_response(InvalidRequest(str(exc.detail), field="body"))
    body = {"error": {"code": f"http_{exc.status_code}", "message": str(exc.detail)}}
    return Response(
        content=orjson.dumps(body),
        status_code=exc.status_code,
        media_type="application/json",
        headers=exc.headers,
    )


def _allowed_methods(request: Request) -> list[str]:
    """The methods the API document declares for this request's path (one path may have several: GET, PUT and
    DELETE a job, where Starlette names only the first route's); empty for a path it does not document."""
    table: list[tuple[re.Pattern[str], list[str]]] | None = getattr(request.app.state, "allow_table", None)
    if table is None:
        table = []
        for path, item in request.app.openapi()["paths"].items():
            literal = re.split(r"\{[^}]+\}", path)
            pattern = re.compile("[^/]+".join(re.escape(part) for part in literal))
            table.append((pattern, [method.upper() for method in item]))
        request.app.state.allow_table = table
    path = request.url.path
    return next((methods for pattern, methods in table if pattern.fullmatch(path)), [])


async def _handle_unexpected(request: Request, exc: Exception) -> Response:
    """A 500 that names its request: Starlette's server error handler calls this outside the observer, whose
    request id is no longer current, so the id is read from the scope (the edge middleware puts it
    there) for the log line and the answer's X-Request-ID: the body sends the caller to the log."""
    rid = request.scope.get(REQUEST_ID_SCOPE_KEY)
    context = request_id.set(rid)
    try:
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
    finally:
        request_id.reset(context)
    response = error_response(InternalError("internal error; see the server log"))
    if rid is not None:
        response.headers["x-request-id"] = rid
    return response


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(SchedlockError, _handle_known_error)
    app.add_exception_handler(RequestValidationError, _handle_known_error)
    app.add_exception_handler(ClientDisconnect, _handle_known_error)
    app.add_exception_handler(StarletteHTTPException, _handle_http_error)
    app.add_exception_handler(Exception, _handle_unexpected)
