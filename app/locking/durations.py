"""Durations as ShedLock spells them.

Accepted: ISO-8601 as ``java.time.Duration.parse`` reads it (``PT10M``, ``P1D``, ``PT0.5S``, ``P1DT2H``) and
ShedLock's short form ``<digits><unit>`` with units ``ms``, ``s``, ``m``, ``h``, ``d`` (case-insensitive). A bare
number (string or JSON integer) means milliseconds. Negative values, years, months and weeks are refused.

Digits are ASCII only and the whole text must match (no trailing newline). Hence ``[0-9]``, ``fullmatch`` and
``re.ASCII``: Python's digit class takes Arabic-Indic or fullwidth digits, ``$`` matches before a final newline,
and IGNORECASE alone takes U+017F (long s) for "s". The client's parser (client/src/schedlock/_durations.py) uses
the same two patterns; tests/client/test_durations.py compares them.
"""

from __future__ import annotations

import functools
import re
from datetime import timedelta

SHORT = re.compile(r"([0-9]{1,15})(ms|s|m|h|d)?", re.IGNORECASE | re.ASCII)
ISO = re.compile(
    r"P(?:([0-9]{1,9})D)?(?:T(?:([0-9]{1,9})H)?(?:([0-9]{1,12})M)?(?:([0-9]{1,15})(?:[.,]([0-9]{1,9}))?S)?)?",
    re.IGNORECASE | re.ASCII,
)
UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# timedelta cannot hold more than 999,999,999 days; anything near that is refused long before, by the maximum.
_CEILING = timedelta(days=100_000)


class DurationError(ValueError):
    """A duration that cannot be read, with a message fit for an API caller."""


def parse_duration(value: str | int | timedelta) -> timedelta:
    """Read a duration; raise DurationError with a caller-facing message when it is not one."""
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, bool):  # bool is an int; True is not a duration
        raise DurationError("must be a duration such as '30s', '10m' or 'PT10M', not a boolean")
    elif isinstance(value, int):
        if value < 0:
            raise DurationError("must not be negative")
        result = _from_ms(value)
    elif isinstance(value, str):
        result = _parse_text(value)
    else:
        raise DurationError("must be a duration string such as '30s', '10m' or 'PT10M'")
    if result < timedelta(0):
        raise DurationError("must not be negative")
    return result


def format_duration(value: timedelta) -> str:
    """The ISO-8601 spelling of a duration, e.g. ``PT90S``; used in messages and by clients."""
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    seconds, frac = divmod(micros, 1_000_000)
    return f"PT{seconds}.{frac:06d}S".rstrip("0").rstrip(".") if frac else f"PT{seconds}S"


#: Texts this short are remembered once read: callers send the same few durations again and again.
_REMEMBERED = 32


def _parse_text(text: str) -> timedelta:
    return _parse_short(text) if len(text) <= _REMEMBERED else _parse_any(text)


@functools.lru_cache(maxsize=256)
def _parse_short(text: str) -> timedelta:
    return _parse_any(text)


def _parse_any(text: str) -> timedelta:
    if text.startswith(("-", "+")):
        raise DurationError(f"must not be signed: {text!r}")
    short = SHORT.fullmatch(text)
    if short:
        amount, unit = int(short.group(1)), (short.group(2) or "ms").lower()
        return _from_ms(amount * UNIT_MS[unit])
    iso = ISO.fullmatch(text)
    if iso and text.upper() not in {"P", "PT"} and not text.upper().endswith("T"):
        days, hours, minutes, seconds, fraction = iso.groups()
        micros = int((fraction or "0").ljust(9, "0")[:6])
        try:
            return _checked(
                timedelta(
                    days=int(days or 0),
                    hours=int(hours or 0),
                    minutes=int(minutes or 0),
                    seconds=int(seconds or 0),
                    microseconds=micros,
                )
            )
        except OverflowError:
            raise DurationError(f"is too large: {text!r}") from None
    raise DurationError(
        f"is not a duration: {text!r} (use ISO-8601 like 'PT10M' or a number with ms, s, m, h or d, like '10m')"
    )


def _from_ms(milliseconds: int) -> timedelta:
    try:
        return _checked(timedelta(milliseconds=milliseconds))
    except OverflowError:
        raise DurationError("is too large") from None


def _checked(value: timedelta) -> timedelta:
    if value > _CEILING:
        raise DurationError("is too large")
    return value
