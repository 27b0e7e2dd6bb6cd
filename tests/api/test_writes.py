"""app.api.writes: one write per response, order kept, nothing held past a turn of the event loop."""

from __future__ import annotations

import asyncio

from app.api.writes import OneWrite


class Recorded(asyncio.Transport):
    """A transport that records what reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closed, "written after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closed or self.aborted


async def test_a_head_and_its_body_go_out_as_one_write() -> None:
    inner = Recorded()
    transport = OneWrite(inner)
    transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    assert inner.writes == []
    transport.write(b"{}")
    assert inner.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")
    transport.write(b"")
    assert inner.writes[1:] == [b"HTTP/1.1 204 No Content\r\n\r\n"]


async def test_a_lone_write_goes_out_when_the_loop_turns() -> None:
    inner = Recorded()
    transport = OneWrite(inner)
    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # the client waits for it before it sends the body
    await asyncio.sleep(0)
    assert inner.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    await asyncio.sleep(0)
    assert inner.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]  # once


async def test_close_sends_what_is_held_first_and_abort_drops_it() -> None:
    inner = Recorded()
    transport = OneWrite(inner)
    transport.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    transport.close()
    assert inner.writes == [b"HTTP/1.1 400 Bad Request\r\n\r\n"]
    assert inner.closed
    await asyncio.sleep(0)  # the scheduled flush finds nothing left
    assert inner.writes == [b"HTTP/1.1 400 Bad Request\r\n\r\n"]

    inner = Recorded()
    transport = OneWrite(inner)
    transport.write(b"partial")
    transport.abort()
    await asyncio.sleep(0)
    assert inner.writes == []
    assert inner.aborted and transport.is_closing()
