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
