"""Times on the wire: UTC, millisecond precision, ``Z`` suffix."""

from __future__ import annotations

from datetime import UTC, datetime


def as_utc_naive(value: datetime) -> datetime:
    """TIMESTAMP columns come back naive (UTC by convention), TIMESTAMPTZ ones aware: bring both to naive UTC."""
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo is not None else value


def format_time(value: datetime) -> str:
    return as_utc_naive(value).isoformat(timespec="milliseconds") + "Z"
