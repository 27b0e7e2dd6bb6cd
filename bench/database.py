"""The Postgres a benchmark runs on: --database-url, or SCHEDLOCK_DATABASE_URL, or (neither set) an embedded
pgserver cluster of its own in a temporary directory, stopped and removed afterwards. Nothing assumes a server on
127.0.0.1:5432."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

#: Where the default comes from, in --help.
HELP = "Postgres to use (default: $SCHEDLOCK_DATABASE_URL, else an embedded cluster of the benchmark's own)"


def default_url() -> str | None:
    return os.environ.get("SCHEDLOCK_DATABASE_URL") or None


@contextlib.contextmanager
def database(url: str | None) -> Iterator[str]:
    """``url``, or a cluster started for the run."""
    if url:
        yield url
        return
    from app.db.embedded import EmbeddedPostgres

    with tempfile.TemporaryDirectory(prefix="schedlock-bench-pg-") as tmp:
        Path(tmp).chmod(0o755)
        embedded = EmbeddedPostgres(Path(tmp) / "pgdata")
        print("# no --database-url: an embedded Postgres for this run", file=sys.stderr, flush=True)
        try:
            yield embedded.start()
        finally:
            embedded.stop()
