"""What every scheduler node program shares: its settings from NODE_*, logging, and the job each tick runs."""

from __future__ import annotations

import logging
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import schedlock._keepalive as keepalive

#: This node's name, written with each record line.
NODE = os.environ.get("NODE_NAME", "node")
#: Where the job writes what it did, one line per event (O_APPEND keeps concurrent lines whole).
RECORD = Path(os.environ.get("NODE_RECORD", "record.txt"))
#: ok: every run succeeds; fail-first: the first run of each tick (on any node) raises; hang: every run hangs.
MODE = os.environ.get("NODE_MODE", "ok")
#: Seconds between ticks.
EVERY = int(os.environ.get("NODE_EVERY", "1"))
LOCK_NAME = os.environ.get("NODE_LOCK", "job")
LOCK_AT_MOST_FOR = os.environ.get("NODE_AT_MOST", "3s")
ON_UNAVAILABLE = os.environ.get("NODE_ON_UNAVAILABLE", "fail-closed")
KEEP_ALIVE = os.environ.get("NODE_KEEP_ALIVE") == "1"

# Keep-alive with a lock of seconds, so that the tests need not wait minutes (tests/client/conftest.py does the same).
keepalive.MINIMUM_LOCK_AT_MOST_FOR = timedelta(seconds=1)


def setup_logging() -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)


def record(tick: str, event: str) -> None:
    with RECORD.open("a") as out:
        out.write(f"{tick} {NODE} {event}\n")


def attempts(tick: str) -> int:
    if not RECORD.exists():
        return 0
    return sum(1 for line in RECORD.read_text().splitlines() if line.startswith(f"{tick} ") and "start" in line)


def job(tick: str) -> None:
    """The scheduled job: records its start and end; fails or hangs as MODE says."""
    first = attempts(tick) == 0
    record(tick, "start")
    if MODE == "hang":
        time.sleep(3600)
    if MODE == "fail-first" and first:
        record(tick, "fail")
        raise RuntimeError(f"the first run of tick {tick} fails")
    record(tick, "done")
