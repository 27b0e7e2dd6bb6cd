"""Durations as the service reads them, so mistakes fail before any request and keep-alive can do arithmetic.

Accepted, as by the server: ISO-8601 (``PT10M``, ``P1D``, ``PT0.5S``), ShedLock's short form (``500ms``, ``30s``,
``10m``, ``1h``, ``2d``, case-insensitive), a bare number of milliseconds (``int`` or digit string), or a
``timedelta``. On the wire every duration is sent as ISO-8601 seconds (``PT90S``), which the server reads exactly.
ASCII digits only, and the whole text must match: the patterns are the server's own (a test compares them).
"""

from __future__ import annotations

import re
from datetime import timedelta

#: What a caller may pass wherever a duration is expected.
DurationLike = timedelta | str | int

SHORT = re.compile(r"([0-9]{1,15})(ms|s|m|h|d)?", re.IGNORECASE | re.ASCII)
ISO = re.compile(
    r"P(?:([0-9]{1,9})D)?(?:T(?:([0-9]{1,9})H)?(?:([0-9]{1,12})M)?(?:([0-9]{1,15})(?:[.,]([0-9]{1,9}))?S)?)?",
    re.IGNORECASE | re.ASCII,
)
UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# The server's sanity ceiling (its configured maximum, 7 days by default, is checked by the server alone).
_CEILING = timedelta(days=100_000)


def parse_duration(value: DurationLike, what: str = "duration") -> timedelta:
    """Read a duration; raise ValueError naming ``what`` when it is not one (or is negative)."""
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, bool):
        raise ValueError(f"{what}: a boolean is not a duration")
    elif isinstance(value, int):
        result = _from_ms(value, what)
    elif isinstance(value, str):
        result = _parse_text(value, what)
    else:
        raise ValueError(f"{what}: expected a timedelta or a string such as '10m', got {type(value).__name__}")
    if result < timedelta(0):
        raise ValueError(f"{what}: must not be negative")
    if result > _CEILING:
        raise ValueError(f"{what}: too large")
    return result


def format_duration(value: timedelta) -> str:
    """ISO-8601 seconds, e.g. ``PT90S`` or ``PT0.5S``: exact to the microsecond, and read by every server."""
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    seconds, frac = divmod(micros, 1_000_000)
    return f"PT{seconds}.{frac:06d}S".rstrip("0").rstrip(".") if frac else f"PT{seconds}S"


def _parse_text(text: str, what: str) -> timedelta:
    short = SHORT.fullmatch(text)
    if short:
        return _from_ms(int(short.group(1)) * UNIT_MS[(short.group(2) or "ms").lower()], what)
    iso = ISO.fullmatch(text)
    if iso and text.upper() not in {"P", "PT"} and not text.upper().endswith("T"):
        days, hours, minutes, seconds, fraction = iso.groups()
        try:
            return timedelta(
                days=int(days or 0),
                hours=int(hours or 0),
                minutes=int(minutes or 0),
                seconds=int(seconds or 0),
                microseconds=int((fraction or "0").ljust(9, "0")[:6]),
            )
        except OverflowError:
            raise ValueError(f"{what}: too large: {text!r}") from None
    raise ValueError(f"{what}: not a duration: {text!r} (use e.g. '30s', '10m', '1h' or ISO-8601 'PT10M')")


def _from_ms(milliseconds: int, what: str) -> timedelta:
    if milliseconds < 0:
        raise ValueError(f"{what}: must not be negative")
    try:
        return timedelta(milliseconds=milliseconds)
    except OverflowError:
        raise ValueError(f"{what}: too large") from None
