"""A supervisor of worker processes on one listening socket, from the standard library alone.

``serve --workers N`` binds the port once, in this process, and starts N workers with ``multiprocessing``'s spawn
method (a fresh interpreter each, handed the listening socket): the kernel gives each new connection to one of the
workers that accept on it. The supervisor then waits for one of three things, without polling: a worker exits, or
SIGTERM/SIGINT (stop), or SIGHUP (restart the workers).

- A worker that exits with ``STARTUP_FAILURE`` failed before it served (its app would not start: a database that
  does not exist, say): every worker would, so the supervisor stops the others and ``run`` returns that status.
- A worker that exits otherwise (killed, crashed) is replaced at once.
- On SIGTERM or SIGINT each worker is sent SIGTERM, which it answers with a graceful shutdown; ``run`` returns 0
  once all have exited. Signals that arrive meanwhile are ignored: the workers are already finishing.
- On SIGHUP each worker is sent SIGTERM and replaced as it exits (they read their configuration again, the token
  file included); connections that arrive meanwhile wait on the socket.

Whatever way a worker went, ``on_exit`` is told its pid (the metrics drop its live gauges).
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import socket
from collections.abc import Callable
from multiprocessing.connection import wait
from types import FrameType

#: What a worker exits with when it failed before it served (what ``uvicorn.run`` exits with after a failed
#: start-up, and ``serve`` with one process).
STARTUP_FAILURE = 3

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RESTART_SIGNALS = (signal.SIGHUP,)

logger = logging.getLogger("schedlock")


def _noted(signum: int, frame: FrameType | None) -> None:
    """A handler that does nothing: with one installed, the interpreter writes the signal's number to the wake-up
    socket (``signal.set_wakeup_fd``), which is what the supervisor waits on."""


class Supervisor:
    """``count`` processes running ``target(sock)``, kept alive until a stop signal (see the module's docstring)."""

    def __init__(
        self,
        target: Callable[[socket.socket], None],
        sock: socket.socket,
        count: int,
        on_exit: Callable[[int], None],
    ) -> None:
        self.target = target
        self.sock = sock
        self.count = count
        self.on_exit = on_exit
        self.context = multiprocessing.get_context("spawn")
        self.workers: list[multiprocessing.process.BaseProcess] = []

    def run(self) -> int:
        """Serve until a stop signal (0) or a worker's failed start-up (``STARTUP_FAILURE``)."""
        woken, waker = socket.socketpair()
        woken.setblocking(False)
        waker.setblocking(False)
        previous_fd = signal.set_wakeup_fd(waker.fileno(), warn_on_full_buffer=False)
        previous = {signum: signal.signal(signum, _noted) for signum in (*STOP_SIGNALS, *RESTART_SIGNALS)}
        try:
            self.workers = [self._start() for _ in range(self.count)]
            status = self._supervise(woken)
            self._stop()
            return status
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            signal.set_wakeup_fd(previous_fd)
            woken.close()
            waker.close()

    def _supervise(self, woken: socket.socket) -> int:
        while True:
            ready = wait([woken, *(worker.sentinel for worker in self.workers)])
            if woken in ready:
                for signum in woken.recv(256):
                    if signum in STOP_SIGNALS:
                        logger.info("%s: stopping %d workers", signal.Signals(signum).name, len(self.workers))
                        return 0
                    if signum in RESTART_SIGNALS:
                        logger.info("%s: restarting %d workers", signal.Signals(signum).name, len(self.workers))
                        for worker in self.workers:
                            worker.terminate()
            for index, worker in enumerate(self.workers):
                if worker.sentinel not in ready:
                    continue
                worker.join()
                self._exited(worker)
                if worker.exitcode == STARTUP_FAILURE:
                    logger.error("worker %d failed at start-up: stopping the server", worker.pid)
                    return STARTUP_FAILURE
                logger.info("worker %d exited (status %s): starting another", worker.pid, worker.exitcode)
                self.workers[index] = self._start()

    def _start(self) -> multiprocessing.process.BaseProcess:
        worker = self.context.Process(target=self.target, args=(self.sock,), name="schedlock-worker")
        worker.start()
        return worker

    def _stop(self) -> None:
        for worker in self.workers:
            if worker.exitcode is None:
                worker.terminate()  # SIGTERM: a graceful shutdown
        for worker in self.workers:
            worker.join()
            self._exited(worker)

    def _exited(self, worker: multiprocessing.process.BaseProcess) -> None:
        if worker.pid is not None:
            self.on_exit(worker.pid)
