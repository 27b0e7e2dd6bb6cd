"""The edge: one pure-ASGI middleware every HTTP request passes, which observes it, applies the origin rule and
bounds its body.

**Observe.** Each request gets an id: the caller's ``X-Request-ID`` when it is a short token, else a new random one
(16 hex digits), echoed in the response's ``X-Request-ID`` and on every log line written while serving it. Each is
timed, counted by route template and status, and written as one access-log line. This is the one place lock
outcomes are counted: the route's operation, the status and the error code decide them (acquire 409 is "held", or
"slot_done" when that is its code; release/extend 409 "not_holder", ...), so routes and the store know no metrics.

**Origins.** A web page can make the operator's browser send requests anywhere, and some need no permission
first (a form post, a fetch with a ``text/plain`` body). Browsers say which page a request comes from in
``Origin``; a request whose Origin is neither the server's own (the host and port of its ``Host``; a server without
tokens on loopback also requires a loopback name there, against DNS rebinding) nor listed in
``SCHEDLOCK_ALLOWED_ORIGINS`` is refused (403 ``forbidden``). For listed origins, CORS: preflights answered, answers
marked readable. Requests without ``Origin`` (curl, the clients, jobs, probes) pass. docs/cors.md.

**Limits.** Lock requests are a few hundred bytes; without a limit one caller could make the server buffer any
amount of JSON. A declared ``Content-Length`` over ``SCHEDLOCK_MAX_BODY_BYTES`` is refused (413
``payload_too_large``, the connection closed) before a byte is read; a body without one (chunked) is read up to the
limit, then refused, so the application never sees a truncated body it might act on.

One class rather than three wrapped layers: the headers are read in one pass, and a response goes through one
``send`` wrapper instead of three.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import ERROR_CODE_KEY, client_closed_response, error_response
from app.auth.exposure import is_loopback
from app.errors import Forbidden, PayloadTooLarge
from app.ops.logs import REQUEST_ID_SCOPE_KEY, request_id, write_json_line
from app.ops.metrics import Metrics
from app.randomness import random_bytes
from app.settings import parse_origin

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

#: What a listed origin's pages may send and read; the API needs no more (no cookies: tokens travel as headers).
_PREFLIGHT = [
    (b"access-control-allow-methods", b"GET, POST"),
    (b"access-control-allow-headers", b"Authorization, Content-Type, X-Request-ID"),
    (b"access-control-max-age", b"600"),
]
_EXPOSED = (b"access-control-expose-headers", b"Retry-After, WWW-Authenticate, X-Request-ID")
_VARY = (b"vary", b"Origin")


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


class Edge:
    """Observe every HTTP request, refuse foreign origins (CORS for the ``allowed`` ones), bound bodies to
    ``max_body_bytes`` (see the module). ``loopback_only``: the server has no tokens and binds loopback, so its own
    origin must name a loopback host too."""

    def __init__(
        self, app: ASGIApp, metrics: Metrics, allowed: Iterable[str], *, loopback_only: bool, max_body_bytes: int
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.allowed = frozenset(allowed)
        self.loopback_only = loopback_only
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        rid = origin = host = None
        length: int | None = None
        preflight = seen_length = False
        for key, value in scope["headers"]:
            if key == b"content-length":
                if not seen_length:  # the first one; a malformed one the server itself rejects
                    seen_length, length = True, int(value) if value.isdigit() else None
            elif key == b"x-request-id":
                if rid is None:
                    text = value.decode("latin-1")
                    rid = text if _REQUEST_ID.fullmatch(text) else ""
            elif key == b"origin":
                origin = value.decode("latin-1")
            elif key == b"host":
                host = value.decode("latin-1")
            elif key == b"access-control-request-method":
                preflight = True
        rid = scope[REQUEST_ID_SCOPE_KEY] = rid or new_request_id()
        added = [(b"x-request-id", rid.encode())]
        status = 500  # what the server error handler answers if the app raises before responding

        async def send_with_headers(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), *added]
            await send(message)

        context = request_id.set(rid)
        try:
            if origin is not None:
                listed = parse_origin(origin) in self.allowed
                if not listed and not self._own(origin, host):
                    refusal = Forbidden(
                        f"cross-origin request from {origin[:100]!r} refused; to let pages there use this API, list "
                        "the origin in SCHEDLOCK_ALLOWED_ORIGINS (docs/cors.md)",
                        origin=origin[:100],
                    )
                    await error_response(refusal)(scope, receive, send_with_headers)
                    return
                if listed:
                    allow = [(b"access-control-allow-origin", origin.encode("latin-1")), _VARY]
                    if scope["method"] == "OPTIONS" and preflight:
                        headers = [*allow, *_PREFLIGHT]
                        await send_with_headers({"type": "http.response.start", "status": 204, "headers": headers})
                        await send_with_headers({"type": "http.response.body", "body": b""})
                        return
                    added[:0] = [*allow, _EXPOSED]
            if length is None:
                await self._buffered(scope, receive, send_with_headers)
            elif length > self.max_body_bytes:
                await self._refuse(scope, receive, send_with_headers)
            else:
                await self.app(scope, receive, send_with_headers)
        finally:
            request_id.reset(context)
            self.record(scope, status, time.perf_counter() - start, rid)

    async def _buffered(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A body of no declared length (chunked, or none): read up to the limit, then handed on whole."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: 499, not "no response" (a 500)
                await client_closed_response()(scope, receive, send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._refuse(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        exc = PayloadTooLarge(f"request body larger than {self.max_body_bytes} bytes", limit=self.max_body_bytes)
        response = error_response(exc)
        # The unread body is not drained: ask the server to close the connection instead of reusing it.
        response.headers["connection"] = "close"
        await response(scope, receive, send)

    def _own(self, origin: str, host: str | None) -> bool:
        """Whether ``origin`` names the host and port this request was sent to. Either scheme: TLS may end at a
        proxy in front, so the request itself may have come in over plain HTTP."""
        normalized = parse_origin(origin)
        if normalized is None or not host:
            return False
        default = 443 if normalized.startswith("https:") else 80
        try:
            theirs, ours = urlsplit(normalized), urlsplit(f"//{host}")
            same = (theirs.hostname, theirs.port or default) == (ours.hostname, ours.port or default)
        except ValueError:  # a Host header with a bad port
            return False
        return same and (not self.loopback_only or is_loopback(ours.hostname or ""))

    def record(self, scope: Scope, status: int, seconds: float, rid: str) -> None:
        """Count a request served (its route, status and lock outcome) and write its access line."""
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
