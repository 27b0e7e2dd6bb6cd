"""The floor under the low-load gap: an HTTP hop to a server that does nothing but answer.

Two bare servers on this machine's loopback, each answering every request at once with an acquire-shaped body (no
database, no auth, no validation), driven by the same wrk script as schedlock at the same low rate:

- ``raw``: uvloop with httptools' parser and one ``write`` per answer, the least a server on this stack can do;
- ``uvicorn``: uvicorn with schedlock's protocol (``app.api.h2c.HttpProtocol``) and an ASGI app of three lines,
  what every schedlock request sits on.

A hop's p50 is what no server on this stack can go under: the callers' and the server's wake-ups and system calls
on two shared cores. ``python -m bench`` runs both in turns with the low-load sides and prints them beside the gap
(docs/performance.md, "Targets"). Run alone: ``python -m bench.hop PORT raw|uvicorn`` serves until killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import IO, Any

from bench import target

MODES = ("raw", "uvicorn")
#: What the wrk script reads of an acquire's answer (a token), about as long as schedlock's.
BODY = (
    b'{"name":"bench-000001","locked_by":"bench","locked_at":"2026-12-03T00:00:00.000000Z",'
    b'"lock_until":"2026-12-03T00:00:30.000000Z","token":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}'
)
HEAD = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


def _serve_raw(port: int) -> None:
    import httptools
    import uvloop

    answer = b"HTTP/1.1 200 OK\r\n" + b"".join(k + b": " + v + b"\r\n" for k, v in HEAD) + b"\r\n" + BODY

    class Hop(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self.parser = httptools.HttpRequestParser(self)

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_message_complete(self) -> None:
            self.transport.write(answer)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Hop, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())


def _serve_uvicorn(port: int) -> None:
    import uvicorn

    from app.api.h2c import HttpProtocol

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": HEAD})
        await send({"type": "http.response.body", "body": BODY})

    uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", http=HttpProtocol, log_config=None, access_log=False)


@contextlib.contextmanager
def servers(log: IO[bytes]) -> Iterator[dict[str, target.Server]]:
    """Both bare servers, each on a free port, ready; stopped afterwards."""
    started: dict[str, target.Server] = {}
    try:
        for mode in MODES:
            port = target.free_port()
            process = subprocess.Popen(
                [sys.executable, "-m", "bench.hop", str(port), mode], cwd=target.ROOT, stdout=log, stderr=log
            )
            started[mode] = target.Server(f"http://127.0.0.1:{port}", process.pid, process, log)
        for server in started.values():
            _wait_ready(server)
        yield started
    finally:
        for server in started.values():
            target.stop_server(server)


def _wait_ready(server: target.Server) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert server.process is not None
        if server.process.poll() is not None:
            raise RuntimeError(f"the bare server {server.url} exited with {server.process.returncode}")
        try:
            with urllib.request.urlopen(server.url + "/", timeout=1) as response:
                if response.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"the bare server {server.url} did not answer")


if __name__ == "__main__":
    port_arg, mode_arg = sys.argv[1], sys.argv[2]
    if mode_arg not in MODES:
        raise SystemExit(f"mode must be one of {MODES}")
    {"raw": _serve_raw, "uvicorn": _serve_uvicorn}[mode_arg](int(port_arg))
