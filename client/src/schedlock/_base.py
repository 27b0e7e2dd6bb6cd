"""The sans-I/O core shared by both clients: configuration, request building, response decoding.

Nothing here sends anything. Each API operation is a :class:`Call` (method, path, body, and how to read a success);
:func:`decode` turns a response into that result or into the matching exception, and :func:`unreachable` turns a
transport failure into :class:`ServiceUnreachable`. ``LockClient`` and ``AsyncLockClient`` only send.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from schedlock._durations import DurationLike, format_duration, parse_duration
from schedlock._exceptions import (
    APIError,
    RateLimited,
    RequestRejected,
    ServiceUnavailable,
    ServiceUnreachable,
    UnexpectedResponse,
    error_class,
)
from schedlock._models import (
    Acquired,
    Extended,
    ForceReleased,
    JobPage,
    LockInfo,
    LockPage,
    Released,
    RunPage,
    Skips,
)
from schedlock._policy import OnUnavailable, clean_holder
from schedlock._times import format_time
from schedlock._version import __version__

T = TypeVar("T")

ENV_URL = "SCHEDLOCK_URL"
ENV_TOKEN = "SCHEDLOCK_TOKEN"
#: A file holding the token (a Kubernetes projected service-account token, say): read at every request, so a
#: rotated token is picked up. SCHEDLOCK_TOKEN, or a token given as an argument, wins over it.
ENV_TOKEN_FILE = "SCHEDLOCK_TOKEN_FILE"
DEFAULT_URL = "http://127.0.0.1:8000"
#: Seconds for one request; a lock call that takes longer than this is treated as "service unavailable".
DEFAULT_TIMEOUT = 10.0
#: Release retries on network errors and 5xx, with these pauses (seconds) between attempts. Safe because the
#: server's release is idempotent: releasing again with the same token answers 200 again.
RELEASE_RETRY_DELAYS = (0.2, 0.5, 1.0)
#: A release answered 429 rate_limited (the caller over its quota) is retried as often, each time after the
#: service's Retry-After, but never waiting longer than this (seconds): at most 3 x 10 s in all, never forever.
RELEASE_MAX_RETRY_AFTER = 10.0


class TokenFile:
    """A bearer token kept in a file its platform rotates (``SCHEDLOCK_TOKEN_FILE``: a Kubernetes projected
    service-account token, a CI job's OIDC token): read at the first request, and again whenever the file changes
    (its mtime, size or inode: a projected volume swaps a symlink), so every request sends the current token. A file
    never read is RequestRejected ``token_file_unreadable`` (a configuration error, as the Go binary says it); one
    that cannot be read after a good read keeps the last token rather than sending none."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._state: tuple[int, int, int] | None = None
        self._token = ""

    def read(self) -> str:
        try:
            st = os.stat(self.path)
            if (st.st_mtime_ns, st.st_size, st.st_ino) != self._state:
                with open(self.path, encoding="utf-8") as file:
                    self._token = file.read().strip()
                self._state = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError as exc:
            if self._state is None:
                # A configuration error, refused like a wrong token, never an outage (which --fail-open runs through).
                message = f"{ENV_TOKEN_FILE} {self.path}: cannot read the token: {exc.strerror or exc}"
                raise RequestRejected(message, status=0, code="token_file_unreadable") from None
        return self._token


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Resolved client settings: arguments first, then ``SCHEDLOCK_URL`` / ``SCHEDLOCK_TOKEN`` /
    ``SCHEDLOCK_TOKEN_FILE``, then defaults."""

    base_url: str
    token: str | None = field(repr=False)
    timeout: httpx.Timeout
    holder: str | None
    on_unavailable: OnUnavailable
    token_file: TokenFile | None = field(default=None, repr=False)

    @classmethod
    def resolve(
        cls,
        base_url: str | None,
        token: str | None,
        timeout: float | httpx.Timeout | None,
        holder: str | None,
        on_unavailable: OnUnavailable | str,
    ) -> ClientConfig:
        url = base_url or os.environ.get(ENV_URL) or DEFAULT_URL
        token = token if token is not None else (os.environ.get(ENV_TOKEN) or None)
        token_file = os.environ.get(ENV_TOKEN_FILE)
        return cls(
            base_url=url.rstrip("/"),
            token=token,
            timeout=timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout or DEFAULT_TIMEOUT),
            holder=clean_holder(holder) if holder else None,
            on_unavailable=OnUnavailable(on_unavailable),
            token_file=TokenFile(token_file) if token is None and token_file else None,
        )

    def headers(self) -> dict[str, str]:
        headers = {"User-Agent": f"schedlock-python/{__version__}", "Accept": "application/json"}
        token = self.token or (self.token_file.read() if self.token_file is not None else None)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One API operation, ready to send: ``parse`` reads the JSON of a 2xx answer."""

    method: str
    path: str
    parse: Callable[[Mapping[str, Any]], T]
    what: str
    json: Mapping[str, Any] | None = None
    params: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Tick:
    """Which tick an acquire runs (docs/slots.md): a key of the caller's own (``slot``), or the latest tick of the
    cron schedule ``once_per`` (in ``timezone``) by the database's clock, computed by the service."""

    slot: str | None = None
    once_per: str | None = None
    timezone: str | None = None

    def __post_init__(self) -> None:
        if self.slot is not None and self.once_per is not None:
            raise ValueError("slot and once_per: give one of them, not both")
        if self.timezone is not None and self.once_per is None:
            raise ValueError("once_per_timezone: only goes with once_per")
        if self.slot is not None and not 1 <= len(self.slot) <= 64:
            raise ValueError("slot: must be 1 to 64 characters")

    def body(self) -> dict[str, str]:
        fields = {"slot": self.slot, "schedule": self.once_per, "timezone": self.timezone}
        return {key: value for key, value in fields.items() if value is not None}


def acquire_call(
    name: str, lock_at_most_for: timedelta, lock_at_least_for: timedelta, holder: str | None, tick: Tick | None = None
) -> Call[Acquired]:
    body: dict[str, Any] = {
        "lock_at_most_for": format_duration(lock_at_most_for),
        "lock_at_least_for": format_duration(lock_at_least_for),
    }
    if holder:
        body["holder"] = holder
    if tick is not None:
        body.update(tick.body())
    return Call("POST", _lock_path(name, "acquire"), Acquired.from_json, f"acquire {name!r}", body)


def release_call(name: str, token: str, completed: bool = True) -> Call[Released]:
    # "completed" is sent only when false: the service's default is true, and a lease without a slot ignores it.
    body: dict[str, Any] = {"token": token} if completed else {"token": token, "completed": False}
    return Call("POST", _lock_path(name, "release"), Released.from_json, f"release {name!r}", body)


def extend_call(
    name: str, token: str, lock_at_most_for: timedelta, lock_at_least_for: timedelta | None
) -> Call[Extended]:
    body: dict[str, Any] = {"token": token, "lock_at_most_for": format_duration(lock_at_most_for)}
    if lock_at_least_for is not None:
        body["lock_at_least_for"] = format_duration(lock_at_least_for)
    return Call("POST", _lock_path(name, "extend"), Extended.from_json, f"extend {name!r}", body)


def get_call(name: str) -> Call[LockInfo]:
    return Call("GET", _lock_path(name, row_name=True), LockInfo.from_json, f"get {name!r}")


def list_call(prefix: str | None, held: bool | None, limit: int, cursor: str | None) -> Call[LockPage]:
    params = {"limit": str(limit)}
    if prefix:
        params["prefix"] = prefix
    if held is not None:
        params["held"] = "true" if held else "false"
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", "/v1/locks", LockPage.from_json, "list locks", params=params)


def history_call(name: str, limit: int, cursor: str | None) -> Call[RunPage]:
    params = {"limit": str(limit)} | ({"cursor": cursor} if cursor is not None else {})
    return Call(
        "GET", _lock_path(name, "runs", row_name=True), RunPage.from_json, f"history of {name!r}", params=params
    )


def runs_call(
    prefix: str | None,
    since: datetime | None,
    until: datetime | None,
    ended: bool | None,
    limit: int,
    cursor: str | None,
) -> Call[RunPage]:
    params = {"limit": str(limit)}
    if prefix:
        params["prefix"] = prefix
    for key, value in (("since", since), ("until", until)):
        if value is not None:
            if value.tzinfo is None:
                raise ValueError(f"{key}: needs a time zone (e.g. datetime.now(UTC)); a naive datetime is ambiguous")
            params[key] = format_time(value)
    if ended is not None:
        params["ended"] = "true" if ended else "false"
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", "/v1/runs", RunPage.from_json, "list runs", params=params)


def jobs_call(prefix: str | None, state: str | None, limit: int, cursor: str | None) -> Call[JobPage]:
    params = {"limit": str(limit)}
    for key, value in (("prefix", prefix), ("state", state), ("cursor", cursor)):
        if value:
            params[key] = value
    return Call("GET", "/v1/jobs", JobPage.from_json, "list jobs", params=params)


def skips_call(name: str, hours: int) -> Call[Skips]:
    return Call(
        "GET",
        _lock_path(name, "skips", row_name=True),
        Skips.from_json,
        f"skips of {name!r}",
        params={"hours": str(hours)},
    )


def force_release_call(name: str, reason: str) -> Call[ForceReleased]:
    path = _lock_path(name, "force-release", row_name=True)
    return Call("POST", path, ForceReleased.from_json, f"force-release {name!r}", {"reason": reason})


def windows(
    lock_at_most_for: DurationLike, lock_at_least_for: DurationLike | None
) -> tuple[timedelta, timedelta | None]:
    """Both windows read and checked locally, so a typo fails before the job is scheduled, not at 3 a.m."""
    at_most = parse_duration(lock_at_most_for, "lock_at_most_for")
    at_least = None if lock_at_least_for is None else parse_duration(lock_at_least_for, "lock_at_least_for")
    if at_most <= timedelta(0):
        raise ValueError("lock_at_most_for: must be greater than zero")
    if at_least is not None and at_least > at_most:
        raise ValueError("lock_at_least_for: must not exceed lock_at_most_for")
    return at_most, at_least


def decode(call: Call[T], response: httpx.Response) -> T:
    """The call's result for a 2xx answer; otherwise raise the exception the answer stands for."""
    data = _json_object(response)
    if response.is_success:
        if data is None:
            raise UnexpectedResponse(
                f"{call.what}: the answer is not JSON; is this a schedlock URL?", response.status_code
            )
        try:
            return call.parse(data)
        except ValueError as exc:
            raise UnexpectedResponse(f"{call.what}: not a schedlock answer ({exc})", response.status_code) from None
    raise error_from_response(response, data)


def error_from_response(response: httpx.Response, data: Mapping[str, Any] | None = None) -> APIError:
    """The exception for an error answer, chosen by its ``code`` (one table), else by its status."""
    status = response.status_code
    error = data.get("error") if data is not None else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        code = str(error["code"])
        message = str(error.get("message") or code)
        details = {k: v for k, v in error.items() if k not in ("code", "message")}
    else:
        code = f"http_{status}"
        message = f"HTTP {status} {response.reason_phrase} without a schedlock error body"
        details = {}
    cls = error_class(code, status)
    return cls(message, status=status, code=code, details=details, retry_after=_retry_after(response))


def unreachable(call: Call[Any], base_url: str, exc: httpx.TransportError) -> ServiceUnreachable:
    reason = str(exc) or type(exc).__name__
    return ServiceUnreachable(f"{call.what}: cannot reach the lock service at {base_url}: {reason}")


def _lock_path(name: str, action: str | None = None, *, row_name: bool = False) -> str:
    """The lock's URL path. ``row_name``: an operation on a row that exists (read, history, force-release), which
    takes any name a row can have, "/" included (a Java node's ShedLock may have made it); acquire, extend and
    release take the API's names only. Every character but letters, digits and ``-_~`` is percent-encoded, dots
    too: a name ``.`` or ``..`` would otherwise be read as a path segment and resolved away."""
    if not isinstance(name, str) or not name:
        raise ValueError("lock name: must be a non-empty string")
    if "/" in name and not row_name:
        raise ValueError(f"lock name: must not contain '/': {name!r}")
    path = f"/v1/locks/{quote(name, safe='').replace('.', '%2E')}"
    return f"{path}/{action}" if action else path


def _json_object(response: httpx.Response) -> dict[str, Any] | None:
    try:
        data = json.loads(response.content)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None


def release_retry_pause(error: ServiceUnavailable | RateLimited, delay: float) -> float:
    """Seconds to wait before sending a failed release again: ``delay`` after no answer or a 5xx; after a 429
    rate_limited (no verdict on the lease) the service's Retry-After, at least ``delay`` and at most
    :data:`RELEASE_MAX_RETRY_AFTER`."""
    if isinstance(error, RateLimited):
        return min(max(error.retry_after or 0.0, delay), RELEASE_MAX_RETRY_AFTER)
    return delay
