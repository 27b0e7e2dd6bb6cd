"""A TCP proxy in front of Postgres (or etcd) that breaks the network on cue: the fault tests' and the fault
campaign's (tests/chaos/) one proxy.

It runs its own event loop in a thread, so it keeps forwarding while a test blocks. ``set_mode`` returns once the
mode is in force. Modes:

- ``pass``: forward both ways.
- ``blackhole``: forward nothing and close nothing (no FIN, no RST), old connections and new ones: a partition, or a
  host that vanished. Bytes are held, not lost, so a partition that heals lets the connections carry on.
- ``drop_replies``: forward what the client sends, throw away what the server answers: statements run and commit,
  and the client never learns it. The lost bytes break those connections for good.
- ``delay``: every chunk waits ``delay`` seconds before it is forwarded: a slow, congested link.
- ``half_open``: the server's side of every connection is closed, the client's is left open and silent (no FIN, no
  RST), as when the database host vanished and came back without its connections; new connections get the same.
  Leaving it resets the silent connections.

``reset()`` aborts every connection with RST at once, as a restarted NAT or firewall does.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from typing import Literal

Mode = Literal["pass", "blackhole", "drop_replies", "delay", "half_open"]


class FaultProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.delay = 0.2
        self.port = 0
        self.connections = 0  # accepted, in all
        self._mode: Mode = "pass"
        self._conns: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"fault-proxy-{target_port}", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start")

    @property
    def mode(self) -> Mode:
        return self._mode

    def set_mode(self, mode: Mode) -> None:
        asyncio.run_coroutine_threadsafe(self._set_mode(mode), self._loop).result(10)

    def reset(self) -> None:
        asyncio.run_coroutine_threadsafe(self._reset_all(), self._loop).result(10)

    async def _set_mode(self, mode: Mode) -> None:
        before, self._mode = self._mode, mode
        if mode == "half_open":
            for _, upstream in list(self._conns):
                if upstream is not None:
                    _abort(upstream)
        elif before == "half_open":
            await self._reset_all()
        if mode == "blackhole":
            self._flowing.clear()
        else:
            self._flowing.set()

    async def _reset_all(self) -> None:
        for client, upstream in list(self._conns):
            _abort(client)
            if upstream is not None:
                _abort(upstream)
        self._conns.clear()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = self._loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self._mode == "half_open":
            self._conns.add((client_w, None))  # open and silent until the heal resets it
            return
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            _abort(client_w)
            return
        pair = (client_w, server_w)
        self._conns.add(pair)
        await asyncio.gather(
            self._pump(client_r, server_w, replies=False),
            self._pump(server_r, client_w, replies=True),
            return_exceptions=True,
        )
        self._conns.discard(pair)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, replies: bool) -> None:
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                if self._mode == "delay":
                    await asyncio.sleep(self.delay)
                if self._mode == "half_open" or (replies and self._mode == "drop_replies"):
                    continue
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if self._mode != "half_open":
                with contextlib.suppress(Exception):
                    writer.close()

    def close(self) -> None:
        async def shutdown() -> None:
            self._flowing.set()
            await self._reset_all()
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with RST, not FIN: SO_LINGER with a zero timeout."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(Exception):
        writer.transport.abort()
