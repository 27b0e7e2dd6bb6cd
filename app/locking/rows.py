"""A lock row as the store reads it, and the SQL fragments every statement shares."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.errors import LockHeld, SlotDone
from app.locking.timefmt import as_utc_naive, format_time

#: The database's now, in UTC: every time schedlock writes or compares comes from here (ShedLock's usingDbTime()).
NOW = "timezone('utc', CURRENT_TIMESTAMP)"
#: The columns every statement returns, in LockRow's order.
ROW = (
    "name, locked_by, locked_at, lock_until, fencing_token, slot, last_completed_slot, last_completed_at, "
    "last_completed_by"
)


def row_of(alias: str) -> str:
    """ROW, each column qualified by ``alias`` (for statements that join the lock table with their input)."""
    return ", ".join(f"{alias}.{column.strip()}" for column in ROW.split(","))


@dataclass(frozen=True, slots=True)
class LockRow:
    name: str
    locked_by: str
    locked_at: datetime
    lock_until: datetime
    fencing_token: int
    db_time: datetime
    #: The tick the current lease runs (docs/slots.md); None without one.
    slot: str | None = None
    #: The last tick a holder released as completed: when (database UTC) and by whom (its locked_by).
    last_completed_slot: str | None = None
    last_completed_at: datetime | None = None
    last_completed_by: str | None = None

    @property
    def held(self) -> bool:
        return as_utc_naive(self.lock_until) > as_utc_naive(self.db_time)


@dataclass(frozen=True, slots=True)
class Lease:
    row: LockRow
    token: str


@dataclass(frozen=True, slots=True)
class Page:
    rows: list[LockRow]
    has_more: bool
    db_time: datetime


def row_from(record: Any) -> LockRow:
    return LockRow(
        record["name"],
        record["locked_by"],
        record["locked_at"],
        record["lock_until"],
        record["fencing_token"],
        record["db_time"],
        record["slot"],
        record["last_completed_slot"],
        record["last_completed_at"],
        record["last_completed_by"],
    )


def held(name: str, current: LockRow) -> LockHeld:
    """The refusal of an acquire: who holds ``name``, since and until when."""
    return LockHeld(
        f"{name!r} is held by {current.locked_by!r} until {format_time(current.lock_until)}",
        name=name,
        locked_by=current.locked_by,
        locked_at=format_time(current.locked_at),
        lock_until=format_time(current.lock_until),
        db_time=format_time(current.db_time),
    )


def slot_done(name: str, current: LockRow, asked: str) -> SlotDone:
    """The refusal of a slotted acquire whose tick ``asked`` is done: it is the last completed slot, or a tick older
    than it (stale: a late trigger, docs/slots.md). Says when and by whom the last one was completed."""
    last = current.last_completed_slot
    completed_at = format_time(current.last_completed_at) if current.last_completed_at is not None else None
    if asked == last:
        message = f"slot {asked!r} of {name!r} was completed at {completed_at} by {current.last_completed_by!r}"
        stale: dict[str, object] = {}
    else:
        message = (
            f"slot {asked!r} of {name!r} is stale: a tick older than its last completed slot {last!r}, "
            f"completed at {completed_at} by {current.last_completed_by!r}"
        )
        stale = {"stale": True, "last_completed_slot": last}
    return SlotDone(
        message,
        name=name,
        slot=asked,
        completed_at=completed_at,
        locked_by=current.last_completed_by,
        db_time=format_time(current.db_time),
        **stale,
    )
