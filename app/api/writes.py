"""One write per response: a transport that holds a write until the next one, or until the event loop turns.

uvicorn writes a response's head when the app sends ``http.response.start`` and its body when it sends
``http.response.body``: two ``send()`` system calls for every answer, and on loopback each one also runs the
receiver's side of TCP. ``OneWrite`` wraps the connection's transport (asyncio's public ``Transport`` interface,
handed over in ``Protocol.connection_made``): a write is held, the next write joins it and both go out as one, and a
write still held when the current turn of the event loop ends goes out then (a ``100 Continue``, a head whose body
is slow). Closing sends what is held first; aborting drops it. Order is kept: every write passes through the hold.
Paired, it cut the server's CPU per request by about a tenth (docs/performance.md, "One write per response").
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


class OneWrite(asyncio.Transport):
    """``transport`` with at most one write held (see the module)."""

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__()
        self.transport = transport
        self.held: bytes | None = None
        self.loop = asyncio.get_running_loop()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self.held
        if held is None:
            self.held = bytes(data)
            self.loop.call_soon(self.flush)
        else:
            self.held = None
            self.transport.write(held + data)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.write(b"".join(list_of_data))

    def flush(self) -> None:
        """Send what is held, if anything."""
        held = self.held
        if held is not None:
            self.held = None
            self.transport.write(held)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        self.held = None
        self.transport.abort()

    def write_eof(self) -> None:
        self.flush()
        self.transport.write_eof()

    def can_write_eof(self) -> bool:
        return self.transport.can_write_eof()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self.transport.pause_reading()

    def resume_reading(self) -> None:
        self.transport.resume_reading()

    def is_reading(self) -> bool:
        return self.transport.is_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.transport.get_protocol()

    def get_write_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() + len(self.held or b"")

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.transport.set_write_buffer_limits(high, low)
