"""Request body size limit: a pure ASGI middleware that answers 413 ``payload_too_large``.

Lock requests are a few hundred bytes. Without a limit, one caller could make the server buffer (and parse) any
amount of JSON. A declared ``Content-Length`` over the limit is refused before a byte of the body is read; the
ASGI server guarantees the body is exactly that long. A body without one (chunked) is read up to the limit,
then refused, so the application never sees a truncated body it might act on.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import client_closed_response, error_response
from app.errors import PayloadTooLarge


class BodySizeLimit:
    """Refuse request bodies larger than ``max_bytes`` with 413, before the application sees them."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None:
            if declared > self.max_bytes:
                await self._refuse(scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        await self._buffered(scope, receive, send)

    async def _buffered(self, scope: Scope, receive: Receive, send: Send) -> None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: 499, not "no response" (a 500)
                await client_closed_response()(scope, receive, send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
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
        exc = PayloadTooLarge(f"request body larger than {self.max_bytes} bytes", limit=self.max_bytes)
        response = error_response(exc)
        # The unread body is not drained: ask the server to close the connection instead of reusing it.
        response.headers["connection"] = "close"
        await response(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server rejects malformed framing itself
    return None
