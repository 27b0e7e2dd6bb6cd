"""Domain errors, and the one place where they (and every other failure) become HTTP responses.

Every error response has the shape ``{"error": {"code": ..., "message": ..., <details>}}``. The ``code`` values
are a stable contract shared with the client library (``schedlock.ERROR_CLASSES``): add, never rename.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

logger = logging.getLogger("schedlock.errors")


class SchedlockError(Exception):
    """Base of every error the service reports on purpose."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    headers: ClassVar[Mapping[str, str]] = MappingProxyType({})

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.details}}


class InvalidRequest(SchedlockError):
    status = 422
    code = "invalid_request"


class LockHeld(SchedlockError):
    status = 409
    code = "lock_held"


class NotHolder(SchedlockError):
    status = 409
    code = "not_holder"


class LockNotFound(SchedlockError):
    status = 404
    code = "lock_not_found"


class StorageUnavailable(SchedlockError):
    status = 503
    code = "storage_unavailable"
    headers = MappingProxyType({"Retry-After": "1"})


class SchemaNotMigrated(StorageUnavailable):
    """The database answers but the lock table (or a column of it) is missing: run the migration."""


class Unauthorized(SchedlockError):
    """No bearer token, or one the server does not know."""

    status = 401
    code = "unauthorized"
    headers = MappingProxyType({"WWW-Authenticate": 'Bearer realm="schedlock"'})


class Forbidden(SchedlockError):
    """A known token used on a name outside its prefixes, or a read-only token trying to write."""

    status = 403
    code = "forbidden"


class PayloadTooLarge(SchedlockError):
    status = 413
    code = "payload_too_large"


class RouteNotFound(SchedlockError):
    status = 404
    code = "not_found"


class MethodNotAllowed(SchedlockError):
    status = 405
    code = "method_not_allowed"


class InternalError(SchedlockError):
    status = 500
    code = "internal_error"


#: Every code a caller can receive, with its HTTP status; the OpenAPI document and the client are built from it.
ERROR_CODES: dict[str, int] = {
    cls.code: cls.status
    for cls in (
        InvalidRequest,
        LockHeld,
        NotHolder,
        LockNotFound,
        StorageUnavailable,
        Unauthorized,
        Forbidden,
        PayloadTooLarge,
        RouteNotFound,
        MethodNotAllowed,
        InternalError,
    )
}


def register_error_code(cls: type[SchedlockError]) -> type[SchedlockError]:
    """Add an error class defined elsewhere (auth, limits) to ERROR_CODES."""
    ERROR_CODES[cls.code] = cls.status
    return cls


def error_response(exc: SchedlockError) -> Response:
    return Response(
        content=orjson.dumps(exc.body()),
        status_code=exc.status,
        media_type="application/json",
        headers=dict(exc.headers) or None,
    )


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


def known_error_response(exc: Exception) -> Response | None:
    """The response for a domain error or a validation error; None for anything else (a bug: 500)."""
    if isinstance(exc, SchedlockError):
        return error_response(exc)
    if isinstance(exc, RequestValidationError):
        return error_response(_describe_validation(exc))
    return None


async def _handle_known_error(request: Request, exc: Exception) -> Response:
    response = known_error_response(exc)
    assert response is not None
    return response


async def _handle_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        return error_response(RouteNotFound(f"no route for {request.method} {request.url.path}"))
    if exc.status_code == 405:
        response = error_response(MethodNotAllowed(f"{request.method} is not allowed on {request.url.path}"))
        response.headers.update(exc.headers or {})  # Allow: the methods the route has (RFC 9110 requires it)
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


async def _handle_unexpected(request: Request, exc: Exception) -> Response:
    logger.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(InternalError("internal error; see the server log"))


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(SchedlockError, _handle_known_error)
    app.add_exception_handler(RequestValidationError, _handle_known_error)
    app.add_exception_handler(StarletteHTTPException, _handle_http_error)
    app.add_exception_handler(Exception, _handle_unexpected)
