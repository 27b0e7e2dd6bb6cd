"""What a lock statement's answer means for its callers: a lease's end refused or done, a failure every caller of a
batch shares, and the answer of an acquire that queued behind another of the same name (app.coalescing.flights)."""

from __future__ import annotations

from typing import Any

from app.coalescing.flights import Alone, Answer, Failed, Outcome
from app.errors import LockHeld, LockNotFound, NotHolder, SchemaNotMigrated, StorageUnavailable
from app.locking.rows import Lease, LockRow, held, row_from

#: Names whose last refusal is kept (Refusals); past this many, the record starts again.
REFUSALS_KEPT = 1024


def lease_row(name: str, rows: list[Any], action: str) -> LockRow:
    """The row a release or extend with a lease's token answered: NotHolder when the lease had ended, LockNotFound
    when there is no such row."""
    if not rows:
        raise LockNotFound(f"no lock named {name!r}", name=name)
    row = row_from(rows[0])
    if not rows[0]["ok"]:
        raise NotHolder(
            f"cannot {action} {name!r}: this token no longer holds the lock "
            "(released, expired, taken over, or never issued for it)",
            name=name,
        )
    return row


def everyones(error: Exception) -> Exception | None:
    """A copy of ``error`` for each caller of a failed statement when it would be theirs too: the database is
    unavailable (their own statements would wait out the same timeouts) or not migrated. None otherwise."""
    if isinstance(error, StorageUnavailable | SchemaNotMigrated):
        return error.again()
    return None


def follow(outcome: Outcome[Lease | LockRow]) -> Answer[Lease | LockRow] | Failed | Alone:
    """An acquire that queued behind another of the same name: after a lease was granted or the holder found, the
    lock is held, by that lease or that holder; after the database failed, the same error; after anything else
    (the first caller was cancelled, say), it runs its own statement."""
    match outcome:
        case Answer(Lease() as lease):
            return Answer(lease.row)
        case Answer(row):
            return Answer(row)
        case Failed(Exception() as exc) if (error := everyones(exc)) is not None:
            return Failed(error)
    return Alone()


class Refusals:
    """The last refusal made per name, with the row it names. Each caller gets its own error: a copy of the one made
    for the last row of this name while it is the same row object (the callers one statement's outcome decided), so
    a refusal is made and its body rendered once for them all. The one kept is never raised, so it holds no
    traceback (and no frame of a request)."""

    def __init__(self) -> None:
        self.kept: dict[str, tuple[LockRow, LockHeld]] = {}

    def of(self, name: str, current: LockRow) -> LockHeld:
        """The refusal naming ``current`` as the holder of ``name``."""
        last = self.kept.get(name)
        if last is None or last[0] is not current:
            if len(self.kept) >= REFUSALS_KEPT:
                self.kept.clear()
            last = self.kept[name] = (current, held(name, current))
        return last[1].again()
