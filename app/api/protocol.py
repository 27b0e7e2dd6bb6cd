"""uvicorn's httptools protocol, with each response's head and body leaving in one write, and a request that asks
to upgrade to anything but a WebSocket served on HTTP/1.1 with its body intact.

uvicorn writes a response's status line and headers as soon as the app sends ``http.response.start``, and the
body when it sends ``http.response.body``: two ``send()`` system calls, and often two TCP segments, per response.
For a lock answer of a few hundred bytes those two calls were a large share of the server's CPU at full load
(docs/performance.md). Here the head waits until the body's write, and both go in one call. A head with no body
write in the same turn of the event loop (a 1xx, or a body still being produced) is written at the end of the
turn, so nothing waits for more than one turn.

The JDK's HttpClient at its defaults, and ``curl --http2``, send every cleartext request with
``Connection: Upgrade, HTTP2-Settings`` and ``Upgrade: h2c``. httptools then tells llhttp to skip the body (its
``on_headers_complete`` returns 1 whenever the upgrade flag is set), llhttp reports the message complete with no
body and pauses with the rest of the bytes "in another protocol", and uvicorn, which upgrades only to WebSocket,
logs "Unsupported upgrade request." and drops those bytes: the app sees an empty body (422), and a body sent in
a later packet is parsed as a new request (400). RFC 9110 section 7.8 lets a server ignore ``Upgrade``, so
HttpProtocol does: it starts no request for the upgrade head, and when llhttp pauses it parses the head again
without the upgrade (no ``Upgrade`` or ``HTTP2-Settings`` header, no ``upgrade`` in ``Connection``), followed by
the bytes llhttp left, with a fresh parser. The request is then an ordinary HTTP/1.1 one, body, keep-alive and
pipelining included. This relies on uvicorn's HttpToolsProtocol internals (``parser``, ``url``, ``headers``,
``_should_upgrade``): tests/test_wire.py sends such requests to a served uvicorn, and pyproject pins the range.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: Headers that only mean something for the upgrade being ignored (RFC 9113 section 3.2: HTTP2-Settings).
_UPGRADE_ONLY = frozenset({b"upgrade", b"http2-settings"})


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


def head_without_upgrade(method: bytes, url: bytes, version: str, headers: list[tuple[bytes, bytes]]) -> bytes:
    """A request head as sent, minus what asks for an upgrade: llhttp parses it as a plain HTTP/1.x request."""
    lines = [b"%s %s HTTP/%s\r\n" % (method, url, version.encode("ascii"))]
    for name, value in headers:
        if name in _UPGRADE_ONLY:
            continue
        if name == b"connection":
            tokens = [t.strip() for t in value.split(b",") if t.strip().lower() not in (b"upgrade", b"http2-settings")]
            if not tokens:
                continue
            value = b", ".join(tokens)
        lines.append(b"%s: %s\r\n" % (name, value))
    lines.append(b"\r\n")
    return b"".join(lines)


class HttpProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` on a CoalescingTransport, ignoring upgrades other than WebSocket; give it to uvicorn
    as ``http=``."""

    #: The head of a request whose upgrade is being ignored, parsed again once llhttp pauses after it.
    _ignored_upgrade: bytes | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]

    def on_headers_complete(self) -> None:
        parser = self.parser
        if parser.should_upgrade() and not self._should_upgrade():
            method = parser.get_method()
            if method != b"CONNECT":  # CONNECT is an upgrade by its method: left to uvicorn, which refuses it
                self._ignored_upgrade = head_without_upgrade(method, self.url, parser.get_http_version(), self.headers)
                return
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        if self._ignored_upgrade is None:
            super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        try:
            self._feed(data)
        except httptools.HttpParserUpgrade as upgrade:
            head, self._ignored_upgrade = self._ignored_upgrade, None
            if head is None:  # WebSocket or CONNECT: as uvicorn does it
                if self._should_upgrade():
                    self.handle_websocket_upgrade()
                else:
                    self._unsupported_upgrade_warning()
                return
            # llhttp stays in its upgraded state; a fresh parser reads the head again, and what followed it.
            self.parser = httptools.HttpRequestParser(self)
            with contextlib.suppress(AttributeError):  # as uvicorn sets it up (httptools >= 0.6.3)
                self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
            self.data_received(head + data[upgrade.args[0] :])

    def _feed(self, data: bytes) -> None:
        """uvicorn's data_received, minus its upgrade handling (an HttpParserUpgrade goes to the caller)."""
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
