"""Times on the wire: ISO-8601 UTC with ``Z``, millisecond precision, from the database's clock."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(text: str) -> datetime:
    """An aware UTC datetime from the API's format; ValueError when it is not a time."""
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        raise ValueError(f"time without a zone: {text!r}")
    return value.astimezone(UTC)


def format_time(value: datetime) -> str:
    """The API's format, for display: ``2026-11-29T03:00:00.000Z``."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"
