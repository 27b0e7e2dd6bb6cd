"""The service's errors: each carries a stable ``code`` and the HTTP status it stands for, and knows nothing of
the web framework. The lock store, the database layer and auth raise them; ``app.api.errors`` is the one place
that turns them (and every other failure) into the JSON error body ``{"error": {"code", "message", ...}}``.

The ``code`` values are a contract shared with the client library (``schedlock.ERROR_CLASSES``): add, never rename.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Self

import orjson


class SchedlockError(Exception):
    """Base of every error the service reports on purpose."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    headers: Mapping[str, str] = MappingProxyType({})  # a class's own, or an instance's (RateLimited)

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.rendered_body: bytes | None = None  # body() as JSON, made once (rendered()), shared by copies (again())

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.details}}

    def rendered(self) -> bytes:
        """``body()`` as JSON bytes, made once for this error and the copies ``again()`` makes of it."""
        if self.rendered_body is None:
            self.rendered_body = orjson.dumps(self.body())
        return self.rendered_body

    def again(self) -> Self:
        """A new error of this class with the same message and details, for another caller to raise (each raise
        its own traceback), sharing this one's rendered body: refusals of one holder are rendered once."""
        copy = Exception.__new__(type(self))
        Exception.__init__(copy, self.message)
        copy.message, copy.details, copy.rendered_body = self.message, self.details, self.rendered()
        return copy


class InvalidRequest(SchedlockError):
    """A field is missing or malformed: ``field`` names the first, ``problems`` lists them all (one by default)."""

    status = 422
    code = "invalid_request"

    def __init__(self, message: str, *, field: str, problems: list[dict[str, str]] | None = None) -> None:
        if problems is None:
            problems = [{"field": field, "message": message.removeprefix(f"{field}: ")}]
        super().__init__(message, field=field, problems=problems)


class LockHeld(SchedlockError):
    status = 409
    code = "lock_held"


class SlotDone(SchedlockError):
    """The slot asked for is the name's last completed slot: this tick has run; skip it (docs/slots.md)."""

    status = 409
    code = "slot_done"


class NotHolder(SchedlockError):
    status = 409
    code = "not_holder"


class LockNotFound(SchedlockError):
    status = 404
    code = "lock_not_found"


class JobNotFound(SchedlockError):
    """No job of that name is registered (docs/jobs.md)."""

    status = 404
    code = "job_not_found"


class StorageUnavailable(SchedlockError):
    status = 503
    code = "storage_unavailable"
    headers = MappingProxyType({"Retry-After": "1"})


class StatementCancelled(StorageUnavailable):
    """Postgres cancelled the statement (it ran past the statement timeout, or an operator cancelled it): its
    transaction was rolled back, nothing was done. The database answered, so it is not reported down and the
    connection stays in the pool; a batch's callers all get it (their own statements would meet the same)."""


class DatabaseContention(SchedlockError):
    """The statement met another transaction (a row lock it would not wait for, a deadlock or a serialization
    failure that its one retry met again) and did nothing: retry. The database answered, so this is not an outage,
    and it is this statement's alone: not a StorageUnavailable, which every caller of a shared statement gets."""

    status = 503
    code = "storage_unavailable"
    headers = MappingProxyType({"Retry-After": "1"})


class RowLockTimeout(DatabaseContention):
    """A statement that set its own ``lock_timeout`` gave up waiting for a row another transaction holds: that
    row's answer (its caller may go on alone), never everyone's."""


class DatabaseUnsuitable(StorageUnavailable):
    """The database answers but cannot hold the lock table as schedlock needs it (its encoding is not UTF8)."""


class SchemaNotMigrated(StorageUnavailable):
    """The database answers but the lock table (or a column of it) is missing: run the migration."""


class Unauthorized(SchedlockError):
    """No bearer token, or one the server does not know."""

    status = 401
    code = "unauthorized"
    headers = MappingProxyType({"WWW-Authenticate": 'Bearer realm="schedlock"'})


class IssuerUnavailable(SchedlockError):
    """A JWT names a trusted issuer whose keys cannot be had: never fetched, and the issuer does not answer now.
    (Once fetched, its keys stay in use while it is down.)"""

    status = 503
    code = "issuer_unavailable"
    headers = MappingProxyType({"Retry-After": "5"})


class RateLimited(SchedlockError):
    """The caller is over its quota (docs/auth.md, "Quotas"); ``Retry-After`` says when a request passes again."""

    status = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, retry_after=retry_after)
        self.headers = MappingProxyType({"Retry-After": str(retry_after)})


class Forbidden(SchedlockError):
    """A known token used on a name outside its prefixes, or a read-only token trying to write."""

    status = 403
    code = "forbidden"


class PayloadTooLarge(SchedlockError):
    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(SchedlockError):
    """A request body that does not say it is JSON (``Content-Type: application/json`` or ``application/*+json``)."""

    status = 415
    code = "unsupported_media_type"
    headers = MappingProxyType({"Accept": "application/json"})


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
        SlotDone,
        NotHolder,
        LockNotFound,
        JobNotFound,
        StorageUnavailable,
        Unauthorized,
        IssuerUnavailable,
        RateLimited,
        Forbidden,
        PayloadTooLarge,
        UnsupportedMediaType,
        RouteNotFound,
        MethodNotAllowed,
        InternalError,
    )
}
