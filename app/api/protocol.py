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
``_should_upgrade``): tests/api/test_wire.py sends such requests to a served uvicorn, and pyproject pins the range.

The lock operations' plain POSTs are handed to the app's direct lane (app.api.direct says which, and why) when the
connection has no request in progress: the protocol reads the body, and a placeholder cycle (``_DirectCycle``)
stands where uvicorn's would, so that what follows on the connection waits in uvicorn's own pipeline, a lost
connection or a shutdown is noted as on any cycle, and the answer is written as uvicorn writes one, then
``on_response_complete`` as uvicorn calls it. This relies on more of uvicorn's internals (``cycle``, ``pipeline``,
``flow``, ``server_state``, ``on_response_complete``, ``STATUS_LINE``, its proxy-headers layer's
``trusted_hosts``): tests/api/test_direct.py serves the same requests with and without the lane.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httptools
from starlette.responses import Response
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from app.api.direct import DirectLane

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

    def write_now(self, data: bytes) -> None:
        """Write ``data`` at once, after whatever is held, in one call."""
        held, self._held = self._held, None
        self._transport.write(data if held is None else held + data)

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


class _DirectCycle:
    """What uvicorn's protocol sees as the request cycle while the direct lane serves a request: what its own
    callbacks read and set on a cycle (a request that follows waits behind it, as behind any cycle not complete;
    a lost connection marks it; a shutdown ends its keep-alive)."""

    __slots__ = ("disconnected", "keep_alive", "response_complete")

    def __init__(self, keep_alive: bool) -> None:
        self.keep_alive = keep_alive
        self.disconnected = False
        self.response_complete = False

    @property
    def message_event(self) -> _DirectCycle:  # connection_lost wakes the cycle's reader: the lane has none
        return self

    def set(self) -> None:
        return None


def _lane_of(app: Any) -> tuple[DirectLane | None, Any]:
    """The direct lane of the app uvicorn serves (through its proxy-headers layer), and the hosts that layer
    trusts; no lane if uvicorn wrapped the app otherwise, or the app has none."""
    trusted = None
    while isinstance(app, ProxyHeadersMiddleware):
        trusted = app.trusted_hosts
        app = app.app
    lane = getattr(getattr(app, "state", None), "direct_lane", None)
    return (lane if isinstance(lane, DirectLane) else None), trusted


class HttpProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` on a CoalescingTransport, ignoring upgrades other than WebSocket, handing the lock
    operations' plain POSTs to the app's direct lane (app.api.direct); give it to uvicorn as ``http=``."""

    #: The head of a request whose upgrade is being ignored, parsed again once llhttp pauses after it.
    _ignored_upgrade: bytes | None = None
    #: The request whose body is being read for the direct lane: its cycle, scope, endpoint and body chunks.
    _direct: tuple[_DirectCycle, dict[str, Any], Any, list[bytes]] | None = None
    _lane: DirectLane | None = None
    _proxy_hosts: Any = None  # the hosts uvicorn's proxy-headers layer trusts, if it has one

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
        self._lane, self._proxy_hosts = _lane_of(self.app)

    def on_headers_complete(self) -> None:
        parser = self.parser
        if parser.should_upgrade() and not self._should_upgrade():
            method = parser.get_method()
            if method != b"CONNECT":  # CONNECT is an upgrade by its method: left to uvicorn, which refuses it
                self._ignored_upgrade = head_without_upgrade(method, self.url, parser.get_http_version(), self.headers)
                return
        if self._lane is None or not self._admit(self._lane):
            super().on_headers_complete()

    def _admit(self, lane: DirectLane) -> bool:
        """Whether the direct lane takes this request (app.api.direct says which): then this connection's
        callbacks read its body for the lane, and uvicorn's see a cycle in progress."""
        parser = self.parser
        cycle = self.cycle
        if (
            (cycle is not None and not cycle.response_complete)
            or self.pipeline
            or self.root_path
            or self.limit_concurrency is not None
            or parser.get_http_version() != "1.1"
            or parser.should_upgrade()
        ):
            return False
        client = self.client
        trusted = self._proxy_hosts is not None and client is not None and client[0] in self._proxy_hosts
        found = lane.admits(parser.get_method(), self.url, self.headers, trusted)
        if found is None:
            return False
        route, endpoint, name = found
        direct = _DirectCycle(parser.should_keep_alive())
        self.cycle = direct  # type: ignore[assignment]
        scope = lane.scope(self.url.decode("latin-1"), route, name, self.scope)  # type: ignore[arg-type]
        self._direct = (direct, scope, endpoint, [])
        return True

    def on_body(self, body: bytes) -> None:
        if self._direct is not None:
            self._direct[3].append(body)
        else:
            super().on_body(body)

    def on_message_complete(self) -> None:
        direct = self._direct
        if direct is not None:
            self._direct = None
            task = self.loop.create_task(self._serve_direct(*direct))
            task.add_done_callback(self.tasks.discard)
            self.tasks.add(task)
        elif self._ignored_upgrade is None:
            super().on_message_complete()

    async def _serve_direct(
        self, cycle: _DirectCycle, scope: dict[str, Any], endpoint: Any, chunks: list[bytes]
    ) -> None:
        async def answer(response: Response, rid: str | None) -> None:
            """The response written as uvicorn writes one (its default headers first, then the response's and the
            observer's request id; ``connection: close`` when the connection ends), head and body in one call.
            Without a request id to add (the server error handler's answer, which carries its own) the connection
            is closed after it, without saying so, as uvicorn closes it after an exception escaped the app."""
            if self.flow.write_paused and not cycle.disconnected:
                await self.flow.drain()
            if cycle.disconnected or self.transport.is_closing():
                return
            content = [STATUS_LINE[response.status_code]]
            closes = False
            for name, value in (*self.server_state.default_headers, *response.raw_headers):
                if name == b"connection" and b"close" in [t.strip().lower() for t in value.split(b",")]:
                    cycle.keep_alive, closes = False, True
                content.extend((name, b": ", value, b"\r\n"))
            if rid is not None:
                content.extend((b"x-request-id: ", rid.encode(), b"\r\n"))
            if not cycle.keep_alive and not closes:
                content.append(b"connection: close\r\n")
            content.extend((b"\r\n", bytes(response.body)))
            self.transport.write_now(b"".join(content))  # type: ignore[attr-defined]
            cycle.response_complete = True
            if not cycle.keep_alive or rid is None:
                self.transport.close()
            self.on_response_complete()

        lane = self._lane
        assert lane is not None
        await lane.serve(scope, endpoint, chunks[0] if len(chunks) == 1 else b"".join(chunks), answer)

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
