"""Everything the client raises on purpose, as one tree.

::

    SchedlockError
    ├── ServiceUnavailable           the service gave no answer: the lock's state is unknown
    │   ├── ServiceUnreachable       connection refused, timeout, broken connection
    │   ├── UnexpectedResponse       an answer that is not schedlock's (wrong URL, a proxy page)
    │   └── ServerError (+APIError)  5xx
    │       ├── StorageUnavailable   503 storage_unavailable
    │       └── InternalServerError  500 internal_error
    ├── APIError                     any error answer; .status .code .message .details
    │   ├── LockHeld                 409 lock_held: skip this run (.locked_by, .lock_until)
    │   ├── SlotDone                 409 slot_done: this tick ran, or a newer one; skip it (.slot, .stale)
    │   ├── NotHolder                409 not_holder: this lease no longer holds the lock
    │   ├── LockNotFound             404 lock_not_found
    │   ├── JobNotFound              404 job_not_found
    │   ├── RequestRejected          other 4xx: fix the call or the configuration
    │   │   ├── InvalidRequest       422 invalid_request (.field)
    │   │   ├── Unauthorized         401 unauthorized
    │   │   ├── Forbidden            403 forbidden
    │   │   ├── NotFound             404 not_found (no such route: check the base URL)
    │   │   ├── MethodNotAllowed     405 method_not_allowed
    │   │   ├── PayloadTooLarge      413 payload_too_large
    │   │   └── UnsupportedMediaType 415 unsupported_media_type
    │   └── ServerError              (see above)
    └── NotLocked                    assert_locked() outside a lock
        └── LockLost                 the lease ended while its body ran

The server's ``code`` picks the class through :data:`ERROR_CLASSES`, the one table. A code this client does not
know still gets a class by status: 4xx is :class:`RequestRejected`, 5xx :class:`ServerError`. ``LockHeld`` is only
ever raised for the code ``lock_held``: a failure is never mistaken for "someone else holds it".
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any

from schedlock._times import parse_time


class SchedlockError(Exception):
    """Base of everything this package raises on purpose."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ServiceUnavailable(SchedlockError):
    """The service could not decide (unreachable, timed out, 5xx, or not a schedlock answer).

    Whether a lock was taken is unknown. The service-down policy (fail-closed, fail-open, raise) applies to this
    class and its subclasses only.
    """


class ServiceUnreachable(ServiceUnavailable):
    """No answer: connection refused, DNS failure, timeout, or the connection broke."""


class UnexpectedResponse(ServiceUnavailable):
    """An answer that is not schedlock's: not JSON, or missing fields. Usually a wrong base URL or a proxy."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class APIError(SchedlockError):
    """The service answered with an error body ``{"error": {"code", "message", ...}}``."""

    #: Class defaults are the table's; an instance carries what the server actually said (an unknown code too).
    status: int = 0
    code: str = ""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str,
        details: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        #: The error body's other fields (e.g. ``field``, ``locked_by``).
        self.details: Mapping[str, Any] = MappingProxyType(dict(details or {}))
        #: The ``Retry-After`` header in seconds, when the service sent one.
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"{self.code} ({self.status}): {self.message}"


class LockHeld(APIError):
    """Someone else holds the lock: skip this run. Says who (``locked_by``) and until when (``lock_until``)."""

    status = 409
    code = "lock_held"

    @property
    def locked_by(self) -> str | None:
        value = self.details.get("locked_by")
        return value if isinstance(value, str) else None

    @property
    def locked_at(self) -> datetime | None:
        return _time_detail(self.details, "locked_at")

    @property
    def lock_until(self) -> datetime | None:
        return _time_detail(self.details, "lock_until")


class SlotDone(APIError):
    """The tick asked for (``slot``, or the one ``once_per`` computed) was already completed: skip this run.

    Says which slot, when it was completed (``completed_at``) and by whom (``locked_by``). When ``stale``, the slot
    is a tick older than the name's last completed one (``last_completed_slot``; ``completed_at`` and ``locked_by``
    are that one's): a late trigger, never run after a newer tick. See docs/slots.md.
    """

    status = 409
    code = "slot_done"

    @property
    def slot(self) -> str | None:
        value = self.details.get("slot")
        return value if isinstance(value, str) else None

    @property
    def stale(self) -> bool:
        return self.details.get("stale") is True

    @property
    def last_completed_slot(self) -> str | None:
        """The name's last completed slot: ``slot`` itself, or, when ``stale``, the newer tick."""
        value = self.details.get("last_completed_slot", self.details.get("slot"))
        return value if isinstance(value, str) else None

    @property
    def completed_at(self) -> datetime | None:
        return _time_detail(self.details, "completed_at")

    @property
    def locked_by(self) -> str | None:
        value = self.details.get("locked_by")
        return value if isinstance(value, str) else None


class NotHolder(APIError):
    """The lease token no longer holds the lock: released, expired, or taken over by someone else."""

    status = 409
    code = "not_holder"


class LockNotFound(APIError):
    """No lock of that name has ever been taken."""

    status = 404
    code = "lock_not_found"


class JobNotFound(APIError):
    """No job of that name is registered (docs/jobs.md)."""

    status = 404
    code = "job_not_found"


class RequestRejected(APIError):
    """The service refused the request itself (4xx): a bug in the call or the configuration, never "held"."""


class InvalidRequest(RequestRejected):
    """A malformed name, duration or field; ``field`` names it."""

    status = 422
    code = "invalid_request"

    @property
    def field(self) -> str | None:
        value = self.details.get("field")
        return value if isinstance(value, str) else None


class Unauthorized(RequestRejected):
    """No API token, or one the service does not know (``SCHEDLOCK_TOKEN``)."""

    status = 401
    code = "unauthorized"


class Forbidden(RequestRejected):
    """The API token may not touch this lock name (outside its prefixes) or may only read."""

    status = 403
    code = "forbidden"


class RateLimited(RequestRejected):
    """The caller is over its quota of requests per second; ``retry_after`` says when a request passes again."""

    status = 429
    code = "rate_limited"


class NotFound(RequestRejected):
    """No such route: the base URL probably does not point at a schedlock service."""

    status = 404
    code = "not_found"


class MethodNotAllowed(RequestRejected):
    status = 405
    code = "method_not_allowed"


class PayloadTooLarge(RequestRejected):
    """The request body exceeds the service's limit."""

    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(RequestRejected):
    """The request body was not sent as ``Content-Type: application/json`` (this client always does)."""

    status = 415
    code = "unsupported_media_type"


class ServerError(APIError, ServiceUnavailable):
    """The service answered 5xx: it could not decide."""


class StorageUnavailable(ServerError):
    """The service cannot reach its database; ``retry_after`` is its hint in seconds."""

    status = 503
    code = "storage_unavailable"


class IssuerUnavailable(ServerError):
    """The service cannot fetch the keys of the issuer of this client's JWT (docs/auth.md); ``retry_after`` is its
    hint in seconds."""

    status = 503
    code = "issuer_unavailable"


class InternalServerError(ServerError):
    status = 500
    code = "internal_error"


class NotLocked(SchedlockError):
    """Raised by ``assert_locked()`` when the calling code does not run under a live lease."""


class LockLost(NotLocked):
    """The lease ended while its body ran: an extension was refused, or it expired before it could be extended.

    Another holder may be running the same job now. ``lease`` is the lost lease; ``__cause__`` the reason.
    """

    def __init__(self, message: str, lease: Any = None) -> None:
        super().__init__(message)
        self.lease = lease


#: The one table from the server's error codes to client classes. Add a code here when the server adds one.
ERROR_CLASSES: Mapping[str, type[APIError]] = MappingProxyType(
    {
        cls.code: cls
        for cls in (
            InvalidRequest,
            LockHeld,
            SlotDone,
            NotHolder,
            LockNotFound,
            JobNotFound,
            Unauthorized,
            Forbidden,
            RateLimited,
            NotFound,
            MethodNotAllowed,
            PayloadTooLarge,
            UnsupportedMediaType,
            StorageUnavailable,
            IssuerUnavailable,
            InternalServerError,
        )
    }
)


def error_class(code: str | None, status: int) -> type[APIError]:
    """The class for an error answer: by code from the table, else a base class by status."""
    known = ERROR_CLASSES.get(code or "")
    if known is not None:
        return known
    if 400 <= status < 500:
        return RequestRejected
    if status >= 500:
        return ServerError
    return APIError


def _time_detail(details: Mapping[str, Any], key: str) -> datetime | None:
    value = details.get(key)
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None
