"""What the slotted acquire is given (docs/slots.md): the candidate ticks, and this process's estimate of the
database's now around which they are listed. The statement picks among them with its own now
(app.locking.statements.acquire); app.schedules lists them from a schedule."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from app.locking.timefmt import as_utc_naive

SLOT_MAX = 64
#: Refused in a slot key (1 to SLOT_MAX characters): C0 and C1 controls, and lone surrogates (no database can store
#: them). The API's models check it.
SLOT_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
#: A tick-time key (docs/slots.md): an instant written exactly as the API writes times, UTC with milliseconds
#: (``2026-11-30T02:00:00.000Z``), the form the server gives a schedule's slot and every adapter sends. Such keys
#: compare as times (their text, byte for byte, orders them): the name's ticks only move forward. TICK_SQL is the
#: same pattern for the statements (tests/locking/test_slots.py checks both agree).
TICK = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[.][0-9]{3}Z")
TICK_SQL = f"'^{TICK.pattern}$'"
#: Attempts before giving up on agreeing with the database's clock (each one after the first learned its now).
ATTEMPTS = 3
_EARLIEST, _LATEST = datetime(1, 1, 1), datetime(9999, 12, 31)


@dataclass(frozen=True, slots=True)
class Candidates:
    """The statement's choice: the last of ``keys`` whose time in ``ats`` is at or before the database's now plus
    ``grace``, provided that moment lies within [``lo``, ``hi``]."""

    ats: list[datetime]
    keys: list[str]
    lo: datetime
    hi: datetime
    grace: timedelta

    def args(self) -> tuple[object, ...]:
        return self.ats, self.keys, self.lo, self.hi, self.grace


def is_tick(key: str | None) -> bool:
    """Whether ``key`` is a tick-time key (TICK)."""
    return key is not None and TICK.fullmatch(key) is not None


def older(key: str | None, last: str | None) -> bool:
    """Whether ``key`` is a tick older than ``last``, the name's last completed tick: stale, never run again."""
    return key is not None and last is not None and is_tick(key) and is_tick(last) and key < last


def done(key: str | None, last: str | None) -> bool:
    """Whether the slot ``key`` counts as done when the name's last completed slot is ``last``: it is that slot, or
    a tick older than it (the statements' rule, app.locking.statements.free)."""
    return key is not None and (key == last or older(key, last))


def fixed(key: str) -> Candidates:
    """A caller-chosen slot: one candidate, whatever the time."""
    return Candidates([_EARLIEST], [key], _EARLIEST, _LATEST, timedelta(0))


class DbClock:
    """This process's estimate of the database's now: the last one a statement answered, moved on by the
    monotonic clock since. Before any answer, the wall clock stands in (a wrong one only costs a retry)."""

    def __init__(self) -> None:
        self._seen: datetime | None = None
        self._at = 0.0

    def learn(self, db_time: datetime) -> None:
        self._seen, self._at = as_utc_naive(db_time), time.monotonic()

    def now(self) -> datetime:
        if self._seen is None:
            return datetime.now(UTC).replace(tzinfo=None)
        return self._seen + timedelta(seconds=time.monotonic() - self._at)
