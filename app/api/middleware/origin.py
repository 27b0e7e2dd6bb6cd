"""Browsers may only call the API from the server's own pages, or from origins the operator lists (CORS).

A web page can make the operator's browser send requests anywhere, and some need no permission first: a form
post, or a fetch with a ``text/plain`` body (a CORS "simple" request). Against a server without tokens on
loopback, that let any page the operator opened take or release locks. Browsers say which page a request comes
from in ``Origin``; this middleware refuses (403 ``forbidden``) every request whose Origin is neither

- the server's own: the same host and port as the request's ``Host`` header, which is what the browser sends
  for pages the server itself serves (``/docs``); a server without tokens on loopback additionally trusts only
  loopback names there, so a page that rebinds its DNS name to 127.0.0.1 is still foreign; nor
- listed in ``SCHEDLOCK_ALLOWED_ORIGINS``. For those, it answers CORS preflights and marks responses readable
  (``Access-Control-Allow-Origin``), so a dashboard on another origin can use the API with a bearer token.

Requests without ``Origin`` (curl, the clients, jobs, probes) are not browsers' cross-site requests and pass.
docs/cors.md says what is supported and what is not.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_response
from app.auth.exposure import is_loopback
from app.errors import Forbidden
from app.settings import parse_origin

#: What a listed origin's pages may send and read; the API needs no more (no cookies: tokens travel as headers).
_PREFLIGHT = [
    (b"access-control-allow-methods", b"GET, POST"),
    (b"access-control-allow-headers", b"Authorization, Content-Type, X-Request-ID"),
    (b"access-control-max-age", b"600"),
]
_EXPOSED = (b"access-control-expose-headers", b"Retry-After, WWW-Authenticate, X-Request-ID")
_VARY = (b"vary", b"Origin")


class OriginGuard:
    """Refuse browser requests from foreign origins; do CORS for the ``allowed`` ones. ``loopback_only``: the
    server has no tokens and binds loopback, so its own origin must name a loopback host too (see the module)."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str], *, loopback_only: bool) -> None:
        self.app = app
        self.allowed = frozenset(allowed)
        self.loopback_only = loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origin = host = None
        if scope["type"] == "http":
            for key, value in scope["headers"]:
                if key == b"origin":
                    origin = value.decode("latin-1")
                elif key == b"host":
                    host = value.decode("latin-1")
        if origin is None:
            await self.app(scope, receive, send)
            return
        listed = parse_origin(origin) in self.allowed
        if not listed and not self._own(origin, host):
            refusal = Forbidden(
                f"cross-origin request from {origin[:100]!r} refused; to let pages there use this API, list the "
                "origin in SCHEDLOCK_ALLOWED_ORIGINS (docs/cors.md)",
                origin=origin[:100],
            )
            await error_response(refusal)(scope, receive, send)
            return
        if not listed:
            await self.app(scope, receive, send)
            return
        allow = [(b"access-control-allow-origin", origin.encode("latin-1")), _VARY]
        if scope["method"] == "OPTIONS" and any(k == b"access-control-request-method" for k, _ in scope["headers"]):
            await send({"type": "http.response.start", "status": 204, "headers": [*allow, *_PREFLIGHT]})
            await send({"type": "http.response.body", "body": b""})
            return

        async def readable(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *allow, _EXPOSED]
            await send(message)

        await self.app(scope, receive, readable)

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
