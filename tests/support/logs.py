"""What the schedlock loggers write, captured in a test as the server would format it, and read back as records."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from app.ops.logs import JsonFormatter


@contextmanager
def captured(formatter: logging.Formatter | None = None, level: int = logging.DEBUG) -> Iterator[io.StringIO]:
    """What the schedlock loggers write while the block runs, formatted as the server would."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter or JsonFormatter())
    logger = logging.getLogger("schedlock")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    """Every JSON line captured, as a record."""
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def access(stream: io.StringIO) -> list[dict[str, Any]]:
    """The access log's records (one per request) among those captured."""
    return [line for line in lines(stream) if line["logger"] == "schedlock.access"]
