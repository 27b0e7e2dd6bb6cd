"""One pure-ASGI middleware that measures and logs every HTTP request, and counts lock outcomes.

It is the single place where lock outcomes are recorded: the route template, the response status and the error
code decide them (acquire 409 is "held", or "slot_done" when that is its code; release/extend 409 "not_holder",
...), so routes and the store stay unaware of metrics. Pure ASGI rather than BaseHTTPMiddleware: no extra task
or body buffering per request.

Each request gets an id: the caller's ``X-Request-ID`` when it is a short token, else a new random one (16 hex
digits). It is echoed
in the response's ``X-Request-ID`` header and appears on every log line written while serving the request.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import ERROR_CODE_KEY
from app.ops.logs import REQUEST_ID_SCOPE_KEY, request_id, write_json_line
from app.ops.metrics import Metrics
from app.randomness import random_bytes

access_log = logging.getLogger("schedlock.access")

#: The lock operations whose outcome is counted, by their route's OpenAPI operation id (a stable contract).
LOCK_OPERATIONS = {"acquireLock": "acquire", "releaseLock": "release", "extendLock": "extend"}
_SUCCESS = {"acquire": "acquired", "release": "released", "extend": "extended"}
#: Probes and scrapes come every few seconds; their successes are logged at DEBUG so they do not drown the rest.
_QUIET_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})
#: Any other method is labelled "other", so a client cannot invent label values.
_METHODS = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"})
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
UNMATCHED = "unmatched"


def new_request_id() -> str:
    """A random 16-hex-digit id. Random rather than counted, so ids do not tell callers how many requests the
    server has served; from the shared buffer of OS randomness (app.randomness), which a forked worker refills."""
    return random_bytes(8).hex()


def lock_outcome(operation: str, status: int, code: str | None = None) -> str:
    """The outcome of a lock operation, from its HTTP status and error code (see LOCK_OUTCOMES in app.ops.metrics)."""
    if status < 300:
        return _SUCCESS[operation]
    if status == 409:
        if operation != "acquire":
            return "not_holder"
        return "slot_done" if code == "slot_done" else "held"
    if status == 404:
        return "not_found" if operation != "acquire" else "invalid"
    if status in (401, 403, 429):
        return "denied"
    if status >= 500:
        return "error"
    return "invalid"


def route_template(scope: Scope) -> str:
    """The matched route's template, e.g. ``/v1/locks/{name}/acquire``; ``unmatched`` when nothing matched."""
    route = scope.get("route")
    if route is not None:
        return str(getattr(route, "path_format", None) or getattr(route, "path", UNMATCHED))
    if "app_root_path" in scope:  # a Mount (the docs' static files) matched; FastAPI sets no "route" for those
        return f"{scope['root_path'][len(scope['app_root_path']) :]}/{{path}}"
    return UNMATCHED


def _incoming_request_id(scope: Scope) -> str | None:
    for key, value in scope["headers"]:
        if key == b"x-request-id":
            text = value.decode("latin-1")
            return text if _REQUEST_ID.fullmatch(text) else None
    return None


def request_id_of(scope: Scope) -> str:
    """The request's id: the caller's ``X-Request-ID`` when it is a short token, else a new one."""
    return _incoming_request_id(scope) or new_request_id()


class RequestObserver:
    """Times each HTTP request, counts it by route template and status, and writes one access-log line."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        rid = scope[REQUEST_ID_SCOPE_KEY] = request_id_of(scope)
        header = (b"x-request-id", rid.encode())
        status = 500  # what the server error handler answers if the app raises before responding

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        context = request_id.set(rid)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id.reset(context)
            self.record(scope, status, time.perf_counter() - start, rid)

    def record(self, scope: Scope, status: int, seconds: float, rid: str) -> None:
        """Count a request served (its route, status and lock outcome) and write its access line. The direct
        lane (app.api.direct) records the requests it serves with this too."""
        route = route_template(scope)
        method = scope["method"] if scope["method"] in _METHODS else "other"
        self.metrics.observe_request(method, route, status, seconds)
        operation = LOCK_OPERATIONS.get(getattr(scope.get("route"), "operation_id", None) or "")
        outcome = None
        if operation is not None:
            outcome = lock_outcome(operation, status, scope.get(ERROR_CODE_KEY))
            self.metrics.count_outcome(operation, outcome)

        if status >= 500:
            level = logging.ERROR if status == 500 else logging.WARNING
        elif route in _QUIET_ROUTES and status < 400:
            level = logging.DEBUG
        else:
            level = logging.INFO
        if not access_log.isEnabledFor(level):
            return
        fields: dict[str, Any] = {
            "method": method,
            "route": route,
            "status": status,
            "duration_ms": round(seconds * 1000, 3),
            "request_id": rid,
        }
        name = scope.get("path_params", {}).get("name")
        if name is not None:
            fields["lock"] = name if len(name) <= 64 else name[:64] + "…"
        if outcome is not None:
            fields["outcome"] = outcome
        if route == UNMATCHED:
            fields["path"] = scope["path"][:200]
        client = scope.get("client")
        if client:
            fields["client"] = client[0]
        if not write_json_line(access_log, level, f"{method} {route} {status}", fields):
            access_log.log(level, "%s %s %d", method, route, status, extra={"fields": fields})
