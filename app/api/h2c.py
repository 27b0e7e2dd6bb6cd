"""A workaround for an upstream bug: uvicorn's httptools protocol loses the body of a request that offers to upgrade
to anything but a WebSocket (Kludex/uvicorn#2722). Delete this module the day tests/api/test_wire.py's
``test_plain_uvicorn_still_loses_the_body_of_an_h2c_offer`` fails.

The JDK's HttpClient at its defaults, and ``curl --http2``, send every cleartext request with
``Connection: Upgrade, HTTP2-Settings`` and ``Upgrade: h2c``. httptools then tells llhttp to skip the body (its
``on_headers_complete`` returns 1 whenever the upgrade flag is set), llhttp reports the message complete with no
body and pauses with the rest of the bytes "in another protocol", and uvicorn, which upgrades only to WebSocket,
logs "Unsupported upgrade request." and drops those bytes: the app sees an empty body (422), and a body sent in
a later packet is parsed as a new request (400). RFC 9110 section 7.8 lets a server ignore ``Upgrade``, so
``HttpProtocol`` does: it starts no request for the upgrade head, and when llhttp pauses it parses the head again
without the upgrade (no ``Upgrade`` or ``HTTP2-Settings`` header, no ``upgrade`` in ``Connection``), followed by
the bytes llhttp left, with a fresh parser. The request is then an ordinary HTTP/1.1 one, body, keep-alive and
pipelining included.

No public means does it: the body is gone inside the protocol, before any ASGI layer; uvicorn's h11 protocol keeps
it, but parses every request in Python (docs/performance.md, "The h2c offer"). The surface this relies on is what
a subclass of ``HttpToolsProtocol`` sees: ``parser``, ``url``, ``headers``, ``logger``, ``send_400_response``,
``handle_websocket_upgrade`` and three of its own underscored methods (``_should_upgrade``,
``_unsupported_upgrade_warning``, ``_unset_keepalive_if_required``). tests/api/test_wire.py sends such requests,
from the real JDK HttpClient and curl too, to a served uvicorn.

``HttpProtocol`` also hands uvicorn the connection's transport wrapped by app.api.writes (one write per response):
that part is asyncio's public interface, not the workaround, and stays if this module goes.
"""

from __future__ import annotations

import asyncio
import contextlib

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.api.writes import OneWrite

#: Headers that only mean something for the upgrade being ignored (RFC 9113 section 3.2: HTTP2-Settings).
_UPGRADE_ONLY = frozenset({b"upgrade", b"http2-settings"})


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
    """``HttpToolsProtocol`` ignoring upgrades other than WebSocket (see the module); give it to uvicorn as
    ``http=``."""

    #: The head of a request whose upgrade is being ignored, parsed again once llhttp pauses after it.
    _ignored_upgrade: bytes | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # Not the h2c workaround: one write per response (app.api.writes), on asyncio's public transport interface.
        super().connection_made(OneWrite(transport))

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
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
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
