"""A TCP proxy between the service and Postgres that breaks the network on cue.

It runs its own event loop in a thread, so it keeps forwarding while a test blocks. Modes:

- ``pass``: forward both ways.
- ``blackhole``: forward nothing, close nothing (no FIN, no RST): a partition, or a host that vanished. Bytes
  are held, not lost, so a partition that heals lets the connections carry on.
- ``drop_replies``: forward what the service sends, throw away what Postgres answers: statements run and
  commit, and the service never learns it. The lost bytes break those connections for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Literal

Mode = Literal["pass", "blackhole", "drop_replies"]


class FaultProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._mode: Mode = "pass"
        self.port = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    @property
    def mode(self) -> Mode:
        return self._mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        self._mode = mode
        self._loop.call_soon_threadsafe(self._flowing.clear if mode == "blackhole" else self._flowing.set)

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
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(
            self._pump(client_r, server_w, replies=False),
            self._pump(server_r, client_w, replies=True),
            return_exceptions=True,
        )

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, replies: bool) -> None:
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                if replies and self._mode == "drop_replies":
                    continue
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def close(self) -> None:
        self.mode = "pass"

        async def shutdown() -> None:
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
