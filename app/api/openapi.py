"""What the OpenAPI document says beyond the models: each route's error responses (schema, headers, example) and a
realistic example of every request and response body, so that Swagger UI and ReDoc show real values (never
``"string"``) and a generator gets a typed schema for every answer.

The examples tell one story: ``nightly-billing`` taken at 03:00 by a billing job on host-3. tests/
test_openapi_contract.py validates each against its schema.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from app.api.error_bodies import (
    ForbiddenError,
    InvalidRequestError,
    LockHeldError,
    LockNotFoundError,
    NotHolderError,
    PayloadTooLargeError,
    RateLimitedError,
    StorageUnavailableError,
    UnauthorizedError,
    UnsupportedMediaTypeError,
)

Responses = dict[int | str, dict[str, Any]]

NAME = "nightly-billing"
LOCKED_BY = "billing on host-3 [schedlock via billing-cron lease 5e0c2a91f3d4]"
LOCKED_AT = "2026-11-29T03:00:00.000Z"
LOCK_UNTIL = "2026-11-29T03:14:00.000Z"
TOKEN = "q1P8cXw2dV0mJ7rT4yLk9sB3nH6gF5aE1zQ0uI8oR2c"

ACQUIRE_REQUEST = {"lock_at_most_for": "14m", "lock_at_least_for": "5m", "holder": "billing on host-3"}
ACQUIRE_RESPONSE = {
    "name": NAME,
    "acquired": True,
    "token": TOKEN,
    "fencing_token": 42,
    "locked_at": LOCKED_AT,
    "lock_until": LOCK_UNTIL,
    "locked_by": LOCKED_BY,
    "db_time": LOCKED_AT,
}
RELEASE_REQUEST = {"token": TOKEN}
RELEASE_RESPONSE = {
    "name": NAME,
    "released": True,
    "lock_until": "2026-11-29T03:05:00.000Z",
    "db_time": "2026-11-29T03:02:41.317Z",
}
EXTEND_REQUEST = {"token": TOKEN, "lock_at_most_for": "14m"}
EXTEND_RESPONSE = {
    "name": NAME,
    "extended": True,
    "fencing_token": 42,
    "locked_at": LOCKED_AT,
    "lock_until": "2026-11-29T03:24:00.000Z",
    "db_time": "2026-11-29T03:10:00.000Z",
}
_VIEW = {"name": NAME, "locked_by": LOCKED_BY, "locked_at": LOCKED_AT, "lock_until": LOCK_UNTIL, "held": True}
LOCK_RESPONSE = {**_VIEW, "fencing_token": 42, "db_time": "2026-11-29T03:01:12.004Z"}
LOCK_LIST = {
    "items": [
        {**_VIEW, "fencing_token": 42},
        {
            "name": "nightly-billing.eu",
            "locked_by": "billing on host-5 [schedlock via billing-cron lease 0b7d41e9a2c6]",
            "locked_at": "2026-11-28T03:00:00.012Z",
            "lock_until": "2026-11-28T03:05:00.012Z",
            "held": False,
            "fencing_token": 17,
        },
    ],
    "next_cursor": "bmlnaHRseS1iaWxsaW5nLmV1",
    "db_time": "2026-11-29T03:01:12.004Z",
}
METRICS = (
    "# TYPE schedlock_lock_operations_total counter\n"
    'schedlock_lock_operations_total{operation="acquire",outcome="acquired"} 1042.0\n'
)


def request_body(example: dict[str, Any]) -> dict[str, Any]:
    """The ``openapi_extra`` of a route whose JSON body this example shows."""
    return {"requestBody": {"content": {"application/json": {"example": example}}}}


def ok(example: dict[str, Any]) -> Responses:
    return {200: {"content": {"application/json": {"example": example}}}}


def _error(
    status: int, model: type[BaseModel], description: str, detail: dict[str, Any], headers: dict[str, Any] | None = None
) -> Responses:
    response: dict[str, Any] = {
        "model": model,
        "description": description,
        "content": {"application/json": {"example": {"error": detail}}},
    }
    if headers:
        response["headers"] = headers
    return {status: response}


HELD = _error(
    409,
    LockHeldError,
    "`lock_held`: someone holds the lock; `locked_by`, `locked_at`, `lock_until` say who and until when. "
    "`slot_done` (with `slot` or `schedule`): the requested slot is the name's last completed one, or `stale`: a "
    "tick older than it (`last_completed_slot`); `slot`, `completed_at` and `locked_by` say which, when and by "
    "whom. Either way: skip this run.",
    {
        "code": "lock_held",
        "message": f"'{NAME}' is held by '{LOCKED_BY}' until {LOCK_UNTIL}",
        "name": NAME,
        "locked_by": LOCKED_BY,
        "locked_at": LOCKED_AT,
        "lock_until": LOCK_UNTIL,
        "db_time": "2026-11-29T03:00:02.581Z",
    },
)


def not_holder(action: str, description: str) -> Responses:
    message = (
        f"cannot {action} '{NAME}': this token no longer holds the lock "
        "(released, expired, taken over, or never issued for it)"
    )
    return _error(409, NotHolderError, description, {"code": "not_holder", "message": message, "name": NAME})


NOT_FOUND = _error(
    404,
    LockNotFoundError,
    "`lock_not_found`: no lock of that name has ever been taken.",
    {"code": "lock_not_found", "message": f"no lock named '{NAME}'", "name": NAME},
)
_DURATION_PROBLEM = (
    "is not a duration: '14 minutes' (use ISO-8601 like 'PT10M' or a number with ms, s, m, h or d, like '10m')"
)
BAD_INPUT = _error(
    422,
    InvalidRequestError,
    "`invalid_request`: a field is missing or malformed; `field` names the first, `problems` lists them all.",
    {
        "code": "invalid_request",
        "message": f"lock_at_most_for: {_DURATION_PROBLEM}",
        "field": "lock_at_most_for",
        "problems": [{"field": "lock_at_most_for", "message": _DURATION_PROBLEM}],
    },
)
DOWN = _error(
    503,
    StorageUnavailableError,
    "`storage_unavailable`: the database cannot be reached or is not migrated; `issuer_unavailable`: the keys of the "
    "caller's JWT issuer could never be fetched (docs/auth.md). Retry after `Retry-After` seconds.",
    {"code": "storage_unavailable", "message": "acquire: database unavailable (ConnectionRefusedError)"},
    {"Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}, "example": 1}},
)
AUTH = {
    **_error(
        401,
        UnauthorizedError,
        "`unauthorized`: no bearer token, or one the server does not know (servers with tokens only).",
        {"code": "unauthorized", "message": "missing credentials: send 'Authorization: Bearer <token>'"},
        {
            "WWW-Authenticate": {
                "description": "The scheme to authenticate with.",
                "schema": {"type": "string"},
                "example": 'Bearer realm="schedlock"',
            }
        },
    ),
    **_error(
        403,
        ForbiddenError,
        "`forbidden`: the name is outside the token's prefixes, or a read-only token tried to write.",
        {
            "code": "forbidden",
            "message": f"token 'reports-cron' may not use lock '{NAME}'; its names start with 'reports.'",
            "name": NAME,
        },
    ),
    **_error(
        429,
        RateLimitedError,
        "`rate_limited`: the caller is over its quota of requests per second (servers with quotas only).",
        {
            "code": "rate_limited",
            "message": "'billing-cron' is over its quota of 5 requests per second (burst 10); retry after 1 s",
            "retry_after": 1,
        },
        {
            "Retry-After": {
                "description": "Seconds until a request passes again.",
                "schema": {"type": "integer"},
                "example": 1,
            }
        },
    ),
}
TOO_LARGE = _error(
    413,
    PayloadTooLargeError,
    "`payload_too_large`: the body exceeds the server's limit (SCHEDLOCK_MAX_BODY_BYTES).",
    {"code": "payload_too_large", "message": "request body larger than 16384 bytes", "limit": 16384},
)
NOT_JSON = _error(
    415,
    UnsupportedMediaTypeError,
    "`unsupported_media_type`: the body is not sent as `Content-Type: application/json` (or `application/*+json`).",
    {
        "code": "unsupported_media_type",
        "message": "the body must be JSON, sent with 'Content-Type: application/json' (got 'text/plain')",
    },
    {
        "Accept": {
            "description": "The media type bodies must have.",
            "schema": {"type": "string"},
            "example": "application/json",
        }
    },
)
