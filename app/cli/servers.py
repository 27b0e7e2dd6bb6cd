"""How ``serve`` runs the app on uvicorn: in this process, or in ``SCHEDLOCK_WORKERS`` worker processes.

One process (the default) serves the app object ``serve`` built. With more, uvicorn's supervisor binds the port once
and starts that many worker processes on it (a fresh interpreter each): every worker builds its own app from the
``SCHEDLOCK_*`` environment, which ``serve`` first sets to the settings it resolved (flags and the embedded
database's URL included). Each worker has its own database pool; their metrics are shared in a private directory
the supervisor creates and removes (app.ops.multiprocess), so any worker's ``/metrics`` answers for all. On
SIGTERM the supervisor sends SIGTERM to each worker, which shuts down gracefully, and returns once all have exited;
``serve`` then stops the embedded database, if it started one. A worker that fails at start-up stops them all, and
``serve`` exits with status 3, as one process does.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess

from app.auth.authenticator import Authenticator
from app.ops import multiprocess
from app.ops.logs import configure_logging
from app.settings import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI

#: What a worker process builds its app with (uvicorn imports it by name, in each worker).
WORKER_APP = "app.cli.servers:worker_app"


def exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM's handler around uvicorn (see ``run``)."""
    raise SystemExit(0)


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options for ``serve``, whatever the number of workers."""
    from app.api.h2c import HttpProtocol

    return {
        "host": settings.host,
        "port": settings.port,
        "loop": "uvloop",
        "http": HttpProtocol,  # httptools, with the body of an h2c offer kept (app.api.h2c)
        "log_config": None,
        # uvicorn's INFO line per request showed in the profile at full load. Logging requests, where wanted, is
        # the app's job (middleware), with its own level and format.
        "access_log": False,
        "timeout_graceful_shutdown": 10,
        "server_header": False,  # no "server: uvicorn" on every answer: nothing to gain from advertising it
    }


def run(settings: Settings, authenticator: Authenticator) -> None:
    """Serve until SIGTERM or SIGINT, then shut down gracefully (every worker, with more than one).

    uvicorn shuts a server down gracefully on SIGTERM, then raises the signal again for the handler it found
    installed. Python's default handler would end the process at once: before ``serve`` stops the embedded
    Postgres, and before the log lines of the last turn of the event loop are written (app.ops.logs holds them
    until the turn ends). Every process that runs a uvicorn server therefore exits through SystemExit instead."""
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    if settings.workers == 1:
        # One process keeps its metrics in memory (the cheaper path). prometheus-client decides when first imported
        # (by app.main): a directory named for its multiprocess mode would make it
        # write every value to files. So this comes before anything imports either.
        os.environ.pop(multiprocess.ENV, None)
    options = uvicorn_options(settings)
    if settings.workers == 1:
        from app.main import create_app

        uvicorn.run(create_app(settings, freeze_gc=True, authenticator=authenticator), **options)
        return
    os.environ.update(settings.environ())
    with multiprocess.private_dir() as metrics_dir:
        # uvicorn.run(WORKER_APP, workers=N) does these three steps with a plain Config.
        config = WorkerConfig(WORKER_APP, factory=True, workers=settings.workers, **options)
        supervisor = Supervisor(config, sockets=[config.bind_socket()], metrics_dir=metrics_dir)
        supervisor.run()
    # A worker that failed before it served (its lifespan raised: a database that does not exist, say) stops the
    # supervisor, which then returns as if asked to stop. Exit as one process does after a failed start-up, so an
    # orchestrator sees the failure rather than a clean exit.
    if any(process.exitcode == STARTUP_FAILURE for process in supervisor.processes):
        raise SystemExit(STARTUP_FAILURE)


class Supervisor(Multiprocess):
    """uvicorn's supervisor, which also tells the shared metrics when a worker has exited (died and replaced, or
    retired by SIGHUP or SIGTTOU), so that its live gauges leave the server's sums."""

    def __init__(self, config: uvicorn.Config, sockets: list[socket.socket], metrics_dir: Path) -> None:
        super().__init__(config, sockets)
        self.metrics_dir = metrics_dir
        self._pids: set[int] = set()

    def init_processes(self) -> None:
        super().init_processes()
        self._forget_exited()

    def keep_subprocess_alive(self) -> None:
        super().keep_subprocess_alive()
        self._forget_exited()

    def handle_signals(self) -> None:
        super().handle_signals()
        self._forget_exited()

    def _forget_exited(self) -> None:
        pids = {p.pid for p in self.processes if p.pid is not None}
        for pid in self._pids - pids:
            multiprocess.forget(pid, self.metrics_dir)
        self._pids = pids


class WorkerConfig(uvicorn.Config):
    """uvicorn's Config for worker processes. ``configure_logging`` is what uvicorn calls first in a new worker
    (and in ``Config.__init__``): there a worker sets up schedlock's logging and SIGTERM's handler (see ``run``)
    before uvicorn's server starts."""

    def configure_logging(self) -> None:
        super().configure_logging()
        if multiprocessing.parent_process() is not None:  # in a worker, not in the supervisor
            settings = Settings()
            configure_logging(settings.log_level, settings.log_format)
            signal.signal(signal.SIGTERM, exit_on_sigterm)


def worker_app() -> FastAPI:
    """The app of one worker process, built from the ``SCHEDLOCK_*`` environment (which ``run`` sets), with
    schedlock's logging. Any ASGI server's factory option can serve it: bench/servers.py measures other servers
    on it."""
    from app.main import create_app

    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    return create_app(settings, freeze_gc=True)
