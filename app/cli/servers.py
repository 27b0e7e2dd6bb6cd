"""How ``serve`` runs the app on uvicorn: in this process, or in ``SCHEDLOCK_WORKERS`` worker processes.

One process (the default) serves the app object ``serve`` built, through ``uvicorn.run``. With more, ``serve`` binds
the port once and schedlock's supervisor (app.cli.supervisor, standard library only) starts that many worker
processes on it (a fresh interpreter each): every worker builds its own app from the ``SCHEDLOCK_*`` environment,
which ``serve`` first sets to the settings it resolved (flags and the embedded database's URL included), and serves
it on the shared socket with uvicorn's public ``Config`` and ``Server``. Each worker has its own database pool; their
metrics are shared in a private directory this process creates and removes (app.ops.multiprocess), so any worker's
``/metrics`` answers for all. On SIGTERM the supervisor sends SIGTERM to each worker, which shuts down gracefully,
and returns once all have exited; ``serve`` then stops the embedded database, if it started one. A worker that fails
at start-up stops them all, and ``serve`` exits with status 3, as one process does.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
from types import FrameType
from typing import TYPE_CHECKING, Any

import uvicorn

from app.auth.authenticator import Authenticator
from app.cli.supervisor import STARTUP_FAILURE, Supervisor
from app.ops import multiprocess
from app.ops.logs import configure_logging
from app.settings import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI

#: What a worker process builds its app with (uvicorn imports it by name, in each worker).
WORKER_APP = "app.cli.servers:worker_app"
#: Connections the shared socket queues before a worker accepts them (uvicorn's default).
BACKLOG = 2048

logger = logging.getLogger("schedlock")


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
        from app.main import create_app

        app = create_app(settings, freeze_gc=True, authenticator=authenticator)
        uvicorn.run(app, **uvicorn_options(settings))
        return
    try:
        listening = listen(settings)
    except OSError as exc:
        logger.error("cannot listen on %s port %d: %s", settings.host, settings.port, exc)
        raise SystemExit(STARTUP_FAILURE) from exc
    os.environ.update(settings.environ())
    with listening, multiprocess.private_dir() as metrics_dir:
        supervisor = Supervisor(
            serve_worker, listening, settings.workers, lambda pid: multiprocess.forget(pid, metrics_dir)
        )
        status = supervisor.run()
    # A worker that failed before it served (its lifespan raised: a database that does not exist, say) stopped the
    # server. Exit as one process does after a failed start-up, so an orchestrator sees the failure, not a clean exit.
    if status != 0:
        raise SystemExit(status)


def listen(settings: Settings) -> socket.socket:
    """The socket every worker accepts on, bound and listening (connections wait in its backlog until a worker that
    has started accepts them). An IPv6 address (with a ``:``) takes an IPv6 socket, as uvicorn does."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    return socket.create_server((settings.host, settings.port), family=family, backlog=BACKLOG)


def serve_worker(listening: socket.socket) -> None:
    """One worker process (the supervisor's target): schedlock's logging and SIGTERM's handler (see ``run``), then
    uvicorn's server on the shared socket, with the app ``worker_app`` builds. A server that never started (its app
    or its lifespan failed) exits with ``STARTUP_FAILURE``, which stops the supervisor."""
    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    server = uvicorn.Server(uvicorn.Config(WORKER_APP, factory=True, **uvicorn_options(settings)))
    server.run(sockets=[listening])
    if not server.started:
        raise SystemExit(STARTUP_FAILURE)


def worker_app() -> FastAPI:
    """The app of one worker process, built from the ``SCHEDLOCK_*`` environment (which ``run`` sets), with
    schedlock's logging. Any ASGI server's factory option can serve it: bench/servers.py measures other servers
    on it."""
    from app.main import create_app

    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    return create_app(settings, freeze_gc=True)
