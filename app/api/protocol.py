"""uvicorn's httptools protocol, with each response's head and body leaving in one write.

uvicorn writes a response's status line and headers as soon as the app sends ``http.response.start``, and the
body when it sends ``http.response.body``: two ``send()`` system calls, and often two TCP segments, per response.
For a lock answer of a few hundred bytes those two calls were a large share of the server's CPU at full load
(docs/performance.md). Here the head waits until the body's write, and both go in one call. A head with no body
write in the same turn of the event loop (a 1xx, or a body still being produced) is written at the end of the
turn, so nothing waits for more than one turn.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CoalescingTransport:
    """Wraps a transport: a write is held until the next write or the end of this turn of the event loop, then
    the held bytes and the new ones go out in a single call. Everything else is the wrapped transport's."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is None:
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
        else:
            self._held = None
            self._transport.write(held + data)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HttpProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` on a CoalescingTransport; give it to uvicorn as ``http=``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
