"""app.api.protocol: a response's head and body leave in one write; nothing is held past a turn of the event loop."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from app.api.protocol import CoalescingTransport, HttpProtocol


class RecordingTransport:
    """Stands in for the socket transport: records what is written, and in how many calls."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False
        self.extra = {"peername": ("127.0.0.1", 1234)}

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.extra.get(name, default)


async def test_head_and_body_go_out_in_one_write() -> None:
    raw = RecordingTransport()
    transport = CoalescingTransport(raw, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    assert raw.writes == []
    transport.write(memoryview(b"{}"))
    assert raw.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    await asyncio.sleep(0)  # the end-of-turn flush finds nothing left to write
    assert len(raw.writes) == 1


async def test_a_lone_write_leaves_at_the_end_of_the_turn_and_close_writes_what_is_held() -> None:
    raw = RecordingTransport()
    transport = CoalescingTransport(raw, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    await asyncio.sleep(0)
    assert raw.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]

    transport.write(b"last words")
    transport.close()
    assert raw.writes[-1] == b"last words" and raw.closed
    await asyncio.sleep(0)  # the scheduled flush must not write to the closed transport
    assert len(raw.writes) == 2


async def test_abort_drops_what_is_held_and_the_rest_is_the_wrapped_transports() -> None:
    raw = RecordingTransport()
    transport = CoalescingTransport(raw, asyncio.get_running_loop())
    assert transport.get_extra_info("peername") == ("127.0.0.1", 1234)
    transport.write(b"half a response")
    transport.abort()
    await asyncio.sleep(0)
    assert raw.writes == [] and raw.aborted


@pytest.mark.parametrize("requests", [1, 3])
def test_uvicorn_serves_keep_alive_requests_with_it(requests: int) -> None:
    """A real uvicorn with HttpProtocol: every response arrives whole, in order, on one connection."""
    import uvicorn

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = scope["path"].encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, http=HttpProtocol, log_config=None, lifespan="off")
    server = uvicorn.Server(config)

    async def run() -> bytes:
        serving = asyncio.create_task(server.serve())
        while not server.started:  # noqa: ASYNC110 (uvicorn.Server has a flag, not an event)
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i in range(requests):
            writer.write(f"GET /r{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        received = b""
        while received.count(b"HTTP/1.1 200") < requests or not received.endswith(f"/r{requests - 1}".encode()):
            received += await asyncio.wait_for(reader.read(65536), 5)
        writer.close()
        server.should_exit = True
        await serving
        return received

    received = asyncio.run(run())
    bodies = [part.rsplit(b"\r\n\r\n", 1)[-1] for part in received.split(b"HTTP/1.1 200 OK\r\n")[1:]]
    assert bodies == [f"/r{i}".encode() for i in range(requests)]
