"""The embedded default database: a real Postgres from the ``pgserver`` wheel, in a local data directory.

For trying schedlock out and for single-process deployments; production points SCHEDLOCK_DATABASE_URL at a
managed Postgres. The server listens on a Unix socket inside the data directory only.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

logger = logging.getLogger("schedlock.embedded")

#: pgserver counts the processes using a data directory in this file and stops Postgres with the last one.
_HANDLES = ".handle_pids.json"


class EmbeddedPostgres:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.expanduser().resolve()
        self._server: Any = None

    def start(self) -> str:
        """Start (or adopt) the server and return a connection URL for it."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pgserver.postgres_server import get_server

        self.data_dir.mkdir(parents=True, exist_ok=True)
        _forget_dead_handles(self.data_dir / _HANDLES)
        if os.geteuid() == 0:
            # Postgres refuses to run as root. pgserver runs it as a `pgserver` system user, which it creates,
            # and makes the data directory's parents traversable for that user.
            logger.warning("running as root: the embedded Postgres runs as system user 'pgserver' in %s", self.data_dir)
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (usual in containers); pgserver copes with that.
            warnings.simplefilter("ignore")
            self._server = get_server(self.data_dir, cleanup_mode="stop")
        uri: str = self._server.get_uri()
        logger.info("embedded Postgres ready in %s", self.data_dir)
        return uri

    def stop(self) -> None:
        """Stop the server unless another live process still uses the same data directory."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None
            logger.info("embedded Postgres stopped")


def _forget_dead_handles(path: Path) -> None:
    """A killed parent never removes itself from pgserver's handle list, and then nobody ever stops the
    postmaster it left running. Drop dead processes from the list, so this process adopts that postmaster and
    stops it on shutdown."""
    try:
        pids = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and _alive(pid)]
    if alive != pids:
        path.write_text(json.dumps(alive))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
