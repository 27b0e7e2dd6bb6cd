"""app.api.h2c on a real uvicorn: keep-alive requests answered whole and in order; an h2c offer's body kept, which
plain uvicorn still loses (the day it does not, the shim goes)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from app.api.h2c import HttpProtocol

H2C_POST = (
    b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
    b"HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n"
    b'{"a": "bc"}'
)


async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers each request with its path and body: ``<path> <body>``."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    answer = scope["path"].encode() + b" " + body
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(answer))]})
    await send({"type": "http.response.body", "body": answer})


def exchange(http: Any, sent: bytes, answers: int) -> list[bytes]:
    """Serve ``echo`` with uvicorn's ``http`` implementation, send ``sent`` on one connection in one write, and
    return the bodies of the first ``answers`` responses."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(echo, host="127.0.0.1", port=port, http=http, log_config=None, lifespan="off")
    server = uvicorn.Server(config)

    async def run() -> bytes:
        serving = asyncio.create_task(server.serve())
        while not server.started:  # noqa: ASYNC110 (uvicorn.Server has a flag, not an event)
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(sent)
        await writer.drain()
        received = b""
        while True:
            heads = received.split(b"HTTP/1.1 200 OK\r\n")[1:]
            if len(heads) >= answers and all(_whole(part) for part in heads):
                break
            chunk = await asyncio.wait_for(reader.read(65536), 5)
            if not chunk:
                break
            received += chunk
        writer.close()
        server.should_exit = True
        await serving
        return received

    received = asyncio.run(run())
    return [part.split(b"\r\n\r\n", 1)[1] for part in received.split(b"HTTP/1.1 200 OK\r\n")[1:]]


def _whole(response: bytes) -> bool:
    head, _, body = response.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.startswith(b"content-length"))
    return len(body) >= length


@pytest.mark.parametrize("requests", [1, 3])
def test_uvicorn_serves_keep_alive_requests_with_it(requests: int) -> None:
    """A real uvicorn with HttpProtocol: every response arrives whole, in order, on one connection."""
    sent = b"".join(f"GET /r{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for i in range(requests))
    assert exchange(HttpProtocol, sent, requests) == [f"/r{i} ".encode() for i in range(requests)]


def test_an_h2c_offer_keeps_its_body_and_the_connection_goes_on() -> None:
    bodies = exchange(HttpProtocol, H2C_POST + b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n", 2)
    assert bodies == [b'/echo {"a": "bc"}', b"/next "]


def test_plain_uvicorn_still_loses_the_body_of_an_h2c_offer() -> None:
    """The upstream bug app.api.h2c works around (Kludex/uvicorn#2722). When this fails, uvicorn keeps the body:
    delete app/api/h2c.py, give uvicorn ``http="httptools"`` in app/cli/servers.py, and delete this test."""
    assert exchange("httptools", H2C_POST, 1) == [b"/echo "], (
        "uvicorn's httptools protocol now keeps an h2c offer's body: delete the app.api.h2c shim (see this test)"
    )


def test_uvicorns_h11_protocol_keeps_the_body() -> None:
    """The public alternative to the shim, measured against it in docs/performance.md ("The h2c offer")."""
    assert exchange("h11", H2C_POST, 1) == [b'/echo {"a": "bc"}']
