"""Keep-alive timing, as ShedLock's ``KeepAliveLockProvider`` does it, without I/O.

Extend every ``lock_at_most_for / 2``. Refuse ``lock_at_most_for`` under 30 seconds (extensions would come too
often to be worth it, and a hiccup would lose the lock). A refused extension (``not_holder``, ``lock_not_found``)
ends keep-alive at once. A failure to reach the service is retried every few seconds, but only while the lease
surely still lives: the local deadline is counted from the *start* of the last successful request, so it is never
later than the server's ``lock_until``. When no retry fits before it, the lease is declared lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

#: The smallest lock_at_most_for keep-alive accepts (ShedLock's rule). Tests lower it to stay fast.
MINIMUM_LOCK_AT_MOST_FOR = timedelta(seconds=30)
#: Longest pause between retries after the service could not be reached.
MAX_RETRY_PAUSE = 5.0


def check_keep_alive(lock_at_most_for: timedelta) -> None:
    """Raise ValueError when keep-alive cannot work with this lock_at_most_for."""
    minimum = MINIMUM_LOCK_AT_MOST_FOR
    if lock_at_most_for < minimum:
        raise ValueError(
            f"keep-alive needs lock_at_most_for >= {minimum.total_seconds():g}s "
            f"(got {lock_at_most_for.total_seconds():g}s); it extends every lock_at_most_for / 2"
        )


@dataclass(slots=True)
class KeepAlivePlan:
    """When the next extension is due, in ``time.monotonic()`` seconds."""

    period: float
    renewed_at: float
    deadline: float
    next_at: float

    @classmethod
    def start(cls, lock_at_most_for: timedelta, acquired_at: float) -> KeepAlivePlan:
        period = lock_at_most_for.total_seconds()
        return cls(period, acquired_at, acquired_at + period, acquired_at + period / 2)

    def delay(self, now: float) -> float:
        return max(0.0, self.next_at - now)

    def extended(self, started: float, lock_at_most_for: timedelta) -> None:
        """An extension that was sent at ``started`` succeeded."""
        self.renewed_at = started
        self.deadline = started + lock_at_most_for.total_seconds()
        self.next_at = started + self.period / 2

    def retry_after_failure(self, now: float) -> bool:
        """The service could not be reached: schedule a retry and return True, or False when none fits any more."""
        retry_at = now + min(MAX_RETRY_PAUSE, self.period / 10)
        if retry_at >= self.deadline:
            return False
        self.next_at = retry_at
        return True
