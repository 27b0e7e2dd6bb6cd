"""The soak's HTTP client: HTTP/1.1 keep-alive connections on asyncio streams, a few per server.

The soak needs requests of several kinds on one schedule (a cycle's extends wait on its acquire's token, a skip on a
held name), timed one by one: wrk's one-script-per-thread model does not fit, and an HTTP library costs the shared
cores several times more per request than these few lines (the answers are schedlock's own: always a
``Content-Length``, never chunked).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from urllib.parse import urlsplit


class Answer:
    __slots__ = ("body", "status")

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body


#: A connection idle this long is not reused: uvicorn closes a keep-alive connection after 5 s idle, and a request
#: sent as it closes would be lost.
IDLE_S = 4.0
_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter, float]


class Server:
    """``size`` keep-alive connections to one server, handed out one request at a time."""

    def __init__(self, base_url: str, token: str, size: int) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self._auth = f"Authorization: Bearer {token}\r\n" if token else ""
        self._idle: asyncio.LifoQueue[_Conn | None] = asyncio.LifoQueue()
        for _ in range(size):
            self._idle.put_nowait(None)  # opened on first use

    async def request(self, method: str, path: str, body: bytes | None = None) -> Answer:
        """One request on an idle connection (waiting for one if all are busy). An I/O error closes the connection
        and raises (a later request opens a new one)."""
        conn = await self._idle.get()
        try:
            if conn is not None and time.monotonic() - conn[2] > IDLE_S:
                conn[1].close()
                conn = None
            if conn is None:
                conn = (*await asyncio.open_connection(self.host, self.port), 0.0)
            reader, writer, _ = conn
            head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n{self._auth}"
            if body is not None:
                head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            writer.write(head.encode() + b"\r\n" + (body or b""))
            headers = await reader.readuntil(b"\r\n\r\n")
            status = int(headers[9:12])
            length = 0
            for line in headers.split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            answer = Answer(status, await reader.readexactly(length) if length else b"")
        except BaseException:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn[1].close()
            self._idle.put_nowait(None)
            raise
        self._idle.put_nowait((reader, writer, time.monotonic()))
        return answer

    async def close(self) -> None:
        while not self._idle.empty():
            conn = self._idle.get_nowait()
            if conn is not None:
                conn[1].close()
                with contextlib.suppress(Exception):
                    await conn[1].wait_closed()
