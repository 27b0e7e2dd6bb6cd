"""schedlock: ShedLock's lock semantics over HTTP, for Python jobs.

A job takes a named lock before it runs; if another node holds it, the run is skipped, never waited for. This is
"at most one at a time", not "exactly once": keep jobs idempotent and hand ``fencing_token`` to what they write.

>>> client = LockClient("http://schedlock:8000")
>>> @client.scheduler_lock("nightly-report", lock_at_most_for="14m", lock_at_least_for="5m")
... def nightly_report() -> None:
...     assert_locked()
...     ...

See client/README.md for leases, keep-alive, the service-down policy and the exceptions.
"""

from schedlock._async import AsyncLease, AsyncLockClient
from schedlock._durations import DurationLike, format_duration, parse_duration
from schedlock._exceptions import (
    ERROR_CLASSES,
    APIError,
    Forbidden,
    InternalServerError,
    InvalidRequest,
    IssuerUnavailable,
    JobNotFound,
    LockHeld,
    LockLost,
    LockNotFound,
    MethodNotAllowed,
    NotFound,
    NotHolder,
    NotLocked,
    PayloadTooLarge,
    RateLimited,
    RequestRejected,
    SchedlockError,
    ServerError,
    ServiceUnavailable,
    ServiceUnreachable,
    SlotDone,
    StorageUnavailable,
    Unauthorized,
    UnexpectedResponse,
    UnsupportedMediaType,
    error_class,
)
from schedlock._lease import LeaseBase, LeaseState, OnLost, assert_locked
from schedlock._models import (
    Extended,
    ForceReleased,
    JobInfo,
    JobPage,
    LockInfo,
    LockPage,
    Released,
    Run,
    RunPage,
    SkipHour,
    Skips,
)
from schedlock._policy import OnUnavailable
from schedlock._sync import Lease, LockClient
from schedlock._version import __version__

__all__ = [
    "ERROR_CLASSES",
    "APIError",
    "AsyncLease",
    "AsyncLockClient",
    "DurationLike",
    "Extended",
    "Forbidden",
    "ForceReleased",
    "InternalServerError",
    "InvalidRequest",
    "IssuerUnavailable",
    "JobInfo",
    "JobNotFound",
    "JobPage",
    "Lease",
    "LeaseBase",
    "LeaseState",
    "LockClient",
    "LockHeld",
    "LockInfo",
    "LockLost",
    "LockNotFound",
    "LockPage",
    "MethodNotAllowed",
    "NotFound",
    "NotHolder",
    "NotLocked",
    "OnLost",
    "OnUnavailable",
    "PayloadTooLarge",
    "RateLimited",
    "Released",
    "RequestRejected",
    "Run",
    "RunPage",
    "SchedlockError",
    "ServerError",
    "ServiceUnavailable",
    "ServiceUnreachable",
    "SkipHour",
    "Skips",
    "SlotDone",
    "StorageUnavailable",
    "Unauthorized",
    "UnexpectedResponse",
    "UnsupportedMediaType",
    "__version__",
    "assert_locked",
    "error_class",
    "format_duration",
    "parse_duration",
]
