"""The direct lane: the lock operations' plain POSTs served from the HTTP protocol, without the ASGI layers.

The lean path (app.api.middleware.lean) serves the lock operations with their own endpoints, but a request still
goes the whole ASGI way to reach it and back: uvicorn's request cycle and its messages, its proxy-headers layer,
FastAPI's and Starlette's layers, the observer, the origin guard and the body limit, each a coroutine and a wrapped
``send``, then uvicorn working the head out again from the messages. Under full load that way cost about a sixth
of the server's CPU for a lock request (docs/performance.md, "The direct lane").

For a request the layers would pass through unchanged, the protocol (app.api.protocol) hands the request to this
lane instead: the same endpoint, with what each layer would have done done here with the layer's own code:

- the observer's: the request id (the caller's or a new one; ``X-Request-ID`` on the answer, the log context), the
  metrics and the access line, with ``RequestObserver.record``;
- the lean path's: the route, the name and the endpoint (``LeanRoutes.plain_post``), its authentication,
  validation and error answers;
- the server error handler's: an unexpected exception answered 500 by the app's own handler;
- uvicorn's: the answer's head (its default headers, ``connection: close`` when the connection ends).

``admits`` takes only requests whose every other layer would do nothing: a POST over HTTP/1.1 to
``<prefix>{name}/acquire|release|extend`` with no query, no percent-escape and no root path; a body of a declared
``Content-Length`` within the limit (no chunked body, no ``Expect: 100-continue``); no ``Origin`` (not a browser's:
the origin guard would look at it); no ``X-Forwarded-*`` from a client uvicorn trusts as a proxy (it would rewrite
the client). Everything else (a browser's request, an oversized or chunked body, a forwarded one) goes the ASGI way,
which answers it as before. tests/api/test_direct.py sends the same requests both ways to a served uvicorn and requires
the same answers, access lines and metrics.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from app.api.middleware.lean import LeanRoutes
from app.api.middleware.observe import RequestObserver, request_id_of
from app.ops.logs import REQUEST_ID_SCOPE_KEY, request_id

#: The headers that send a request the ASGI way (see the module).
_BROWSER_OR_FRAMING = frozenset({b"origin", b"transfer-encoding", b"expect"})
_FORWARDED = frozenset({b"x-forwarded-for", b"x-forwarded-proto"})
#: What the app answers an unexpected exception with (app.api.errors' handler for ``Exception``).
Handler = Callable[[Request, Exception], Awaitable[Response]]


class DirectLane:
    """Serves the plain POSTs of ``lean``'s routes for ``app``, recorded by ``observer`` (see the module)."""

    def __init__(self, app: FastAPI, lean: LeanRoutes, observer: RequestObserver, max_body_bytes: int) -> None:
        self.app = app
        self.lean = lean
        self.observer = observer
        self.max_body_bytes = max_body_bytes
        handler = app.exception_handlers.get(Exception)
        assert handler is not None, "the app answers unexpected exceptions with its own handler"
        self._unexpected: Handler = handler  # type: ignore[assignment]

    def admits(
        self, method: bytes, url: bytes, headers: Iterable[tuple[bytes, bytes]], proxy_trusted: bool
    ) -> tuple[Any, Any, str] | None:
        """The route, endpoint and lock name of a request the lane serves, else None (the ASGI way). ``url`` as
        sent; ``proxy_trusted``: uvicorn would take ``X-Forwarded-*`` from this client."""
        if method != b"POST" or b"?" in url or b"%" in url or b"#" in url:
            return None
        path = url.decode("latin-1")
        if not path.startswith(self.lean.prefix):
            return None
        found = self.lean.plain_post(path, path[path.rfind("/") :])
        if found is None:
            return None
        length = None
        for key, value in headers:
            if key == b"content-length":
                if length is not None or not value.isdigit():
                    return None
                length = int(value)
            elif key in _BROWSER_OR_FRAMING or (proxy_trusted and key in _FORWARDED):
                return None
        if length is None or length > self.max_body_bytes:
            return None
        return found

    def scope(self, path: str, route: Any, name: str, base: dict[str, Any]) -> dict[str, Any]:
        """The request's scope as the layers above the endpoint leave it: ``base`` is the protocol's (type,
        headers, client, server, scheme, ...), completed as Starlette and the lean path complete it."""
        scope = base
        scope["app"] = self.app
        scope["method"] = "POST"
        scope["path"] = path
        scope["raw_path"] = path.encode("latin-1")
        scope["query_string"] = b""
        scope["endpoint"] = route.endpoint
        scope["path_params"] = {"name": name}
        scope["route"] = route
        return scope

    async def serve(
        self,
        scope: dict[str, Any],
        endpoint: Any,
        body: bytes,
        answer: Callable[[Response, str | None], Awaitable[None]],
    ) -> None:
        """Run the endpoint on the request and ``answer(response, request_id)``; counted and logged once answered,
        as the observer does. An unexpected exception is answered by the app's handler, which sets the request id
        itself (so ``answer`` is given None): the ASGI way, that handler sits outside the observer and reads the id
        from the scope, and uvicorn then closes the connection."""
        start = time.perf_counter()
        rid = scope[REQUEST_ID_SCOPE_KEY] = request_id_of(scope)

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        request = Request(scope, receive)
        context = request_id.set(rid)
        status = 500
        try:
            shown: str | None = rid
            try:
                response: Response = await endpoint(request)
            except Exception as exc:  # as Starlette's ServerErrorMiddleware: the app's own handler answers 500
                response, shown = await self._unexpected(request, exc), None
            status = response.status_code
            await answer(response, shown)
            if response.background is not None:
                await response.background()
        finally:
            request_id.reset(context)
            self.observer.record(scope, status, time.perf_counter() - start, rid)
